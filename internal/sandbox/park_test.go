package sandbox_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// A profile's idle_action must be one its provider can do, on a profile with idle sandboxes
// to park: otherwise the gateway does not start (fault.Config naming the key).
func TestIdleActionNeedsTheCapability(t *testing.T) {
	t.Parallel()
	parking := sandboxtest.DefaultCapabilities()
	parking.Pause, parking.Snapshots = true, true
	for name, tc := range map[string]struct {
		spec  func() sandbox.ProfileSpec
		words []string // nil: accepted
	}{
		"pause without the capability": {func() sandbox.ProfileSpec {
			p := sandboxtest.Profile("p", sandbox.ScopePerSession, nil)
			p.IdleAction = sandbox.IdlePause
			return p
		}, []string{"sandbox.profiles.p.idle_action", "capability pause"}},
		"snapshot without the capability": {func() sandbox.ProfileSpec {
			p := sandboxtest.Profile("p", sandbox.ScopePerSession, nil)
			p.IdleAction = sandbox.IdleSnapshot
			return p
		}, []string{"capability snapshots"}},
		"attached": {func() sandbox.ProfileSpec {
			p := sandboxtest.Profile("p", sandbox.ScopePerSession, &parking)
			p.IdleAction, p.Attached = sandbox.IdlePause, true
			return p
		}, []string{"attached environments"}},
		"per_call": {func() sandbox.ProfileSpec {
			p := sandboxtest.Profile("p", sandbox.ScopePerCall, &parking)
			p.IdleAction = sandbox.IdleSnapshot
			return p
		}, []string{"per_call"}},
		"unknown": {func() sandbox.ProfileSpec {
			p := sandboxtest.Profile("p", sandbox.ScopePerSession, &parking)
			p.IdleAction = "hibernate"
			return p
		}, []string{"hibernate"}},
		"pause with the capability": {func() sandbox.ProfileSpec {
			p := sandboxtest.Profile("p", sandbox.ScopePerSession, &parking)
			p.IdleAction = sandbox.IdlePause
			return p
		}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := sandboxtest.Build(t, sandboxtest.Options{Profiles: []sandbox.ProfileSpec{tc.spec()}})
			if tc.words == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, fault.Config, fault.KindOf(err))
			for _, w := range tc.words {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
