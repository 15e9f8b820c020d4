package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// CodeSandbox is the handle of a sandbox whose template runs E2B's code interpreter: code
// naming a context runs there (POST /execute), in a Jupyter kernel per context.
//
// Sandgate's contexts have names; the code interpreter's have ids. The map from names to ids
// (with each context's language and creation time) is kept in the sandbox itself, in
// ContextsFile (outside the workspace), so every gateway replica and a restarted gateway find
// the same kernels; this process caches it per sandbox.
type CodeSandbox struct {
	*Sandbox
}

var (
	_ providers.Sandbox  = (*CodeSandbox)(nil)
	_ providers.Contexts = (*CodeSandbox)(nil)
)

// ContextsFile is where a sandbox keeps its context map (JSON).
const ContextsFile = "/tmp/.sandgate/contexts.json"

// MaxContexts is the most contexts a sandbox keeps (docs/semantics.md §3).
const MaxContexts = 16

type ctxRecord struct {
	ID         string       `json:"id"`
	Language   string       `json:"language"`
	CreatedAt  time.Time    `json:"created_at"`
	executions atomic.Int64 // execution_count the kernel last reported
}

var contextName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Exec runs code that names a context in the code interpreter, anything else as Sandbox.Exec
// does.
//
// In a context: the context is created on first use (spec.Language, python by default); code
// in another language than the context's is fault.Validation; spec.Env goes as the request's
// env_vars, which the code interpreter sets for this execution with a line of code it writes
// itself (a value with a quote, a backslash or a line break cannot travel that way and is
// fault.Validation); a working folder or standard input cannot be given (fault.Validation).
// stdout and stderr text is written as it streams; the value of the cell's last expression
// (Jupyter's main result) is written to stdout as its text and a line break. An exception is
// exit code 1 with its traceback (terminal colours removed) on stderr, ending with the line
// "Name: value"; a bash cell that fails gives its exit status. A kernel that died (the code
// interpreter's ContextRestarting) is ContextLost with exit code 1. When spec.Timeout passes
// or ctx ends the request is abandoned, and the code interpreter interrupts the kernel
// (KeyboardInterrupt): the context keeps its state. Code in a context is no envd process: it
// cannot keep an input open (fault.Validation), and the Executions methods do not find it.
func (s *CodeSandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if spec.Context == "" {
		return s.Sandbox.Exec(ctx, spec)
	}
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.open(); err != nil {
		return providers.ExitStatus{}, err
	}
	if spec.Dir != "" {
		return providers.ExitStatus{}, fault.New(fault.Validation, "e2b: code in a context keeps its own working folder; change it in the code (os.chdir, cd) instead of giving one")
	}
	if spec.StdinOpen {
		return providers.ExitStatus{}, fault.New(fault.Validation, "e2b: code in a context cannot read standard input, so it cannot keep one open; run a command or context-less code instead")
	}
	if spec.Stdin != nil {
		var b [1]byte
		if n, _ := io.ReadFull(spec.Stdin, b[:]); n > 0 {
			return providers.ExitStatus{}, fault.New(fault.Validation, "e2b: code in a context cannot read standard input; pass the data as a file")
		}
	}
	for k, v := range spec.Env {
		if strings.ContainsAny(v, "'\\\n\r") {
			return providers.ExitStatus{}, fault.New(fault.Validation, "e2b: environment variable %s holds a quote, backslash or line break, which the code interpreter cannot set; pass it as a file or set it in the code", k)
		}
	}
	lang := spec.Language
	if lang == "" {
		lang = "python"
	}
	rec, err := s.contextFor(ctx, spec.Context, lang, spec.Language != "")
	if err != nil {
		return providers.ExitStatus{}, err
	}
	st, found, err := s.execute(ctx, rec, spec)
	if err == nil && !found {
		// The kernel is gone (the code interpreter restarted, or someone removed it): start
		// the context afresh and say its state was lost.
		s.st.mu.Lock()
		if s.st.contexts[spec.Context] == rec {
			delete(s.st.contexts, spec.Context)
		}
		s.st.mu.Unlock()
		if rec, err = s.contextFor(ctx, spec.Context, rec.Language, false); err != nil {
			return st, err
		}
		st, _, err = s.execute(ctx, rec, spec)
		st.ContextReset = true
	}
	return st, err
}

// contextFor returns context name's record, making the context (in language) when it does
// not exist. Errors: fault.Validation when strict and it runs another language; newContext's.
func (s *CodeSandbox) contextFor(ctx context.Context, name, language string, strict bool) (*ctxRecord, error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if err := s.loadContexts(ctx); err != nil {
		return nil, err
	}
	if rec, ok := s.st.contexts[name]; ok {
		if strict && rec.Language != language {
			return nil, fault.New(fault.Validation, "context '%s' runs %s, not %s; omit language to use the context's own", name, rec.Language, language)
		}
		return rec, nil
	}
	return s.newContext(ctx, name, language)
}

// interpURL is the base URL of the sandbox's code interpreter.
func (s *CodeSandbox) interpURL() string {
	return s.p.portURL(s.id, s.domain, wire.CodeInterpreterPort)
}

// interp sends a request to the code interpreter.
func (s *CodeSandbox) interp(ctx context.Context, method, p string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.interpURL()+p, rd)
	if err != nil {
		return nil, err
	}
	s.headers(req.Header, wire.CodeInterpreterPort)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.p.http.Do(req)
	if err != nil {
		return nil, fault.Wrap(fault.Provision, fmt.Errorf("%w: %w", providers.ErrUnreached, err), "e2b: the code interpreter of sandbox %s", s.id)
	}
	return resp, nil
}

// interpError turns a failed answer into an error (closing its body).
func interpError(resp *http.Response, what string) error {
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	kind := fault.Provision
	if resp.StatusCode == http.StatusNotFound {
		kind = fault.NotFound
	}
	return fault.New(kind, "e2b: %s: the code interpreter answered %d %s", what, resp.StatusCode, strings.TrimSpace(string(data)))
}

// execute runs spec.Code in context rec. found is false when the code interpreter knows no
// such context (404).
func (s *CodeSandbox) execute(ctx context.Context, rec *ctxRecord, spec providers.ExecSpec) (providers.ExitStatus, bool, error) {
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	if spec.Timeout > 0 {
		t := time.AfterFunc(spec.Timeout, func() { timedOut.Store(true); cancel() })
		defer t.Stop()
	}
	refresh := s.refresher(ctx)
	defer refresh.stop()
	id := rec.ID
	resp, err := s.interp(reqCtx, http.MethodPost, "/execute", wire.ExecuteRequest{Code: spec.Code, ContextID: &id, EnvVars: spec.Env})
	if err != nil {
		if timedOut.Load() {
			return providers.ExitStatus{TimedOut: true}, true, nil
		}
		if ctx.Err() != nil {
			return providers.ExitStatus{}, true, ctx.Err()
		}
		return providers.ExitStatus{}, true, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		return providers.ExitStatus{}, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return providers.ExitStatus{}, true, interpError(resp, "running code")
	}
	write := func(w io.Writer, text string) {
		if w != nil && text != "" {
			_, _ = io.WriteString(w, text)
		}
	}
	var failure *wire.Output
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	ended := false
	for sc.Scan() {
		var o wire.Output
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			continue // not ours to judge: a line the client does not know
		}
		switch o.Type {
		case wire.OutputStdout:
			write(spec.Stdout, o.Text)
		case wire.OutputStderr:
			write(spec.Stderr, o.Text)
		case wire.OutputResult:
			if o.IsMainResult && o.Text != "" {
				write(spec.Stdout, o.Text+"\n")
			}
		case wire.OutputError:
			if failure == nil {
				f := o
				failure = &f
			}
		case wire.OutputNumberOfExecutions:
			rec.executions.Store(int64(o.ExecutionCount))
		case wire.OutputEndOfExecution:
			ended = true
		}
		if ended {
			break
		}
	}
	switch {
	case timedOut.Load():
		return providers.ExitStatus{TimedOut: true}, true, nil
	case ctx.Err() != nil:
		return providers.ExitStatus{}, true, ctx.Err()
	case !ended:
		err := sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return providers.ExitStatus{}, true, fault.Wrap(fault.Provision, err, "e2b: the code interpreter's answer broke off")
	}
	return s.failureStatus(failure, spec.Stderr), true, nil
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// failureStatus maps the error of an execution (nil: none) to its status, writing the
// traceback and "Name: value" to stderr.
func (s *CodeSandbox) failureStatus(f *wire.Output, stderr io.Writer) providers.ExitStatus {
	if f == nil {
		return providers.ExitStatus{}
	}
	if f.Name == "" {
		// bash_kernel: no name, the exit status as the value.
		if n, err := strconv.Atoi(strings.TrimSpace(f.Value)); err == nil {
			return providers.ExitStatus{ExitCode: n}
		}
	}
	st := providers.ExitStatus{ExitCode: 1, ContextLost: f.Name == "ContextRestarting"}
	if stderr == nil {
		return st
	}
	tb := ansiEscape.ReplaceAllString(f.Traceback, "")
	last := f.Name + ": " + f.Value
	if f.Value == "" {
		last = f.Name
	}
	lines := strings.Split(strings.TrimRight(tb, "\n"), "\n")
	if tb != "" {
		_, _ = io.WriteString(stderr, strings.TrimRight(tb, "\n")+"\n")
	}
	if tb == "" || strings.TrimSpace(lines[len(lines)-1]) != last {
		_, _ = io.WriteString(stderr, last+"\n")
	}
	return st
}

// loadContexts fills s.st.contexts from ContextsFile once per process. s.st.mu is held.
func (s *CodeSandbox) loadContexts(ctx context.Context) error {
	if s.st.contexts != nil {
		return nil
	}
	m := map[string]*ctxRecord{}
	resp, err := s.httpFiles(ctx, http.MethodGet, ContextsFile, nil)
	if err != nil {
		return envdError(fmt.Errorf("%w: %w", providers.ErrUnreached, err), "reading the sandbox's context map")
	}
	switch resp.StatusCode {
	case http.StatusOK:
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return fault.Wrap(fault.Provision, err, "e2b: reading the sandbox's context map")
		}
		if err := json.Unmarshal(data, &m); err != nil {
			s.p.logger.Warn("e2b: the sandbox's context map is unreadable; starting a new one", "sandbox", s.id, "error", err)
			m = map[string]*ctxRecord{}
		}
	case http.StatusNotFound:
		resp.Body.Close()
	default:
		return filesError(resp, "reading the sandbox's context map")
	}
	s.st.contexts = m
	return nil
}

// saveContexts writes s.st.contexts to ContextsFile. s.st.mu is held.
func (s *CodeSandbox) saveContexts(ctx context.Context) error {
	data, err := json.Marshal(s.st.contexts)
	if err != nil {
		return err
	}
	resp, err := s.httpFiles(ctx, http.MethodPost, ContextsFile, bytes.NewReader(data))
	if err != nil {
		return envdError(err, "writing the sandbox's context map")
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return filesError(resp, "writing the sandbox's context map")
	}
	resp.Body.Close()
	return nil
}

// newContext makes a kernel for context name (POST /contexts, in the workspace) and records
// it. s.st.mu is held.
func (s *CodeSandbox) newContext(ctx context.Context, name, language string) (*ctxRecord, error) {
	if !contextName.MatchString(name) {
		return nil, fault.New(fault.Validation, "invalid context name %q: use 1 to 64 letters, digits, '_', '.' or '-'", name)
	}
	if language != "python" && language != "bash" {
		return nil, fault.New(fault.Validation, "unknown context language %q: use python or bash", language)
	}
	if len(s.st.contexts) >= MaxContexts {
		return nil, fault.New(fault.Conflict, "the sandbox has %d contexts, the most it keeps; delete one you no longer need (DELETE .../contexts/{name})", MaxContexts)
	}
	cwd := s.p.cfg.Workdir
	resp, err := s.interp(ctx, http.MethodPost, "/contexts", wire.CreateContext{Language: &language, Cwd: &cwd})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return nil, interpError(resp, "creating context '"+name+"'")
	}
	var c wire.Context
	err = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if err != nil || c.ID == "" {
		return nil, fault.New(fault.Provision, "e2b: creating context '%s': the code interpreter's answer names no context", name)
	}
	rec := &ctxRecord{ID: c.ID, Language: language, CreatedAt: time.Now().UTC()}
	s.st.contexts[name] = rec
	if err := s.saveContexts(ctx); err != nil {
		return nil, err
	}
	return rec, nil
}

func (r *ctxRecord) info(name string, alive bool) providers.ContextInfo {
	return providers.ContextInfo{Name: name, Language: r.Language, CreatedAt: r.CreatedAt, Executions: int(r.executions.Load()), Alive: alive}
}

// ListContexts lists the sandbox's contexts, sorted by name; Alive says the code
// interpreter still has the kernel. Executions counts what this gateway process saw.
func (s *CodeSandbox) ListContexts(ctx context.Context) ([]providers.ContextInfo, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if err := s.loadContexts(ctx); err != nil {
		return nil, err
	}
	resp, err := s.interp(ctx, http.MethodGet, "/contexts", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, interpError(resp, "listing contexts")
	}
	var kernels []wire.Context
	err = json.NewDecoder(resp.Body).Decode(&kernels)
	resp.Body.Close()
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "e2b: listing contexts")
	}
	out := make([]providers.ContextInfo, 0, len(s.st.contexts))
	for name, rec := range s.st.contexts {
		alive := slices.ContainsFunc(kernels, func(k wire.Context) bool { return k.ID == rec.ID })
		out = append(out, rec.info(name, alive))
	}
	slices.SortFunc(out, func(a, b providers.ContextInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CreateContext starts context name (python or bash). Errors: fault.Validation for a bad name
// or language, fault.Conflict when it exists or the sandbox has MaxContexts.
func (s *CodeSandbox) CreateContext(ctx context.Context, name, language string) (providers.ContextInfo, error) {
	if err := s.open(); err != nil {
		return providers.ContextInfo{}, err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if err := s.loadContexts(ctx); err != nil {
		return providers.ContextInfo{}, err
	}
	if _, ok := s.st.contexts[name]; ok {
		return providers.ContextInfo{}, fault.New(fault.Conflict, "context '%s' exists", name)
	}
	rec, err := s.newContext(ctx, name, language)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	return rec.info(name, true), nil
}

// RestartContext restarts the context's kernel (POST /contexts/{id}/restart): its state is
// lost. Errors: fault.NotFound.
func (s *CodeSandbox) RestartContext(ctx context.Context, name string) (providers.ContextInfo, error) {
	if err := s.open(); err != nil {
		return providers.ContextInfo{}, err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if err := s.loadContexts(ctx); err != nil {
		return providers.ContextInfo{}, err
	}
	rec, ok := s.st.contexts[name]
	if !ok {
		return providers.ContextInfo{}, fault.New(fault.NotFound, "no context '%s'", name)
	}
	resp, err := s.interp(ctx, http.MethodPost, "/contexts/"+rec.ID+"/restart", nil)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		resp.Body.Close()
		rec.CreatedAt = time.Now().UTC()
		rec.executions.Store(0)
		if err := s.saveContexts(ctx); err != nil {
			return providers.ContextInfo{}, err
		}
		return rec.info(name, true), nil
	case http.StatusNotFound:
		resp.Body.Close()
		delete(s.st.contexts, name)
		rec, err := s.newContext(ctx, name, rec.Language)
		if err != nil {
			return providers.ContextInfo{}, err
		}
		return rec.info(name, true), nil
	}
	return providers.ContextInfo{}, interpError(resp, "restarting context '"+name+"'")
}

// DeleteContext removes the context's kernel (DELETE /contexts/{id}). Errors:
// fault.NotFound.
func (s *CodeSandbox) DeleteContext(ctx context.Context, name string) error {
	if err := s.open(); err != nil {
		return err
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if err := s.loadContexts(ctx); err != nil {
		return err
	}
	rec, ok := s.st.contexts[name]
	if !ok {
		return fault.New(fault.NotFound, "no context '%s'", name)
	}
	resp, err := s.interp(ctx, http.MethodDelete, "/contexts/"+rec.ID, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
		return interpError(resp, "deleting context '"+name+"'")
	}
	resp.Body.Close()
	delete(s.st.contexts, name)
	return s.saveContexts(ctx)
}
