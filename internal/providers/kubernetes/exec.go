package kubernetes

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Exec runs spec to completion in the pod's sandboxd (see the package doc) and returns how
// it ended; a non-zero exit is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); sandboxd's
// (fault.Policy or fault.NotFound for a working folder that escapes or is missing,
// fault.Validation); fault.Gone when the pod is gone or Destroy ran meanwhile; fault.Conflict
// on a closed handle; fault.Forbidden when the identity may not use pods/exec;
// fault.Provision when sandboxd cannot be reached; ctx.Err() when ctx ends first (the
// program is then killed in the pod).
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
	req, err := providers.RuntimeRequest(spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	return s.run(ctx, req, spec.Output)
}

// InstallPackages runs `python3 -m pip install --user --no-input -- <packages>` in the pod
// (the root file system is read-only; packages go under HOME, the workspace), with no time
// limit but ctx. A failed installation is a status, never an error. Package names must not be
// empty or start with "-" (fault.Validation), so none can pass pip an option.
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
	argv := append([]string{"python3", "-m", "pip", "install", "--user", "--no-input", "--disable-pip-version-check", "--"}, packages...)
	return s.run(ctx, sandboxd.ExecRequest{Argv: argv, Env: map[string]string{
		"PIP_BREAK_SYSTEM_PACKAGES": "1", // the sandbox is disposable: no "externally managed" refusal
		"PIP_NO_CACHE_DIR":          "1",
	}}, out)
}

// run sends one execution to sandboxd. Destroy cancels it (fault.Gone).
func (s *Sandbox) run(ctx context.Context, req sandboxd.ExecRequest, out providers.Output) (providers.ExitStatus, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	untrack := s.p.track(s.id, cancel)
	defer untrack()
	res, err := s.rt().Exec(rctx, req, providers.RuntimeStreams(out))
	st := providers.RuntimeStatus(res)
	if errors.Is(context.Cause(rctx), errDestroyed) {
		return providers.ExitStatus{}, fault.New(fault.Gone, "%s: sandbox '%s' was destroyed during the execution", TypeName, s.id)
	}
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(err, fault.ErrLeftRunning) {
				return st, err // the gateway stops; sandboxd holds the execution for its adopter
			}
			return st, ctx.Err()
		}
		return st, s.rtErr(err)
	}
	s.p.servedBy(s, true)
	if res.OOMKilled {
		s.p.log.Warn("the kernel's OOM killer ended a program in a sandbox", "sandbox_id", s.id)
	}
	return st, nil
}

// ListContexts lists the sandbox's stateful contexts, sorted by name.
func (s *Sandbox) ListContexts(ctx context.Context) ([]providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	list, err := s.rt().ListContexts(ctx)
	if err != nil {
		return nil, s.ctxErr(ctx, err)
	}
	out := make([]providers.ContextInfo, len(list))
	for i, c := range list {
		out[i] = providers.RuntimeContext(c)
	}
	return out, nil
}

// CreateContext starts context name for language (python or bash).
// Errors: fault.Validation for a bad name or language, fault.Conflict when it exists.
func (s *Sandbox) CreateContext(ctx context.Context, name, language string) (providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := s.rt().CreateContext(ctx, name, language)
	if err != nil {
		return providers.ContextInfo{}, s.ctxErr(ctx, err)
	}
	return providers.RuntimeContext(c), nil
}

// RestartContext gives context name a fresh interpreter. Errors: fault.NotFound.
func (s *Sandbox) RestartContext(ctx context.Context, name string) (providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := s.rt().RestartContext(ctx, name)
	if err != nil {
		return providers.ContextInfo{}, s.ctxErr(ctx, err)
	}
	return providers.RuntimeContext(c), nil
}

// DeleteContext stops context name and forgets it. Errors: fault.NotFound.
func (s *Sandbox) DeleteContext(ctx context.Context, name string) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.rt().DeleteContext(ctx, name); err != nil {
		return s.ctxErr(ctx, err)
	}
	return nil
}

func (s *Sandbox) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return s.rtErr(err)
}

// podGone returns a fault.Gone error when pod ns/name no longer exists, is being deleted or
// has ended, and nil otherwise (also when that cannot be told).
func (p *Provider) podGone(ctx context.Context, c *clients, ns, name string) error {
	pod, err := c.core.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fault.New(fault.Gone, "%s: pod %s/%s no longer exists", TypeName, ns, name)
	}
	if err != nil {
		return nil
	}
	return goneErr(pod)
}

// Reattach follows again execution id, held by the pod's sandboxd (it was started with
// ExecSpec.ID by a gateway that has since stopped); see providers.Reattacher.
func (s *Sandbox) Reattach(ctx context.Context, id string, out providers.Output) (providers.ExitStatus, error) {
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	st, _, err := providers.ReattachRuntime(ctx, s.rt(), id, out, remote.ErrStopped, s.rtErr)
	return st, err
}
