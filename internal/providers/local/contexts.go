//go:build unix

package local

import (
	"context"
	"os"
	"path/filepath"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Every sandbox folder has one sandboxd.Runtime inside the gateway process, made on first use
// and closed (its executions ended, its interpreters killed) by Destroy and Close. It runs
// plain executions and stateful contexts and moves files. Contexts do not survive the gateway
// process; a later Attach starts with none, but says so: each runtime records its contexts'
// names in a state file beside the sandbox folders (stateFile), and the first execution in a
// context an earlier process had reports ExitStatus.ContextReset (the domain's notice that
// its variables are gone) instead of silently starting afresh.

var _ providers.Contexts = (*Sandbox)(nil)

// runtime returns the runtime of sandbox folder id, making it on first use.
func (p *Provider) runtime(id string) (*sandboxd.Runtime, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fault.New(fault.Gone, "%s: the provider is closed", TypeName)
	}
	if rt, ok := p.runtimes[id]; ok {
		return rt, nil
	}
	rt, err := sandboxd.New(sandboxd.Options{
		Workspace:  id,
		Env:        p.environ(id),
		Python:     p.python,
		Bash:       p.bash,
		KillGrace:  p.killGrace(),
		DrainDelay: p.drainDelay(),
		Cgroups:    p.cgroups,
		StateFile:  p.stateFile(id),
		Logger:     p.logger,
	})
	if err != nil {
		return nil, err
	}
	if p.runtimes == nil {
		p.runtimes = map[string]*sandboxd.Runtime{}
	}
	p.runtimes[id] = rt
	return rt, nil
}

// contextStateDir is the folder, in the workdir beside the sandbox folders, of their runtimes'
// state files (never a sandbox: its name lacks SandboxPrefix).
const contextStateDir = ".contexts"

// stateFile is sandbox folder id's context state file ("" when its folder cannot be made:
// then contexts lost with the gateway go unreported, as before).
func (p *Provider) stateFile(id string) string {
	dir := filepath.Join(p.workdir, contextStateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		p.logger.Warn("local_subprocess: cannot keep a record of contexts; contexts lost with the gateway will not be reported", "dir", dir, "err", err)
		return ""
	}
	return filepath.Join(dir, filepath.Base(id)+".json")
}

// current reports whether rt is still the runtime of sandbox folder id (Destroy and Close end
// it).
func (p *Provider) current(id string, rt *sandboxd.Runtime) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runtimes[id] == rt
}

// closeRuntime ends the executions and contexts of sandbox folder id, if any.
func (p *Provider) closeRuntime(id string) {
	p.mu.Lock()
	rt := p.runtimes[id]
	delete(p.runtimes, id)
	p.mu.Unlock()
	if rt != nil {
		_ = rt.Close()
	}
}

// Close ends every running execution (it returns fault.Gone) and every context's
// interpreter. Sandbox folders stay. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	rts := p.runtimes
	p.runtimes, p.closed = nil, true
	p.mu.Unlock()
	for _, rt := range rts {
		_ = rt.Close()
	}
	return nil
}

// ListContexts lists the sandbox's contexts, sorted by name.
func (s *Sandbox) ListContexts(context.Context) ([]providers.ContextInfo, error) {
	rt, err := s.runtime()
	if err != nil {
		return nil, err
	}
	list := rt.ListContexts()
	out := make([]providers.ContextInfo, len(list))
	for i, c := range list {
		out[i] = providers.RuntimeContext(c)
	}
	return out, nil
}

// CreateContext starts context name for language (python or bash).
func (s *Sandbox) CreateContext(_ context.Context, name, language string) (providers.ContextInfo, error) {
	rt, err := s.runtime()
	if err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := rt.CreateContext(name, language)
	return providers.RuntimeContext(c), err
}

// RestartContext gives context name a fresh interpreter.
func (s *Sandbox) RestartContext(_ context.Context, name string) (providers.ContextInfo, error) {
	rt, err := s.runtime()
	if err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := rt.RestartContext(name)
	return providers.RuntimeContext(c), err
}

// DeleteContext stops context name and forgets it.
func (s *Sandbox) DeleteContext(_ context.Context, name string) error {
	rt, err := s.runtime()
	if err != nil {
		return err
	}
	return rt.DeleteContext(name)
}

// environ is the base environment of the programs of sandbox folder workspace: PATH (the
// interpreter's folder, then the gateway's PATH), HOME and TMPDIR set to the workspace,
// LANG=C.UTF-8 and PYTHONUNBUFFERED=1; never the gateway's own environment. The runtime adds
// PWD and each execution's variables.
func (p *Provider) environ(workspace string) []string {
	return []string{
		"HOME=" + workspace,
		"LANG=C.UTF-8",
		"PATH=" + p.pathEnv,
		"PYTHONUNBUFFERED=1",
		"TMPDIR=" + workspace,
	}
}
