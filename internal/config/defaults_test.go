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
      type: docker
      docker: {}
    pods:
      type: kubernetes
      kubernetes: {}
    cloud:
      type: e2b
      e2b: {}
    day:
      type: daytona
      daytona: {}
  bedrock_agentcore: {}
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
	require.NotNil(t, p.LocalSubprocess, "local_subprocess needs no block")
	require.Nil(t, p.Docker)

	require.Equal(t, "python:3.12-slim", s.Profiles["box"].Docker.Image)
	k := s.Profiles["pods"].Kubernetes
	require.Equal(t, "default", k.Namespace)
	require.Equal(t, "sandgate/sandbox-python:latest", k.Image, "pods need an image that ships sandboxd")
	require.Equal(t, 120.0, k.CreateTimeout)
	no := false
	require.Equal(t, E2B{APIKeyEnv: "E2B_API_KEY", Template: "base", Domain: "e2b.app", Workdir: "/home/user", Python: "python3", CodeInterpreter: &no}, *s.Profiles["cloud"].E2B)
	require.Equal(t, "DAYTONA_API_KEY", s.Profiles["day"].Daytona.APIKeyEnv)
	require.Equal(t, "sandbox", s.BedrockAgentCore.NetworkMode)
}

func TestApplyDefaultsIsIdempotent(t *testing.T) {
	t.Parallel()
	c := &Config{Sandbox: Sandbox{Type: ProviderDocker, ProviderBlocks: ProviderBlocks{Docker: &Docker{}}}}
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
			Type:   ProviderLocalSubprocess,
			Policy: Policy{Strict: ptr(false), Timeout: ptr(5.0)},
		}},
	}}
	c.ApplyDefaults()
	require.Equal(t, 0.0, *c.Sandbox.Broker.WaitTimeout, "0 means always promote")
	p := c.Sandbox.Profiles["default"]
	require.False(t, *p.Policy.Strict)
	require.Equal(t, 5.0, *p.Policy.Timeout)
}
