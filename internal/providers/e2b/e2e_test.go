package e2b_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

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
	block := func(template string) config.Blocks {
		return config.Blocks{e2b.TypeName: &e2b.Block{
			APIKeyEnv: "SANDGATE_TEST_E2B_KEY", Template: template, Domain: fake.Domain,
			APIURL: fake.API, SandboxURL: fake.Sandboxes,
		}}
	}
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Logger: slog.New(slog.DiscardHandler), Config: func(cfg *config.Config) {
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"cloud": {Type: e2b.TypeName, Stateful: true, IdleTimeout: 600, Blocks: block("code-interpreter-v1")},
			"offline": {Type: e2b.TypeName, Scope: config.ScopePerCall, Blocks: block("base"),
				Policy: config.Policy{NetworkEgress: config.EgressDeny, CPU: &cpu, Strict: &no}},
			"sized": {Type: e2b.TypeName, Scope: config.ScopePerCall, Blocks: block("base"), Policy: config.Policy{CPU: &cpu}},
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

// TestBackgroundProcessThroughTheAPI starts a background process on an e2b profile through the
// REST API, lists it, feeds its open input and follows its output (the gateway that started it
// follows it from its first byte), stops it, and runs a command whose input stays open and one
// on a terminal: the envd process each becomes is tagged with its task id.
func TestBackgroundProcessThroughTheAPI(t *testing.T) {
	fake := e2bfake.New(t, e2bfake.Options{})
	t.Setenv("SANDGATE_TEST_E2B_KEY", fake.APIKey)
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Logger: slog.New(slog.DiscardHandler), Config: func(cfg *config.Config) {
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"cloud": {Type: e2b.TypeName, IdleTimeout: 600, Blocks: config.Blocks{e2b.TypeName: &e2b.Block{
				APIKeyEnv: "SANDGATE_TEST_E2B_KEY", Template: "base", Domain: fake.Domain, APIURL: fake.API, SandboxURL: fake.Sandboxes,
			}}},
		}
		cfg.Sandbox.DefaultProfile = "cloud"
	}})
	tok := e.Token("alice")
	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		rd := strings.NewReader("")
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = strings.NewReader(string(b))
		}
		status, _, raw := e.Do(method, path, tok, rd, map[string]string{"Content-Type": "application/json"})
		var m map[string]any
		if len(raw) > 0 {
			require.NoError(t, json.Unmarshal(raw, &m), "body: %s", raw)
		}
		return status, m
	}

	status, m := call("GET", "/v1/profiles", nil)
	require.Equal(t, 200, status, "%v", m)
	caps := m["profiles"].([]any)[0].(map[string]any)["capabilities"].(map[string]any)
	assert.Equal(t, true, caps["background"])
	assert.Equal(t, true, caps["interactive"])

	status, m = call("POST", "/v1/sessions", map[string]any{"profile": "cloud"})
	require.Equal(t, 201, status, "%v", m)
	sid := m["id"].(string)
	command := `echo started; while read line; do echo "got $line"; done`
	status, m = call("POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": command, "background": true, "stdin_open": true})
	require.Equal(t, 201, status, "%v", m)
	pid := m["id"].(string)
	assert.Equal(t, "running", m["status"])
	assert.Positive(t, m["pid"], "envd's process id")
	started := m

	status, m = call("GET", "/v1/sessions/"+sid+"/processes", nil)
	require.Equal(t, 200, status, "%v", m)
	list := m["processes"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, pid, list[0].(map[string]any)["id"])
	assert.Equal(t, command, list[0].(map[string]any)["command"])

	// Its output streams; what is sent to its input comes back.
	req, err := http.NewRequestWithContext(t.Context(), "GET", e.URL+"/v1/tasks/"+pid+"/output", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	events := bufio.NewScanner(resp.Body)
	var stdout strings.Builder
	readUntil := func(want string) {
		t.Helper()
		event := ""
		for !strings.Contains(stdout.String(), want) {
			require.True(t, events.Scan(), "the output stream ended before %q: %v", want, events.Err())
			line := events.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "stdout":
				var d map[string]any
				require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d))
				stdout.WriteString(d["data"].(string))
			}
		}
	}
	readUntil("started\n")
	status, _, raw := e.Do("POST", "/v1/tasks/"+pid+"/stdin", tok, strings.NewReader("hello\n"), map[string]string{"Content-Type": "application/octet-stream"})
	require.Equal(t, 200, status, "%s", raw)
	readUntil("got hello\n")

	tagged := false
	for _, p := range fake.Processes(sandboxOf(t, call, sid)) {
		if p.Tag != nil && *p.Tag == pid {
			tagged = true
			assert.EqualValues(t, started["pid"], p.Pid)
		}
	}
	assert.True(t, tagged, "the envd process is tagged with the task id")

	status, m = call("DELETE", "/v1/sessions/"+sid+"/processes/"+pid, nil)
	require.Equal(t, 200, status, "%v", m)
	final := e.WaitTask(tok, pid)
	assert.Equal(t, "cancelled", final["status"], "%v", final)
	assert.Equal(t, "started\ngot hello\n", final["result"].(map[string]any)["stdout"], "the output it wrote is kept")
	status, m = call("GET", "/v1/sessions/"+sid+"/processes/"+pid, nil)
	require.Equal(t, 200, status, "%v", m)
	assert.Equal(t, "cancelled", m["status"])

	// A command whose input stays open, fed and closed through the API.
	status, m = call("POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sort", "stdin": "pear\n", "stdin_open": true, "wait_s": 0})
	require.Equal(t, 202, status, "%v", m)
	sorted := m["id"].(string)
	status, _, raw = e.Do("POST", "/v1/tasks/"+sorted+"/stdin?eof=true", tok, strings.NewReader("apple\n"), map[string]string{"Content-Type": "application/octet-stream"})
	require.Equal(t, 200, status, "%s", raw)
	done := e.WaitTask(tok, sorted)
	assert.Equal(t, "apple\npear\n", done["result"].(map[string]any)["stdout"], "%v", done)

	// A command on a terminal, resized while it waits for its input.
	status, m = call("POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": `read line; stty size; echo "typed $line"`, "pty": map[string]any{"rows": 24, "cols": 80}, "wait_s": 0})
	require.Equal(t, 202, status, "%v", m)
	term := m["id"].(string)
	require.Eventually(t, func() bool {
		status, _ := call("POST", "/v1/tasks/"+term+"/resize", map[string]any{"rows": 40, "cols": 100})
		return status == 204
	}, 30*time.Second, 50*time.Millisecond)
	status, _, raw = e.Do("POST", "/v1/tasks/"+term+"/stdin", tok, strings.NewReader("hi\r"), map[string]string{"Content-Type": "application/octet-stream"})
	require.Equal(t, 200, status, "%s", raw)
	done = e.WaitTask(tok, term)
	out := done["result"].(map[string]any)["stdout"].(string)
	assert.Contains(t, out, "40 100")
	assert.Contains(t, out, "typed hi")
}

// sandboxOf returns the sandbox id of session sid.
func sandboxOf(t *testing.T, call func(method, path string, body any) (int, map[string]any), sid string) string {
	t.Helper()
	status, m := call("GET", "/v1/sessions/"+sid, nil)
	require.Equal(t, 200, status, "%v", m)
	id, _ := m["sandbox_id"].(string)
	require.NotEmpty(t, id)
	return id
}
