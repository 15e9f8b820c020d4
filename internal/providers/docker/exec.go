package docker

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

// Exec runs spec to completion through the container's sandboxd (internal/sandboxd/doc.go has
// the semantics: a session per execution, the whole tree killed on timeout or cancel,
// 128+n for signals, bounded output, OOM reporting) and returns how it ended; a non-zero exit
// is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.Capability
// for a context in a sandbox without a sandboxd daemon (an attach_to target); sandboxd's
// fault kinds (fault.Policy or fault.NotFound for a working folder that escapes or is
// missing); fault.Gone when the container no longer exists or does not run; fault.Conflict
// on a closed handle; ctx.Err() (with the status of the killed program) when ctx ends first.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := ctx.Err(); err != nil {
		return providers.ExitStatus{}, err
	}
	if spec.Context != "" && !s.daemon {
		return providers.ExitStatus{}, fault.Unsupported(TypeName, "stateful")
	}
	req, err := providers.RuntimeRequest(spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	if !s.daemon {
		req.ID = "" // a connection's own runtime ends with it: nothing could be held
	}
	return s.run(ctx, req, spec.Output)
}

// InstallPackages runs `python3 -m pip install --no-input -- <packages>` in the container,
// with no time limit but ctx; in a container the gateway started (non-root, read-only root
// file system) with --user, into the user's site-packages under the workspace (HOME). A failed
// installation is a status, never an error. Package names must not be empty or start with
// "-" (fault.Validation), so none can pass pip an option.
func (s *Sandbox) InstallPackages(ctx context.Context, packages []string, out providers.Output) (providers.ExitStatus, error) {
	if len(packages) == 0 {
		return providers.ExitStatus{}, fault.New(fault.Validation, "give at least one package to install")
	}
	for _, pkg := range packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") || strings.ContainsAny(pkg, "\x00\n\r") {
			return providers.ExitStatus{}, fault.New(fault.Validation, "invalid package name %q", pkg)
		}
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	argv := []string{"python3", "-m", "pip", "install", "--no-input", "--disable-pip-version-check"}
	if s.daemon {
		argv = append(argv, "--user")
	}
	argv = append(append(argv, "--"), packages...)
	return s.run(ctx, sandboxd.ExecRequest{Argv: argv, Env: map[string]string{
		"PIP_ROOT_USER_ACTION":      "ignore",
		"PIP_NO_CACHE_DIR":          "1", // no cache in the workspace (HOME)
		"PIP_BREAK_SYSTEM_PACKAGES": "1", // the sandbox is disposable: no Debian "externally managed" refusal
	}}, out)
}

func (s *Sandbox) run(ctx context.Context, req sandboxd.ExecRequest, out providers.Output) (providers.ExitStatus, error) {
	res, err := s.rt.Exec(ctx, req, providers.RuntimeStreams(out))
	st := providers.RuntimeStatus(res)
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(err, fault.ErrLeftRunning) {
				return st, err // the gateway stops; sandboxd holds the execution for its adopter
			}
			return st, ctx.Err()
		}
		return st, s.rtErr(err)
	}
	if res.OOMKilled && out.Stderr != nil {
		_, _ = io.WriteString(out.Stderr, oomNotice)
		s.p.log.Warn("the kernel's OOM killer ended a program in a sandbox", "sandbox_id", s.id)
	}
	return st, nil
}

// rtErr classifies a sandboxd error: a request sandboxd never served (it cannot be reached,
// or wants a token this handle does not hold: a restarted container) forgets the kept client
// and carries providers.ErrUnreached; other fault kinds stand; anything else (a connection
// that broke) means the sandbox went away or is unreachable.
func (s *Sandbox) rtErr(err error) error {
	if errors.Is(err, remote.ErrUnreachable) {
		s.p.forgetClient(s.id)
		return fault.Wrap(fault.Provision, errors.Join(providers.ErrUnreached, err), "%s: sandbox '%s' could not be reached", TypeName, s.id)
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	s.p.forgetClient(s.id)
	return fault.Wrap(fault.Provision, err, "%s: sandboxd in sandbox '%s' failed", TypeName, s.id)
}

// ListContexts lists the sandbox's stateful contexts.
func (s *Sandbox) ListContexts(ctx context.Context) ([]providers.ContextInfo, error) {
	if err := s.contextsUsable(); err != nil {
		return nil, err
	}
	list, err := s.rt.ListContexts(ctx)
	if err != nil {
		return nil, s.rtErr(err)
	}
	out := make([]providers.ContextInfo, len(list))
	for i, c := range list {
		out[i] = providers.RuntimeContext(c)
	}
	return out, nil
}

// CreateContext starts context name for language.
func (s *Sandbox) CreateContext(ctx context.Context, name, language string) (providers.ContextInfo, error) {
	if err := s.contextsUsable(); err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := s.rt.CreateContext(ctx, name, language)
	if err != nil {
		return providers.ContextInfo{}, s.rtErr(err)
	}
	return providers.RuntimeContext(c), nil
}

// RestartContext gives context name a fresh interpreter.
func (s *Sandbox) RestartContext(ctx context.Context, name string) (providers.ContextInfo, error) {
	if err := s.contextsUsable(); err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := s.rt.RestartContext(ctx, name)
	if err != nil {
		return providers.ContextInfo{}, s.rtErr(err)
	}
	return providers.RuntimeContext(c), nil
}

// DeleteContext stops context name.
func (s *Sandbox) DeleteContext(ctx context.Context, name string) error {
	if err := s.contextsUsable(); err != nil {
		return err
	}
	if err := s.rt.DeleteContext(ctx, name); err != nil {
		return s.rtErr(err)
	}
	return nil
}

// contextsUsable: contexts live in a sandboxd daemon, which attach_to targets lack.
func (s *Sandbox) contextsUsable() error {
	if err := s.usable(); err != nil {
		return err
	}
	if !s.daemon {
		return fault.Unsupported(TypeName, "stateful")
	}
	return nil
}

// Reattach follows again execution id, held by the container's sandboxd (it was started with
// ExecSpec.ID by a gateway that has since stopped); see providers.Reattacher.
func (s *Sandbox) Reattach(ctx context.Context, id string, out providers.Output) (providers.ExitStatus, error) {
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if !s.daemon {
		return providers.ExitStatus{}, fault.New(fault.NotFound, "%s: sandbox '%s' runs no sandboxd of its own, which alone could hold execution '%s'", TypeName, s.id, id)
	}
	st, res, err := providers.ReattachRuntime(ctx, s.rt, id, out, remote.ErrStopped, s.rtErr)
	if err != nil {
		return st, err
	}
	if res.OOMKilled && out.Stderr != nil {
		_, _ = io.WriteString(out.Stderr, oomNotice)
	}
	return st, nil
}
