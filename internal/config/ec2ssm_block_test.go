package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The ec2_ssm block's fields beyond the seed's: endpoint_url, web_identity, output_s3_bucket,
// output_s3_prefix, python.
func TestEC2SSMBlock(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, "sandbox:\n  default_profile: ec2\n  profiles:\n    ec2:\n      type: ec2_ssm\n      environment: attached\n      identity: {mode: user}\n"+
		"      ec2_ssm:\n        attach_to: i-0123456789abcdef0\n        endpoint_url: http://localhost:4566\n        web_identity: true\n        output_s3_bucket: out\n        output_s3_prefix: runs\n")
	e := c.Sandbox.Profiles["ec2"].EC2SSM
	require.Equal(t, "http://localhost:4566", e.EndpointURL)
	require.True(t, e.WebIdentity)
	require.Equal(t, "out", e.OutputS3Bucket)
	require.Equal(t, "runs", e.OutputS3Prefix)
	require.Equal(t, "python3", e.Python)

	const key = "sandbox.profiles.default.ec2_ssm"
	ec2 := func(e EC2SSM, mode string) func(c *Config) {
		return profile(func(p *Profile) {
			e.AttachTo = "i-0123456789abcdef0"
			p.Type, p.Environment, p.EC2SSM, p.Identity.Mode = ProviderEC2SSM, EnvironmentAttached, &e, mode
		})
	}
	for name, tc := range map[string]struct {
		mutate func(c *Config)
		key    string
		words  []string
	}{
		"endpoint_url":       {ec2(EC2SSM{EndpointURL: "localhost:4566"}, IdentityAgent), key + ".endpoint_url", []string{"http://", "https://"}},
		"web_identity agent": {ec2(EC2SSM{WebIdentity: true}, IdentityAgent), key + ".web_identity", []string{"identity.mode: user"}},
		"prefix, no bucket":  {ec2(EC2SSM{OutputS3Prefix: "runs"}, IdentityUser), key + ".output_s3_prefix", []string{"output_s3_bucket"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			tc.mutate(c)
			requireProblem(t, c.Validate(), tc.key, tc.words...)
		})
	}
}
