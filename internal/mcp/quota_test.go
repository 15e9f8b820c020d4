package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/mcp"
)

// tryConnect opens an MCP session with the official SDK client as the bearer of tok.
func (g *gateway) tryConnect(tok string) (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "sandgate-test", Version: "1"}, nil)
	return client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   g.URL + mcp.Path,
		HTTPClient: &http.Client{Transport: bearer{tok: tok, base: http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
}

// mcpSessions is GET /v1/me's mcp_sessions quota as tok.
func (g *gateway) mcpSessions(tok string) map[string]any {
	g.t.Helper()
	req, err := http.NewRequest("GET", g.URL+"/v1/me", nil)
	require.NoError(g.t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	require.Equal(g.t, 200, resp.StatusCode)
	var me struct {
		Quotas map[string]map[string]any `json:"quotas"`
	}
	require.NoError(g.t, json.NewDecoder(resp.Body).Decode(&me))
	return me.Quotas["mcp_sessions"]
}

// MCP sessions count against sandbox.quotas.mcp_sessions per principal on the replica: past
// it the initialize fails with the quota's JSON-RPC error (the SDK client's Connect returns
// it), other principals and admins are unaffected, and a closed session frees its place.
func TestMCPSessionQuota(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		only(c, "default")
		c.Sandbox.Quotas.MCPSessions = 2
	})
	alice := g.token("alice")
	first := g.connect(alice)
	g.connect(alice)
	assert.Equal(t, map[string]any{"used": 2.0, "limit": 2.0}, g.mcpSessions(alice))

	_, err := g.tryConnect(alice)
	require.Error(t, err, "a third session is over the quota")
	assert.Contains(t, err.Error(), "sandbox.quotas.mcp_sessions")
	var rpc *jsonrpc.Error
	require.True(t, errors.As(err, &rpc), "a JSON-RPC error: %v", err)
	assert.EqualValues(t, mcp.CodeQuota, rpc.Code)
	var data mcp.QuotaErrorData
	require.NoError(t, json.Unmarshal(rpc.Data, &data))
	assert.Equal(t, mcp.QuotaErrorData{Type: "https://sandgate.dev/problems/quota", RetryAfter: 60}, data)
	assert.EqualValues(t, 2, g.mcpSessions(alice)["used"], "the refused session is not held")

	bob := g.connect(g.token("bob")) // another principal
	res, isErr := call(t, bob, "run_command", map[string]any{"command": "echo hi"})
	require.False(t, isErr)
	assert.Equal(t, "hi\n", res["stdout"])
	admin := g.token("root", "admins")
	for range 3 {
		g.connect(admin) // exempt
	}
	assert.EqualValues(t, -1, g.mcpSessions(admin)["limit"])

	res, isErr = call(t, first, "run_command", map[string]any{"command": "echo still"})
	require.False(t, isErr, "sessions within the quota work")
	assert.Equal(t, "still\n", res["stdout"])

	require.NoError(t, first.Close()) // DELETE /mcp: the server ends the session
	var again *sdk.ClientSession
	require.Eventually(t, func() bool {
		cs, err := g.tryConnect(alice)
		if err != nil {
			return false
		}
		again = cs
		return true
	}, 10*time.Second, 50*time.Millisecond, "a closed session frees its place")
	t.Cleanup(func() { _ = again.Close() })
	assert.EqualValues(t, 2, g.mcpSessions(alice)["used"])
}
