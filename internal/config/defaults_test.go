package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestApplyDefaults(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, `
server:
  addr: 127.0.0.1:9090
auth:
  issuers:
    - url: https://issuer.example.com
      audiences: [sandgate]
      claim_mappings:
        groups:
          expression: claims.roles
sandbox:
  profiles:
    default:
      type: local_subprocess
    box:
      type: box
      box:
`)

	require.Equal(t, "127.0.0.1:9090", c.Server.Addr)
	require.Equal(t, "http://localhost:9090", c.Server.PublicURL)
	require.Equal(t, 10*time.Second, c.Server.ReadHeaderTimeout.D())
	require.Equal(t, 15*time.Minute, c.Server.ReadTimeout.D())
	require.Equal(t, 15*time.Minute, c.Server.WriteTimeout.D())
	require.Equal(t, 2*time.Minute, c.Server.IdleTimeout.D())
	require.Equal(t, 30*time.Second, c.Server.ShutdownTimeout.D())
	require.EqualValues(t, 8<<20, c.Server.MaxBodyBytes)

	require.EqualValues(t, 20, c.Database.MaxConns)
	require.True(t, *c.Database.AutoMigrate)
	require.Equal(t, Log{Level: "info", Format: "json"}, c.Log)

	require.Equal(t, 30*time.Second, c.Auth.ClockSkew.D())
	require.Equal(t, 30*24*time.Hour, c.Auth.APIKeys.DefaultTTL.D())
	require.Equal(t, 365*24*time.Hour, c.Auth.APIKeys.MaxTTL.D())
	require.Equal(t, 50, c.Auth.APIKeys.MaxPerPrincipal)
	short := &Config{Auth: Auth{APIKeys: APIKeys{MaxTTL: Duration(24 * time.Hour)}}}
	short.ApplyDefaults()
	require.Equal(t, 24*time.Hour, short.Auth.APIKeys.DefaultTTL.D(), "the default never exceeds a shorter max")
	iss := c.Auth.Issuers[0]
	require.Equal(t, []string{"RS256", "ES256"}, iss.SigningAlgorithms)
	require.Equal(t, ClaimOrExpression{Claim: "sub"}, iss.ClaimMappings.Username)
	require.Equal(t, ClaimOrExpression{Expression: "claims.roles"}, iss.ClaimMappings.Groups, "an expression is kept")
	require.Equal(t, ClaimOrExpression{Claim: "email"}, iss.ClaimMappings.Email)

	s := c.Sandbox
	require.True(t, *s.Enabled)
	require.Equal(t, "default", s.DefaultProfile)
	require.Equal(t, 8000, s.ToolOutputMaxChars)
	require.EqualValues(t, 1<<20, s.MaxOutputBytes)
	require.EqualValues(t, 100<<20, s.MaxFileBytes)
	require.EqualValues(t, 128<<20, s.KeptOutputMemoryBytes)

	b := s.Broker
	require.Equal(t, FlavorThread, b.Flavor)
	require.Equal(t, 60.0, *b.WaitTimeout)
	require.Equal(t, 0.5, b.WaitPollInterval)
	require.Equal(t, 131072, b.InlinePayloadMaxBytes)
	require.Equal(t, 86400, b.ResponseTTL)
	require.Equal(t, 300, b.SweepInterval)
	require.Equal(t, 30*time.Second, b.LostAfter.D())
	require.Nil(t, b.WorkerTimeoutCeiling)

	p := s.Profiles["default"]
	require.Equal(t, ScopePerSession, p.Scope)
	require.Equal(t, EnvironmentManaged, p.Environment)
	require.Equal(t, 1800, p.IdleTimeout)
	require.Equal(t, IdentityAgent, p.Identity.Mode)
	require.Equal(t, EgressAllow, p.Policy.NetworkEgress)
	require.Equal(t, 120.0, *p.Policy.Timeout)
	require.True(t, *p.Policy.Strict)
	require.Nil(t, p.Policy.CPU, "no limit unless set")
	require.Nil(t, p.Policy.MemoryMB, "no limit unless set")
	require.Empty(t, p.Blocks, "provider blocks are their backends' (internal/gateway adds the ones a type needs)")
	require.Equal(t, Blocks{"box": nil}, s.Profiles["box"].Blocks, "kept raw, for the registry to decode")
}

func TestApplyDefaultsIsIdempotent(t *testing.T) {
	t.Parallel()
	c := &Config{Sandbox: Sandbox{Type: "docker", Blocks: Blocks{"docker": map[string]any{"image": "alpine:3"}}}}
	c.ApplyDefaults()
	once := *c.Redacted()
	c.ApplyDefaults()
	require.Equal(t, once, *c.Redacted())
	require.Len(t, c.Sandbox.Profiles, 1)
}

func TestApplyDefaultsKeepsSetValues(t *testing.T) {
	t.Parallel()
	c := &Config{Sandbox: Sandbox{
		Broker: Broker{WaitTimeout: ptr(0.0)},
		Profiles: map[string]Profile{"default": {
			Type:   "local_subprocess",
			Policy: Policy{Strict: ptr(false), Timeout: ptr(5.0)},
		}},
	}}
	c.ApplyDefaults()
	require.Equal(t, 0.0, *c.Sandbox.Broker.WaitTimeout, "0 means always promote")
	p := c.Sandbox.Profiles["default"]
	require.False(t, *p.Policy.Strict)
	require.Equal(t, 5.0, *p.Policy.Timeout)
}
