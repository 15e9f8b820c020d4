package mcp_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// refusingDestroy is the local provider with a Destroy that fails while refuse is set.
type refusingDestroy struct {
	*local.Provider
	refuse *atomic.Bool
}

func (p refusingDestroy) Destroy(ctx context.Context, id string) error {
	if p.refuse.Load() {
		return fault.New(fault.Provision, "local_subprocess: the engine does not answer")
	}
	return p.Provider.Destroy(ctx, id)
}

// destroy_sandbox_session when the provider fails to remove the sandbox: destroyed false and
// a notice (the session is kept, closed, and retried); the session then refuses work, and a
// repeated destroy succeeds once the provider does.
func TestDestroyWhenTheProviderFails(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	reg := providers.NewRegistry()
	b := local.Backend()
	b.Factory = func(ctx providers.BuildContext) (providers.Provider, error) {
		p, err := local.Factory(ctx)
		if err != nil {
			return nil, err
		}
		return refusingDestroy{Provider: p.(*local.Provider), refuse: &refuse}, nil
	}
	reg.Add(b)
	g := newGatewayWith(t, func(c *config.Config) { only(c, "default") }, nil, reg)
	cs := g.connect(g.token("alice"))
	m, _ := call(t, cs, "new_sandbox_session", nil)
	sid := m["sandbox_session_id"].(string)
	_, isErr := call(t, cs, "run_command", map[string]any{"command": "true", "sandbox_session_id": sid})
	require.False(t, isErr)

	refuse.Store(true)
	m, isErr = call(t, cs, "destroy_sandbox_session", map[string]any{"sandbox_session_id": sid})
	require.False(t, isErr, "not an error: the gateway retries")
	require.Equal(t, false, m["destroyed"])
	require.Contains(t, m["notice"], "the engine does not answer")
	m, isErr = call(t, cs, "run_command", map[string]any{"command": "true", "sandbox_session_id": sid})
	require.True(t, isErr)
	require.Contains(t, m["error"], "being destroyed")

	refuse.Store(false)
	m, _ = call(t, cs, "destroy_sandbox_session", map[string]any{"sandbox_session_id": sid})
	require.Equal(t, map[string]any{"sandbox_session_id": sid, "destroyed": true}, m)
}
