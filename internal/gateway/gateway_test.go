package gateway_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// A profile whose provider type this binary does not serve (the registry accepts
// bedrock_agentcore's block, no provider serves it) is refused before anything connects: the
// database URL here points at nothing, and the answer names the profile and the served types.
func TestNewRefusesAnUnservedProviderBeforeConnecting(t *testing.T) {
	cfg := &config.Config{}
	cfg.Database.URL = "postgres://nobody@127.0.0.1:1/none?connect_timeout=30"
	cfg.Auth.Issuers = []config.Issuer{{URL: "https://issuer.example", Audiences: []string{"sandgate"}}}
	cfg.Sandbox.Profiles = map[string]config.Profile{
		"cloud": {Type: "bedrock_agentcore", Blocks: config.Blocks{"bedrock_agentcore": map[string]any{}}},
	}
	cfg.ApplyDefaults()

	start := time.Now()
	_, err := gateway.New(context.Background(), cfg, gateway.Options{})
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "no connection was tried")
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "sandbox.profiles.cloud.type: 'bedrock_agentcore'")
	assert.Contains(t, err.Error(), "served types: [daytona, docker, e2b, ec2_ssm, kubernetes, local_subprocess]")

	require.NoError(t, gateway.CheckProviders(&config.Config{}, gateway.Builtin()))
}

// The harness's gateway serves REST and MCP side by side, as serve does.
func TestHarnessServesRESTAndMCP(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{})
	tok := e.Token("alice")
	for path, want := range map[string]int{
		"/v1/me":                                    200,
		"/.well-known/oauth-protected-resource":     200,
		"/.well-known/oauth-protected-resource/mcp": 200,
		"/v1/agent/tools":                           200,
	} {
		status := get(e, path, tok)
		assert.Equal(t, want, status, path)
	}
	assert.Equal(t, 401, get(e, "/v1/me", ""))
	assert.Equal(t, 401, postMCP(e, ""), "MCP behind the same authentication")
}

// gateway dev listens on loopback unless server.addr names a host.
func TestDevSetupListensOnLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{":8080": "127.0.0.1:8080", "0.0.0.0:9000": "0.0.0.0:9000", "[::1]:7000": "[::1]:7000"} {
		cfg := &config.Config{}
		cfg.Server.Addr = addr
		cfg.Database.URL = pgtest.URL(t)
		cfg.ApplyDefaults()
		_, stop, err := gateway.DevSetup(t.Context(), cfg, t.TempDir(), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		stop()
		assert.Equal(t, want, cfg.Server.Addr, addr)
	}
}

// gateway dev keeps the egress proxy's CA in its data folder unless egress.state_dir says
// where: the default for root (/var/lib/sandgate) is read-only in docker-compose.yml's gateway.
func TestDevSetupKeepsTheEgressCAWithItsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := &config.Config{}
	cfg.Database.URL = pgtest.URL(t)
	cfg.ApplyDefaults()
	_, stop, err := gateway.DevSetup(t.Context(), cfg, dir, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	stop()
	assert.Equal(t, filepath.Join(dir, "egress"), cfg.Egress.StateDir)

	cfg = &config.Config{}
	cfg.Database.URL = pgtest.URL(t)
	cfg.Egress.StateDir = "/srv/egress"
	cfg.ApplyDefaults()
	_, stop, err = gateway.DevSetup(t.Context(), cfg, t.TempDir(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	stop()
	assert.Equal(t, "/srv/egress", cfg.Egress.StateDir, "a configured folder is kept")
}

// MCP shares the principal's request rate with REST: past the burst, 429.
func TestMCPIsRateLimited(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) {
		c.Sandbox.Quotas.RequestsPerSecond = 0.5
		c.Sandbox.Quotas.RequestsBurst = 3
	}})
	tok := e.Token("alice")
	statuses := map[int]int{}
	for range 6 {
		statuses[postMCP(e, tok)]++
	}
	assert.Equal(t, 3, statuses[429], "%v", statuses)
	assert.Equal(t, 429, get(e, "/v1/me", tok), "the same bucket as REST")
}
