//go:build unix

package local

import (
	"context"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Stateful contexts run on sandboxd's runtime library inside the gateway process: one
// sandboxd.Runtime per sandbox folder, made on first use and closed (its interpreters killed)
// by Destroy and Close. Contexts do not survive the gateway process; a later Attach starts
// with none.

var _ providers.Contexts = (*Sandbox)(nil)

// runtime returns the context runtime of sandbox folder id, making it on first use.
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
		Env:        p.environ(id, id, nil),
		Python:     p.python,
		Bash:       p.bash,
		KillGrace:  p.killGrace(),
		DrainDelay: p.drainDelay(),
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

// closeRuntime stops the contexts of sandbox folder id, if any.
func (p *Provider) closeRuntime(id string) {
	p.mu.Lock()
	rt := p.runtimes[id]
	delete(p.runtimes, id)
	p.mu.Unlock()
	if rt != nil {
		_ = rt.Close()
	}
}

// Close stops every context's interpreter. Sandbox folders stay. Idempotent.
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

// execContext runs spec (code with a Context) in the sandbox's context runtime.
func (s *Sandbox) execContext(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	rt, err := s.p.runtime(s.id)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	req, err := providers.RuntimeRequest(spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	res, err := rt.Exec(ctx, req, providers.RuntimeStreams(spec.Output))
	st := providers.RuntimeStatus(res)
	if err != nil && ctx.Err() != nil {
		return st, ctx.Err()
	}
	return st, err
}

// ListContexts lists the sandbox's contexts, sorted by name.
func (s *Sandbox) ListContexts(context.Context) ([]providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	rt, err := s.p.runtime(s.id)
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
	if err := s.usable(); err != nil {
		return providers.ContextInfo{}, err
	}
	rt, err := s.p.runtime(s.id)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := rt.CreateContext(name, language)
	return providers.RuntimeContext(c), err
}

// RestartContext gives context name a fresh interpreter.
func (s *Sandbox) RestartContext(_ context.Context, name string) (providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return providers.ContextInfo{}, err
	}
	rt, err := s.p.runtime(s.id)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := rt.RestartContext(name)
	return providers.RuntimeContext(c), err
}

// DeleteContext stops context name and forgets it.
func (s *Sandbox) DeleteContext(_ context.Context, name string) error {
	if err := s.usable(); err != nil {
		return err
	}
	rt, err := s.p.runtime(s.id)
	if err != nil {
		return err
	}
	return rt.DeleteContext(name)
}
