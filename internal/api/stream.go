package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// DefaultStreamKeepalive is the longest an event stream stays silent: a comment line is sent
// after that much time without an event (proxies and clients drop connections that say
// nothing for long).
const DefaultStreamKeepalive = 15 * time.Second

// eventStream is the media type of server-sent events.
const eventStream = "text/event-stream"

// wantsEventStream reports whether the request's Accept header asks for text/event-stream
// (RFC 9110 §12.5.1 media ranges; a quality of 0 refuses it).
func wantsEventStream(ctx context.Context) bool {
	r := requestOf(ctx)
	if r == nil {
		return false
	}
	for _, accept := range r.Header.Values("Accept") {
		for _, rng := range strings.Split(accept, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(rng))
			if err == nil && mt == eventStream && params["q"] != "0" && params["q"] != "0.0" {
				return true
			}
		}
	}
	return false
}

// streamExecution answers an execution request that asked for an event stream: it submits
// in without waiting (the execution becomes a task at once) and streams the task's output.
func (s *Server) streamExecution(ctx context.Context, p principal.Principal, run func(sandbox.ExecInput) (sandbox.Outcome, error), in sandbox.ExecInput) (streamResponse, error) {
	zero := time.Duration(0)
	in.Wait = &zero
	out, err := run(in)
	if err != nil {
		return streamResponse{}, err
	}
	return streamResponse{s: s, ctx: ctx, p: p, task: out.Task, result: out.Result}, nil
}

// streamResponse is an answer of type text/event-stream: the output of one task, followed
// until it ends (sandbox.Follower). It serves every operation that can stream.
type streamResponse struct {
	s      *Server
	ctx    context.Context
	p      principal.Principal
	task   *sandbox.Task    // announced first (execution requests); nil for getTaskOutput
	taskID string           // followed when task is nil
	after  sandbox.Position // Last-Event-ID
	result *sandbox.Result  // an execution that finished before it could be followed
}

func (sr streamResponse) VisitRunCommandResponse(w http.ResponseWriter) error { return sr.serve(w) }
func (sr streamResponse) VisitRunCodeResponse(w http.ResponseWriter) error    { return sr.serve(w) }
func (sr streamResponse) VisitCreateRunResponse(w http.ResponseWriter) error  { return sr.serve(w) }
func (sr streamResponse) VisitGetTaskOutputResponse(w http.ResponseWriter) error {
	return sr.serve(w)
}

// serve writes the stream. Errors before its first byte become the problem answer; after
// that the stream carries them as an error event.
func (sr streamResponse) serve(w http.ResponseWriter) error {
	ctx := sr.ctx
	id := sr.taskID
	if sr.task != nil {
		id = sr.task.ID
	}
	var f *sandbox.Follower
	if sr.result == nil {
		var err error
		if f, err = sr.s.sandbox.Follow(ctx, sr.p, id, sr.after); err != nil {
			return err
		}
		defer f.Close()
	}
	h := w.Header()
	h.Set("Content-Type", eventStream)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on as they come
	w.WriteHeader(http.StatusOK)
	if r := requestOf(ctx); r != nil && r.Method == http.MethodHead {
		return nil // the header says what a GET would stream; no body to wait for
	}
	ew := &eventWriter{w: w, rc: http.NewResponseController(w), keepalive: sr.s.keepalive()}
	if sr.task != nil {
		if err := ew.event("", "task", taskView(*sr.task)); err != nil {
			return nil // the client went away; the task goes on
		}
	}
	if sr.result != nil {
		_ = ew.result(sr.result)
		return nil
	}
	for {
		batch, err := f.Next(ctx, ew.keepalive)
		if err != nil {
			if ctx.Err() == nil {
				_ = ew.event("", "error", ProblemFor(err))
			}
			return nil
		}
		for _, g := range batch.Gaps {
			gap := apigen.OutputGap{Stream: apigen.OutputGapStream(g.Stream), From: g.From, To: g.To}
			if err := ew.event("", "gap", gap); err != nil {
				return nil
			}
		}
		pos := sr.after
		for _, ev := range batch.Events {
			end := ev.Offset + int64(len(ev.Data))
			name, data := ev.Stream, any(nil)
			switch ev.Stream {
			case sandbox.StreamResult:
				pos.Results = end
				var r sandbox.RichResult
				if json.Unmarshal(ev.Data, &r) != nil {
					continue
				}
				name, data = "rich_result", richResultView(r)
			case sandbox.StreamStderr:
				pos.Stderr = end
				data = chunkView(ev)
			default:
				pos.Stdout = end
				data = chunkView(ev)
			}
			if err := ew.event(eventID(pos), name, data); err != nil {
				return nil
			}
		}
		sr.after = batch.Position
		switch {
		case batch.Done && batch.Err != nil:
			_ = ew.event("", "error", ProblemFor(batch.Err))
			return nil
		case batch.Done:
			_ = ew.result(batch.Result)
			return nil
		case len(batch.Events) == 0 && len(batch.Gaps) == 0:
			if err := ew.comment("keepalive"); err != nil {
				return nil
			}
		}
	}
}

// chunkView is the data of a stdout or stderr event; its stream is named in it too, for a
// client that reads only the data.
func chunkView(ev sandbox.OutputEvent) apigen.OutputChunk {
	stream := apigen.OutputChunkStreamStdout
	if ev.Stream == sandbox.StreamStderr {
		stream = apigen.OutputChunkStreamStderr
	}
	if utf8.Valid(ev.Data) {
		return apigen.OutputChunk{Stream: stream, Offset: ev.Offset, Data: string(ev.Data), Encoding: apigen.OutputChunkEncodingUtf8}
	}
	return apigen.OutputChunk{Stream: stream, Offset: ev.Offset, Data: base64.StdEncoding.EncodeToString(ev.Data), Encoding: apigen.OutputChunkEncodingBase64}
}

// eventWriter writes server-sent events, each flushed at once, moving the connection's write
// deadline along so a long stream outlives server.write_timeout.
type eventWriter struct {
	w         io.Writer
	rc        *http.ResponseController
	keepalive time.Duration
}

func (e *eventWriter) event(id, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	head := "event: " + name + "\ndata: "
	if id != "" {
		head = "id: " + id + "\n" + head
	}
	if err := e.put(head); err != nil {
		return err
	}
	if err := e.putBytes(data); err != nil {
		return err
	}
	return e.write("\n\n")
}

// resultPiece is how many bytes of a result's stdout or stderr its event encodes at a time.
const resultPiece = 32 << 10

// resultRest is an ExecutionResult without its stdout and stderr (the outer fields hide the
// embedded ones and are omitted).
type resultRest struct {
	Stdout *struct{} `json:"stdout,omitempty"`
	Stderr *struct{} `json:"stderr,omitempty"`
	apigen.ExecutionResult
}

// result writes the result event of r — the JSON of resultView(r) — encoding its stdout and
// stderr resultPiece bytes at a time: the followers of one large result share it (it may be
// kept for all of them, sandbox.Batch) instead of each holding an encoding of all of it.
func (e *eventWriter) result(r *sandbox.Result) error {
	rest, err := json.Marshal(resultRest{ExecutionResult: resultView(r)})
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error { return e.put("event: result\ndata: {\"stdout\":") },
		func() error { return e.jsonString(r.Stdout) },
		func() error { return e.put(`,"stderr":`) },
		func() error { return e.jsonString(r.Stderr) },
		func() error { return e.put(",") },
		func() error { return e.putBytes(rest[1:]) }, // rest has "status": never just "{}"
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return e.write("\n\n")
}

// jsonString writes s as a JSON string, encoded in pieces cut on UTF-8 character boundaries
// (the encoding of each piece is the encoding of its part of s).
func (e *eventWriter) jsonString(s string) error {
	if err := e.put(`"`); err != nil {
		return err
	}
	for len(s) > 0 {
		n := min(len(s), resultPiece)
		for n < len(s) && n > resultPiece-utf8.UTFMax && !utf8.RuneStart(s[n]) {
			n--
		}
		b, err := json.Marshal(s[:n])
		if err != nil {
			return err
		}
		if err := e.putBytes(b[1 : len(b)-1]); err != nil {
			return err
		}
		s = s[n:]
	}
	return e.put(`"`)
}

func (e *eventWriter) comment(text string) error { return e.write(": " + text + "\n\n") }

// put writes part of an event (no flush), moving the write deadline along.
func (e *eventWriter) put(s string) error {
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.keepalive + time.Minute))
	_, err := io.WriteString(e.w, s)
	return err
}

// putBytes is put for bytes.
func (e *eventWriter) putBytes(b []byte) error {
	_ = e.rc.SetWriteDeadline(time.Now().Add(e.keepalive + time.Minute))
	_, err := e.w.Write(b)
	return err
}

// write writes the end of an event and flushes it.
func (e *eventWriter) write(s string) error {
	if err := e.put(s); err != nil {
		return err
	}
	return e.rc.Flush()
}

// keepalive is the stream keepalive interval of s.
func (s *Server) keepalive() time.Duration {
	if s.streamKeepalive > 0 {
		return s.streamKeepalive
	}
	return DefaultStreamKeepalive
}

// eventID is the id of an output event: the position after it, "<stdout>-<stderr>" (the
// bytes of each stream read so far) and, once there are rich results, "-<results>" (the bytes
// of their JSON), which resumes a stream on any replica.
func eventID(p sandbox.Position) string {
	if p.Results > 0 {
		return fmt.Sprintf("%d-%d-%d", p.Stdout, p.Stderr, p.Results)
	}
	return fmt.Sprintf("%d-%d", p.Stdout, p.Stderr)
}

// parseEventID reads a Last-Event-ID header (eventID's form); "" is the start. Errors: a
// fault.Validation error for any other form.
func parseEventID(s string) (sandbox.Position, error) {
	if s == "" {
		return sandbox.Position{}, nil
	}
	parts := strings.Split(s, "-")
	var n [3]int64
	ok := len(parts) == 2 || len(parts) == 3
	for i := 0; ok && i < len(parts); i++ {
		v, err := strconv.ParseInt(parts[i], 10, 64)
		ok = err == nil && v >= 0
		n[i] = v
	}
	if !ok {
		return sandbox.Position{}, fault.New(fault.Validation, "Last-Event-ID %q is not an event id of this stream (byte offsets, \"<stdout>-<stderr>\" or \"<stdout>-<stderr>-<rich results>\")", s)
	}
	return sandbox.Position{Stdout: n[0], Stderr: n[1], Results: n[2]}, nil
}

// GetTaskOutput streams a task's output (server-sent events).
func (s *Server) GetTaskOutput(ctx context.Context, req apigen.GetTaskOutputRequestObject) (apigen.GetTaskOutputResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	after, err := parseEventID(deref(req.Params.LastEventID))
	if err != nil {
		return nil, err
	}
	return streamResponse{s: s, ctx: ctx, p: p, taskID: req.TaskId, after: after}, nil
}
