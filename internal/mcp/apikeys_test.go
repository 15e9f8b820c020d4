package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/mcp"
)

// newKey makes an API key through REST as tok with body; it answers the key's id and secret.
func (g *gateway) newKey(tok string, body map[string]any) (string, string) {
	g.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(g.t, err)
	req, err := http.NewRequest("POST", g.URL+"/v1/api-keys", bytes.NewReader(b))
	require.NoError(g.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	require.Equal(g.t, 201, resp.StatusCode)
	var k map[string]any
	require.NoError(g.t, json.NewDecoder(resp.Body).Decode(&k))
	return k["id"].(string), k["secret"].(string)
}

// TestAPIKeyOverMCP: /mcp takes an API key as its bearer; a key restricted to profiles sees
// and uses only those; a revoked key is refused.
func TestAPIKeyOverMCP(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) { only(c, "default", "oneshot", "restricted") })
	alice := g.token("alice", "ml")
	id, secret := g.newKey(alice, map[string]any{"name": "agent", "profiles": []string{"default"}})

	cs := g.connect(secret)
	instructions := cs.InitializeResult().Instructions
	require.Contains(t, instructions, "- 'default' (default): provider 'local_subprocess'")
	require.NotContains(t, instructions, "'oneshot'", "only the key's profiles")
	require.NotContains(t, instructions, "'restricted'")

	m, isErr := call(t, cs, "run_command", map[string]any{"command": "echo via-key"})
	require.False(t, isErr, "%v", m)
	require.Equal(t, "via-key\n", m["stdout"])
	for _, profile := range []string{"oneshot", "restricted"} {
		m, isErr = call(t, cs, "run_command", map[string]any{"command": "echo never", "profile": profile})
		require.True(t, isErr)
		require.Contains(t, m["error"], "this API key may use only the profiles ['default'], not '"+profile+"'")
	}

	// Revoked: the next request is refused (this replica forgot the key at once).
	req, err := http.NewRequest("DELETE", g.URL+"/v1/api-keys/"+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	r := post(t, g.URL+mcp.Path, secret, "", body)
	require.Equal(t, 401, r.StatusCode)
	require.True(t, strings.Contains(r.Header.Get("WWW-Authenticate"), "was revoked at"), r.Header.Get("WWW-Authenticate"))

	// The MCP session the key opened is no way around it: each request is authenticated.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "echo after"}})
	require.Error(t, err, "a revoked key's open MCP session refuses tool calls")
}
