package daytona_test

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// TestLive runs against real Daytona, only when SANDGATE_DAYTONA_E2E=1 and DAYTONA_API_KEY
// holds an API key. Optional: DAYTONA_API_URL (a self-hosted deployment),
// SANDGATE_DAYTONA_E2E_TARGET (region), SANDGATE_DAYTONA_E2E_IMAGE (build sandboxes from an
// image instead of the default snapshot). Every sandbox it makes is deleted at the end of
// its test; a run takes several minutes and creates dozens of sandboxes.
func TestLive(t *testing.T) {
	if os.Getenv("SANDGATE_DAYTONA_E2E") != "1" || os.Getenv("DAYTONA_API_KEY") == "" {
		t.Skip("set SANDGATE_DAYTONA_E2E=1 and DAYTONA_API_KEY to run against real Daytona")
	}
	p, err := daytona.New(daytona.Options{
		Config: daytona.Config{
			APIURL: os.Getenv("DAYTONA_API_URL"), Target: os.Getenv("SANDGATE_DAYTONA_E2E_TARGET"),
			Image: os.Getenv("SANDGATE_DAYTONA_E2E_IMAGE"),
		},
		Profile: "live-test", Policy: pol, IdleTimeout: 15 * time.Minute, Logger: slog.Default(),
	})
	require.NoError(t, err)

	t.Run("basics", func(t *testing.T) {
		sb, err := p.Create(t.Context(), agent, pol)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, p.Destroy(t.Context(), sb.ID())) })
		res := run(t, sb, providers.ExecSpec{Command: "echo out; printf 'no newline' >&2; exit 3", Timeout: time.Minute})
		require.NoError(t, res.err)
		assert.Equal(t, 3, res.st.ExitCode)
		assert.Equal(t, "out\n", res.stdout)
		assert.Equal(t, "no newline", res.stderr)
		list, err := p.List(t.Context())
		require.NoError(t, err)
		assert.NotEmpty(t, list)
	})

	t.Run("contract", func(t *testing.T) {
		providertest.Run(t, providertest.Harness{
			New:  func(*testing.T) providers.Provider { return p },
			Skip: contractSkips,
		})
	})
}
