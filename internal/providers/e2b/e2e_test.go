package e2b_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/e2b/e2bfake"
)

// TestEndToEndThroughTheAPI runs a whole gateway (REST API, OIDC, Postgres, the thread broker)
// whose e2b profiles point at the fake, with the provider built by the real Factory from the
// configuration and the API key read from the environment variable api_key_env names.
func TestEndToEndThroughTheAPI(t *testing.T) {
	fake := e2bfake.New(t, e2bfake.Options{})
	t.Setenv("SANDGATE_TEST_E2B_KEY", fake.APIKey)
	cpu, no := 1.0, false
	block := func(template string) config.ProviderBlocks {
		return config.ProviderBlocks{E2B: &config.E2B{
			APIKeyEnv: "SANDGATE_TEST_E2B_KEY", Template: template, Domain: fake.Domain,
			APIURL: fake.API, SandboxURL: fake.Sandboxes,
		}}
	}
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Logger: slog.New(slog.DiscardHandler), Config: func(cfg *config.Config) {
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"cloud": {Type: e2b.TypeName, Stateful: true, IdleTimeout: 600, ProviderBlocks: block("code-interpreter-v1")},
			"offline": {Type: e2b.TypeName, Scope: config.ScopePerCall, ProviderBlocks: block("base"),
				Policy: config.Policy{NetworkEgress: config.EgressDeny, CPU: &cpu, Strict: &no}},
			"sized": {Type: e2b.TypeName, Scope: config.ScopePerCall, ProviderBlocks: block("base"), Policy: config.Policy{CPU: &cpu}},
		}
		cfg.Sandbox.DefaultProfile = "cloud"
	}})
	tok := e.Token("alice")
	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		var rd *strings.Reader
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = strings.NewReader(string(b))
		} else {
			rd = strings.NewReader("")
		}
		status, _, raw := e.Do(method, path, tok, rd, map[string]string{"Content-Type": "application/json"})
		var m map[string]any
		if len(raw) > 0 {
			require.NoError(t, json.Unmarshal(raw, &m), "body: %s", raw)
		}
		return status, m
	}

	// /v1/profiles shows honest capabilities.
	status, m := call("GET", "/v1/profiles", nil)
	require.Equal(t, 200, status, "%v", m)
	byName := map[string]map[string]any{}
	for _, p := range m["profiles"].([]any) {
		p := p.(map[string]any)
		byName[p["name"].(string)] = p
	}
	cloud := byName["cloud"]
	require.NotNil(t, cloud)
	assert.Equal(t, "e2b", cloud["provider"])
	assert.Equal(t, "micro_vm", cloud["isolation"])
	caps := cloud["capabilities"].(map[string]any)
	assert.Equal(t, true, caps["stateful"])
	assert.Equal(t, true, caps["policy_network"])
	assert.Equal(t, false, caps["policy_resources"], "cpu and memory come from the template")
	assert.Equal(t, false, caps["principal_user"])
	assert.Equal(t, false, byName["offline"]["capabilities"].(map[string]any)["stateful"], "the base template runs no code interpreter")

	// A session, a command, stateful code, a file round trip.
	status, m = call("POST", "/v1/sessions", map[string]any{"profile": "cloud"})
	require.Equal(t, 201, status, "%v", m)
	sid := m["id"].(string)
	sandboxID := m["sandbox_id"]
	status, m = call("POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo hi from $HOME; echo oops >&2; exit 4"})
	require.Equal(t, 200, status, "%v", m)
	assert.EqualValues(t, 4, m["exit_code"])
	assert.Contains(t, m["stdout"], "hi from")
	assert.Equal(t, "oops\n", m["stderr"])
	if sandboxID == nil {
		_, s := call("GET", "/v1/sessions/"+sid, nil)
		sandboxID = s["sandbox_id"]
	}
	created, ok := fake.Sandbox(sandboxID.(string))
	require.True(t, ok, "the session's sandbox is an E2B sandbox of the fake")
	assert.EqualValues(t, 600, *created.Request.Timeout, "idle_timeout is E2B's sandbox timeout")
	assert.Equal(t, "cloud", created.Request.Metadata[e2b.MetaProfile])

	status, m = call("POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "answer = 6 * 7", "language": "python"})
	require.Equal(t, 200, status, "%v", m)
	status, m = call("POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "print(f'still here: {answer}')", "language": "python"})
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "still here: 42\n", m["stdout"], "the default context keeps its state")
	status, m = call("POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "raise ValueError('bad input')", "language": "python"})
	require.Equal(t, 200, status, "%v", m)
	assert.EqualValues(t, 1, m["exit_code"], "an exception is exit code 1")
	assert.True(t, strings.HasSuffix(m["stderr"].(string), "ValueError: bad input\n"), "stderr ends with Name: value: %q", m["stderr"])

	data := "bytes \x00\x01 through the API\n"
	status, _, raw := e.Do("PUT", "/v1/sessions/"+sid+"/files/in/data.bin", tok, strings.NewReader(data), nil)
	require.Contains(t, []int{200, 201, 204}, status, "%s", raw)
	status, _, raw = e.Do("GET", "/v1/sessions/"+sid+"/files/in/data.bin", tok, nil, nil)
	require.Equal(t, 200, status, "%s", raw)
	assert.Equal(t, data, string(raw))
	status, m = call("POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "wc -c < in/data.bin"})
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "25\n", m["stdout"])

	status, _ = call("DELETE", "/v1/sessions/"+sid, nil)
	require.Contains(t, []int{200, 204}, status)
	created, _ = fake.Sandbox(sandboxID.(string))
	assert.True(t, created.Killed, "destroying the session kills the E2B sandbox")

	// Policy: deny egress maps to allow_internet_access false; cpu without strict warns.
	status, m = call("POST", "/v1/runs", map[string]any{"profile": "offline", "command": "echo offline"})
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "offline\n", m["stdout"])
	require.NotEmpty(t, m["warnings"], "cpu is not enforceable on e2b: a warning")
	offline := false
	for _, c := range fake.Calls() {
		if c.Method == "POST" && c.Path == "/sandboxes" && strings.Contains(string(c.Body), `"allow_internet_access":false`) {
			offline = true
		}
	}
	assert.True(t, offline, "the sandbox was created without internet access")

	// A strict profile with cpu is refused before any sandbox is made.
	before := len(fake.Calls())
	status, m = call("POST", "/v1/runs", map[string]any{"profile": "sized", "command": "echo never"})
	assert.Equal(t, 403, status, "%v", m)
	assert.Contains(t, m["type"], "policy")
	assert.Len(t, fake.Calls(), before, "no E2B call for a refused profile")
}
