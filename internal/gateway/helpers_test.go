package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

// TestMain fails the package when a test leaves a goroutine behind, or Docker objects of its
// gateways' installations on the engine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dockertest.CheckAfter(m))
}

func get(e *gatewaytest.Env, path, tok string) int {
	status, _, _ := e.Do(http.MethodGet, path, tok, nil, nil)
	return status
}

// postMCP sends a JSON-RPC ping to /mcp.
func postMCP(e *gatewaytest.Env, tok string) int {
	status, _, _ := e.Do(http.MethodPost, "/mcp", tok, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`),
		map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	return status
}
