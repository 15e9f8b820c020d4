package mcp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/mcp"
)

// rawCall posts one JSON-RPC message as is (bytes the SDK client would never send) on the
// MCP session id and returns the status, the content type and the answer.
func rawCall(t *testing.T, g *gateway, tok, session, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("POST", g.URL+mcp.Path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// Tool arguments the SDK would decode with U+FFFD in place of the bytes sent (invalid UTF-8,
// an unpaired surrogate escape), or a message followed by more data, are refused before
// the SDK sees them: 400 problem validation; nothing runs.
func TestMessagesAreExactlyOneUTF8Text(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	tok := g.token("alice")
	cs := g.connect(tok)
	runCommand := func(command string) string {
		return `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"` + command + `"}}}`
	}
	for body, want := range map[string]string{
		runCommand("echo \xff\xfe > ran"):                       "not valid UTF-8 (RFC 8259 §8.1)",
		runCommand(`echo \udcff > ran`):                         "unpaired UTF-16 surrogate",
		runCommand("echo a > ran") + runCommand("echo b > ran"): "data after its JSON value",
	} {
		status, ctype, answer := rawCall(t, g, tok, cs.ID(), body)
		require.Equal(t, http.StatusBadRequest, status, "%s", answer)
		require.Equal(t, "application/problem+json", ctype)
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(answer), &p))
		assert.Equal(t, "https://sandgate.dev/problems/validation", p["type"])
		assert.Contains(t, p["detail"], want)
	}
	m, _ := call(t, cs, "run_command", map[string]any{"command": "ls ran 2>&1; echo ünï 🚀"})
	assert.Contains(t, m["stdout"], "No such file", "nothing ran")
	assert.Contains(t, m["stdout"], "ünï 🚀")
}

// write_sandbox_file refuses a path ending in '/' (it wrote a file of that name) and says how
// to make a folder; read_sandbox_file of a folder names list_sandbox_files.
func TestFolderPathsInFileTools(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	cs := g.connect(g.token("alice"))
	m, isErr := call(t, cs, "write_sandbox_file", map[string]any{"path": "x/", "content": "hi"})
	require.True(t, isErr)
	assert.Contains(t, m["error"], "a file path cannot end with '/' ('x/'); to make a folder, write a file inside it")
	m, isErr = call(t, cs, "write_sandbox_file", map[string]any{"path": "x/y.txt", "content": "hi"})
	require.False(t, isErr, "%v", m)
	m, isErr = call(t, cs, "read_sandbox_file", map[string]any{"path": "x"})
	require.True(t, isErr)
	assert.Contains(t, m["error"], `'x' is a folder, not a file; list it with list_sandbox_files(path="x")`)
}
