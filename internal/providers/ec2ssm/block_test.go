package ec2ssm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
)

// The ec2_ssm block: its defaults, the keys that need others, and stateful, which no
// SSM-run command can keep.
func TestBlock(t *testing.T) {
	user := providers.Profile{Name: "ec2", Attached: true, AttachTo: "i-0123456789abcdef0", UserIdentity: true}
	b := ec2ssm.Block{AttachTo: "i-0123456789abcdef0", EndpointURL: "http://localhost:4566", WebIdentity: true, OutputS3Bucket: "out", OutputS3Prefix: "runs"}
	b.ApplyDefaults()
	assert.Equal(t, ec2ssm.DefaultPython, b.Python)
	assert.Empty(t, b.Validate(user))
	assert.Equal(t, ec2ssm.Options{
		Config: ec2ssm.Config{
			EndpointURL: "http://localhost:4566", WebIdentity: true, OutputS3Bucket: "out", OutputS3Prefix: "runs", Python: ec2ssm.DefaultPython,
		},
		AttachTo: "i-0123456789abcdef0", UserMode: true,
	}, b.Options(user))

	agent := user
	agent.UserIdentity = false
	stateful := user
	stateful.Stateful = true
	for name, tc := range map[string]struct {
		block ec2ssm.Block
		prof  providers.Profile
		key   string
		words []string
	}{
		"endpoint_url":       {ec2ssm.Block{EndpointURL: "localhost:4566"}, agent, "ec2_ssm.endpoint_url", []string{"http://", "https://"}},
		"web_identity agent": {ec2ssm.Block{WebIdentity: true}, agent, "ec2_ssm.web_identity", []string{"identity.mode: user"}},
		"prefix, no bucket":  {ec2ssm.Block{OutputS3Prefix: "runs"}, user, "ec2_ssm.output_s3_prefix", []string{"output_s3_bucket"}},
		"stateful":           {ec2ssm.Block{}, stateful, "stateful", []string{"ec2_ssm", "keeps no interpreter state"}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.block.ApplyDefaults()
			var found bool
			for _, p := range tc.block.Validate(tc.prof) {
				if p.Key == tc.key {
					found = true
					for _, w := range tc.words {
						assert.Contains(t, p.Msg, w)
					}
				}
			}
			require.True(t, found, "no problem for %s", tc.key)
		})
	}
}
