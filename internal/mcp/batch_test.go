package mcp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/mcp"
)

// postBatch posts body to /mcp on session as tok, naming protocol version version (none when
// empty), and returns the answer with its whole body.
func postBatch(t *testing.T, g *gateway, tok, session, version, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", g.URL+mcp.Path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", session)
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// batch is a JSON-RPC batch of n messages made by msg(i).
func batch(n int, msg func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = msg(i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func problemOf(t *testing.T, resp *http.Response, body string, status int, kind string) map[string]any {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, "%s", body)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "%s", body)
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	require.Equal(t, "https://sandgate.dev/problems/"+kind, p["type"], "%s", body)
	return p
}

// Issue 33: one POST carrying 20,000 tool calls cost one request of the rate limit. A batch
// is refused past server.mcp_max_batch before the SDK decodes it (nothing runs), refused
// outright under a protocol version without batches, and otherwise costs one request per
// message: a batch the principal's bucket cannot pay for is refused with 429 and
// Retry-After, and another principal is not charged.
func TestBatchesAreBoundedAndCountedCallByCall(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		only(c, "default")
		// A bucket that does not refill within the test: what is left is what was spent.
		c.Sandbox.Quotas.RequestsPerSecond = 0.0001
		c.Sandbox.Quotas.RequestsBurst = 40
	})
	tok := g.token("alice")
	cs := g.connect(tok)
	toolCall := func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"touch ran-%d"}}}`, i+1, i)
	}
	ping := func(i int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 1000+i) }
	remaining := func(resp *http.Response) int {
		t.Helper()
		n, err := strconv.Atoi(resp.Header.Get("RateLimit-Remaining"))
		require.NoError(t, err, "RateLimit-Remaining %q", resp.Header.Get("RateLimit-Remaining"))
		return n
	}

	// 20,000 tool calls: refused before any is decoded or run, whatever the version says.
	huge := batch(20000, toolCall)
	for _, version := range []string{"", "2025-03-26"} {
		resp, body := postBatch(t, g, tok, cs.ID(), version, huge)
		p := problemOf(t, resp, body, http.StatusRequestEntityTooLarge, "too-large")
		assert.Contains(t, p["detail"], "more than 50 messages")
		assert.Contains(t, p["detail"], "server.mcp_max_batch")
	}
	// Versions from 2025-06-18 on have no batches at all.
	for _, version := range []string{"2025-06-18", "2025-11-25"} {
		resp, body := postBatch(t, g, tok, cs.ID(), version, batch(2, ping))
		p := problemOf(t, resp, body, http.StatusBadRequest, "validation")
		assert.Contains(t, p["detail"], "JSON-RPC batches were removed in MCP 2025-06-18")
		assert.Contains(t, p["detail"], version)
	}
	m, _ := call(t, cs, "run_command", map[string]any{"command": "ls"})
	assert.Empty(t, m["stdout"], "no call of a refused batch ran")

	// A batch the limit allows runs, and costs one request per message.
	resp, body := postBatch(t, g, tok, cs.ID(), "2025-03-26", ping(0))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	before := remaining(resp)
	resp, body = postBatch(t, g, tok, cs.ID(), "2025-03-26", batch(3, toolCall))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Equal(t, before-3, remaining(resp), "three calls, three requests")
	for i := range 3 {
		assert.Contains(t, body, fmt.Sprintf(`"id":%d`, i+1), "each call answered")
	}
	m, _ = call(t, cs, "run_command", map[string]any{"command": "ls"})
	assert.Equal(t, "ran-0\nran-1\nran-2\n", m["stdout"])

	// More calls than are left in the bucket: refused, nothing run; a single request passes.
	resp, body = postBatch(t, g, tok, cs.ID(), "2025-03-26", ping(0))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	left := remaining(resp)
	require.Greater(t, left, 2)
	resp, body = postBatch(t, g, tok, cs.ID(), "2025-03-26", batch(left+1, ping))
	p := problemOf(t, resp, body, http.StatusTooManyRequests, "quota")
	assert.Contains(t, p["detail"], fmt.Sprintf("this one carries %d calls, each counted as one request", left+1))
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp, body = postBatch(t, g, tok, cs.ID(), "2025-03-26", ping(0))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	// Another principal's bucket is its own.
	bobTok := g.token("bob")
	bob := g.connect(bobTok)
	resp, body = postBatch(t, g, bobTok, bob.ID(), "2025-03-26", batch(5, ping))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
}
