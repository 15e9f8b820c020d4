package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// fakeSandbox is a handle on one box.
type fakeSandbox struct {
	p      *Provider
	b      *box
	pr     providers.Principal
	closed atomic.Bool
}

var (
	_ providers.Sandbox    = (*fakeSandbox)(nil)
	_ providers.Contexts   = (*fakeSandbox)(nil)
	_ providers.Reattacher = (*fakeSandbox)(nil)
)

// Reattach runs the Program that Provider.HoldExecution left for execution id (once), as the
// sandbox's runtime would stream a held execution to a gateway that adopted it.
// Errors: fault.NotFound when none is held; fault.Conflict on a closed handle; fault.Gone for
// a sandbox that is gone; ctx.Err().
func (s *fakeSandbox) Reattach(ctx context.Context, id string, out providers.Output) (providers.ExitStatus, error) {
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	s.p.mu.Lock()
	prog, ok := s.p.held[id]
	delete(s.p.held, id)
	s.p.mu.Unlock()
	if !ok {
		return providers.ExitStatus{}, fault.New(fault.NotFound, "%s: sandbox '%s' holds no execution '%s'", s.p.typ, s.b.id, id)
	}
	run := &Run{Spec: providers.ExecSpec{ID: id}, SandboxID: s.b.id, Stdin: bytes.NewReader(nil), Stdout: out.Stdout, Stderr: out.Stderr, ws: s.b.ws}
	if run.Stdout == nil {
		run.Stdout = io.Discard
	}
	if run.Stderr == nil {
		run.Stderr = io.Discard
	}
	st, err := prog(ctx, run)
	if ctx.Err() != nil {
		return providers.ExitStatus{}, ctx.Err()
	}
	return st, err
}

func (s *fakeSandbox) ID() string { return s.b.id }

// Close releases the handle; the sandbox stays. Idempotent; the handle's other methods then
// return fault.Conflict, as every provider's (providers.Sandbox).
func (s *fakeSandbox) Close() error {
	s.closed.Store(true)
	return nil
}

// usable returns the error of an operation on a closed handle (fault.Conflict) or on a
// sandbox that was destroyed or lost (fault.Gone), or nil.
func (s *fakeSandbox) usable() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", s.p.typ, s.b.id)
	}
	if s.b.ctx.Err() != nil {
		return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", s.p.typ, s.b.id)
	}
	return nil
}

// Exec runs the execution's Program (see Program for how its end is reported).
// Errors: those of providers.CheckExecSpec; fault.Conflict on a closed handle; fault.Gone for
// a sandbox that is gone (before or during the execution); fault.NotFound for a missing working folder; fault.Validation for
// code of another language than its context's; ctx.Err() when ctx ends first.
func (s *fakeSandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	p, b := s.p, s.b
	if err := providers.CheckExecSpec(p.typ, p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if spec.Dir != "" {
		dir, _ := clean(spec.Dir) // CheckExecSpec refused escapes
		if !b.ws.isDir(dir) {
			return providers.ExitStatus{}, fault.New(fault.NotFound, "working folder '%s' does not exist in the sandbox workspace", dir)
		}
	}
	rec := &Exec{SandboxID: b.id, Spec: spec, Principal: s.pr}
	rec.Spec.Stdin, rec.Spec.Stdout, rec.Spec.Stderr = nil, nil, nil
	p.mu.Lock()
	if spec.Context != "" {
		if err := b.useContext(spec, p.now); err != nil {
			p.mu.Unlock()
			return providers.ExitStatus{}, err
		}
	}
	prog := p.pick(spec)
	p.execs = append(p.execs, rec)
	b.active++
	p.peak[b.id] = max(p.peak[b.id], b.active)
	p.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel) // destroyed or lost: the program ends
	defer stop()
	if spec.Timeout > 0 {
		var cancelT context.CancelFunc
		runCtx, cancelT = context.WithTimeout(runCtx, spec.Timeout)
		defer cancelT()
	}
	run := &Run{Spec: spec, SandboxID: b.id, Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr, ws: b.ws}
	if run.Stdin == nil {
		run.Stdin = bytes.NewReader(nil)
	}
	if run.Stdout == nil {
		run.Stdout = io.Discard
	}
	if run.Stderr == nil {
		run.Stderr = io.Discard
	}
	st, err := prog(runCtx, run)
	switch {
	case ctx.Err() != nil:
		st, err = providers.ExitStatus{}, ctx.Err()
	case b.ctx.Err() != nil:
		st, err = providers.ExitStatus{}, fault.New(fault.Gone, "%s: sandbox '%s' went away during the execution", p.typ, b.id)
	case spec.Timeout > 0 && errors.Is(runCtx.Err(), context.DeadlineExceeded):
		st, err = providers.ExitStatus{TimedOut: true}, nil
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	b.active--
	if c := b.contexts[spec.Context]; spec.Context != "" && c != nil {
		c.Executions++
		if st.ContextLost {
			c.Executions, c.Alive = 0, false
		}
	}
	rec.Finished, rec.Status, rec.Err, rec.Cancelled = true, st, err, ctx.Err() != nil
	return st, err
}

// useContext readies context spec.Context for an execution: created with the spec's language
// (python by default) on first use. Call with Provider.mu held.
func (b *box) useContext(spec providers.ExecSpec, now func() time.Time) error {
	c := b.contexts[spec.Context]
	if c == nil {
		lang := spec.Language
		if lang == "" {
			lang = "python"
		}
		c = &providers.ContextInfo{Name: spec.Context, Language: lang, CreatedAt: now(), Alive: true}
		b.contexts[spec.Context] = c
		return nil
	}
	if spec.Language != "" && spec.Language != c.Language {
		return fault.New(fault.Validation, "context '%s' runs %s, not %s", c.Name, c.Language, spec.Language)
	}
	c.Alive = true
	return nil
}

// InstallPackages succeeds without doing anything when the provider declares
// package_install.
func (s *fakeSandbox) InstallPackages(_ context.Context, _ []string, _ providers.Output) (providers.ExitStatus, error) {
	if !s.p.caps.PackageInstall {
		return providers.ExitStatus{}, fault.Unsupported(s.p.typ, "package_install")
	}
	return providers.ExitStatus{}, s.usable()
}

// files checks the files capability, path p (providers.CleanEntry when it must name an entry
// inside the workspace, the path of a write or a removal; else providers.CleanPath), then the
// handle and that the sandbox is there, in the order of every provider.
func (s *fakeSandbox) files(p string, entry bool) (string, error) {
	if !s.p.caps.Files {
		return "", fault.Unsupported(s.p.typ, "files")
	}
	cleanPath := clean
	if entry {
		cleanPath = providers.CleanEntry
	}
	c, err := cleanPath(p)
	if err != nil {
		return "", err
	}
	return c, s.usable()
}

// WriteFile stores r's bytes as file path; over maxBytes: fault.TooLarge and nothing written.
func (s *fakeSandbox) WriteFile(_ context.Context, path string, r io.Reader, maxBytes int64) (int64, error) {
	c, err := s.files(path, true)
	if err != nil {
		return 0, err
	}
	maxBytes = max(maxBytes, 0)
	if maxBytes < math.MaxInt64 {
		r = io.LimitReader(r, maxBytes+1)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, fmt.Errorf("%s: writing '%s': %w", s.p.typ, c, err)
	}
	if int64(len(data)) > maxBytes {
		return 0, fault.New(fault.TooLarge, "file '%s' is over the %d-byte limit; nothing was written", c, maxBytes)
	}
	if err := s.b.ws.write(c, data); err != nil {
		return 0, err
	}
	return int64(len(data)), nil
}

// ReadFile opens file path (a copy of its content at the time of the call).
func (s *fakeSandbox) ReadFile(_ context.Context, path string) (io.ReadCloser, error) {
	c, err := s.files(path, false)
	if err != nil {
		return nil, err
	}
	data, err := s.b.ws.read(c)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// ListFiles lists folder dir, sorted by name.
func (s *fakeSandbox) ListFiles(_ context.Context, dir string) ([]providers.FileInfo, error) {
	c, err := s.files(dir, false)
	if err != nil {
		return nil, err
	}
	return s.b.ws.list(c)
}

// RemoveFile removes a file or an empty folder; a missing one is no error.
func (s *fakeSandbox) RemoveFile(_ context.Context, path string) error {
	c, err := s.files(path, true)
	if err != nil {
		return err
	}
	return s.b.ws.remove(c)
}

// contexts checks the stateful capability and that the sandbox is there.
func (s *fakeSandbox) contexts() error {
	if !s.p.caps.Stateful {
		return fault.Unsupported(s.p.typ, "stateful")
	}
	return s.usable()
}

// ListContexts returns the sandbox's contexts, sorted by name.
func (s *fakeSandbox) ListContexts(context.Context) ([]providers.ContextInfo, error) {
	if err := s.contexts(); err != nil {
		return nil, err
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	out := []providers.ContextInfo{}
	for _, c := range s.b.contexts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b providers.ContextInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CreateContext starts context name for language (python or bash).
func (s *fakeSandbox) CreateContext(_ context.Context, name, language string) (providers.ContextInfo, error) {
	if err := s.contexts(); err != nil {
		return providers.ContextInfo{}, err
	}
	if language != "python" && language != "bash" {
		return providers.ContextInfo{}, fault.New(fault.Validation, "context language %q is not supported: use python or bash", language)
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if _, ok := s.b.contexts[name]; ok {
		return providers.ContextInfo{}, fault.New(fault.Conflict, "context '%s' exists", name)
	}
	c := &providers.ContextInfo{Name: name, Language: language, CreatedAt: s.p.now(), Alive: true}
	s.b.contexts[name] = c
	return *c, nil
}

// RestartContext gives context name a fresh interpreter (its executions count restarts).
func (s *fakeSandbox) RestartContext(_ context.Context, name string) (providers.ContextInfo, error) {
	if err := s.contexts(); err != nil {
		return providers.ContextInfo{}, err
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	c, ok := s.b.contexts[name]
	if !ok {
		return providers.ContextInfo{}, fault.New(fault.NotFound, "no context '%s'", name)
	}
	c.CreatedAt, c.Executions, c.Alive = s.p.now(), 0, true
	return *c, nil
}

// DeleteContext forgets context name.
func (s *fakeSandbox) DeleteContext(_ context.Context, name string) error {
	if err := s.contexts(); err != nil {
		return err
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if _, ok := s.b.contexts[name]; !ok {
		return fault.New(fault.NotFound, "no context '%s'", name)
	}
	delete(s.b.contexts, name)
	return nil
}
