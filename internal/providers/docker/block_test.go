package docker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// problemKeys is what b (defaults applied) reports for profile p, by key.
func problemKeys(b providers.Block, p providers.Profile) map[string]string {
	b.ApplyDefaults()
	out := map[string]string{}
	for _, pr := range b.Validate(p) {
		out[pr.Key] = pr.Msg
	}
	return out
}

// The docker block: its defaults, and the keys it refuses (docs/semantics.md §6).
func TestBlock(t *testing.T) {
	var b docker.Block
	b.ApplyDefaults()
	assert.Equal(t, docker.Block{Image: docker.DefaultImage, PidsLimit: docker.DefaultPidsLimit, Pull: docker.PullMissing}, b)
	assert.Equal(t, docker.Options{Config: docker.Config{Image: docker.DefaultImage, PidsLimit: docker.DefaultPidsLimit}},
		b.Options(providers.Profile{Name: "box"}), "New falls back to the same values")
	assert.Empty(t, problemKeys(&b, providers.Profile{Name: "box"}))

	attached := providers.Profile{Name: "box", Attached: true, AttachTo: "dev-box"}
	for name, tc := range map[string]struct {
		block docker.Block
		prof  providers.Profile
		key   string
		words []string
	}{
		"pull":                 {docker.Block{Pull: "always"}, providers.Profile{}, "docker.pull", []string{`"always"`, "missing", "never"}},
		"pids_limit":           {docker.Block{PidsLimit: -1}, providers.Profile{}, "docker.pids_limit", []string{"greater than 0"}},
		"sandboxd transport":   {docker.Block{Sandboxd: &docker.SandboxdBlock{Transport: "tcp"}}, providers.Profile{}, "docker.sandboxd.transport", []string{`"tcp"`, "socket", "exec"}},
		"warm_pool size":       {docker.Block{WarmPool: &docker.WarmPoolBlock{Size: -2}}, providers.Profile{}, "docker.warm_pool.size", []string{"negative"}},
		"warm_pool attached":   {docker.Block{WarmPool: &docker.WarmPoolBlock{Size: 2}}, attached, "docker.warm_pool", []string{"managed"}},
		"stateful on attached": {docker.Block{AttachTo: "dev-box"}, providers.Profile{Attached: true, Stateful: true}, "stateful", []string{"attached", "no sandboxd keeps running"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := problemKeys(&tc.block, tc.prof)
			require.Contains(t, got, tc.key, "%v", got)
			for _, w := range tc.words {
				assert.Contains(t, got[tc.key], w)
			}
		})
	}

	set := docker.Block{AttachTo: "dev-box", Pull: docker.PullNever, WarmPool: &docker.WarmPoolBlock{Size: 3}}
	set.ApplyDefaults()
	o := set.Options(attached).(docker.Options)
	assert.Equal(t, "dev-box", o.AttachTo)
	assert.True(t, o.Config.NeverPull)
	assert.Equal(t, 3, o.Config.WarmPoolSize)
	assert.Empty(t, set.Options(providers.Profile{AttachTo: "dev-box"}).(docker.Options).AttachTo, "a managed profile binds to nothing")
	assert.Equal(t, "dev-box", set.AttachTarget())
}
