package daytonafake

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// interp is an interpreter context: a sandboxd python context.
type interp struct {
	id, ctxName, cwd string
	created          time.Time
	turn             chan struct{} // one execution at a time, in arrival order
}

// defaultInterp is the id of the context that runs code sent without a contextId.
const defaultInterp = "default"

// runner is defined in the context before each execution. It runs the code the way
// Daytona's REPL worker does: globals persist; an exception is reported (its traceback
// showing only the code's own frames) instead of printed; SystemExit completes normally;
// KeyboardInterrupt (the timeout's SIGINT) is reported as an interruption. The report goes to
// a file the fake reads afterwards.
const runner = `def __daytonafake_run(code, report):
    import json, sys, traceback
    try:
        exec(compile(code, "<string>", "exec"), sys.modules["__main__"].__dict__)
    except KeyboardInterrupt:
        with open(report, "w") as f:
            json.dump({"interrupted": True}, f)
    except SystemExit:
        pass
    except BaseException as e:
        frames = [fr for fr in traceback.extract_tb(e.__traceback__) if fr.filename == "<string>"]
        tb = "%s: %s\n" % (type(e).__name__, e)
        if frames:
            tb = "Traceback (most recent call last):\n" + "".join('  File "<stdin>", line %d\n' % fr.lineno for fr in frames) + tb
        with open(report, "w") as f:
            json.dump({"name": type(e).__name__, "value": str(e), "traceback": tb}, f)
`

func (s *Server) interpreterRoutes(h func(string, func(http.ResponseWriter, *http.Request, *sandbox)), t string) {
	h("POST "+t+"/process/interpreter/context", s.createInterp)
	h("GET "+t+"/process/interpreter/context", s.listInterps)
	h("DELETE "+t+"/process/interpreter/context/{cid}", s.deleteInterp)
	h("GET "+t+"/process/interpreter/execute", s.executeInterp)
}

func (b *sandbox) newInterp(id, cwd string) (*interp, error) {
	it := &interp{id: id, ctxName: "interp-" + randomHex(8), cwd: cwd, created: time.Now().UTC(), turn: make(chan struct{}, 1)}
	if _, err := b.runtime().CreateContext(it.ctxName, "python"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.interps[id] = it
	b.mu.Unlock()
	return it, nil
}

func (b *sandbox) interp(id string) *interp {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.interps[id]
}

func (b *sandbox) interpView(it *interp) map[string]any {
	active := false
	if rt := b.runtime(); rt != nil {
		for _, c := range rt.ListContexts() {
			if c.Name == it.ctxName {
				active = c.Alive
			}
		}
	}
	return map[string]any{"id": it.id, "cwd": it.cwd, "createdAt": it.created.Format(time.RFC3339Nano), "active": active, "language": "python"}
}

func (s *Server) createInterp(w http.ResponseWriter, r *http.Request, b *sandbox) {
	var req struct {
		Cwd      string `json:"cwd"`
		Language string `json:"language"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if req.Language != "" && req.Language != "python" {
		writeError(w, http.StatusBadRequest, "unsupported language: %s", req.Language)
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.home
	}
	if rel, ok := b.relPath(cwd); !ok {
		writeError(w, http.StatusBadRequest, "cwd is outside the sandbox")
		return
	} else if fi, err := b.fsroot.Stat(rel); err != nil || !fi.IsDir() {
		writeError(w, http.StatusBadRequest, "cwd %s is not a folder", cwd)
		return
	}
	it, err := b.newInterp(randomHex(16), cwd)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if cwd != b.home {
		// sandboxd starts contexts in the work dir; Daytona's worker starts in cwd.
		code := "import os as _o\n_o.chdir(" + string(jsonBytes(cwd)) + ")\ndel _o\n"
		if _, err := b.runtime().Exec(r.Context(), sandboxd.ExecRequest{Code: code, Language: "python", Context: it.ctxName}, sandboxd.Streams{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			writeError(w, http.StatusInternalServerError, "%v", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, b.interpView(it))
}

func (s *Server) listInterps(w http.ResponseWriter, _ *http.Request, b *sandbox) {
	b.mu.Lock()
	list := make([]*interp, 0, len(b.interps))
	for id, it := range b.interps {
		if id != defaultInterp {
			list = append(list, it)
		}
	}
	b.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].created.Before(list[j].created) })
	out := []map[string]any{}
	for _, it := range list {
		out = append(out, b.interpView(it))
	}
	writeJSON(w, http.StatusOK, map[string]any{"contexts": out})
}

func (s *Server) deleteInterp(w http.ResponseWriter, r *http.Request, b *sandbox) {
	id := r.PathValue("cid")
	b.mu.Lock()
	it := b.interps[id]
	delete(b.interps, id)
	b.mu.Unlock()
	if it == nil {
		writeError(w, http.StatusNotFound, "context not found")
		return
	}
	_ = b.runtime().DeleteContext(it.ctxName)
	writeJSON(w, http.StatusOK, map[string]string{"message": "Context deleted successfully"})
}

// wsWriter sends one stream's output as {type, text} messages.
type wsWriter struct {
	mu   *sync.Mutex
	conn *websocket.Conn
	typ  string
}

func (x *wsWriter) Write(p []byte) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	_ = x.conn.WriteMessage(websocket.TextMessage, jsonBytes(map[string]string{"type": x.typ, "text": string(p)}))
	return len(p), nil
}

func (s *Server) executeInterp(w http.ResponseWriter, r *http.Request, b *sandbox) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	var mu sync.Mutex
	closeWith := func(code int, text string) {
		mu.Lock()
		defer mu.Unlock()
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
	}
	send := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		_ = conn.WriteMessage(websocket.TextMessage, jsonBytes(v))
	}
	var req struct {
		Code      string            `json:"code"`
		ContextID *string           `json:"contextId"`
		Timeout   *int64            `json:"timeout"`
		Envs      map[string]string `json:"envs"`
	}
	if err := conn.ReadJSON(&req); err != nil {
		closeWith(websocket.CloseUnsupportedData, "invalid request")
		return
	}
	id := defaultInterp
	if req.ContextID != nil && *req.ContextID != "" {
		id = *req.ContextID
	}
	it := b.interp(id)
	if it == nil && id == defaultInterp {
		it, err = b.newInterp(defaultInterp, b.home)
	}
	if it == nil || err != nil {
		closeWith(websocket.CloseInternalServerErr, "context not found")
		return
	}
	it.turn <- struct{}{}
	defer func() { <-it.turn }()

	report := filepath.Join(b.tmp, ".daytonafake-report-"+randomHex(8))
	defer os.Remove(report)
	code := runner + "__daytonafake_run(" + string(jsonBytes(req.Code)) + ", " + string(jsonBytes(report)) + ")\n"
	var timeout time.Duration
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	rt := b.runtime()
	if rt == nil {
		closeWith(websocket.CloseGoingAway, "sandbox stopped")
		return
	}
	// A client that goes away does not stop the code (as in Daytona); only the context's end does.
	res, err := rt.Exec(context.Background(), sandboxd.ExecRequest{Code: code, Language: "python", Context: it.ctxName, Env: req.Envs, Timeout: timeout},
		sandboxd.Streams{Stdout: &wsWriter{mu: &mu, conn: conn, typ: "stdout"}, Stderr: &wsWriter{mu: &mu, conn: conn, typ: "stderr"}})
	switch {
	case err != nil:
		closeWith(websocket.CloseGoingAway, "context shutdown")
		return
	case res.ContextLost && res.TimedOut:
		closeWith(4008, "")
		return
	case res.ContextLost:
		closeWith(websocket.CloseGoingAway, "worker process ended")
		return
	}
	var rep struct {
		Interrupted bool   `json:"interrupted"`
		Name        string `json:"name"`
		Value       string `json:"value"`
		Traceback   string `json:"traceback"`
	}
	if data, err := os.ReadFile(report); err == nil {
		_ = json.Unmarshal(data, &rep)
	}
	if rep.Interrupted || res.TimedOut {
		send(map[string]string{"type": "control", "text": "interrupted"})
		closeWith(4008, "")
		return
	}
	if rep.Name != "" {
		send(map[string]string{"type": "error", "name": rep.Name, "value": rep.Value, "traceback": rep.Traceback})
	}
	send(map[string]string{"type": "control", "text": "completed"})
	closeWith(websocket.CloseNormalClosure, "")
}
