package e2bfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// The code interpreter (e2b-dev/code-interpreter template/server): contexts are sandboxd
// contexts named by their ids; the default context of a language serves /execute requests
// that name a language, or neither.

type codeContext struct {
	id, language, cwd string
	mu                sync.Mutex
	count             int  // executions since (re)start: IPython's execution_count
	placed            bool // the working folder was set (the first execution changes to cwd)
}

type contextTable struct {
	mu        sync.Mutex
	m         map[string]*codeContext
	byLang    map[string]string // default context id per language
	languages []string
}

func newContextTable() *contextTable {
	return &contextTable{m: map[string]*codeContext{}, byLang: map[string]string{}, languages: []string{"python", "bash"}}
}

// normalizeLanguage is the server's normalize_language: lower case, python by default.
func normalizeLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	if l == "" {
		return "python"
	}
	return l
}

func (t *contextTable) create(sb *sandbox, language, cwd string) (*codeContext, error) {
	if !slices.Contains(t.languages, language) {
		//lint:ignore ST1005 the fake answers with E2B's own wording
		return nil, fmt.Errorf("Failed to create context: the fake has no %s kernel (python and bash)", language)
	}
	c := &codeContext{id: uuid.NewString(), language: language, cwd: cwd}
	if _, err := sb.rt.CreateContext(c.id, language); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[c.id] = c
	if _, ok := t.byLang[language]; !ok {
		t.byLang[language] = c.id
	}
	return c, nil
}

func (t *contextTable) get(id string) *codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

func (s *Server) newInterpMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, "OK") })
	m.HandleFunc("POST /execute", s.execute)
	m.HandleFunc("GET /contexts", func(w http.ResponseWriter, r *http.Request) {
		sb := sandboxFrom(r.Context())
		sb.contexts.mu.Lock()
		out := []wire.Context{}
		for _, c := range sb.contexts.m {
			out = append(out, wire.Context{ID: c.id, Language: c.language, Cwd: c.cwd})
		}
		sb.contexts.mu.Unlock()
		slices.SortFunc(out, func(a, b wire.Context) int { return strings.Compare(a.ID, b.ID) })
		writeJSON(w, http.StatusOK, out)
	})
	m.HandleFunc("POST /contexts", func(w http.ResponseWriter, r *http.Request) {
		sb := sandboxFrom(r.Context())
		var req wire.CreateContext
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "invalid body", http.StatusUnprocessableEntity)
			return
		}
		lang, cwd := "", Home
		if req.Language != nil {
			lang = *req.Language
		}
		if req.Cwd != nil && *req.Cwd != "" {
			cwd = *req.Cwd
		}
		c, err := sb.contexts.create(sb, normalizeLanguage(lang), cwd)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusOK, wire.Context{ID: c.id, Language: c.language, Cwd: c.cwd})
	})
	m.HandleFunc("DELETE /contexts/{id}", func(w http.ResponseWriter, r *http.Request) {
		sb, id := sandboxFrom(r.Context()), r.PathValue("id")
		t := sb.contexts
		t.mu.Lock()
		c, ok := t.m[id]
		if ok {
			delete(t.m, id)
			if t.byLang[c.language] == id {
				delete(t.byLang, c.language)
			}
		}
		t.mu.Unlock()
		if !ok {
			http.Error(w, fmt.Sprintf("Context %s not found", id), http.StatusNotFound)
			return
		}
		_ = sb.rt.DeleteContext(id)
		writeJSON(w, http.StatusOK, nil)
	})
	m.HandleFunc("POST /contexts/{id}/restart", func(w http.ResponseWriter, r *http.Request) {
		sb, id := sandboxFrom(r.Context()), r.PathValue("id")
		c := sb.contexts.get(id)
		if c == nil {
			http.Error(w, fmt.Sprintf("Context %s not found", id), http.StatusNotFound)
			return
		}
		if _, err := sb.rt.RestartContext(id); err != nil {
			http.Error(w, fmt.Sprintf("Failed to restart context %s", id), http.StatusInternalServerError)
			return
		}
		c.mu.Lock()
		c.count, c.placed = 0, false
		c.mu.Unlock()
		writeJSON(w, http.StatusOK, nil)
	})
	return m
}

// execute serves POST /execute: newline-delimited Output objects, the last one
// end_of_execution. A client that goes away interrupts the code.
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	sb := sandboxFrom(r.Context())
	var req wire.ExecuteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "invalid body", http.StatusUnprocessableEntity)
		return
	}
	if req.ContextID != nil && req.Language != nil {
		http.Error(w, "Only one of context_id or language can be provided", http.StatusBadRequest)
		return
	}
	var c *codeContext
	switch {
	case req.ContextID != nil:
		c = sb.contexts.get(*req.ContextID)
		if c == nil {
			http.Error(w, fmt.Sprintf("Context %s not found", *req.ContextID), http.StatusNotFound)
			return
		}
	default:
		lang := "python"
		if req.Language != nil {
			lang = normalizeLanguage(*req.Language)
		}
		sb.contexts.mu.Lock()
		id, ok := sb.contexts.byLang[lang]
		sb.contexts.mu.Unlock()
		if ok {
			c = sb.contexts.get(id)
		}
		if c == nil {
			var err error
			if c, err = sb.contexts.create(sb, lang, Home); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
	}

	// One execution per context at a time, as the server's per-context lock does.
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var sendMu sync.Mutex
	send := func(o wire.Output) {
		sendMu.Lock()
		defer sendMu.Unlock()
		b, _ := json.Marshal(o)
		_, _ = w.Write(append(b, '\n'))
		if flusher != nil {
			flusher.Flush()
		}
	}
	now := func() *time.Time { t := time.Now().UTC(); return &t }
	c.count++
	send(wire.Output{Type: wire.OutputNumberOfExecutions, ExecutionCount: c.count})

	stdout := &textWriter{emit: func(s string) { send(wire.Output{Type: wire.OutputStdout, Text: s, Timestamp: now()}) }}
	// stderr is held back by up to 64 KiB, so that the traceback sandboxd prints last can be
	// left out of the stream: Jupyter sends it in the error object only.
	stderrText := &textWriter{emit: func(s string) { send(wire.Output{Type: wire.OutputStderr, Text: s, Timestamp: now()}) }}
	stderr := &holdback{limit: 64 << 10, out: stderrText}

	er := sandboxd.ExecRequest{Code: req.Code, Language: c.language, Context: c.id, Env: req.EnvVars}
	if !c.placed {
		if rel, err := filepath.Rel(sb.home, sb.hostPath(c.cwd)); err == nil && !strings.HasPrefix(rel, "..") && rel != "." {
			er.Dir = filepath.ToSlash(rel)
		}
		c.placed = true
	}
	stop := make(chan struct{})
	go func() { // keepalives, as the server sends every 5 s
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				send(wire.Output{Type: wire.OutputKeepalive})
			case <-stop:
				return
			}
		}
	}()
	res, err := sb.rt.Exec(r.Context(), er, sandboxd.Streams{Stdout: stdout, Stderr: stderr})
	close(stop)
	if r.Context().Err() != nil {
		return // the client went away: the code was interrupted (SIGINT), nobody listens
	}
	stdout.flush()
	if err != nil {
		stderr.finish(nil)
		stderrText.flush()
		send(wire.Output{Type: wire.OutputError, Name: "ExecutionError", Value: err.Error()})
		send(wire.Output{Type: wire.OutputEndOfExecution})
		return
	}
	switch {
	case res.ContextLost:
		// Jupyter restarts a dead kernel; the server reports it so. sandboxd's own note
		// about the lost context is not a kernel's output.
		stderr.finish(func(b []byte) []byte {
			if i := bytes.LastIndex(b, []byte("sandboxd: ")); i >= 0 && (i == 0 || b[i-1] == '\n') {
				return b[:i]
			}
			return b
		})
		stderrText.flush()
		send(wire.Output{Type: wire.OutputError, Name: "ContextRestarting", Value: "Context was restarted"})
	case res.Error != nil:
		stderr.finish(func(b []byte) []byte { return bytes.TrimSuffix(b, []byte(res.Error.Traceback)) })
		stderrText.flush()
		send(wire.Output{Type: wire.OutputError, Name: res.Error.Name, Value: res.Error.Value, Traceback: res.Error.Traceback})
	default:
		stderr.finish(nil)
		stderrText.flush()
		if res.ExitCode != 0 && c.language == "bash" {
			// bash_kernel reports a failing cell as an error with no name and the exit status
			// as its value.
			send(wire.Output{Type: wire.OutputError, Value: strconv.Itoa(res.ExitCode)})
		}
	}
	send(wire.Output{Type: wire.OutputEndOfExecution})
}

// holdback passes bytes on once more than limit bytes follow them; finish passes on the
// rest, after trim (if any) cut its end.
type holdback struct {
	mu    sync.Mutex
	limit int
	buf   []byte
	out   interface{ Write([]byte) (int, error) }
}

func (h *holdback) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf = append(h.buf, b...)
	if n := len(h.buf) - h.limit; n > 0 {
		_, _ = h.out.Write(h.buf[:n])
		h.buf = slices.Clone(h.buf[n:])
	}
	return len(b), nil
}

func (h *holdback) finish(trim func([]byte) []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.buf
	if trim != nil {
		b = trim(b)
	}
	if len(b) > 0 {
		_, _ = h.out.Write(b)
	}
	h.buf = nil
}
