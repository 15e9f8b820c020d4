package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The daytona block: its defaults, stateful profiles, and the rules that tie it to the
// profile's policy (docs/semantics.md §12, daytona).
func TestDaytonaBlock(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, "sandbox:\n  default_profile: day\n  profiles:\n    day:\n      type: daytona\n      stateful: true\n"+
		"      policy: {cpu: 2, memory_mb: 2048}\n      daytona: {target: eu, env_vars: {A: b}}\n")
	d := c.Sandbox.Profiles["day"].Daytona
	require.Equal(t, Daytona{
		APIKeyEnv: "DAYTONA_API_KEY", Target: "eu", EnvVars: map[string]string{"A": "b"},
		APIURL: "https://app.daytona.io/api", CreateTimeout: 300,
	}, *d)
	require.True(t, c.Sandbox.Profiles["day"].Stateful, "daytona keeps interpreter state")

	const key = "sandbox.profiles.default.daytona"
	day := func(d Daytona, pol func(*Policy)) func(c *Config) {
		return profile(func(p *Profile) {
			p.Type, p.Daytona = ProviderDaytona, &d
			if pol != nil {
				pol(&p.Policy)
			}
		})
	}
	cpu, mem := 1.0, 1024
	for name, tc := range map[string]struct {
		mutate func(c *Config)
		key    string
		words  []string
	}{
		"snapshot with cpu":    {day(Daytona{Snapshot: "s"}, func(p *Policy) { p.CPU = &cpu }), key + ".snapshot", []string{"cpu or memory_mb", "image"}},
		"snapshot with memory": {day(Daytona{Snapshot: "s"}, func(p *Policy) { p.MemoryMB = &mem }), key + ".snapshot", []string{"image"}},
		"api_url":              {day(Daytona{APIURL: "app.daytona.io"}, nil), key + ".api_url", []string{"http"}},
		"create_timeout":       {day(Daytona{CreateTimeout: -1}, nil), key + ".create_timeout", []string{"negative"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			tc.mutate(c)
			requireProblem(t, c.Validate(), tc.key, tc.words...)
		})
	}
	c = validConfig(t)
	day(Daytona{Image: "python:3.13-slim"}, func(p *Policy) { p.CPU, p.MemoryMB = &cpu, &mem })(c)
	require.NoError(t, c.Validate(), "an image with resources is fine")
}
