package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// TestBackgroundProcess: a command started with background: true answers 201 once it runs,
// outlives the call (another command sees it), is listed with its pid, streams its output,
// counts as its session's use, and ends with DELETE — its task then says cancelled, with
// the output it wrote. Another principal sees none of it.
func TestBackgroundProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "default")

	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{
		"command":    "echo started; exec sleep 300",
		"background": true,
	})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	proc := r.JSON(t)
	pid := proc["id"].(string)
	assert.Equal(t, "/v1/sessions/"+sid+"/processes/"+pid, r.Header.Get("Location"))
	assert.Equal(t, "running", proc["status"])
	assert.Equal(t, "echo started; exec sleep 300", proc["command"])
	osPID := proc["pid"].(float64)
	require.Positive(t, osPID)

	// It runs on while other commands run and see it.
	out := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("kill -0 %d && echo alive", int(osPID))}).JSON(t)
	assert.Equal(t, "alive\n", out["stdout"])

	list := e.do(tok, "GET", "/v1/sessions/"+sid+"/processes", nil).JSON(t)["processes"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, pid, list[0].(map[string]any)["id"])
	got := e.do(tok, "GET", "/v1/sessions/"+sid+"/processes/"+pid, nil).JSON(t)
	assert.Equal(t, "running", got["status"])
	task := e.do(tok, "GET", "/v1/tasks/"+pid, nil).JSON(t)
	assert.Equal(t, true, task["background"])
	assert.Equal(t, "echo started; exec sleep 300", task["program"])

	// Its output streams like any task's.
	s := e.stream(tok, "GET", "/v1/tasks/"+pid+"/output", nil, nil)
	ev := s.event(t)
	require.Equal(t, "stdout", ev.event)
	assert.Equal(t, "started\n", decode(t, ev.data)["data"])
	_ = s.resp.Body.Close()

	me := e.do(tok, "GET", "/v1/me", nil).JSON(t)
	assert.Equal(t, map[string]any{"used": 1.0, "limit": 8.0}, me["quotas"].(map[string]any)["background_processes"])

	// Other principals see neither the process nor its task.
	bob := e.token("bob")
	requireProblem(t, e.do(bob, "GET", "/v1/sessions/"+sid+"/processes/"+pid, nil), 404, "not-found")
	requireProblem(t, e.do(bob, "DELETE", "/v1/sessions/"+sid+"/processes/"+pid, nil), 404, "not-found")
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+sid+"/processes/"+strings.Repeat("0", 32), nil), 404, "not-found")

	stopped := e.do(tok, "DELETE", "/v1/sessions/"+sid+"/processes/"+pid, nil)
	require.Equal(t, 200, stopped.Status, "body: %s", stopped.Body)
	assert.Equal(t, "cancelled", stopped.JSON(t)["status"])
	final := e.waitTask(tok, pid)
	assert.Equal(t, "cancelled", final["status"])
	assert.Equal(t, "started\n", final["result"].(map[string]any)["stdout"], "the output it wrote is kept")
	out = e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("kill -0 %d 2>/dev/null || echo gone", int(osPID))}).JSON(t)
	assert.Equal(t, "gone\n", out["stdout"], "its process is gone")
}

// TestBackgroundProcessRules: background processes are commands in sessions, bounded by the
// background_processes quota, and die with their session.
func TestBackgroundProcessRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.Quotas.BackgroundProcesses = 1 }})
	tok := e.token("carol")
	sid := e.newSession(tok, "default")

	requireProblem(t, e.do(tok, "POST", "/v1/runs", map[string]any{"profile": "oneshot", "command": "sleep 1", "background": true}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/commands?profile=oneshot", map[string]any{"command": "sleep 1", "background": true}), 409, "conflict")

	first := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 300", "background": true})
	require.Equal(t, 201, first.Status, "body: %s", first.Body)
	over := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 300", "background": true})
	p := requireProblem(t, over, 429, "quota")
	assert.Contains(t, p["detail"], "background_processes")
	assert.NotEmpty(t, over.Header.Get("Retry-After"))
	// Ordinary executions are not counted with them.
	assert.Equal(t, 200, e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "true"}).Status)

	// Destroying the session stops it.
	require.Equal(t, 200, e.do(tok, "DELETE", "/v1/sessions/"+sid, nil).Status)
	final := e.waitTask(tok, first.JSON(t)["id"].(string))
	assert.Equal(t, "cancelled", final["status"])
	assert.Equal(t, "the session was destroyed", final["error"])
	assert.Equal(t, 0.0, e.do(tok, "GET", "/v1/me", nil).JSON(t)["quotas"].(map[string]any)["background_processes"].(map[string]any)["used"])
}

// TestStdinStreams: an execution started with stdin_open reads what POST /v1/tasks/{id}/stdin
// sends while it runs, in order, until eof=true; a task that takes no input says so.
func TestStdinStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("dora")
	sid := e.newSession(tok, "default")

	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{
		"code":       "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\nprint('eof')",
		"stdin":      "first\n",
		"stdin_open": true,
		"wait_s":     0,
	})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	id := r.JSON(t)["id"].(string)

	sent := e.send(tok, "POST", "/v1/tasks/"+id+"/stdin", "application/octet-stream", strings.NewReader("second\n"), -1, nil)
	require.Equal(t, 200, sent.Status, "body: %s", sent.Body)
	assert.Equal(t, map[string]any{"task_id": id, "bytes": 7.0, "closed": false}, sent.JSON(t))
	closed := e.send(tok, "POST", "/v1/tasks/"+id+"/stdin?eof=true", "application/octet-stream", strings.NewReader("third\n"), 6, nil)
	require.Equal(t, 200, closed.Status, "body: %s", closed.Body)
	assert.Equal(t, true, closed.JSON(t)["closed"])

	done := e.waitTask(tok, id)
	assert.Equal(t, "got first\ngot second\ngot third\neof\n", done["result"].(map[string]any)["stdout"])

	requireProblem(t, e.send(tok, "POST", "/v1/tasks/"+id+"/stdin", "application/octet-stream", strings.NewReader("late"), 4, nil), 409, "conflict")
	requireProblem(t, e.send(e.token("eve"), "POST", "/v1/tasks/"+id+"/stdin", "application/octet-stream", strings.NewReader("x"), 1, nil), 404, "not-found")

	// An execution started without stdin_open takes nothing.
	plain := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 5", "wait_s": 0}).JSON(t)["id"].(string)
	p := requireProblem(t, e.send(tok, "POST", "/v1/tasks/"+plain+"/stdin", "application/octet-stream", strings.NewReader("x"), 1, nil), 409, "conflict")
	assert.Contains(t, p["detail"], "stdin")
	e.do(tok, "POST", "/v1/tasks/"+plain+"/cancel", nil)
}

// TestTerminal: a command on a pty sees a terminal of the asked size, which resize changes;
// what the client types reaches it; its output is one stream.
func TestTerminal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("finn")
	sid := e.newSession(tok, "default")

	s := e.stream(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{
		"command": `stty size; read line; stty size; echo "typed: $line"`,
		"pty":     map[string]any{"rows": 24, "cols": 80},
	}, nil)
	require.Equal(t, 200, s.resp.StatusCode)
	id := decode(t, s.event(t).data)["id"].(string)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "24 80") {
		ev := s.event(t)
		require.Equal(t, "stdout", ev.event, "a terminal has one stream")
		seen.WriteString(decode(t, ev.data)["data"].(string))
	}
	require.Equal(t, 204, e.do(tok, "POST", "/v1/tasks/"+id+"/resize", map[string]any{"rows": 50, "cols": 132}).Status)
	requireProblem(t, e.do(tok, "POST", "/v1/tasks/"+id+"/resize", map[string]any{"rows": 0, "cols": 132}), 400, "validation")
	require.Equal(t, 200, e.send(tok, "POST", "/v1/tasks/"+id+"/stdin", "application/octet-stream", strings.NewReader("hello\r"), 6, nil).Status)
	var result map[string]any
	for result == nil {
		ev := s.event(t)
		switch ev.event {
		case "stdout":
			seen.WriteString(decode(t, ev.data)["data"].(string))
		case "result":
			result = decode(t, ev.data)
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	assert.Contains(t, seen.String(), "50 132")
	assert.Contains(t, seen.String(), "typed: hello")
	assert.Equal(t, "", result["stderr"])

	// A pty runs commands only, and only fits in 1..1000 cells.
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "true", "pty": map[string]any{"rows": 0, "cols": 80}}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/tasks/"+id+"/resize", map[string]any{"rows": 10, "cols": 10}), 409, "conflict")
}

// TestBackgroundProcessKeepsItsSessionBusy: a session whose background process runs is not
// reset for idleness, however long it runs.
func TestBackgroundProcessKeepsItsSessionBusy(t *testing.T) {
	t.Parallel()
	clock := sandboxtest.NewClock(time.Now())
	e := newEnv(t, envOpts{now: clock.Now})
	tok := e.token("gus")
	sid := e.newSession(tok, "short-idle") // idle_timeout: 1 s
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 300", "background": true})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	// Three times its idle timeout pass (well within broker.lost_after, so the runner stays
	// alive); the running process records its use of the session (every second of real
	// time), so the session is not idle when the sweeper and the next command look.
	clock.Advance(3 * time.Second)
	require.Eventually(t, func() bool {
		used, err := time.Parse(time.RFC3339Nano, e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["last_used_at"].(string))
		return err == nil && !used.Before(clock.Now().Add(-time.Second))
	}, 10*time.Second, 50*time.Millisecond, "the background process touches its session")
	e.svc.SweepNow(t.Context())
	out := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo still"}).JSON(t)
	assert.Equal(t, "still\n", out["stdout"])
	assert.Empty(t, out["notice"], "no idle reset while its background process runs")
	assert.Equal(t, "running", e.do(tok, "GET", "/v1/tasks/"+r.JSON(t)["id"].(string), nil).JSON(t)["status"])
}
