package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// The lease is the one path from an operation to its session's sandbox: it takes the
// operation's place among the session's other work, re-reads the session, wakes a paused
// one (or refuses), restores a parked one, resets an idle one, attaches to its sandbox or
// creates one, and records the binding. Every operation that reaches a session's sandbox
// takes one (exec.go, processes.go, files.go, contexts.go, snapshots.go, preview.go,
// adopt.go); reachSandbox is the only function that calls a provider's Attach or Create for a
// session (TestOneLease pins it).
//
// One ordering mechanism stands behind leaseOpts.order: the session's line (takeTurn), whose
// tickets the store grants one at a time in arrival order across replicas. An execution takes
// its ticket with its task row at submission (store.BeginTask, leaseOpts.turn) and waits for
// it in its lease; every other operation takes one when its lease does (store.LockSession).

// leaseOrder is how an operation takes its place among its session's other work.
type leaseOrder int

const (
	// orderNone: no waiting and no re-read — the session is used as the caller read it,
	// neither woken nor restored (a running sandbox's reads, a preview's dial, per_call
	// executions).
	orderNone leaseOrder = iota
	// orderIfParked: no waiting for running work (reads, contexts, processes, previews),
	// except that a paused session is woken (or fault.Paused) and a parked one restored
	// under the session lock first; the lock is given back before lease returns.
	orderIfParked
	// orderReread: no waiting, but the session is read again (adoption of a background
	// process, which gave its session's line up when it started).
	orderReread
	// orderLock: the operation's turn in the session's line (takeTurn with leaseOpts.turn),
	// held until Release — or, for an execution placed at submission, until its completion
	// is recorded (executions, file writes and deletes, context creation, snapshots,
	// adoption of an execution).
	orderLock
)

// leaseReach is what a lease reaches.
type leaseReach int

const (
	// reachNone readies the session only (woken, restored): the lease holds no sandbox.
	reachNone leaseReach = iota
	// reachAttach attaches to the session's sandbox when it has one (Lease.Sandbox nil when
	// it has none); one that vanished is an error of kind fault.Gone.
	reachAttach
	// reachCreate attaches, or creates a sandbox when the session has none — or, for a
	// managed one, when it vanished (Lease.Healed says so).
	reachCreate
)

// leaseBind is when a lease records the session's binding (store.UpdateSessionBackend).
type leaseBind int

const (
	bindNever leaseBind = iota
	// bindChanged records it when the sandbox, the status or a pending notice changed (an
	// execution: its completion records the use).
	bindChanged
	// bindAlways records it, and the use, every time (writes, context creation).
	bindAlways
)

// leaseOpts say how an operation takes its session's sandbox.
type leaseOpts struct {
	order leaseOrder
	// turn is an execution's place in the session's line (orderLock; the zero turn: an
	// operation that takes its place when its lease does).
	turn  turn
	reach leaseReach
	bind  leaseBind
	// refuse: a closed session, or a paused one the profile does not resume on use, turns
	// the operation away as a refusal (an execution: nothing ran).
	refuse bool
	// resetIdle applies idle expiry on touch and delivers a pending notice (Lease.Notice).
	resetIdle bool
	// noWake leaves a paused session paused (snapshots capture it as it is); noRestore
	// leaves a parked one parked (adoption: its session runs).
	noWake, noRestore bool
	// ephemeral: a per_call sandbox, destroyed at Release.
	ephemeral bool
	// agent: the gateway acts for itself (adoption), not for the caller.
	agent bool
	// patience: an attach that fails other than fault.Gone is tried again, pausing 250 ms
	// doubling while the pause stays within patience (adoption: a busy engine).
	patience time.Duration
}

// Lease is an operation's hold on its session's sandbox. Release it when done.
type Lease struct {
	// Session is the session as the lease left it (bound to Sandbox).
	Session store.Session
	// Sandbox is the handle, nil with reachNone or when the session has none (reachAttach).
	Sandbox providers.Sandbox
	// Notice is what the caller is told of the session: a pending notice or an idle reset
	// (leaseOpts.resetIdle), then a wake.
	Notice string
	// Healed says a vanished sandbox was recreated, or a parked one restored without its
	// snapshot.
	Healed string

	room    *leases // the lease room that took it
	prof    *Profile
	pp      providers.Principal
	opts    leaseOpts
	release func()
	made    []string        // per_call sandboxes to destroy at Release
	ctx     context.Context // the lease's (destroying them outlives its cancellation)
}

// leases is the lease room: the one path from an operation to its session's sandbox (above).
// It is Service's, reached with Service.leases; the leases it takes keep it.
type leases struct{ s *Service }

// leases is the lease room of s.
func (s *Service) leases() *leases { return &leases{s: s} }

// orderErr marks a failure to take the operation's place (the session lock) or to re-read
// the session under it: nothing was reached.
type orderErr struct{ error }

func (e orderErr) Unwrap() error { return e.error }

// lease takes session sess (as the caller resolved it, for p, in prof) for an operation as
// opts say. Errors: the order's (orderErr: the lock, the re-read), wake's (fault.Paused,
// as a refusal with opts.refuse), reachSandbox's (fault.Gone for a vanished sandbox that is not
// recreated, else classified under fault.Provision), the binding's.
func (ls *leases) lease(ctx context.Context, p principal.Principal, prof *Profile, sess store.Session, opts leaseOpts) (_ *Lease, err error) {
	l := &Lease{Session: sess, room: ls, prof: prof, pp: providerPrincipal(prof, p), opts: opts, release: func() {}, ctx: ctx}
	if opts.agent {
		l.pp = agentPrincipal
	}
	defer func() {
		if err != nil {
			l.Release()
		}
	}()
	if err := l.take(ctx); err != nil {
		return nil, err
	}
	if l.opts.order != orderNone {
		if err := l.ready(ctx); err != nil {
			return nil, err
		}
	}
	if err := l.renew(ctx); err != nil {
		return nil, err
	}
	if opts.reach == reachNone && l.Sandbox != nil {
		_ = l.Sandbox.Close() // a parked session restored: its sandbox is in place
		l.Sandbox = nil
	}
	if l.opts.order == orderIfParked {
		l.release() // the lock was for waking or restoring only
		l.release = func() {}
	}
	return l, nil
}

// ordered reports whether the lease re-read the session holding its place.
func (l *Lease) ordered() bool { return l.opts.order != orderNone && l.opts.order != orderReread }

// take takes the lease's place among the session's work and re-reads the session.
func (l *Lease) take(ctx context.Context) error {
	s, id := l.room.s, l.Session.ID
	switch l.opts.order {
	case orderNone:
		return nil
	case orderLock:
		sess, release, err := l.room.takeTurn(ctx, id, l.opts.turn)
		if err != nil {
			return err
		}
		l.Session, l.release = sess, release
		return nil
	case orderIfParked:
		sess := l.Session
		if sess.PausedAt.IsZero() && sess.ParkedSnapshot == "" {
			l.opts.order = orderNone // nothing to wake or restore: as it is
			return nil
		}
		if !sess.PausedAt.IsZero() && !sess.PausedIdle && !l.prof.AutoResume {
			return pausedErr(sess.ID) // no lock needed to refuse
		}
	}
	if l.opts.order == orderReread {
		sess, err := s.store.GetSession(ctx, id)
		if err != nil {
			return orderErr{sessionErr(err, id)}
		}
		l.Session = sess
		return nil
	}
	sess, release, err := l.room.takeTurn(ctx, id, turn{})
	if err != nil {
		return err
	}
	l.Session, l.release = sess, release
	return nil
}

// turn is an execution's place in its session's line, for takeTurn.
type turn struct {
	// task is the execution's task id ("": an operation that is no execution).
	task string
	// place was taken with the task row at submission (store.BeginTask; the zero Place: none,
	// a queued delivery takes its place when it runs). first: it already holds the line, and
	// sess is the session as read holding it.
	place store.Place
	first bool
	sess  store.Session
}

// takeTurn is the domain's one way to take an operation's place in session id's line and
// wait for its turn (docs/semantics.md §9 step 5: executions and writes of one session run
// one at a time, in arrival order, across replicas — tickets in the store's session lock
// line). An execution placed at submission (t.place) waits for that place and keeps the line
// until its completion is recorded (the returned release does nothing); any other operation
// takes a place now and gives it back with release. It returns the session as it stands
// holding the line (an execution's task marked running). Errors are orderErr; a session
// destroyed meanwhile is fault.NotFound.
func (ls *leases) takeTurn(ctx context.Context, id string, t turn) (_ store.Session, release func(), err error) {
	s := ls.s
	gone := func(err error) error {
		if t.task != "" && errors.Is(err, store.ErrNotFound) {
			return orderErr{fault.New(fault.NotFound, "sandbox session '%s' was destroyed while this operation waited", id)}
		}
		return orderErr{sessionErr(err, id)}
	}
	if t.place.Token != "" {
		if t.first {
			return t.sess, func() {}, nil
		}
		sess, err := s.store.AwaitTurn(ctx, t.place, t.task, s.now)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return store.Session{}, nil, gone(err)
		case err != nil && ctx.Err() == nil:
			return store.Session{}, nil, orderErr{classifyAs(err, fault.Broker, "could not take the session lock")}
		case err != nil:
			return store.Session{}, nil, orderErr{err}
		}
		return sess, func() {}, nil
	}
	unlock, err := s.sessions.Lock(ctx, id)
	if err != nil {
		return store.Session{}, nil, orderErr{err}
	}
	var sess store.Session
	if t.task != "" {
		sess, err = s.store.StartTaskInSession(ctx, t.task, id, s.now())
	} else {
		sess, err = s.store.GetSession(ctx, id)
	}
	if err != nil {
		unlock()
		return store.Session{}, nil, gone(err)
	}
	return sess, unlock, nil
}

// ready makes the session, holding its place, take the operation: not closed (opts.refuse),
// woken, reset if idle.
func (l *Lease) ready(ctx context.Context) error {
	s, prof, sess := l.room.s, l.prof, &l.Session
	if l.opts.refuse && sess.Status == store.SessionClosed {
		return refused(closedErr(*sess))
	}
	woke := ""
	if !l.opts.noWake && l.opts.order != orderReread {
		var err error
		if woke, err = s.park.Wake(ctx, prof, sess); err != nil {
			if l.opts.refuse && fault.KindOf(err) == fault.Paused {
				err = refused(err)
			}
			return err
		}
	}
	if l.opts.resetIdle {
		notice, err := l.room.resetIfIdle(ctx, prof, sess)
		if err != nil {
			return err
		}
		l.Notice = notice
	}
	l.Notice = joinNotice(l.Notice, woke)
	return nil
}

// resetIfIdle applies idle expiry on touch (docs/semantics.md §8): a session with a sandbox unused for
// longer than its profile's idle_timeout loses that sandbox and the caller gets a notice —
// when its idle_action is reset: a profile that parks idle sessions keeps a sandbox the
// sweeper has not parked yet as it is. A notice left by the idle sweeper is delivered here
// too. Call holding the lease's place, after wake.
func (ls *leases) resetIfIdle(ctx context.Context, prof *Profile, sess *store.Session) (string, error) {
	s := ls.s
	notice := sess.PendingNotice
	if sess.SandboxID != "" && sess.PausedAt.IsZero() && idleAction(prof) == IdleReset && s.now().Sub(sess.LastUsedAt) > prof.IdleTimeout {
		_ = s.sessions.DestroyBackend(ctx, prof, sess.ID, sess.SandboxID)
		notice = idleNotice(prof, sess.ID)
		if _, err := s.store.ResetSession(ctx, sess.ID, "", s.now(), sess.SandboxID); err != nil {
			return "", err
		}
		sess.SandboxID = ""
	}
	return notice, nil
}

// renew reaches the session's sandbox (again, after a handle that could not be reached:
// providers.ErrUnreached) under the lease's place, and records the binding as opts.bind
// says. It closes the handle it replaces.
func (l *Lease) renew(ctx context.Context) error {
	s := l.room.s
	if l.Sandbox != nil {
		_ = l.Sandbox.Close()
		l.Sandbox = nil
	}
	bound := l.Session.SandboxID
	sb, healed, err := l.room.reachSandbox(ctx, l)
	if err != nil || sb == nil {
		return err
	}
	l.Sandbox, l.Healed = sb, healed
	if l.opts.ephemeral {
		l.made = append(l.made, sb.ID())
		return nil
	}
	sess := &l.Session
	switch l.opts.bind {
	case bindChanged:
		// Unchanged bindings need no write: last use is recorded with the completion
		// (FinishTask touches the session), and the idle sweeper skips sessions with
		// unfinished tasks.
		if bound == sb.ID() && sess.Status == "active" && sess.PendingNotice == "" {
			return nil
		}
	case bindNever:
		return nil
	}
	if err := s.store.UpdateSessionBackend(ctx, sess.ID, sb.ID(), "active", s.now()); err != nil {
		return err
	}
	sess.Status, sess.PendingNotice = "active", ""
	return nil
}

// reachSandbox attaches to l's session's sandbox or creates one (seed _acquire): the one call of a
// provider's Attach or Create for a session. A managed sandbox that vanished is recreated
// empty with a notice (reachCreate); an attached environment never is. A session parked in
// a snapshot gets its sandbox restored from it (unpark), unless the lease is unordered or
// opts.noRestore. With reachAttach, a session without a sandbox gives a nil handle.
func (ls *leases) reachSandbox(ctx context.Context, l *Lease) (providers.Sandbox, string, error) {
	s := ls.s
	prof, sess, pp := l.prof, &l.Session, l.pp
	create := func(ctx context.Context) (sb providers.Sandbox, err error) {
		pol, err := s.sessionPolicy(ctx, prof, *sess)
		if err != nil {
			return nil, err
		}
		err = s.obs.Call(ctx, prof, "create", func(ctx context.Context) (err error) {
			sb, err = prof.Provider.Create(ctx, pp, pol)
			return err
		})
		if err != nil {
			return nil, classify(err, fault.Provision)
		}
		return sb, nil
	}
	if sess.SandboxID == "" && sess.ParkedSnapshot != "" && l.ordered() && !l.opts.noRestore {
		return s.park.Unpark(ctx, prof, sess, pp, create)
	}
	if sess.SandboxID == "" || l.opts.reach == reachNone {
		if l.opts.reach != reachCreate {
			return nil, "", nil
		}
		sb, err := create(ctx)
		if err != nil {
			return nil, "", err
		}
		sess.SandboxID = sb.ID()
		return sb, "", nil
	}
	var sb providers.Sandbox
	pol, err := s.sessionPolicy(ctx, prof, *sess)
	if err != nil {
		return nil, "", err
	}
	attach := func(ctx context.Context) (err error) {
		sb, err = prof.Provider.Attach(ctx, sess.SandboxID, pp, pol)
		return err
	}
	err = l.patiently(ctx, attach)
	if err == nil {
		return sb, "", nil
	}
	if fault.KindOf(err) != fault.Gone {
		return nil, "", classify(err, fault.Provision)
	}
	if l.opts.reach != reachCreate {
		return nil, "", err
	}
	if prof.Attached() {
		return nil, "", fault.New(fault.Gone, "attached environment '%s' (profile '%s') is unreachable; not recreating — attached environments are never provisioned by the gateway", sess.SandboxID, prof.Name)
	}
	if sb, err = create(ctx); err != nil {
		return nil, "", err
	}
	sess.SandboxID = sb.ID()
	return sb, fmt.Sprintf("the sandbox behind session '%s' no longer existed and was recreated empty; its previous workspace state is gone", sess.ID), nil
}

// patiently calls attach (as a provider call: Service.call), and again while it fails other
// than fault.Gone and opts.patience allows: pausing 250 ms, doubling, while the pause stays
// within patience.
func (l *Lease) patiently(ctx context.Context, attach func(context.Context) error) error {
	s := l.room.s
	err := s.obs.Call(ctx, l.prof, "attach", attach)
	for wait := 250 * time.Millisecond; err != nil && ctx.Err() == nil && fault.KindOf(err) != fault.Gone && wait <= l.opts.patience; wait *= 2 {
		s.log.Info("a sandbox did not answer; trying again", "session_id", l.Session.ID, "err", err)
		if sleep(ctx, s.clock, wait) {
			err = s.obs.Call(ctx, l.prof, "attach", attach)
		}
	}
	return err
}

// Keep hands the lease's handle to the caller, who closes it (a background process's
// watcher keeps it after the lease is released).
func (l *Lease) Keep() providers.Sandbox {
	sb := l.Sandbox
	l.Sandbox = nil
	return sb
}

// Release closes the handle (unless kept), destroys the per_call sandboxes the lease made
// and gives the lease's place back. It may be called more than once.
func (l *Lease) Release() {
	if l.Sandbox != nil {
		_ = l.Sandbox.Close()
		l.Sandbox = nil
	}
	for _, id := range l.made {
		_ = l.room.s.sessions.DestroyBackend(l.ctx, l.prof, l.Session.ID, id)
	}
	l.made = nil
	release := l.release
	l.release = func() {}
	release()
}
