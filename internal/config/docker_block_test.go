package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The docker block's fields beyond the seed's: user, pids_limit, pull, warm_pool.
func TestDockerBlock(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, "sandbox:\n  default_profile: box\n  profiles:\n    box:\n      type: docker\n      docker:\n        user: \"1000:1000\"\n        warm_pool: {size: 3}\n")
	d := c.Sandbox.Profiles["box"].Docker
	require.Equal(t, "1000:1000", d.User)
	require.Equal(t, int64(DefaultDockerPidsLimit), d.PidsLimit)
	require.Equal(t, DockerPullMissing, d.Pull)
	require.Equal(t, 3, d.WarmPool.Size)

	const key = "sandbox.profiles.default.docker"
	docker := func(d Docker, environment string) func(c *Config) {
		return profile(func(p *Profile) {
			p.Type, p.Environment, p.Docker = ProviderDocker, environment, &d
			if environment == EnvironmentAttached {
				p.Docker.AttachTo = "box"
			}
		})
	}
	for name, tc := range map[string]struct {
		mutate func(c *Config)
		key    string
		words  []string
	}{
		"pull":               {docker(Docker{Pull: "always"}, EnvironmentManaged), key + ".pull", []string{`"always"`, "missing", "never"}},
		"pids_limit":         {docker(Docker{PidsLimit: -1}, EnvironmentManaged), key + ".pids_limit", []string{"greater than 0"}},
		"warm_pool size":     {docker(Docker{WarmPool: &DockerWarmPool{Size: -2}}, EnvironmentManaged), key + ".warm_pool.size", []string{"negative"}},
		"warm_pool attached": {docker(Docker{WarmPool: &DockerWarmPool{Size: 2}}, EnvironmentAttached), key + ".warm_pool", []string{"managed"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			tc.mutate(c)
			requireProblem(t, c.Validate(), tc.key, tc.words...)
		})
	}
}
