package sdadapter

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// oomNotice is appended to the standard error of a program the kernel killed because the
// sandbox ran out of memory.
const oomNotice = "\nsandgate: the program was killed because the sandbox ran out of memory (policy memory_mb)\n"

// Exec runs spec to completion in the sandbox's sandboxd (internal/sandboxd/doc.go has the
// semantics: a session per execution, the whole tree killed on timeout or cancel, 128+n for
// signals, OOM reporting) and returns how it ended; a non-zero exit is a status, never an
// error. An execution with spec.ID is held by sandboxd when the gateway stops following it
// (providers.Reattacher), except in a Transient sandbox, whose runtime ends with the call.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.Conflict
// on a closed handle; fault.Capability "stateful" for a context in a Transient sandbox;
// sandboxd's fault kinds (fault.Policy or fault.NotFound for a working folder that escapes or
// is missing); fault.Gone when the provider's Destroy ended it, or the backend finds the
// sandbox gone; fault.Provision (with providers.ErrUnreached) when sandboxd cannot be
// reached; ctx.Err() (with the status of the killed program) when ctx ends first, joined
// with fault.ErrLeftRunning when sandboxd holds the execution on for an adopter.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(s.cfg.Subject, s.cfg.CapsFunc(), spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.Usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := ctx.Err(); err != nil {
		return providers.ExitStatus{}, err
	}
	if spec.Context != "" && s.cfg.Transient {
		return providers.ExitStatus{}, fault.Unsupported(s.cfg.Subject, "stateful")
	}
	req, err := providers.RuntimeRequest(spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	if s.cfg.Transient {
		req.ID = "" // a connection's own runtime ends with it: nothing could be held
	}
	return s.run(ctx, req, spec.Output)
}

// InstallPackages runs `python3 -m pip install --no-input --user -- <packages>` in the
// sandbox (the root file system is read-only; packages go under HOME, the workspace; a
// Transient sandbox installs without --user), with no time limit but ctx. A failed
// installation is a status, never an error.
//
// Errors: fault.Capability "package_install" when the provider does not declare it;
// fault.Validation for no package, or a name that is empty, starts with "-" (so none can pass
// pip an option) or holds a NUL byte or a line break; Exec's others.
func (s *Sandbox) InstallPackages(ctx context.Context, packages []string, out providers.Output) (providers.ExitStatus, error) {
	if !s.cfg.CapsFunc().PackageInstall {
		return providers.ExitStatus{}, fault.Unsupported(s.cfg.Subject, "package_install")
	}
	if len(packages) == 0 {
		return providers.ExitStatus{}, fault.New(fault.Validation, "give at least one package to install")
	}
	for _, pkg := range packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") || strings.ContainsAny(pkg, "\x00\n\r") {
			return providers.ExitStatus{}, fault.New(fault.Validation, "invalid package name %q", pkg)
		}
	}
	if err := s.Usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	argv := []string{"python3", "-m", "pip", "install", "--no-input", "--disable-pip-version-check"}
	if !s.cfg.Transient {
		argv = append(argv, "--user")
	}
	argv = append(append(argv, "--"), packages...)
	return s.run(ctx, sandboxd.ExecRequest{Argv: argv, Env: map[string]string{
		"PIP_ROOT_USER_ACTION":      "ignore",
		"PIP_NO_CACHE_DIR":          "1", // no cache in the workspace (HOME)
		"PIP_BREAK_SYSTEM_PACKAGES": "1", // the sandbox is disposable: no Debian "externally managed" refusal
	}}, out)
}

// run sends one execution to sandboxd, registered in Running while it runs.
func (s *Sandbox) run(ctx context.Context, req sandboxd.ExecRequest, out providers.Output) (providers.ExitStatus, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.cfg.Running != nil {
		defer s.cfg.Running.track(s.cfg.ID, cancel)()
	}
	res, err := s.cfg.ClientFunc().Exec(rctx, req, providers.RuntimeStreams(out))
	st := providers.RuntimeStatus(res)
	if errors.Is(context.Cause(rctx), ErrDestroyed) {
		return providers.ExitStatus{}, fault.New(fault.Gone, "%s: %s was destroyed during the execution", s.cfg.Subject, s.cfg.Where)
	}
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(err, fault.ErrLeftRunning) {
				return st, err // the gateway stops; sandboxd holds the execution for its adopter
			}
			return st, ctx.Err()
		}
		return st, s.Fault(err)
	}
	if s.cfg.ServedFunc != nil {
		s.cfg.ServedFunc()
	}
	s.oomKilled(res, out)
	return st, nil
}

// oomKilled tells the program's standard error, and the log, that the OOM killer ended it.
func (s *Sandbox) oomKilled(res sandboxd.Result, out providers.Output) {
	if !res.OOMKilled {
		return
	}
	if out.Stderr != nil {
		_, _ = io.WriteString(out.Stderr, oomNotice)
	}
	s.cfg.Logger.Warn("the kernel's OOM killer ended a program in a sandbox", "provider", s.cfg.Subject, "sandbox_id", s.cfg.ID)
}

// Reattach follows again execution id, held by the sandbox's sandboxd (it was started with
// ExecSpec.ID by a gateway that has since stopped); see providers.Reattacher.
//
// Errors: fault.Conflict on a closed handle; fault.NotFound in a Transient sandbox (nothing
// is held there) and when sandboxd holds no such execution; providers.ErrExecutionStopped;
// ctx.Err(); Fault's others.
func (s *Sandbox) Reattach(ctx context.Context, id string, out providers.Output) (providers.ExitStatus, error) {
	if err := s.Usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if s.cfg.Transient {
		return providers.ExitStatus{}, fault.New(fault.NotFound, "%s: %s runs no sandboxd of its own, which alone could hold execution '%s'", s.cfg.Subject, s.cfg.Where, id)
	}
	st, res, err := providers.ReattachRuntime(ctx, s.cfg.ClientFunc(), id, out, remote.ErrStopped, s.Fault)
	if err != nil {
		return st, err
	}
	s.oomKilled(res, out)
	return st, nil
}

// ListContexts lists the sandbox's stateful contexts, sorted by name.
// Errors: fault.Conflict on a closed handle; fault.Capability "stateful" in a Transient
// sandbox; ctx.Err(); Fault's others.
func (s *Sandbox) ListContexts(ctx context.Context) ([]providers.ContextInfo, error) {
	rt, err := s.daemon()
	if err != nil {
		return nil, err
	}
	list, err := rt.ListContexts(ctx)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	out := make([]providers.ContextInfo, len(list))
	for i, c := range list {
		out[i] = providers.RuntimeContext(c)
	}
	return out, nil
}

// CreateContext starts context name for language (python or bash).
// Errors: ListContexts's; fault.Validation for a bad name or language, fault.Conflict when it
// exists.
func (s *Sandbox) CreateContext(ctx context.Context, name, language string) (providers.ContextInfo, error) {
	rt, err := s.daemon()
	if err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := rt.CreateContext(ctx, name, language)
	if err != nil {
		return providers.ContextInfo{}, s.err(ctx, err)
	}
	return providers.RuntimeContext(c), nil
}

// RestartContext gives context name a fresh interpreter.
// Errors: ListContexts's; fault.NotFound when there is no such context.
func (s *Sandbox) RestartContext(ctx context.Context, name string) (providers.ContextInfo, error) {
	rt, err := s.daemon()
	if err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := rt.RestartContext(ctx, name)
	if err != nil {
		return providers.ContextInfo{}, s.err(ctx, err)
	}
	return providers.RuntimeContext(c), nil
}

// DeleteContext stops context name and forgets it.
// Errors: ListContexts's; fault.NotFound when there is no such context.
func (s *Sandbox) DeleteContext(ctx context.Context, name string) error {
	rt, err := s.daemon()
	if err != nil {
		return err
	}
	return s.err(ctx, rt.DeleteContext(ctx, name))
}
