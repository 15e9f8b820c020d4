package daytona_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/daytona/daytonafake"
)

// TestEndToEndThroughTheAPI runs a whole Sandgate (REST API, OIDC, Postgres, the domain)
// whose daytona profile talks to the fake, built from configuration by the real factory: the
// profile is listed with its capabilities, and a session runs a command, moves a file both
// ways and keeps Python state between code calls.
func TestEndToEndThroughTheAPI(t *testing.T) {
	fake := daytonafake.New(t)
	t.Setenv("SANDGATE_TEST_DAYTONA_KEY", fake.APIKey)
	cpu, mem := 2.0, 2048
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(cfg *config.Config) {
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"day": {
				Type: daytona.TypeName, Stateful: true,
				Policy: config.Policy{NetworkEgress: "deny", CPU: &cpu, MemoryMB: &mem},
				Blocks: config.Blocks{daytona.TypeName: &daytona.Block{
					APIURL: fake.URL, APIKeyEnv: "SANDGATE_TEST_DAYTONA_KEY", Target: "eu",
					EnvVars: map[string]string{"SANDGATE_FROM_BLOCK": "yes"},
				}},
			},
		}
		cfg.Sandbox.DefaultProfile = "day"
	}})
	tok := e.Token("alice")
	do := func(method, path string, body []byte, header map[string]string) (int, []byte) {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		var status int
		var out []byte
		if rd == nil {
			status, _, out = e.Do(method, path, tok, nil, header)
		} else {
			status, _, out = e.Do(method, path, tok, rd, header)
		}
		return status, out
	}
	jsonBody := map[string]string{"Content-Type": "application/json"}
	decode := func(b []byte) map[string]any {
		t.Helper()
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m), "body: %s", b)
		return m
	}

	// The profile and what it enforces.
	status, body := do("GET", "/v1/profiles", nil, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var list struct {
		Profiles []map[string]any `json:"profiles"`
	}
	require.NoError(t, json.Unmarshal(body, &list), "%s", body)
	i := slices.IndexFunc(list.Profiles, func(p map[string]any) bool { return p["name"] == "day" })
	require.GreaterOrEqual(t, i, 0, "%s", body)
	prof := list.Profiles[i]
	assert.Equal(t, "daytona", prof["provider"])
	assert.Equal(t, "container", prof["isolation"])
	caps := prof["capabilities"].(map[string]any)
	for k, want := range map[string]any{
		"isolation": "container", "shell": true, "files": true, "package_install": true, "stateful": true,
		"attach": true, "provisions": true, "attaches_external": false, "principal_user": false,
		"policy_network": true, "policy_filesystem": false, "policy_resources": true,
	} {
		assert.Equal(t, want, caps[k], "capability %s", k)
	}
	assert.ElementsMatch(t, []any{"python", "bash"}, caps["languages"])

	// A session (its sandbox is made on first use).
	status, body = do("POST", "/v1/sessions", []byte(`{"name":"e2e"}`), jsonBody)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	id := decode(body)["id"].(string)
	// A command: separate streams and the exit code; the block's env_vars reach it.
	status, body = do("POST", "/v1/sessions/"+id+"/commands", []byte(`{"command":"echo out $SANDGATE_FROM_BLOCK; echo err >&2; exit 3"}`), jsonBody)
	require.Equal(t, http.StatusOK, status, "%s", body)
	m := decode(body)
	assert.EqualValues(t, 3, m["exit_code"])
	assert.Equal(t, "out yes\n", m["stdout"])
	assert.Equal(t, "err\n", m["stderr"])

	// Its sandbox is built from an image, sized and cut off as the policy says.
	require.Len(t, fake.Sandboxes(), 1)
	sb, ok := fake.Sandbox(fake.Sandboxes()[0])
	require.True(t, ok)
	assert.Equal(t, "python:3.12-slim", sb.Image, "resources force the image path")
	assert.Equal(t, 2, sb.CPU)
	assert.Equal(t, 2, sb.Memory)
	assert.True(t, sb.BlockAll)
	assert.Equal(t, "eu", sb.Target)
	assert.Equal(t, 30, sb.AutoStop, "ceil(idle_timeout 1800 s / 60)")
	assert.Equal(t, "day", sb.Labels["sandgate.io/profile"])

	// A file round trip, byte-exact, seen by programs too.
	data := make([]byte, 64<<10)
	_, _ = rand.Read(data)
	status, body = do("PUT", "/v1/sessions/"+id+"/files/in/data.bin", data, map[string]string{"Content-Type": "application/octet-stream"})
	require.Less(t, status, 300, "%s", body)
	status, body = do("GET", "/v1/sessions/"+id+"/files/in/data.bin", nil, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, data, body)
	status, body = do("POST", "/v1/sessions/"+id+"/commands", []byte(`{"command":"wc -c < in/data.bin"}`), jsonBody)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Equal(t, "65536", strings.TrimSpace(decode(body)["stdout"].(string)))

	// Code keeps its state between calls (a Daytona interpreter context).
	status, body = do("POST", "/v1/sessions/"+id+"/code", []byte(`{"code":"answer = 6 * 7"}`), jsonBody)
	require.Equal(t, http.StatusOK, status, "%s", body)
	status, body = do("POST", "/v1/sessions/"+id+"/code", []byte(`{"code":"print(f'still here: {answer}')"}`), jsonBody)
	require.Equal(t, http.StatusOK, status, "%s", body)
	m = decode(body)
	assert.Equal(t, "still here: 42\n", m["stdout"])
	assert.EqualValues(t, 0, m["exit_code"])

	// Destroying the session deletes the sandbox.
	status, body = do("DELETE", "/v1/sessions/"+id, nil, nil)
	require.Less(t, status, 300, "%s", body)
	assert.Empty(t, fake.Sandboxes())
}
