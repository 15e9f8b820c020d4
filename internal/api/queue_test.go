package api_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// TestQueueFlavorInMemory runs the main paths through the queue flavor: the operation is
// serialised, consumed by this process as a worker, and its completion read back from Postgres.
func TestQueueFlavorInMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.Broker.Flavor = config.FlavorQueue
		c.Sandbox.Broker.Queue = &config.Queue{Type: config.InMemory}
		c.Sandbox.Broker.ResponseStore = &config.ResponseStore{Type: config.InMemory}
		c.Sandbox.Broker.InlinePayloadMaxBytes = 4096
		c.Sandbox.Broker.WorkerTimeoutCeiling = ptr(200.0)
		slow := c.Sandbox.Profiles["default"]
		slow.Policy.Timeout = ptr(300.0)
		c.Sandbox.Profiles["slow"] = slow
	}})
	tok := e.token("alice")
	id := e.newSession(tok, "default")

	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "python3 -c 'print(6*7)'"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "42\n", r.JSON(t)["stdout"])
	// The session keeps the sandbox the worker created (never lost across the queue).
	sb := e.do(tok, "GET", "/v1/sessions/"+id, nil).JSON(t)["sandbox_id"]
	require.NotEmpty(t, sb)
	e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo x > f"})
	require.Equal(t, sb, e.do(tok, "GET", "/v1/sessions/"+id, nil).JSON(t)["sandbox_id"])

	// Promotion and polling.
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 0.5; echo later", "wait_s": 0})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	done := e.waitTask(tok, r.JSON(t)["id"].(string))
	require.Equal(t, "succeeded", done["status"])
	require.Equal(t, "later\n", done["result"].(map[string]any)["stdout"])

	// Oversized requests are refused before sending; completions are trimmed to the record.
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo " + strings.Repeat("x", 5000)}), 413, "too-large")
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "head -c 20000 /dev/zero | tr '\\0' a"})
	require.Equal(t, 200, r.Status)
	m := r.JSON(t)
	require.Equal(t, true, m["stdout_truncated"])
	require.EqualValues(t, 20000, m["stdout_bytes"])
	require.Contains(t, m["notice"], "record limit")
	m = requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/commands?profile=slow", map[string]any{"command": "true"}), 403, "policy")
	require.Contains(t, m["detail"], "worker_timeout_ceiling")
	// A lower request timeout passes the ceiling.
	require.Equal(t, 200, e.do(tok, "POST", "/v1/sessions/default/commands?profile=slow", map[string]any{"command": "true", "timeout_s": 30}).Status)

	// Machinery errors keep their problem type across the queue.
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/commands?profile=nonet", map[string]any{"command": "true"}), 403, "policy")

	// FIFO per session under concurrent submissions.
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": fmt.Sprintf("echo start-%d >> log; sleep 0.2; echo end-%d >> log", i, i)})
			require.Equal(t, 200, r.Status, "body: %s", r.Body)
		}()
	}
	wg.Wait()
	requireSerial(t, string(e.do(tok, "GET", "/v1/sessions/"+id+"/files/log", nil).Body), 5)

	// Cancel a queued run.
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 30", "wait_s": 0})
	tid := r.JSON(t)["id"].(string)
	require.Equal(t, 200, e.do(tok, "POST", "/v1/tasks/"+tid+"/cancel", nil).Status)
	require.Equal(t, "cancelled", e.waitTask(tok, tid)["status"])
}
