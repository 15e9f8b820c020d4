package sdadapter

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Config is what a backend tells the adapter about one sandbox.
type Config struct {
	// Subject names the provider in errors and capability faults (its type name). Required.
	Subject string
	// ID is the sandbox's id, as the provider gives it (ID, and the key of Running).
	// Required.
	ID string
	// Where names the sandbox in error messages, e.g. "sandbox '<id>'" or "pod ns/name".
	// Default "sandbox '<ID>'".
	Where string
	// CapsFunc returns the provider's capabilities, which executions are checked against
	// (providers.CheckExecSpec). Required.
	CapsFunc func() providers.Capabilities
	// ClientFunc returns the client of the sandbox's sandboxd. It is asked before every call,
	// so a backend may hand out another client meanwhile (one per pod and identity, one made
	// anew after the last broke). Required.
	ClientFunc func() *remote.Client
	// Transient says the sandbox runs no sandboxd daemon of its own: each connection gets a
	// runtime that ends with it (docker's attach_to targets, reached with `sandboxd stdio`).
	// Nothing can then outlive a call — contexts are fault.Capability "stateful", kept
	// executions fault.Capability "background", no execution is held for Reattach — and
	// packages are installed for the whole system rather than with pip's --user.
	Transient bool
	// UnreachedFunc, when set, is told that a request never reached sandboxd
	// (remote.ErrUnreachable): the backend forgets its client or checks it again next time.
	UnreachedFunc func()
	// ServedFunc, when set, is told that sandboxd ran an execution to its end.
	ServedFunc func()
	// BrokenFunc maps an error of the client that is neither a fault nor an unreachable
	// daemon — a connection that broke during the request — onto the backend's fault:
	// fault.Gone when the sandbox is gone (the container or pod was removed, or ended), else
	// fault.Provision. Default: fault.Provision.
	BrokenFunc func(err error) error
	// Running, when set, holds the sandbox's executions while they run, so that the
	// provider's Destroy ends them at once (Running.Stop): they return fault.Gone.
	Running *Running
	// Logger receives the warning of a program the OOM killer ended. Default slog.Default().
	Logger *slog.Logger
}

// Sandbox is a providers.Sandbox (with providers.Contexts, providers.Executions and
// providers.PortDialer) over one sandbox's sandboxd. A backend embeds it in its own handle,
// adding what only it has (snapshots, its identity). It is safe for concurrent use.
type Sandbox struct {
	providers.RuntimeExecutions // kept executions: background processes, open input, terminals

	cfg    Config
	closed atomic.Bool
}

var (
	_ providers.Sandbox    = (*Sandbox)(nil)
	_ providers.Contexts   = (*Sandbox)(nil)
	_ providers.Executions = (*Sandbox)(nil)
	_ providers.PortDialer = (*Sandbox)(nil)
)

// New returns the handle cfg describes.
func New(cfg Config) *Sandbox {
	if cfg.Where == "" {
		cfg.Where = "sandbox '" + cfg.ID + "'"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Sandbox{cfg: cfg}
	s.RuntimeExecutions = providers.RuntimeExecutions{
		Subject: cfg.Subject, Caps: cfg.CapsFunc, Runtime: s.kept, Classify: s.Fault,
	}
	return s
}

// ID returns the sandbox's id (Config.ID).
func (s *Sandbox) ID() string { return s.cfg.ID }

// Close marks the handle closed; the sandbox keeps running for a later Attach
// (docs/semantics.md §3). Idempotent; every other method of a closed handle returns
// fault.Conflict.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	return nil
}

// Usable returns the fault.Conflict error of a closed handle, nil for an open one. Backends
// call it first in the methods they add.
func (s *Sandbox) Usable() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "%s: the handle on %s is closed", s.cfg.Subject, s.cfg.Where)
	}
	return nil
}

// Client returns the sandbox's sandboxd client (Config.ClientFunc), for what a backend adds.
func (s *Sandbox) Client() *remote.Client { return s.cfg.ClientFunc() }

// Fault maps an error of the sandbox's sandboxd client onto the fault it means (see the
// package doc): a request sandboxd never received is fault.Provision wrapping
// providers.ErrUnreached (UnreachedFunc is told); sandboxd's own faults stand; anything else
// is BrokenFunc's answer. nil stays nil.
func (s *Sandbox) Fault(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, remote.ErrUnreachable) {
		if s.cfg.UnreachedFunc != nil {
			s.cfg.UnreachedFunc()
		}
		return fault.Wrap(fault.Provision, errors.Join(providers.ErrUnreached, err), "%s: sandboxd in %s could not be reached", s.cfg.Subject, s.cfg.Where)
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	if s.cfg.BrokenFunc != nil {
		return s.cfg.BrokenFunc(err)
	}
	return fault.Wrap(fault.Provision, err, "%s: sandboxd in %s failed", s.cfg.Subject, s.cfg.Where)
}

// err is Fault for a call under ctx: once ctx ended, its error is ctx.Err() (what the client
// saw is the consequence, not the cause).
func (s *Sandbox) err(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return s.Fault(err)
}

// kept returns the sandboxd of kept executions (providers.RuntimeExecutions.Runtime):
// fault.Conflict on a closed handle, fault.Capability "background" in a Transient sandbox,
// whose runtime ends with its connection.
func (s *Sandbox) kept() (providers.KeptRuntime, error) {
	if err := s.Usable(); err != nil {
		return nil, err
	}
	if s.cfg.Transient {
		return nil, fault.Unsupported(s.cfg.Subject, "background")
	}
	return s.cfg.ClientFunc(), nil
}

// daemon returns the client of a call that needs a sandboxd daemon of the sandbox's own
// (contexts): fault.Conflict on a closed handle, fault.Capability "stateful" in a Transient
// sandbox.
func (s *Sandbox) daemon() (*remote.Client, error) {
	if err := s.Usable(); err != nil {
		return nil, err
	}
	if s.cfg.Transient {
		return nil, fault.Unsupported(s.cfg.Subject, "stateful")
	}
	return s.cfg.ClientFunc(), nil
}
