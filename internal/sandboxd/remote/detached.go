//go:build unix

package remote

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Kept executions (sandboxd.Runtime.Start): POST /v1/exec with X-Execution-Id starts one and
// follows it, POST /v1/executions starts one and answers at once; any client may follow them
// (GET /v1/executions/{id}), feed their input, resize their terminal, or stop them.
const headerExecutionID = "X-Execution-Id"

// follow streams kept execution e to w from its start: its kept output in order (a FrameSkip
// where bytes were dropped), then, once it ended, its result (or error) frame. A client that
// goes away stops following; the execution runs on. delivered says the last frame went out.
func (s *server) follow(w http.ResponseWriter, r *http.Request, e *sandboxd.Execution) (delivered bool) {
	st := &stream{w: w, rc: http.NewResponseController(w)}
	res, err := e.Follow(r.Context(), sandboxd.Streams{
		Stdout:     skipFrameWriter{frameWriter{st, FrameStdout}},
		Stderr:     skipFrameWriter{frameWriter{st, FrameStderr}},
		ResultFunc: st.richResult,
	})
	switch {
	case r.Context().Err() != nil || st.failed():
		return false
	case err != nil:
		p := problemFor(err)
		if errors.Is(err, context.Canceled) {
			p = newProblem(http.StatusConflict, kindStopped, "the execution was stopped (DELETE /v1/executions/"+e.ID()+")")
		}
		if !st.begun() {
			writeProblem(w, p)
			return true
		}
		return st.frame(FrameError, p.json()) == nil
	}
	data, _ := json.Marshal(res)
	return st.frame(FrameResult, data) == nil
}

// skipFrameWriter writes output frames and, for bytes dropped from the middle, skip frames.
type skipFrameWriter struct{ frameWriter }

func (f skipFrameWriter) Skip(n int64) {
	var p [9]byte
	p[0] = f.typ
	binary.BigEndian.PutUint64(p[1:], uint64(n))
	_ = f.s.frame(FrameSkip, p[:])
}

// execKept is POST /v1/exec with X-Execution-Id: the execution is kept (Runtime.Start) and
// followed. An id kept already is a conflict (409): the client follows that one instead.
func (s *server) execKept(w http.ResponseWriter, r *http.Request, id string, req sandboxd.ExecRequest) {
	req.ID = id
	e, err := s.rt.Start(req)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	if s.follow(w, r, e) {
		// Its caller has its end: nobody needs it kept (only executions whose caller went
		// away are, for the one that comes back).
		s.rt.Forget(id)
	}
}

// startExecution is POST /v1/executions (X-Execution-Id names it): start a kept execution
// and answer 201 with its ExecutionInfo at once.
func (s *server) startExecution(w http.ResponseWriter, r *http.Request) {
	var body execBody
	if !s.decode(w, r, &body) {
		return
	}
	req, ok := body.request(w)
	if !ok {
		return
	}
	req.ID = r.Header.Get(headerExecutionID)
	e, err := s.rt.Start(req)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, e.Info())
}

// listExecutions is GET /v1/executions.
func (s *server) listExecutions(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.rt.Executions())
}

// getExecution is GET /v1/executions/{id}: follow a kept execution from its start.
func (s *server) getExecution(w http.ResponseWriter, r *http.Request) {
	e, err := s.rt.Execution(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	s.follow(w, r, e)
}

// deleteExecution is DELETE /v1/executions/{id}: stop a kept execution (like a cancel: its
// whole process tree is killed; its result says how it ended). An ended one is left as it is.
func (s *server) deleteExecution(w http.ResponseWriter, r *http.Request) {
	if err := s.rt.Stop(r.PathValue("id")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeStdin is POST /v1/executions/{id}/stdin: the body goes to the execution's standard
// input as it arrives; ?eof=true closes that input afterwards → {"bytes": n}.
func (s *server) writeStdin(w http.ResponseWriter, r *http.Request) {
	eof := false
	if v := r.URL.Query().Get("eof"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "eof must be true or false"))
			return
		}
		eof = b
	}
	n, err := s.rt.WriteStdin(r.Context(), r.PathValue("id"), r.Body, eof)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, writeResult{Bytes: n})
}

// resize is POST /v1/executions/{id}/resize: {"rows","cols"} → 204.
func (s *server) resize(w http.ResponseWriter, r *http.Request) {
	var size sandboxd.TermSize
	if !s.decodeLimit(w, r, &size, 1<<10) {
		return
	}
	if err := s.rt.Resize(r.PathValue("id"), size); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
