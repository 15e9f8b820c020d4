package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers/docker"
)

func requireDocker(t *testing.T) {
	t.Helper()
	if !docker.Available(t.Context(), "") {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Docker engine: .ci/run starts one with scripts/docker-setup.sh")
		}
		t.Skip("no Docker engine reachable (scripts/docker-setup.sh starts one)")
	}
}

// sse is an open event stream of a real gateway.
type sse struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
}

// event is one server-sent event.
type event struct{ id, name, data string }

func (c *client) sse(method, path, body string, header map[string]string) *sse {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(c.t, 200, resp.StatusCode)
	require.Equal(c.t, "text/event-stream", resp.Header.Get("Content-Type"))
	return &sse{t: c.t, resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event; keepalive comments come back as events named ":".
func (s *sse) next() event {
	s.t.Helper()
	var ev event
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(s.t, err, "the stream ended early")
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && (ev.name != "" || ev.data != ""):
			return ev
		case strings.HasPrefix(line, ":"):
			return event{name: ":", data: strings.TrimSpace(line[1:])}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

// output returns the data of an output event.
func (ev event) output(t *testing.T) string {
	t.Helper()
	var chunk struct{ Data string }
	require.NoError(t, json.Unmarshal([]byte(ev.data), &chunk), ev.data)
	return chunk.Data
}

// TestLiveOutputOfAWorkersExecution: with the queue flavor a worker process runs the
// execution, yet the gateway's event stream shows its output while it runs — the gateway
// follows it in its Docker sandbox — and resumes on its position.
func TestLiveOutputOfAWorkersExecution(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	d := newQueueDeploymentOf(t, "postgres", 120, `
    box: {type: docker, docker: {image: sandgate/sandbox-python:latest, pull: never}}`)
	d.startWorker()

	s := d.c.sse("POST", "/v1/sessions/default/commands?profile=box",
		`{"command":"for i in 1 2 3 4 5; do echo tick $i; sleep 1; done"}`, nil)
	task := s.next()
	require.Equal(t, "task", task.name)
	var tk struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(task.data), &tk))

	var first event
	for first = s.next(); first.name == ":"; first = s.next() {
	}
	require.Equal(t, "stdout", first.name, "%+v", first)
	assert.Equal(t, "tick 1\n", first.output(t))
	assert.Equal(t, "7-0", first.id)
	assert.Equal(t, "running", d.c.json("GET", "/v1/tasks/"+tk.ID, "", 200)["status"],
		"the first line arrived while the worker still runs it")

	// A second stream resuming after the first line gets the rest, live too.
	again := d.c.sse("GET", "/v1/tasks/"+tk.ID+"/output", "", map[string]string{"Last-Event-ID": first.id})
	var rest strings.Builder
	for ev := again.next(); ev.name != "result"; ev = again.next() {
		if ev.name == "stdout" {
			rest.WriteString(ev.output(t))
		}
	}
	assert.Equal(t, "tick 2\ntick 3\ntick 4\ntick 5\n", rest.String())
}

// TestBackgroundProcessSurvivesItsGateway: a background process on Docker keeps running when
// its gateway is killed; the next gateway adopts it — it is still listed as running, its
// output streams live, and DELETE stops it with everything it wrote.
func TestBackgroundProcessSurvivesItsGateway(t *testing.T) {
	requirePostgres(t)
	requireDocker(t)
	t.Parallel()
	dir := dataDir(t)
	addr := freeAddr(t)
	env := []string{"SANDGATE_SANDBOX__BROKER__LOST_AFTER=2s", "SANDGATE_SANDBOX__DEFAULT_PROFILE=docker"}
	g := startDev(t, dir, addr, env...)
	c := &client{t: t, base: g.base, token: g.token}

	sid := c.json("POST", "/v1/sessions", `{"name":"server"}`, 201)["id"].(string)
	proc := c.json("POST", "/v1/sessions/"+sid+"/commands",
		`{"command":"i=0; while :; do i=$((i+1)); echo beat $i; sleep 0.5; done","background":true}`, 201)
	id := proc["id"].(string)
	require.Equal(t, "running", proc["status"])

	g.kill(syscall.SIGKILL)
	g2 := startDev(t, dir, addr, env...)
	c.base = g2.base

	// Adopted once the dead gateway's heartbeat is older than lost_after: it stays running,
	// and its output is live on the new gateway.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		st := c.json("GET", "/v1/tasks/"+id, "", 200)
		require.Equal(t, "running", st["status"], "the process after its gateway died: %v", st)
	}
	s := c.sse("GET", "/v1/tasks/"+id+"/output", "", nil)
	seen := map[string]bool{}
	for len(seen) < 3 {
		if ev := s.next(); ev.name == "stdout" {
			for _, l := range strings.Split(strings.TrimSpace(ev.output(t)), "\n") {
				seen[l] = true
			}
		}
	}
	list := c.json("GET", "/v1/sessions/"+sid+"/processes", "", 200)["processes"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, "running", list[0].(map[string]any)["status"])

	stopped := c.json("DELETE", "/v1/sessions/"+sid+"/processes/"+id, "", 200)
	assert.Equal(t, "cancelled", stopped["status"])
	final := c.json("GET", "/v1/tasks/"+id, "", 200)
	assert.Equal(t, "cancelled", final["status"])
	out := final["result"].(map[string]any)["stdout"].(string)
	assert.True(t, strings.HasPrefix(out, "beat 1\nbeat 2\n"), "everything it wrote, from before its first gateway died: %q", out)
	assert.Contains(t, final["notice"], "another gateway")
}

// TestExecutionSurvivesARollingRestart: a command running on Docker when its gateway is
// stopped gracefully (SIGTERM, past server.shutdown_timeout) is left running in its sandbox,
// not killed; the next gateway adopts it and its task succeeds with all of its output.
func TestExecutionSurvivesARollingRestart(t *testing.T) {
	requirePostgres(t)
	requireDocker(t)
	t.Parallel()
	dir := dataDir(t)
	addr := freeAddr(t)
	env := []string{"SANDGATE_SANDBOX__BROKER__LOST_AFTER=2s", "SANDGATE_SANDBOX__DEFAULT_PROFILE=docker", "SANDGATE_SERVER__SHUTDOWN_TIMEOUT=1s"}
	g := startDev(t, dir, addr, env...)
	c := &client{t: t, base: g.base, token: g.token}

	sid := c.json("POST", "/v1/sessions", `{"name":"rolling"}`, 201)["id"].(string)
	task := c.json("POST", "/v1/sessions/"+sid+"/commands",
		`{"command":"for i in 1 2 3 4 5 6 7 8; do echo n $i; sleep 0.5; done","wait_s":0}`, 202)
	id := task["id"].(string)
	s := c.sse("GET", "/v1/tasks/"+id+"/output", "", nil)
	for ev := s.next(); ev.name != "stdout"; ev = s.next() {
	}
	_ = s.resp.Body.Close()

	g.kill(syscall.SIGTERM)
	g2 := startDev(t, dir, addr, env...)
	c.base = g2.base

	var final map[string]any
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		final = c.json("GET", "/v1/tasks/"+id, "", 200)
		if final["status"] != "running" {
			break
		}
	}
	require.Equal(t, "succeeded", final["status"], "the execution after a graceful restart: %v", final)
	assert.Equal(t, "n 1\nn 2\nn 3\nn 4\nn 5\nn 6\nn 7\nn 8\n", final["result"].(map[string]any)["stdout"], "all of its output, from before and after the restart")
	assert.Contains(t, final["notice"], "another gateway")
}

// TestQuietStreamStaysOpen: a command silent for 65 s — longer than the keepalive interval
// (15 s) four times over and than common proxy idle timeouts — streams its first line, then
// keepalive comments only, then its last line and result, in order, on the real binary with
// its default server timeouts.
func TestQuietStreamStaysOpen(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	g := startDev(t, dataDir(t), freeAddr(t))
	c := &client{t: t, base: g.base, token: g.token}
	s := c.sse("POST", "/v1/sessions/default/commands", `{"command":"echo start; sleep 65; echo end"}`, nil)
	require.Equal(t, "task", s.next().name)
	var names []string
	keepalives := 0
	for {
		ev := s.next()
		if ev.name == ":" {
			keepalives++
			continue
		}
		names = append(names, ev.name)
		if ev.name == "stdout" {
			names[len(names)-1] += ":" + ev.output(t)
		}
		if ev.name == "result" || ev.name == "error" {
			break
		}
	}
	assert.Equal(t, []string{"stdout:start\n", "stdout:end\n", "result"}, names)
	assert.GreaterOrEqual(t, keepalives, 4, "a keepalive at least every 15 s of the 65 s of silence")
}
