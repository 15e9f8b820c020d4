package e2bdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// The code interpreter (e2b-dev/code-interpreter template/server) on the session's stateful
// contexts (docs/semantics.md §8): a context's id is the domain context's name. /execute runs
// code as an execution of the session — in the named context, else in the language's default
// one (python: the session's default context; another language: a context named
// "default-<language>", made on first use) — and streams its output as it comes, then its
// error (name, value, traceback) and its rich results. A client that goes away interrupts
// the code (its task is cancelled), as the code interpreter does.

// executeKeepalive is the interval of keepalive lines on an /execute stream (the code
// interpreter's).
const executeKeepalive = 5 * time.Second

// tracebackStart starts a Python traceback on stderr. From its first one on, stderr is held
// back until the end — up to maxHeld bytes, sent on past that — so that the traceback of the
// execution's error, which its context prints last, goes out in the error object only, as
// Jupyter sends it. stdout and results stream on meanwhile (their order with stderr is not
// kept across the two pipes anyway); a traceback the code prints and goes on comes late.
const tracebackStart = "Traceback (most recent call last):"

// maxHeld bounds the stderr an /execute stream holds back.
const maxHeld = 64 << 10

func (h *Handler) interpMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, "OK") })
	m.Handle("POST /execute", streaming(http.HandlerFunc(h.execute)))
	m.HandleFunc("GET /contexts", h.listContexts)
	m.HandleFunc("POST /contexts", h.createContext)
	m.HandleFunc("DELETE /contexts/{id}", h.deleteContext)
	m.HandleFunc("POST /contexts/{id}/restart", h.restartContext)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.apiError(w, r, http.StatusNotFound, "not-found", fmt.Sprintf("Sandgate's E2B door does not serve the code interpreter's %s %s (docs/e2b-door.md)", r.Method, r.URL.Path))
	})
	return m
}

// normalizeLanguage is the code interpreter's: lower case, python by default.
func normalizeLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	if l == "" {
		return "python"
	}
	return l
}

// executeBody is the code interpreter's ExecuteRequest.
type executeBody struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// contextNamed is context name of the session, if it has one.
func (h *Handler) contextNamed(ctx context.Context, p principal.Principal, sess sandbox.Session, name string) (sandbox.NamedContext, bool, error) {
	list, err := h.svc.Contexts(ctx, p, sess.ID, "", sandbox.ContextOp{Op: sandbox.ContextList})
	if err != nil {
		return sandbox.NamedContext{}, false, err
	}
	for _, c := range list {
		if c.Name == name {
			return c, true, nil
		}
	}
	return sandbox.NamedContext{}, false, nil
}

func contextNotFound(id string) error { return fault.New(fault.NotFound, "Context %s not found", id) }

// executeInput is the execution of b in session sess.
func (h *Handler) executeInput(ctx context.Context, p principal.Principal, sess sandbox.Session, b executeBody) (sandbox.ExecInput, error) {
	in := sandbox.ExecInput{SessionID: sess.ID, Code: b.Code, Env: b.EnvVars}
	switch {
	case b.ContextID != nil && b.Language != nil:
		return in, fault.New(fault.Validation, "Only one of context_id or language can be provided")
	case b.ContextID != nil:
		c, ok, err := h.contextNamed(ctx, p, sess, *b.ContextID)
		if err != nil {
			return in, err
		}
		if !ok {
			return in, contextNotFound(*b.ContextID)
		}
		in.Context, in.Language = c.Name, c.Language
		return in, nil
	}
	lang := "python"
	if b.Language != nil {
		lang = normalizeLanguage(*b.Language)
	}
	in.Language = lang
	prof := h.profileNamed(p, sess.Profile)
	if lang != "python" && prof != nil && prof.Caps.Stateful {
		in.Context = "default-" + lang // made on first use (the domain's), as the interpreter's
	}
	return in, nil
}

// ndjson writes the lines of one /execute answer, flushed as they go; safe for concurrent use.
type ndjson struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (n *ndjson) send(v any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	b, _ := json.Marshal(v)
	_, _ = n.w.Write(append(b, '\n'))
	_ = n.rc.Flush()
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	ctx := r.Context()
	var b executeBody
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	in, err := h.executeInput(ctx, p, sess, b)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	started := make(chan string, 1)
	in.Started = func(id string) { started <- id }
	type outcome struct {
		out sandbox.Outcome
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		out, err := h.svc.Execute(context.WithoutCancel(ctx), p, in)
		done <- outcome{out, err}
	}()
	var taskID string
	select {
	case taskID = <-started:
	case o := <-done:
		if o.err == nil {
			o.err = fault.New(fault.Internal, "the execution ended without a task")
		}
		h.fail(w, r, o.err)
		return
	case <-ctx.Done():
		go func() { // the client went away before the code started: it never runs
			select {
			case id := <-started:
				_, _ = h.svc.CancelTask(context.WithoutCancel(ctx), p, id)
			case <-done:
			}
		}()
		return
	}
	f, err := h.svc.Follow(ctx, p, taskID, sandbox.Position{})
	if err != nil {
		select {
		case o := <-done:
			if o.err != nil {
				err = o.err // refused as it started: its task was withdrawn
			}
		case <-time.After(time.Second):
			// Not refused: it runs and cannot be followed; nobody will read it.
			_, _ = h.svc.CancelTask(context.WithoutCancel(ctx), p, taskID)
		}
		h.fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	out := &ndjson{w: w, rc: http.NewResponseController(w)}
	var held strings.Builder // stderr from a traceback's start on
	results := 0             // rich results sent as they came
	flushHeld := func() {
		if held.Len() > 0 {
			out.send(wire.Output{Type: wire.OutputStderr, Text: held.String(), Timestamp: now()})
			held.Reset()
		}
	}
	for {
		batch, err := f.Next(ctx, executeKeepalive)
		if err != nil {
			if ctx.Err() != nil {
				// The client went away: interrupt the code, as the code interpreter does.
				_, _ = h.svc.CancelTask(context.WithoutCancel(ctx), p, taskID)
				return
			}
			flushHeld()
			out.send(wire.Output{Type: wire.OutputError, Name: "SandgateError", Value: messageOf(err)})
			out.send(wire.Output{Type: wire.OutputEndOfExecution})
			return
		}
		for _, ev := range batch.Events {
			if ev.Stream == sandbox.StreamResult {
				var r sandbox.RichResult
				if json.Unmarshal(ev.Data, &r) == nil {
					out.send(resultOutput(r))
					results++
				}
				continue
			}
			text := strings.ToValidUTF8(string(ev.Data), "\uFFFD")
			if ev.Stream == sandbox.StreamStdout {
				out.send(wire.Output{Type: wire.OutputStdout, Text: text, Timestamp: now()})
				continue
			}
			if held.Len() == 0 {
				i := strings.Index(text, tracebackStart)
				if i < 0 {
					out.send(wire.Output{Type: wire.OutputStderr, Text: text, Timestamp: now()})
					continue
				}
				if i > 0 {
					out.send(wire.Output{Type: wire.OutputStderr, Text: text[:i], Timestamp: now()})
				}
				text = text[i:]
			}
			held.WriteString(text)
			if held.Len() > maxHeld {
				flushHeld()
			}
		}
		if batch.Done {
			h.finish(out, &held, batch, results)
			return
		}
		if len(batch.Events) == 0 && len(batch.Gaps) == 0 {
			out.send(wire.Output{Type: wire.OutputKeepalive})
		}
	}
}

func now() *time.Time {
	t := time.Now().UTC()
	return &t
}

// finish sends how the execution of batch (its last) ended: what stderr held back (without
// the error's own traceback), the rich results not sent as they came (sent: how many were),
// the error, end_of_execution.
func (h *Handler) finish(out *ndjson, held *strings.Builder, batch sandbox.Batch, sent int) {
	res := batch.Result
	rest := held.String()
	if res != nil && res.Error != nil {
		// The traceback the code's context printed last (Result.Error has it whole).
		if tb := strings.TrimSpace(res.Error.Traceback); tb != "" {
			if i := strings.LastIndex(rest, tb); i >= 0 && strings.TrimSpace(rest[i+len(tb):]) == "" {
				rest = rest[:i]
			}
		}
	}
	if rest != "" {
		out.send(wire.Output{Type: wire.OutputStderr, Text: rest, Timestamp: now()})
	}
	if res != nil && len(res.Results) > sent {
		// Read from the stored result (the live output was not followed here): in order, after
		// those that came live.
		for _, r := range res.Results[sent:] {
			out.send(resultOutput(r))
		}
	}
	switch {
	case batch.Err != nil:
		out.send(wire.Output{Type: wire.OutputError, Name: "SandgateError", Value: messageOf(batch.Err)})
	case res == nil:
		out.send(wire.Output{Type: wire.OutputError, Name: "SandgateError", Value: "the execution ended without a result"})
	case res.ContextLost:
		// The code interpreter reports a kernel that died and was restarted so.
		out.send(wire.Output{Type: wire.OutputError, Name: "ContextRestarting", Value: "Context was restarted"})
	case res.Error != nil:
		out.send(wire.Output{Type: wire.OutputError, Name: res.Error.Name, Value: res.Error.Value, Traceback: res.Error.Traceback})
	case res.Status == sandbox.ResultTimedOut:
		out.send(wire.Output{Type: wire.OutputError, Name: "TimeoutError", Value: "the execution passed its profile's timeout and was stopped"})
	case res.Status == sandbox.ResultCancelled:
		out.send(wire.Output{Type: wire.OutputError, Name: "KeyboardInterrupt", Value: "the execution was cancelled"})
	case res.ExitCode != nil && *res.ExitCode != 0:
		// bash_kernel reports a failing cell as an error with no name and the exit status
		// as its value.
		out.send(wire.Output{Type: wire.OutputError, Value: strconv.Itoa(*res.ExitCode)})
	}
	out.send(wire.Output{Type: wire.OutputEndOfExecution})
}

// mimeKeys are the members of the code interpreter's result output that carry each MIME
// type of a Jupyter display bundle (template/server messaging.py); a type not listed travels
// under its own name (E2B's SDKs gather such members in Result.extra).
var mimeKeys = map[string]string{
	"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
	"image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
	"application/json": "json", "application/javascript": "javascript",
}

// resultOutput is rich result r — the value of the code's last expression (is_main_result) or
// a display — as the code interpreter's "result" output: each representation under its
// member (binary images as base64, JSON as JSON). A result the domain dropped for being over
// the output limit says so in its text, and names its types and size in sandgate_dropped.
func resultOutput(r sandbox.RichResult) map[string]any {
	o := map[string]any{"type": wire.OutputResult, "is_main_result": r.Main}
	if d := r.Dropped; d != nil {
		o["text"] = fmt.Sprintf("[a result of %d bytes (%s) was over the output limit and was dropped]", d.Bytes, strings.Join(d.Types, ", "))
		o["sandgate_dropped"] = map[string]any{"types": d.Types, "bytes": d.Bytes}
		return o
	}
	for mime, v := range r.Data {
		key, ok := mimeKeys[mime]
		if !ok {
			key = mime
		}
		o[key] = v
	}
	return o
}

// contextBody is the code interpreter's CreateContext.
type contextBody struct {
	Language *string `json:"language"`
	Cwd      *string `json:"cwd"`
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	list, err := h.svc.Contexts(r.Context(), p, sess.ID, "", sandbox.ContextOp{Op: sandbox.ContextList})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := []wire.Context{}
	for _, c := range list {
		out = append(out, wire.Context{ID: c.Name, Language: c.Language, Cwd: Home})
	}
	slices.SortFunc(out, func(a, b wire.Context) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, out)
}

// createContext makes a context of the language (python by default) whose id is a new UUID;
// a cwd in the workspace other than its root becomes its working folder by a first
// execution (python os.chdir, bash cd) — one a restart does not keep.
func (h *Handler) createContext(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	var b contextBody
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	lang := "python"
	if b.Language != nil {
		lang = normalizeLanguage(*b.Language)
	}
	dir := "."
	if b.Cwd != nil && *b.Cwd != "" {
		rel, err := workspacePath(*b.Cwd)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		dir = rel
	}
	var chdir string
	switch {
	case dir == ".":
	case lang == "python":
		chdir = "import os\nos.chdir(os.environ['E2B_CONTEXT_CWD'])"
	case lang == "bash":
		chdir = `cd -- "$E2B_CONTEXT_CWD"`
	default:
		h.fail(w, r, fault.New(fault.Validation, "a cwd is offered for python and bash contexts, not %s", lang))
		return
	}
	id := uuid.NewString()
	if _, err := h.svc.Contexts(r.Context(), p, sess.ID, "", sandbox.ContextOp{Op: sandbox.ContextCreate, Name: id, Language: lang}); err != nil {
		h.fail(w, r, err)
		return
	}
	if chdir != "" {
		out, err := h.svc.Execute(r.Context(), p, sandbox.ExecInput{SessionID: sess.ID, Code: chdir, Context: id, Env: map[string]string{"E2B_CONTEXT_CWD": dir}})
		if err == nil && (out.Result == nil || out.Result.Error != nil || out.Result.ExitCode == nil || *out.Result.ExitCode != 0) {
			err = fault.New(fault.Validation, "cwd '%s' cannot be the context's working folder (does it exist?)", *b.Cwd)
		}
		if err != nil {
			_, _ = h.svc.Contexts(r.Context(), p, sess.ID, "", sandbox.ContextOp{Op: sandbox.ContextDelete, Name: id})
			h.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, wire.Context{ID: id, Language: lang, Cwd: e2bPath(dir)})
}

func (h *Handler) deleteContext(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	id := r.PathValue("id")
	if _, err := h.svc.Contexts(r.Context(), p, sess.ID, "", sandbox.ContextOp{Op: sandbox.ContextDelete, Name: id}); err != nil {
		if fault.KindOf(err) == fault.NotFound {
			err = contextNotFound(id)
		}
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request) {
	p, sess := mustPrincipal(r), sessionFrom(r.Context())
	id := r.PathValue("id")
	if _, err := h.svc.Contexts(r.Context(), p, sess.ID, "", sandbox.ContextOp{Op: sandbox.ContextRestart, Name: id}); err != nil {
		if fault.KindOf(err) == fault.NotFound {
			err = contextNotFound(id)
		}
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}
