package ec2ssm_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/awsfake"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
)

// gateway is a whole Sandgate (HTTP API, OIDC verification against the development issuer,
// Postgres, the sandbox domain with the thread broker) whose ec2_ssm profiles talk to the
// fake AWS. The provider is built by the real Factory, with the default AWS credential chain
// reading the gateway's credentials from the environment.
type gateway struct {
	t      *testing.T
	url    string
	issuer *devissuer.Issuer
}

func newGateway(t *testing.T, fake *awsfake.Server) *gateway {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", awsfake.GatewayAccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", fake.GatewaySecret())
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))

	block := func(web bool) config.Blocks {
		return config.Blocks{ec2ssm.TypeName: &ec2ssm.Block{Region: fake.Region, AttachTo: instanceID, EndpointURL: fake.URL, WebIdentity: web}}
	}
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Logger: slog.New(slog.DiscardHandler), Config: func(cfg *config.Config) {
		// The OIDC caller's role comes from the group→role table.
		cfg.Auth.Issuers[0].GroupRoles = []config.GroupRole{{Group: "ops", AWSRoleARN: roleARN, RunAs: "deploy"}}
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"ec2":     {Type: ec2ssm.TypeName, Environment: config.EnvironmentAttached, Identity: config.Identity{Mode: config.IdentityUser}, Blocks: block(false)},
			"ec2-web": {Type: ec2ssm.TypeName, Environment: config.EnvironmentAttached, Identity: config.Identity{Mode: config.IdentityUser}, Blocks: block(true)},
			"ec2-gw":  {Type: ec2ssm.TypeName, Environment: config.EnvironmentAttached, Blocks: block(false)},
		}
		cfg.Sandbox.DefaultProfile = "ec2"
	}})
	return &gateway{t: t, url: e.URL, issuer: e.Issuer}
}

func (g *gateway) token(sub string, groups ...string) string {
	g.t.Helper()
	tok, err := g.issuer.Mint(devissuer.Claims{Subject: sub, Groups: groups, Email: sub + "@example.test"})
	require.NoError(g.t, err)
	return tok
}

func (g *gateway) do(tok, method, path string, body any) (int, map[string]any) {
	g.t.Helper()
	buf, err := json.Marshal(body)
	require.NoError(g.t, err)
	req, err := http.NewRequest(method, g.url+path, bytes.NewReader(buf))
	require.NoError(g.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(g.t, err)
	var m map[string]any
	require.NoError(g.t, json.Unmarshal(raw, &m), "body: %s", raw)
	return resp.StatusCode, m
}

func (g *gateway) session(tok, profile string) string {
	g.t.Helper()
	status, m := g.do(tok, "POST", "/v1/sessions", map[string]any{"profile": profile})
	require.Equal(g.t, 201, status, "%v", m)
	return m["id"].(string)
}

// TestEndToEndThroughTheAPI: an OIDC caller whose token puts them in group "ops" (mapped to
// an AWS role and run_as user by the issuer's group_roles) runs a command on a user-mode
// ec2_ssm profile through the REST API. The fake AWS proves which identity signed each call.
func TestEndToEndThroughTheAPI(t *testing.T) {
	fake := awsfake.New(t)
	fake.AddInstance(instanceID)
	g := newGateway(t, fake)

	alice := g.token("alice", "ops")
	id := g.session(alice, "ec2")
	status, m := g.do(alice, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": `echo "ran as $SANDGATE_FAKE_SUDO_USER"; echo oops >&2; exit 7`})
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "completed", m["status"])
	assert.EqualValues(t, 7, m["exit_code"])
	assert.Equal(t, "ran as deploy\n", m["stdout"], "run_as from group_roles")
	assert.Equal(t, "oops\n", m["stderr"])

	status, m = g.do(alice, "POST", "/v1/sessions/"+id+"/code", map[string]any{"code": "print(6*7)", "language": "python"})
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "42\n", m["stdout"])

	assumed := fake.CallsTo("AssumeRole")
	require.Len(t, assumed, 1)
	assert.Equal(t, awsfake.GatewayAccessKeyID, assumed[0].AccessKeyID, "the gateway's own credentials (from the environment) assume the role")
	assert.Equal(t, roleARN, assumed[0].Form.Get("RoleArn"))
	assert.Equal(t, "sandgate-alice", assumed[0].Form.Get("RoleSessionName"))
	assert.Equal(t, "alice", assumed[0].Form.Get("SourceIdentity"))
	ssm := ssmCalls(fake)
	require.NotEmpty(t, ssm)
	for _, c := range ssm {
		require.NotNil(t, c.Identity, c.Operation)
		assert.NotEqual(t, awsfake.GatewayAccessKeyID, c.AccessKeyID, "%s signed by the gateway", c.Operation)
		assert.Equal(t, "sandgate-alice", c.Identity.RoleSessionName, c.Operation)
		assert.Equal(t, c.Identity.SessionToken, c.SessionToken)
	}
	assert.True(t, strings.HasPrefix(sentScript(t, fake), "sudo -n -u deploy sh -c '"))

	// A caller with no role mapped is refused before any AWS call: 403, policy.
	before := len(fake.Calls())
	bob := g.token("bob", "dev")
	id = g.session(bob, "ec2")
	status, m = g.do(bob, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "true"})
	assert.Equal(t, 403, status, "%v", m)
	assert.True(t, strings.HasSuffix(m["type"].(string), "/policy"), "%v", m)
	assert.Contains(t, m["detail"], "requires a role ARN on the principal")
	assert.Len(t, fake.Calls(), before)

	// Web identity: the caller's own token is exchanged, unsigned; no gateway key is used.
	carol := g.token("carol", "ops")
	fake.TrustWebIdentityToken(carol, "carol")
	id = g.session(carol, "ec2-web")
	status, m = g.do(carol, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo web"})
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "web\n", m["stdout"])
	web := fake.CallsTo("AssumeRoleWithWebIdentity")
	require.Len(t, web, 1)
	assert.False(t, web[0].Signed)
	assert.Equal(t, carol, web[0].Form.Get("WebIdentityToken"), "the caller's own bearer token")
	assert.Equal(t, "sandgate-carol", web[0].Form.Get("RoleSessionName"))
	for _, c := range ssmCalls(fake)[len(ssm):] {
		require.NotNil(t, c.Identity, c.Operation)
		assert.Equal(t, "web-identity", c.Identity.Kind, c.Operation)
		assert.Equal(t, "carol", c.Identity.WebIdentitySubject)
	}

	// Agent mode: the gateway's own credentials sign the SSM calls.
	n := len(ssmCalls(fake))
	id = g.session(bob, "ec2-gw")
	status, m = g.do(bob, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo gw"})
	require.Equal(t, 200, status, "%v", m)
	for _, c := range ssmCalls(fake)[n:] {
		assert.Equal(t, awsfake.GatewayAccessKeyID, c.AccessKeyID, c.Operation)
	}

	// A deregistered instance: the attached environment is reported gone (502).
	fake.RemoveInstance(instanceID)
	status, m = g.do(alice, "POST", "/v1/sessions/"+g.session(alice, "ec2")+"/commands", map[string]any{"command": "true"})
	assert.Equal(t, 502, status, "%v", m)
	assert.True(t, strings.HasSuffix(m["type"].(string), "/gone"), "%v", m)
}
