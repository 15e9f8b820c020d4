package e2b_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/e2b/e2bfake"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// contractSkips are the suite's tests E2B cannot pass, with why.
var contractSkips = map[string]string{
	"stateful/crash_is_reported_and_replaced":   "a Jupyter kernel that dies reports no exit status: the code interpreter says ContextRestarting, which the provider maps to ContextLost with exit code 1 (TestContextLost)",
	"processes/cell_children_end_with_the_cell": "E2B's Jupyter kernel keeps what a cell starts running after the cell (the fake's sandboxd contexts would end it, so passing here would say nothing of E2B)",
	"processes/stop_ends_the_whole_tree":        "envd signals only the process it started: a stopped background process's children may live on in real E2B (README, limits the fake does not show)",
}

// rig is one fake E2B and a provider pointed at it.
type rig struct {
	fake *e2bfake.Server
	p    *e2b.Provider
}

type rigOpts struct {
	template string
	idle     time.Duration
	config   func(*e2b.Config)
}

func newRig(t *testing.T, o rigOpts) rig {
	t.Helper()
	fake := e2bfake.New(t, e2bfake.Options{})
	return rig{fake: fake, p: newProvider(t, fake, o)}
}

func newProvider(t *testing.T, fake *e2bfake.Server, o rigOpts) *e2b.Provider {
	t.Helper()
	if o.template == "" {
		o.template = "code-interpreter-v1"
	}
	cfg := e2b.Config{
		APIKeyEnv: "TEST_E2B_KEY", Template: o.template, APIURL: fake.API, SandboxURL: fake.Sandboxes,
		Domain: fake.Domain, CodeInterpreter: o.template == "code-interpreter-v1",
	}
	if o.config != nil {
		o.config(&cfg)
	}
	p, err := e2b.New(e2b.Options{
		Config: cfg, Profile: "contract", IdleTimeout: o.idle,
		LookupEnv: func(name string) (string, bool) {
			if name == "TEST_E2B_KEY" {
				return fake.APIKey, true
			}
			return "", false
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return p
}

// TestContract runs the contract suite against the fake, with the code interpreter (stateful).
func TestContract(t *testing.T) {
	r := newRig(t, rigOpts{})
	providertest.Run(t, providertest.Harness{
		New:       func(*testing.T) providers.Provider { return r.p },
		Skip:      contractSkips,
		KillGrace: time.Second,
	})
}

// TestContractBaseTemplate runs it on a template without the code interpreter: not stateful.
func TestContractBaseTemplate(t *testing.T) {
	r := newRig(t, rigOpts{template: "base"})
	require.False(t, r.p.Capabilities().Stateful)
	providertest.Run(t, providertest.Harness{
		New:       func(*testing.T) providers.Provider { return r.p },
		KillGrace: time.Second,
	})
}
