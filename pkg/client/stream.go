package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Event types of an execution's event stream (openapi.yaml, EventStream).
const (
	EventTask   = "task"   // a Task; first on POST answers
	EventStdout = "stdout" // an OutputChunk of standard output
	EventStderr = "stderr" // an OutputChunk of standard error
	EventGap    = "gap"    // an OutputGap: bytes dropped from the middle of a long output
	// EventRichResult is a RichResult of code as it is produced (a chart, a table, the last
	// expression's value); the result's Results has them all.
	EventRichResult = "rich_result"
	EventResult     = "result" // the ExecutionResult; ends the stream
	EventError      = "error"  // a problem; ends the stream
)

// Event is one server-sent event of an execution's stream.
type Event struct {
	// Type is one of the Event* constants.
	Type string
	// ID is set on stdout, stderr and rich_result events: the position after them,
	// "<stdout bytes>-<stderr bytes>" (and "-<rich result bytes>" once there are rich
	// results), which FollowTask resumes from.
	ID string
	// Data is the event's JSON document.
	Data json.RawMessage
}

// Task decodes a task event.
func (e Event) Task() (*Task, error) { return decodeEvent[Task](e, EventTask) }

// Chunk decodes a stdout or stderr event.
func (e Event) Chunk() (*OutputChunk, error) {
	if e.Type != EventStderr {
		return decodeEvent[OutputChunk](e, EventStdout)
	}
	return decodeEvent[OutputChunk](e, EventStderr)
}

// Bytes are the output bytes of a stdout or stderr event, decoded from base64 when the chunk
// was sent so (output that is not UTF-8).
func (e Event) Bytes() ([]byte, error) {
	c, err := e.Chunk()
	if err != nil {
		return nil, err
	}
	return c.Bytes()
}

// Bytes are the chunk's bytes, decoded from base64 when its Encoding says so.
func (c *OutputChunk) Bytes() ([]byte, error) {
	if c.Encoding == OutputChunkEncodingBase64 {
		return base64.StdEncoding.DecodeString(c.Data)
	}
	return []byte(c.Data), nil
}

// Gap decodes a gap event.
func (e Event) Gap() (*OutputGap, error) { return decodeEvent[OutputGap](e, EventGap) }

// RichResult decodes a rich_result event.
func (e Event) RichResult() (*RichResult, error) {
	return decodeEvent[RichResult](e, EventRichResult)
}

// Result decodes a result event.
func (e Event) Result() (*ExecutionResult, error) {
	return decodeEvent[ExecutionResult](e, EventResult)
}

// Problem decodes an error event into the *Error it carries.
func (e Event) Problem() *Error {
	p := &Error{}
	if e.Type != EventError || json.Unmarshal(e.Data, p) != nil {
		return &Error{Title: "bad event", Detail: fmt.Sprintf("event %q is not a problem: %s", e.Type, firstBytes(e.Data, 200))}
	}
	return p
}

func decodeEvent[T any](e Event, want string) (*T, error) {
	if e.Type != want {
		return nil, fmt.Errorf("sandgate: a %q event, not %q", e.Type, want)
	}
	var v T
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return nil, fmt.Errorf("sandgate: decoding a %s event: %w", e.Type, err)
	}
	return &v, nil
}

// Stream reads the event stream of one execution: a `task` event first (on execution
// requests), then its output, then one `result` or `error` event. Use it like a
// bufio.Scanner:
//
//	for s.Next() {
//		ev := s.Event()
//		…
//	}
//	err := s.Err()
//
// A connection that breaks before the last event is reopened with GET
// /v1/tasks/{id}/output and Last-Event-ID (up to 5 times in a row, 0.5–8 s apart), so no
// output is lost or repeated. Closing the stream (or ending its context) leaves the task
// running on the gateway: cancel it with Client.CancelTask.
type Stream struct {
	c       *Client
	ctx     context.Context
	editors []RequestEditorFn
	body    io.ReadCloser
	r       *sseReader
	ev      Event
	err     error
	taskID  string
	lastID  string
	done    bool
	// Reconnects counts the connections reopened after a break.
	Reconnects int
}

// maxReconnects bounds consecutive reopen attempts without an event in between.
const maxReconnects = 5

// TaskID is the id of the followed task (known after the `task` event on execution
// requests).
func (s *Stream) TaskID() string { return s.taskID }

// LastEventID is the id of the last output event read: pass it to FollowTask to resume
// after it.
func (s *Stream) LastEventID() string { return s.lastID }

// Event is the event Next read.
func (s *Stream) Event() Event { return s.ev }

// Err is the error that ended the stream early: nil after a `result` or `error` event (an
// error event is an event, read with Event().Problem()), ctx's error once it ended, or the
// transport's error after the reconnects failed.
func (s *Stream) Err() error { return s.err }

// Close closes the connection; the task goes on.
func (s *Stream) Close() error {
	s.done = true
	if s.body != nil {
		return s.body.Close()
	}
	return nil
}

// Next reads the next event; false at the end of the stream (after a result or error
// event) or on an error (Err).
func (s *Stream) Next() bool {
	if s.done {
		return false
	}
	failures := 0
	for {
		ev, err := s.r.next()
		if err == nil {
			if ev.Type == "" {
				continue // an event without a name is not one the gateway sends
			}
			s.ev = ev
			switch ev.Type {
			case EventTask:
				if t, err := ev.Task(); err == nil && s.taskID == "" {
					s.taskID = t.Id
				}
			case EventResult, EventError:
				s.done = true
				_ = s.body.Close()
			}
			if ev.ID != "" {
				s.lastID = ev.ID
			}
			return true
		}
		_ = s.body.Close()
		if s.ctx.Err() != nil {
			s.err, s.done = s.ctx.Err(), true
			return false
		}
		if s.taskID == "" || failures >= maxReconnects {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the stream ended before its result
			}
			s.err, s.done = fmt.Errorf("sandgate: event stream: %w", err), true
			return false
		}
		select {
		case <-s.ctx.Done():
			s.err, s.done = s.ctx.Err(), true
			return false
		case <-time.After(time.Duration(500<<failures) * time.Millisecond):
		}
		failures++
		body, rerr := s.c.openStream(s.c.Raw.GetTaskOutput(s.ctx, s.taskID, &GetTaskOutputParams{LastEventID: optional(s.lastID)}, s.editors...))
		if rerr != nil {
			var e *Error
			if errors.As(rerr, &e) && !e.Temporary() {
				s.err, s.done = rerr, true // the task is gone, or no longer ours
				return false
			}
			s.body, s.r = io.NopCloser(strings.NewReader("")), newSSEReader(strings.NewReader(""))
			continue
		}
		s.body, s.r = body, newSSEReader(body)
		s.Reconnects++
	}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Wait reads the rest of the stream, writing output as it comes (stdout events to stdout,
// stderr events to stderr; either may be nil to drop it) and returns the result. An error
// event is returned as its *Error.
func (s *Stream) Wait(stdout, stderr io.Writer) (*ExecutionResult, error) {
	defer s.Close()
	for s.Next() {
		ev := s.Event()
		switch ev.Type {
		case EventStdout, EventStderr:
			w := stdout
			if ev.Type == EventStderr {
				w = stderr
			}
			if w == nil {
				continue
			}
			b, err := ev.Bytes()
			if err != nil {
				return nil, err
			}
			if _, err := w.Write(b); err != nil {
				return nil, err
			}
		case EventResult:
			return ev.Result()
		case EventError:
			return nil, ev.Problem()
		}
	}
	if s.err == nil {
		return nil, fmt.Errorf("sandgate: event stream: %w", io.ErrUnexpectedEOF)
	}
	return nil, s.err
}

// acceptEventStream asks for the event stream of an execution.
func acceptEventStream(_ context.Context, req *http.Request) error {
	req.Header.Set("Accept", "text/event-stream")
	return nil
}

// openStream checks an event-stream answer and returns its body.
func (c *Client) openStream(resp *http.Response, err error) (io.ReadCloser, error) {
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode == http.StatusOK && ct == "text/event-stream" {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil, fmt.Errorf("%w: %d %s where an event stream was asked for", errUnexpected, resp.StatusCode, ct)
	}
	return nil, errorFrom(resp, body)
}

func (c *Client) stream(ctx context.Context, taskID, lastID string, editors []RequestEditorFn, resp *http.Response, err error) (*Stream, error) {
	body, err := c.openStream(resp, err)
	if err != nil {
		return nil, err
	}
	return &Stream{c: c, ctx: ctx, editors: editors, body: body, r: newSSEReader(body), taskID: taskID, lastID: lastID}, nil
}

// StreamCommand runs a shell command in a session and streams its output as it is produced
// (POST /v1/sessions/{id}/commands with Accept: text/event-stream). The first event is the
// task; the stream ends with its result.
func (c *Client) StreamCommand(ctx context.Context, sessionID string, req CommandRequest, editors ...RequestEditorFn) (*Stream, error) {
	resp, err := c.Raw.RunCommand(ctx, sessionID, nil, req, append(editors, acceptEventStream)...)
	return c.stream(ctx, "", "", editors, resp, err)
}

// StreamCode runs code in a session and streams its output (POST /v1/sessions/{id}/code).
func (c *Client) StreamCode(ctx context.Context, sessionID string, req CodeRequest, editors ...RequestEditorFn) (*Stream, error) {
	resp, err := c.Raw.RunCode(ctx, sessionID, nil, req, append(editors, acceptEventStream)...)
	return c.stream(ctx, "", "", editors, resp, err)
}

// StreamRun is Run streaming its output (POST /v1/runs).
func (c *Client) StreamRun(ctx context.Context, req RunRequest, editors ...RequestEditorFn) (*Stream, error) {
	resp, err := c.Raw.CreateRun(ctx, req, append(editors, acceptEventStream)...)
	return c.stream(ctx, "", "", editors, resp, err)
}

// FollowTask streams a task's output (GET /v1/tasks/{id}/output) from the start, or after
// the event lastEventID ("" for the start) — a Stream's LastEventID — on any replica.
func (c *Client) FollowTask(ctx context.Context, taskID, lastEventID string, editors ...RequestEditorFn) (*Stream, error) {
	resp, err := c.Raw.GetTaskOutput(ctx, taskID, &GetTaskOutputParams{LastEventID: optional(lastEventID)}, editors...)
	return c.stream(ctx, taskID, lastEventID, editors, resp, err)
}

// sseReader parses a text/event-stream body as the HTML standard's "event stream
// interpretation" does: lines end in CR, LF or CR LF; a leading BOM is skipped; lines
// starting with ":" are comments; a blank line dispatches the event; several data lines
// join with "\n"; "retry" is ignored (Stream reconnects on its own schedule).
type sseReader struct {
	sc    *bufio.Scanner
	first bool
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20) // an event carries at most a result: its output is bounded
	sc.Split(scanSSELines)
	return &sseReader{sc: sc, first: true}
}

// next returns the next dispatched event; io.EOF when the body ended.
func (r *sseReader) next() (Event, error) {
	var ev Event
	var data []byte
	hasData := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if r.first {
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
			r.first = false
		}
		if len(line) == 0 {
			if !hasData {
				ev = Event{ID: ev.ID}
				continue // nothing to dispatch
			}
			ev.Data = json.RawMessage(data)
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.Type = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "id":
			if !bytes.ContainsRune(value, 0) {
				ev.ID = string(value)
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, io.EOF // an unfinished event at the end is dropped, as the standard says
}

// scanSSELines splits at CR LF, LF or CR.
func scanSSELines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\r' {
			if i+1 == len(data) && !atEOF {
				return 0, nil, nil // a CR LF may be split across reads
			}
			if i+1 < len(data) && data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
		}
		return i + 1, data[:i], nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
