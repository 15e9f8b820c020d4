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

	// Oversized requests are refused before sending (413 naming the limit); completions are
	// recorded in the response store, not sent on the queue, so the record limit does not cut
	// them.
	m := requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo " + strings.Repeat("x", 5000)}), 413, "too-large")
	require.Contains(t, m["detail"], "inline_payload_max_bytes=4096")
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "head -c 20000 /dev/zero | tr '\\0' a"})
	require.Equal(t, 200, r.Status)
	m = r.JSON(t)
	require.Equal(t, false, m["stdout_truncated"])
	require.Len(t, m["stdout"], 20000)
	require.Nil(t, m["notice"])
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

// Output over the queue's record limit: a queued execution answers exactly what the thread
// flavor answers for the same command (max_output_bytes per stream, head and tail), since
// results are recorded in the response store, not sent on the queue.
func TestQueueFlavorKeepsThreadFlavorOutput(t *testing.T) {
	t.Parallel()
	thread := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.MaxOutputBytes = 256 << 10 }})
	queued := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.MaxOutputBytes = 256 << 10
		c.Sandbox.Broker.Flavor = config.FlavorQueue
		c.Sandbox.Broker.Queue = &config.Queue{Type: config.InMemory}
		c.Sandbox.Broker.ResponseStore = &config.ResponseStore{Type: config.InMemory}
		c.Sandbox.Broker.InlinePayloadMaxBytes = 4096
	}})
	answer := func(e *testEnv) map[string]any {
		tok := e.token("alice")
		id := e.newSession(tok, "default")
		r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "seq 1 100000 >&2; seq 1 120000; echo END"})
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		m := r.JSON(t)
		for _, k := range []string{"duration_ms", "session_id", "task_id"} {
			delete(m, k)
		}
		return m
	}
	want, got := answer(thread), answer(queued)
	require.Equal(t, true, want["stdout_truncated"])
	require.Equal(t, true, want["stderr_truncated"])
	require.Len(t, want["stdout"], 256<<10)
	require.Equal(t, want, got)

	tok := queued.token("alice")
	profiles := queued.do(tok, "GET", "/v1/profiles", nil).JSON(t)["profiles"].([]any)
	require.EqualValues(t, 256<<10, profiles[0].(map[string]any)["output_limit_bytes"])
}
