package daytona_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
)

// The daytona block: its defaults, and the rules that tie it to the profile's policy
// (docs/semantics.md §12, daytona).
func TestBlock(t *testing.T) {
	b := daytona.Block{Target: "eu", EnvVars: map[string]string{"A": "b"}}
	b.ApplyDefaults()
	assert.Equal(t, daytona.Block{
		APIKeyEnv: daytona.DefaultAPIKeyEnv, Target: "eu", EnvVars: map[string]string{"A": "b"},
		APIURL: daytona.DefaultAPIURL, CreateTimeout: daytona.DefaultCreateTimeout.Seconds(),
	}, b)
	sized := providers.Profile{Name: "day", Stateful: true, Policy: providers.Policy{CPU: 2, MemoryMB: 2048}}
	assert.Empty(t, b.Validate(sized), "daytona keeps interpreter state; resources size an image")

	for name, tc := range map[string]struct {
		block daytona.Block
		prof  providers.Profile
		key   string
		words []string
	}{
		"snapshot with cpu":    {daytona.Block{Snapshot: "s"}, providers.Profile{Policy: providers.Policy{CPU: 1}}, "daytona.snapshot", []string{"cpu or memory_mb", "image"}},
		"snapshot with memory": {daytona.Block{Snapshot: "s"}, providers.Profile{Policy: providers.Policy{MemoryMB: 1024}}, "daytona.snapshot", []string{"image"}},
		"image and snapshot":   {daytona.Block{Image: "python:3.12", Snapshot: "snap-1"}, providers.Profile{}, "daytona", []string{"image", "snapshot", "mutually exclusive"}},
		"api_url":              {daytona.Block{APIURL: "app.daytona.io"}, providers.Profile{}, "daytona.api_url", []string{"http"}},
		"create_timeout":       {daytona.Block{CreateTimeout: -1}, providers.Profile{}, "daytona.create_timeout", []string{"negative"}},
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
