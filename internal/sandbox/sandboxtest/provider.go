package sandboxtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// DefaultType is the fake provider's type name unless ProviderOptions.Type says otherwise.
const DefaultType = "fake"

// DefaultCapabilities is what a fake provider declares unless told otherwise: Python code
// (the contract's one mandatory language), files, attach; no shell, no state between
// executions, no policy enforcement, isolation none.
func DefaultCapabilities() providers.Capabilities {
	return providers.Capabilities{
		Isolation: providers.IsolationNone, Languages: []string{"python"}, Files: true, Attach: true, Provisions: true,
	}
}

// ProviderOptions configures a fake provider.
type ProviderOptions struct {
	// Type is the provider's type name; default DefaultType.
	Type string
	// Capabilities are declared and honoured (undeclared operations fail as the contract
	// says); a zero Isolation means DefaultCapabilities(). With Stateful, sandboxes keep
	// named contexts (bookkeeping only: a Program sees Spec.Context).
	Capabilities providers.Capabilities
	// Program runs the executions no Handle, Next or Hold claimed; default Reply(0, "", "").
	Program Program
	// Clock stamps files and contexts; default the system clock.
	Clock sandbox.Clock
}

// Provider is a fake providers.Provider. Its sandboxes live in memory (files included) and
// run Programs instead of processes; it records what it was asked (Calls, Execs) and lets a
// test script executions (SetProgram, Handle, Next, Hold), fail a Create (FailCreate) or a
// Destroy (FailDestroy) or lose a sandbox (Lose). It is safe for concurrent use.
type Provider struct {
	typ  string
	caps providers.Capabilities
	now  func() time.Time

	mu         sync.Mutex
	boxes      map[string]*box
	calls      []Call
	execs      []*Exec
	program    Program
	next       []Program
	handlers   map[string]Program
	createErrs []error
	destroyErr []error            // what the next Destroy calls fail with (FailDestroy)
	peak       map[string]int     // sandbox id → most executions at once
	held       map[string]Program // execution id → what Reattach runs (HoldExecution)
}

// HoldExecution makes the provider's sandboxes hold execution id, as a sandbox runtime holds
// one whose gateway stopped: a later Reattach of id runs prog (once).
func (p *Provider) HoldExecution(id string, prog Program) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[string]Program{}
	}
	p.held[id] = prog
}

var _ providers.Provider = (*Provider)(nil)

// box is one live sandbox.
type box struct {
	id     string
	ws     *workspace
	ctx    context.Context // ends when the sandbox is destroyed or lost
	cancel context.CancelFunc

	// guarded by Provider.mu
	contexts map[string]*providers.ContextInfo
	active   int
}

// Call is one Create, Attach or Destroy the provider received.
type Call struct {
	Op        string // "create", "attach" or "destroy"
	SandboxID string // "" for a failed create
	Principal providers.Principal
	Policy    providers.Policy
	Err       error
}

// Counts are how many calls of each kind the provider received (failed ones included).
type Counts struct {
	Create, Attach, Destroy int
}

// Exec is one execution a sandbox ran (or is running).
type Exec struct {
	SandboxID string
	// Spec is the execution's spec without its Stdin and output writers.
	Spec providers.ExecSpec
	// Principal is whom the sandbox handle was created or attached for.
	Principal providers.Principal
	// Finished is set once Exec returned, with its Status and Err.
	Finished bool
	Status   providers.ExitStatus
	Err      error
	// Cancelled: the execution's ctx had ended when it returned (cancelled or past the
	// caller's deadline).
	Cancelled bool
}

var sandboxSeq atomic.Int64 // sandbox ids are unique across providers

// NewProvider returns a fake provider.
func NewProvider(opts ProviderOptions) *Provider {
	p := &Provider{
		typ: opts.Type, caps: opts.Capabilities, program: opts.Program, now: time.Now,
		boxes: map[string]*box{}, handlers: map[string]Program{}, peak: map[string]int{},
	}
	if p.typ == "" {
		p.typ = DefaultType
	}
	if p.caps.Isolation == "" {
		p.caps = DefaultCapabilities()
	}
	if p.program == nil {
		p.program = Reply(0, "", "")
	}
	if opts.Clock != nil {
		p.now = opts.Clock.Now
	}
	return p
}

// Type returns the provider's type name.
func (p *Provider) Type() string { return p.typ }

// Capabilities returns what the provider declares.
func (p *Provider) Capabilities() providers.Capabilities { return p.caps }

// Create provisions an empty sandbox, or fails with the error FailCreate queued.
func (p *Provider) Create(ctx context.Context, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.createErrs) > 0 {
		err := p.createErrs[0]
		p.createErrs = p.createErrs[1:]
		p.calls = append(p.calls, Call{Op: "create", Principal: pr, Policy: pol, Err: err})
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		p.calls = append(p.calls, Call{Op: "create", Principal: pr, Policy: pol, Err: err})
		return nil, fault.Wrap(fault.Provision, err, "%s: create", p.typ)
	}
	bctx, cancel := context.WithCancel(context.Background())
	b := &box{
		id: fmt.Sprintf("%s-%d", p.typ, sandboxSeq.Add(1)), ws: newWorkspace(p.now), ctx: bctx, cancel: cancel,
		contexts: map[string]*providers.ContextInfo{},
	}
	p.boxes[b.id] = b
	p.calls = append(p.calls, Call{Op: "create", SandboxID: b.id, Principal: pr, Policy: pol})
	return &fakeSandbox{p: p, b: b, pr: pr}, nil
}

// Attach reconnects to sandbox id: fault.Gone when it was destroyed, lost or never
// existed; fault.Capability without the attach capability.
func (p *Provider) Attach(_ context.Context, id string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	b, ok := p.boxes[id]
	switch {
	case !p.caps.Attach:
		err = fault.Unsupported(p.typ, "attach")
	case !ok:
		err = fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", p.typ, id)
	}
	p.calls = append(p.calls, Call{Op: "attach", SandboxID: id, Principal: pr, Policy: pol, Err: err})
	if err != nil {
		return nil, err
	}
	return &fakeSandbox{p: p, b: b, pr: pr}, nil
}

// Destroy removes sandbox id, ending its running executions (they fail with fault.Gone).
// Idempotent.
func (p *Provider) Destroy(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Op: "destroy", SandboxID: id})
	if len(p.destroyErr) > 0 {
		err := p.destroyErr[0]
		p.destroyErr = p.destroyErr[1:]
		return err // the sandbox stays, as with an engine that did not do it
	}
	p.drop(id)
	return nil
}

// FailDestroy makes the next n Destroy calls fail with err, leaving their sandboxes as they
// are (an engine that does not answer, or refuses).
func (p *Provider) FailDestroy(n int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.destroyErr = append(p.destroyErr, err)
	}
}

// drop ends sandbox id. Call with mu held.
func (p *Provider) drop(id string) bool {
	b, ok := p.boxes[id]
	if ok {
		b.cancel()
		delete(p.boxes, id)
	}
	return ok
}

// Lose makes sandbox id vanish without a Destroy, as a container removed behind the
// gateway's back: Attach then fails with fault.Gone, and so do its handles' operations and
// running executions. It reports whether the sandbox existed.
func (p *Provider) Lose(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop(id)
}

// FailCreate makes the next Create fail with err (queued: one Create per call).
func (p *Provider) FailCreate(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.createErrs = append(p.createErrs, err)
}

// SetProgram sets the program of executions that no Handle, Next or Hold claims.
func (p *Provider) SetProgram(prog Program) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.program = prog
}

// Handle runs prog for every execution whose Code or Command is text (before Next's queue).
func (p *Provider) Handle(text string, prog Program) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handlers[text] = prog
}

// Next queues programs for the next executions, one each, in order.
func (p *Provider) Next(progs ...Program) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = append(p.next, progs...)
}

// Hold queues a Gate for the next execution and returns it. "Next" is the next execution to
// reach the provider, which, for executions the domain runs in the background, need not be
// the next one submitted: wait for the gate's Started before another execution may reach
// the provider, or bind the gate to a program text with Handle(text, gate.Program).
func (p *Provider) Hold() *Gate {
	g := NewGate()
	p.Next(g.Program)
	return g
}

// pick chooses the program of an execution. Call with mu held.
func (p *Provider) pick(spec providers.ExecSpec) Program {
	text := spec.Code
	if spec.Command != "" {
		text = spec.Command
	}
	if prog, ok := p.handlers[text]; ok {
		return prog
	}
	if len(p.next) > 0 {
		prog := p.next[0]
		p.next = p.next[1:]
		return prog
	}
	return p.program
}

// Calls returns the Create, Attach and Destroy calls received, in order.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// Counts counts the calls received by kind.
func (p *Provider) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c Counts
	for _, call := range p.calls {
		switch call.Op {
		case "create":
			c.Create++
		case "attach":
			c.Attach++
		case "destroy":
			c.Destroy++
		}
	}
	return c
}

// Created returns the ids of the sandboxes created, in order.
func (p *Provider) Created() []string { return p.ids("create") }

// Destroyed returns the ids Destroy was called with, in order.
func (p *Provider) Destroyed() []string { return p.ids("destroy") }

func (p *Provider) ids(op string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.calls {
		if c.Op == op && c.SandboxID != "" {
			out = append(out, c.SandboxID)
		}
	}
	return out
}

// Live returns the ids of the sandboxes that exist now, sorted.
func (p *Provider) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []string{}
	for id := range p.boxes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Execs returns the executions so far in the order they started.
func (p *Provider) Execs() []Exec {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Exec, len(p.execs))
	for i, e := range p.execs {
		out[i] = *e
	}
	return out
}

// MaxParallel is the most executions that ran at once in sandbox id (0 if it ran none),
// also after it is gone.
func (p *Provider) MaxParallel(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak[id]
}
