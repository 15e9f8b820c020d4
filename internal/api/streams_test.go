package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
)

// slowRequest is a request whose chunked body carries what the test writes to it, when it
// writes it: a client that holds its stream open.
type slowRequest struct {
	req  *http.Request
	body *io.PipeWriter
	done chan slowReply
}

type slowReply struct {
	reply
	err error
}

// slow starts method path as tok with a body of type ctype that the test feeds (write) and
// ends (close); answer waits for the reply.
func (e *testEnv) slow(tok, method, path, ctype string) *slowRequest {
	e.t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(method, e.URL+path, pr)
	require.NoError(e.t, err)
	req.ContentLength = -1
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+tok)
	s := &slowRequest{req: req, body: pw, done: make(chan slowReply, 1)}
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.done <- slowReply{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		s.done <- slowReply{reply: reply{Status: resp.StatusCode, Header: resp.Header, Body: b}, err: err}
	}()
	e.t.Cleanup(func() { _ = pw.Close() })
	return s
}

// write sends p as a chunk of the body.
func (s *slowRequest) write(t *testing.T, p string) {
	t.Helper()
	_, err := s.body.Write([]byte(p))
	require.NoError(t, err)
}

// answer ends the body (unless the server ended the request first) and returns the reply,
// checked against the contract.
func (s *slowRequest) answer(t *testing.T, end bool) reply {
	t.Helper()
	if end {
		_ = s.body.Close()
	}
	select {
	case r := <-s.done:
		require.NoError(t, r.err)
		gatewaytest.LoadContract(t).Check(t, s.req, r.Status, r.Header, r.Body)
		return r.reply
	case <-time.After(time.Minute):
		t.Fatalf("%s %s: no answer within a minute", s.req.Method, s.req.URL.Path)
		return reply{}
	}
}

// until polls cond every 20 ms until it holds (at most 30 s).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not the case after 30 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stdinTask starts a program in a session of its own (sessions run one execution at a time)
// that copies its standard input, kept open, to the host file out, and returns the task id.
func (e *testEnv) stdinTask(tok, out string) string {
	e.t.Helper()
	sid := e.newSession(tok, "default")
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("exec cat > '%s'", out), "stdin_open": true, "wait_s": 0})
	require.Equal(e.t, 202, r.Status, "body: %s", r.Body)
	id := r.JSON(e.t)["id"].(string)
	e.t.Cleanup(func() { e.do(tok, "POST", "/v1/tasks/"+id+"/cancel", nil) })
	return id
}

// Issue 33: one principal held 300 slow chunked standard-input streams open for the whole
// 15-minute read timeout, and at the allowed request rate reached the process's descriptor
// limit in minutes. Now a principal's requests in progress are bounded
// (sandbox.quotas.open_requests): with its limit of slow streams open, its next request of any
// kind is refused with 429 and Retry-After, while another principal is served; a stream that
// ends gives its place back.
func TestOpenRequestsArePerPrincipal(t *testing.T) {
	t.Parallel()
	const limit = 4
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.Quotas.OpenRequests = limit }})
	alice, bob := e.token("alice"), e.token("bob")
	dir := t.TempDir()
	var streams []*slowRequest
	var tasks []string
	for i := range limit {
		out := filepath.Join(dir, fmt.Sprint(i))
		id := e.stdinTask(alice, out)
		tasks = append(tasks, id)
		s := e.slow(alice, "POST", "/v1/tasks/"+id+"/stdin", "application/octet-stream")
		s.write(t, "x")
		// Its first byte reached the program: the stream holds its place.
		until(t, "stream "+fmt.Sprint(i)+" is open", func() bool { b, _ := os.ReadFile(out); return len(b) > 0 })
		streams = append(streams, s)
	}

	// At the limit: another stream, or any other request, of alice's is refused.
	r := e.send(alice, "POST", "/v1/tasks/"+tasks[0]+"/stdin", "application/octet-stream", strings.NewReader("y"), 1, nil)
	p := requireProblem(t, r, 429, "quota")
	assert.Contains(t, p["detail"], fmt.Sprintf("you have %d requests in progress on this gateway replica, the limit of sandbox.quotas.open_requests", limit))
	assert.Equal(t, "5", r.Header.Get("Retry-After"))
	requireProblem(t, e.do(alice, "GET", "/v1/me", nil), 429, "quota")
	requireProblem(t, e.do(alice, "GET", "/v1/tasks/"+tasks[1], nil), 429, "quota")

	// Another principal is served meanwhile, and sees its own count.
	me := e.do(bob, "GET", "/v1/me", nil)
	require.Equal(t, 200, me.Status, "body: %s", me.Body)
	assert.Equal(t, map[string]any{"used": 1.0, "limit": float64(limit)}, me.JSON(t)["quotas"].(map[string]any)["open_requests"])
	bobTask := e.stdinTask(bob, filepath.Join(dir, "bob"))
	sent := e.send(bob, "POST", "/v1/tasks/"+bobTask+"/stdin", "application/octet-stream", strings.NewReader("bob"), 3, nil)
	require.Equal(t, 200, sent.Status, "body: %s", sent.Body)

	// A stream that ends gives its place back.
	done := streams[0].answer(t, true)
	require.Equal(t, 200, done.Status, "body: %s", done.Body)
	assert.EqualValues(t, 1, done.JSON(t)["bytes"])
	var again reply
	until(t, "alice is under her limit again", func() bool { again = e.do(alice, "GET", "/v1/me", nil); return again.Status == 200 })
	assert.Equal(t, map[string]any{"used": float64(limit), "limit": float64(limit)}, again.JSON(t)["quotas"].(map[string]any)["open_requests"],
		"three streams and this request")
	for _, s := range streams[1:] {
		require.Equal(t, 200, s.answer(t, true).Status)
	}
}

// A stream that moves no bytes for server.stream_idle_timeout is cut: a standard-input
// stream, an upload or a JSON body that stops sending gets 408 problem "timeout" naming the
// setting (and leaves no partial file); a preview port's WebSocket that carries nothing
// either way is closed with 1001 and the same reason. Waiting on the gateway's side is no
// idleness of the client's: a program slow to read its input, an event stream waiting for
// output.
func TestIdleStreamsAreCut(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	e := newEnv(t, envOpts{keepalive: idle / 4, config: func(c *config.Config) { c.Server.StreamIdleTimeout = config.Duration(idle) }})
	tok := e.token("alice")
	dir := t.TempDir()
	requireIdle := func(r reply) {
		t.Helper()
		p := requireProblem(t, r, 408, "timeout")
		assert.Contains(t, p["detail"], "no byte of the request body arrived for 2s (server.stream_idle_timeout)")
	}

	out := filepath.Join(dir, "stdin")
	task := e.stdinTask(tok, out)
	s := e.slow(tok, "POST", "/v1/tasks/"+task+"/stdin", "application/octet-stream")
	s.write(t, "x")
	requireIdle(s.answer(t, false))
	sent := e.send(tok, "POST", "/v1/tasks/"+task+"/stdin", "application/octet-stream", strings.NewReader("y"), 1, nil)
	require.Equal(t, 200, sent.Status, "the task takes input still: %s", sent.Body)

	sid := e.newSession(tok, "default")
	s = e.slow(tok, "PUT", "/v1/sessions/"+sid+"/files/slow.bin", "application/octet-stream")
	s.write(t, "0123456789")
	requireIdle(s.answer(t, false))
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+sid+"/files/slow.bin", nil), 404, "not-found")

	s = e.slow(tok, "POST", "/v1/sessions", "application/json")
	s.write(t, `{"name":`)
	requireIdle(s.answer(t, false))

	// A program that reads its input late: the gateway waits on it, not on the client.
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 4; wc -c", "stdin_open": true, "wait_s": 0})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	slowReader := r.JSON(t)["id"].(string)
	big := bytes.Repeat([]byte("z"), 1<<20) // far more than a pipe holds: the write waits for the program
	sent = e.send(tok, "POST", "/v1/tasks/"+slowReader+"/stdin?eof=true", "application/octet-stream", bytes.NewReader(big), int64(len(big)), nil)
	require.Equal(t, 200, sent.Status, "body: %s", sent.Body)
	assert.EqualValues(t, len(big), sent.JSON(t)["bytes"])

	assert.Equal(t, "1048576\n", e.waitTask(tok, slowReader)["result"].(map[string]any)["stdout"])

	// An event stream waiting longer than idle for output keeps going (its keepalives move).
	ev := e.stream(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 3; echo late"}, nil)
	require.Equal(t, 200, ev.resp.StatusCode)
	var result map[string]any
	for result == nil {
		got := ev.event(t)
		if got.event == "result" {
			result = decode(t, got.data)
		}
	}
	assert.Equal(t, "late\n", result["stdout"])

	// A WebSocket that carries nothing is closed, with the reason.
	port := freePort(t)
	e.run(tok, sid, "cat > server.py <<'EOF'\n"+previewServer+"EOF")
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("exec python3 server.py %d", port), "background": true})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	base := fmt.Sprintf("/v1/sessions/%s/ports/%d", sid, port)
	until(t, "the preview server answers", func() bool { return e.do(tok, "GET", base+"/server.py", nil).Status == 200 })
	conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.URL, "http")+base+"/ws", http.Header{"Authorization": {"Bearer " + tok}})
	require.NoError(t, err)
	defer conn.Close()
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte("hi")))
	_, msg, err := conn.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, "echo:hi", string(msg))
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	_, _, err = conn.ReadMessage()
	var closed *websocket.CloseError
	require.ErrorAs(t, err, &closed)
	assert.Equal(t, websocket.CloseGoingAway, closed.Code)
	assert.Equal(t, "idle for 2s (server.stream_idle_timeout)", closed.Text)
}
