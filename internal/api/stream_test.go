package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
)

// sseEvent is one server-sent event (or, with comment set, one comment line).
type sseEvent struct {
	id, event, data, comment string
}

// sseStream reads events from an open text/event-stream answer, as the HTML standard's
// event-stream parsing describes (fields id, event, data; lines starting with ':' are
// comments; a blank line ends an event).
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

func (e *testEnv) stream(tok, method, path string, body any, header map[string]string) *sseStream {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(e.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.URL+path, rd)
	require.NoError(e.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = resp.Body.Close() })
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The status and media type are the contract's (the events are read by the test).
		gatewaytest.LoadContract(e.t).Check(e.t, req, resp.StatusCode, resp.Header, nil)
	}
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event or comment; io.EOF when the stream ended.
func (s *sseStream) next(t *testing.T) (sseEvent, error) {
	t.Helper()
	var ev sseEvent
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.event != "" || len(data) > 0 {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			return sseEvent{comment: strings.TrimSpace(line[1:])}, nil
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.id = value
			case "event":
				ev.event = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

// event returns the next event, skipping comments.
func (s *sseStream) event(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev, err := s.next(t)
		require.NoError(t, err, "the stream ended early")
		if ev.comment == "" {
			return ev
		}
	}
}

func decode(t *testing.T, data string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &m), data)
	return m
}

// TestCommandOutputStreams: with Accept: text/event-stream a command's output arrives while
// it runs — the first line before the program goes on — in order, with offsets, then the
// result; the stream can be resumed from the task.
func TestCommandOutputStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "default")
	// The program waits for a file the test makes once it has seen the first line.
	s := e.stream(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{
		// The pause orders "two" before "three" across the two pipes, whose readers race.
		"command": "echo one; while [ ! -f go ]; do sleep 0.02; done; echo two >&2; sleep 0.3; printf 'thr'; printf 'ee\\n'",
	}, nil)
	require.Equal(t, 200, s.resp.StatusCode)
	require.Equal(t, "text/event-stream", s.resp.Header.Get("Content-Type"))

	first := s.event(t)
	require.Equal(t, "task", first.event)
	task := decode(t, first.data)
	taskID := task["id"].(string)
	require.NotEmpty(t, taskID)

	ev := s.event(t)
	require.Equal(t, "stdout", ev.event)
	assert.Equal(t, "4-0", ev.id, "the id is the position after the event: 4 bytes of stdout, none of stderr")
	assert.Equal(t, map[string]any{"stream": "stdout", "offset": 0.0, "data": "one\n", "encoding": "utf-8"}, decode(t, ev.data))
	running := e.do(tok, "GET", "/v1/tasks/"+taskID, nil).JSON(t)
	assert.Equal(t, "running", running["status"], "the first line arrived while the program runs")

	sess := e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)
	require.NoError(t, os.WriteFile(filepath.Join(sess["sandbox_id"].(string), "go"), nil, 0o644))

	var stdout, stderr strings.Builder
	var result map[string]any
	for result == nil {
		ev := s.event(t)
		switch ev.event {
		case "stdout":
			stdout.WriteString(decode(t, ev.data)["data"].(string))
		case "stderr":
			assert.Equal(t, 0.0, decode(t, ev.data)["offset"])
			stderr.WriteString(decode(t, ev.data)["data"].(string))
		case "result":
			result = decode(t, ev.data)
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	assert.Equal(t, "three\n", stdout.String())
	assert.Equal(t, "two\n", stderr.String())
	assert.Equal(t, "completed", result["status"])
	assert.Equal(t, 0.0, result["exit_code"])
	assert.Equal(t, "one\nthree\n", result["stdout"], "the result holds the whole output")
	_, err := s.next(t)
	assert.ErrorIs(t, err, io.EOF, "the stream ends after the result")

	// Resumed after the first event: the rest again, then the result.
	again := e.stream(tok, "GET", "/v1/tasks/"+taskID+"/output", nil, map[string]string{"Last-Event-ID": "4-0"})
	require.Equal(t, 200, again.resp.StatusCode)
	rest := map[string]string{}
	ev = again.event(t)
	for ev.event != "result" {
		rest[ev.event] += decode(t, ev.data)["data"].(string)
		ev = again.event(t)
	}
	assert.Equal(t, map[string]string{"stdout": "three\n", "stderr": "two\n"}, rest, "resumed after the first event: nothing of it again")

	// Someone else's task is not there; a malformed Last-Event-ID is a bad request.
	requireProblem(t, e.do(e.token("bob"), "GET", "/v1/tasks/"+taskID+"/output", nil), 404, "not-found")
	r := e.send(tok, "GET", "/v1/tasks/"+taskID+"/output", "", nil, 0, map[string]string{"Last-Event-ID": "x"})
	requireProblem(t, r, 400, "validation")
}

// TestStreamKeepaliveAndErrors: a quiet program's stream carries keepalive comments; a
// request that fails before anything runs is an ordinary problem answer, not a stream.
func TestStreamKeepaliveAndErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{keepalive: 50 * time.Millisecond})
	tok := e.token("alice")
	s := e.stream(tok, "POST", "/v1/sessions/default/code", map[string]any{"code": "import time; time.sleep(0.5); print('late')"}, nil)
	require.Equal(t, 200, s.resp.StatusCode)
	keepalives := 0
	for {
		ev, err := s.next(t)
		require.NoError(t, err)
		if ev.comment == "keepalive" {
			keepalives++
		}
		if ev.event == "result" {
			assert.Equal(t, "late\n", decode(t, ev.data)["stdout"])
			break
		}
	}
	assert.GreaterOrEqual(t, keepalives, 2, "a quiet stream says it is alive")

	bad := e.stream(tok, "POST", "/v1/sessions/default/commands?profile=nope", map[string]any{"command": "true"}, nil)
	assert.Equal(t, "application/problem+json", bad.resp.Header.Get("Content-Type"))
	assert.GreaterOrEqual(t, bad.resp.StatusCode, 400)

	// A per_call run streams too.
	run := e.stream(tok, "POST", "/v1/runs", map[string]any{"profile": "oneshot", "command": "echo once; exit 3"}, nil)
	require.Equal(t, 200, run.resp.StatusCode)
	var last sseEvent
	for last.event != "result" {
		last = run.event(t)
	}
	assert.Equal(t, 3.0, decode(t, last.data)["exit_code"])
}
