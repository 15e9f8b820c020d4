//go:build unix

package remote

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/outlog"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Held executions (the X-Execution-Id header of POST /v1/exec): they run on when their client
// goes away, keep their output (the start and the end of each stream, within retainBytes)
// and, when their caller did not receive it, their result for heldFor after they end; any
// client may follow them again with GET /v1/executions/{id} or stop them with
// DELETE /v1/executions/{id}. One whose caller received its result is forgotten at once.
const (
	headerExecutionID = "X-Execution-Id"
	// retainBytes is how much of each stream a held execution keeps (half from its start,
	// half from its end): twice the gateway's default output limit.
	retainBytes = 2 << 20
	// heldFor is how long a held execution stays followable after it ended.
	heldFor = 10 * time.Minute
	// maxHeld bounds the held executions, running and ended; the oldest ended ones make room.
	maxHeld = 256
)

// executionID is the form of an execution id (the gateway uses its task ids).
var executionID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// held are the executions of one handler that outlive their requests.
type held struct {
	mu sync.Mutex
	m  map[string]*heldExec
}

type heldExec struct {
	id     string
	log    *outlog.Log
	cancel context.CancelFunc
	done   chan struct{} // closed once res and err are set
	ended  time.Time
	expiry *time.Timer // forgets it heldFor after it ended; stopped when forgotten sooner
	res    sandboxd.Result
	err    error
}

// start runs run as execution id, detached from any request: fault.Conflict when id is held
// already, fault.Quota when no room can be made.
func (h *held) start(id string, run func(ctx context.Context, out sandboxd.Streams) (sandboxd.Result, error)) (*heldExec, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*heldExec{}
	}
	if _, ok := h.m[id]; ok {
		return nil, fault.New(fault.Conflict, "an execution with id '%s' is held already; follow it with GET /v1/executions/%s", id, id)
	}
	if len(h.m) >= maxHeld && !h.evictEnded() {
		// Not Conflict: a client takes that for its own execution, held already.
		return nil, fault.New(fault.Quota, "sandboxd holds %d running executions, its most; wait for one to end", maxHeld)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &heldExec{id: id, log: outlog.New(retainBytes), cancel: cancel, done: make(chan struct{})}
	h.m[id] = e
	go func() {
		defer cancel()
		res, err := run(ctx, sandboxd.Streams{Stdout: logWriter{e.log, "stdout"}, Stderr: logWriter{e.log, "stderr"}})
		h.mu.Lock()
		e.res, e.err, e.ended = res, err, time.Now()
		if h.m[id] == e { // not forgotten already
			e.expiry = time.AfterFunc(heldFor, func() { h.forget(id, e) })
		}
		h.mu.Unlock()
		close(e.done)
		e.log.Close()
	}()
	return e, nil
}

// evictEnded forgets the execution that ended first; false when none has ended.
func (h *held) evictEnded() bool {
	var oldest *heldExec
	for _, e := range h.m {
		if !e.ended.IsZero() && (oldest == nil || e.ended.Before(oldest.ended)) {
			oldest = e
		}
	}
	if oldest == nil {
		return false
	}
	delete(h.m, oldest.id)
	oldest.expiry.Stop()
	return true
}

func (h *held) get(id string) *heldExec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id]
}

func (h *held) forget(id string, e *heldExec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[id] == e {
		delete(h.m, id)
		if e.expiry != nil {
			e.expiry.Stop()
		}
	}
}

// logWriter appends what a stream writes to a log (copied: the runtime reuses its buffer).
type logWriter struct {
	log    *outlog.Log
	stream string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Append(w.stream, p) // the log keeps a copy
	return len(p), nil
}

// follow streams held execution e to w from its start: its kept output in order (a FrameSkip
// where bytes were dropped), then, once it ended, its result (or error) frame. A client that
// goes away stops following; the execution runs on. delivered says the last frame went out.
func (s *server) follow(w http.ResponseWriter, r *http.Request, e *heldExec) (delivered bool) {
	st := &stream{w: w, rc: http.NewResponseController(w)}
	next := map[string]int64{} // the next offset each stream's reader expects
	var after int64
	skip := func(stream string, upTo int64) error {
		n := upTo - next[stream]
		if n <= 0 {
			return nil
		}
		next[stream] = upTo
		var p [9]byte
		p[0] = FrameStdout
		if stream == "stderr" {
			p[0] = FrameStderr
		}
		binary.BigEndian.PutUint64(p[1:], uint64(n))
		return st.frame(FrameSkip, p[:])
	}
	for {
		evs, _, closed, changed := e.log.Read(after)
		for _, ev := range evs {
			typ := FrameStdout
			if ev.Stream == "stderr" {
				typ = FrameStderr
			}
			if skip(ev.Stream, ev.Offset) != nil || st.frame(typ, ev.Data) != nil {
				return
			}
			next[ev.Stream] = ev.Offset + int64(len(ev.Data))
			after = ev.Seq
		}
		if closed && len(evs) == 0 {
			<-e.done
			for _, stream := range []string{"stdout", "stderr"} {
				if skip(stream, e.log.Written(stream)) != nil {
					return
				}
			}
			if e.err != nil {
				p := problemFor(e.err)
				if errors.Is(e.err, context.Canceled) {
					p = newProblem(http.StatusConflict, kindStopped, "the execution was stopped (DELETE /v1/executions/"+e.id+")")
				}
				if !st.begun() {
					writeProblem(w, p)
					return true
				}
				return st.frame(FrameError, p.json()) == nil
			}
			data, _ := json.Marshal(e.res)
			return st.frame(FrameResult, data) == nil
		}
		if closed {
			continue // nothing more will come: the next read ends it
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// execHeld is POST /v1/exec with X-Execution-Id: the execution is held (see held).
func (s *server) execHeld(w http.ResponseWriter, r *http.Request, id string, req sandboxd.ExecRequest) {
	if !executionID.MatchString(id) {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), headerExecutionID+" must be 1 to 128 letters, digits, '.', '_' or '-'"))
		return
	}
	e, err := s.held.start(id, func(ctx context.Context, out sandboxd.Streams) (sandboxd.Result, error) {
		return s.rt.Exec(ctx, req, out)
	})
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	if s.follow(w, r, e) {
		// Its caller has its end: nobody needs it kept (only executions whose caller went
		// away are, for the one that comes back).
		s.held.forget(id, e)
	}
}

// getExecution is GET /v1/executions/{id}: follow a held execution from its start.
func (s *server) getExecution(w http.ResponseWriter, r *http.Request) {
	e := s.held.get(r.PathValue("id"))
	if e == nil {
		writeProblem(w, problemFor(fault.New(fault.NotFound, "no execution '%s' is held here (it never ran here, or ended more than %s ago, or sandboxd restarted)", r.PathValue("id"), heldFor)))
		return
	}
	s.follow(w, r, e)
}

// deleteExecution is DELETE /v1/executions/{id}: stop a held execution (like a cancel: its
// whole process tree is killed; its result says how it ended). An ended one is left as it is.
func (s *server) deleteExecution(w http.ResponseWriter, r *http.Request) {
	e := s.held.get(r.PathValue("id"))
	if e == nil {
		writeProblem(w, problemFor(fault.New(fault.NotFound, "no execution '%s' is held here", r.PathValue("id"))))
		return
	}
	e.cancel()
	w.WriteHeader(http.StatusNoContent)
}
