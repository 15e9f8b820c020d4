package e2b_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// TestLive runs the contract suite against real E2B, only with SANDGATE_E2B_E2E=1 and an API key
// in E2B_API_KEY. Optional: SANDGATE_E2B_TEMPLATE (default code-interpreter-v1, so the stateful
// tests run; a template without the code interpreter skips them), SANDGATE_E2B_DOMAIN and
// SANDGATE_E2B_API_URL (self-hosted E2B). Every sandbox it makes is killed at the end; each
// lives at most 10 minutes (its timeout).
func TestLive(t *testing.T) {
	if os.Getenv("SANDGATE_E2B_E2E") != "1" {
		t.Skip("set SANDGATE_E2B_E2E=1 and E2B_API_KEY to run the contract suite against real E2B")
	}
	if os.Getenv("E2B_API_KEY") == "" {
		t.Fatal("SANDGATE_E2B_E2E=1 needs an API key in E2B_API_KEY")
	}
	template := os.Getenv("SANDGATE_E2B_TEMPLATE")
	if template == "" {
		template = "code-interpreter-v1"
	}
	p, err := e2b.New(e2b.Options{
		Config: e2b.Config{
			Template: template, Domain: os.Getenv("SANDGATE_E2B_DOMAIN"), APIURL: os.Getenv("SANDGATE_E2B_API_URL"),
			CodeInterpreter: strings.HasPrefix(template, "code-interpreter"),
		},
		Profile: "sandgate-live-test", IdleTimeout: 10 * time.Minute, Logger: slog.Default(),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, err := p.ListSandboxes(ctx)
		if err != nil {
			t.Logf("listing leftover sandboxes: %v", err)
			return
		}
		for _, sb := range left {
			assert.NoError(t, p.Destroy(ctx, sb.SandboxID), "killing leftover %s", sb.SandboxID)
		}
	})

	t.Run("policy", func(t *testing.T) {
		sb, err := p.Create(t.Context(), providers.Principal{Mode: providers.ModeAgent, Subject: "live"},
			providers.Policy{NetworkEgress: providers.EgressDeny, Timeout: time.Minute, Strict: true})
		require.NoError(t, err)
		defer func() { _ = p.Destroy(context.WithoutCancel(t.Context()), sb.ID()) }()
		var out strings.Builder
		st, err := sb.Exec(t.Context(), providers.ExecSpec{
			Code:     "import urllib.request\ntry:\n    urllib.request.urlopen('https://example.com', timeout=5)\n    print('reached')\nexcept Exception as e:\n    print('blocked')",
			Language: "python", Timeout: time.Minute, Output: providers.Output{Stdout: &out},
		})
		require.NoError(t, err)
		assert.Equal(t, 0, st.ExitCode)
		assert.Equal(t, "blocked\n", out.String(), "network_egress: deny is E2B's allow_internet_access: false")
	})

	t.Run("contract", func(t *testing.T) {
		providertest.Run(t, providertest.Harness{
			New: func(*testing.T) providers.Provider { return p },
			Skip: map[string]string{
				"stateful/crash_is_reported_and_replaced": contractSkips["stateful/crash_is_reported_and_replaced"],
				"exec/timeout_kills_process_tree":         "envd signals only the process it started; its background children may outlive a timeout",
				"exec/cancel_kills_process_tree":          "envd signals only the process it started; its background children may outlive a cancel",
				"exec/background_child_does_not_hang":     "envd ends a process's stream only when its output pipes close, which a background child holds",
			},
		})
	})
}
