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

// adoptLimit bounds how many orphaned tasks one sweep takes over.
const adoptLimit = 100

// adoptOrphans takes over the running tasks of runners that stopped (no heartbeat since
// staleBefore) when their sandbox can hold executions (providers.Reattacher: sandboxd in a
// container or pod), and finishes each from what the sandbox kept — its whole bounded output
// and how it ended — instead of giving it up as lost (docs/semantics.md §9 "An execution
// survives its gateway"). Only session tasks of agent-mode profiles are adopted: a per_call
// sandbox goes with its call, and acting as a user needs the user's own request. What is not
// adopted is left to MarkLostTasks.
func (x *executions) adoptOrphans(ctx context.Context, staleBefore time.Time) {
	s := x.s
	tasks, err := s.store.OrphanedTasks(ctx, staleBefore, adoptLimit)
	if err != nil {
		s.log.Warn("listing the tasks of stopped runners failed", "err", err)
		return
	}
	for _, t := range tasks {
		prof := s.profiles.Get(t.Profile)
		if prof == nil || prof.Scope == ScopePerCall || prof.IdentityMode == IdentityUser {
			continue
		}
		ok, err := s.store.AdoptTask(ctx, t.ID, x.runnerID, staleBefore)
		if err != nil || !ok {
			continue
		}
		s.log.Info("adopting a task of a stopped runner", "task_id", t.ID, "runner", t.RunnerID, "session_id", t.SessionID)
		x.adopting.Add(1)
		go func() {
			defer x.adopting.Done()
			x.resume(t, prof)
		}()
	}
}

// resume follows adopted task t in its sandbox to its end and records its completion. When
// the gateway stops meanwhile it leaves the task as it is: this runner then stops too, and
// another one adopts it again.
func (xs *executions) resume(t store.Task, prof *Profile) {
	s := xs.s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-xs.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	lost := func(why string) {
		xs.recordCompletion(ctx, t.ID, store.Completion{Status: TaskLost, ErrorType: "lost", SessionID: t.SessionID,
			Error: "the gateway process running this task stopped before it finished (runner " + t.RunnerID + "), and " + why})
	}
	// A paused sandbox is frozen, its sandboxd too: follow the task once it runs again.
	if !s.park.AwaitRunning(ctx, t.SessionID) {
		if ctx.Err() == nil {
			lost("its session is gone")
		}
		return
	}
	// The session read again, as it is (neither woken nor restored), for the gateway itself.
	opts := leaseOpts{order: orderLock, reach: reachAttach, noWake: true, noRestore: true, agent: true, patience: adoptAttachWait}
	if t.Background {
		// A background process gave its session's line up when it started; it counts as
		// use of its session while it runs.
		go xs.keepTouched(ctx, t.SessionID, prof.IdleTimeout)
		opts.order = orderReread
	}
	// Else the session's lock, as for an execution that runs here: executions submitted
	// meanwhile wait for the adopted one's end (the dead replica's place no longer counts).
	// A sandbox that does not answer at once (a busy engine) is tried again before the task
	// is given up: only one that is gone, or stays unreachable, makes it lost.
	l, err := s.leases().lease(ctx, principal.Principal{}, prof, store.Session{ID: t.SessionID}, opts)
	var oe orderErr
	switch {
	case ctx.Err() != nil:
		return // shutting down: left for the next adopter
	case errors.As(err, &oe) && t.Background, errors.As(err, &oe) && fault.KindOf(err) == fault.NotFound, err == nil && l.Sandbox == nil:
		lost("its session or sandbox is gone")
		return
	case errors.As(err, &oe):
		return // the store does not answer: the next sweep tries again
	case err != nil:
		lost(fmt.Sprintf("its sandbox cannot be reached (%v)", err))
		return
	}
	defer l.Release()
	sb := l.Sandbox
	if _, ok := sb.(providers.Reattacher); !ok {
		lost("provider " + prof.Provider.Type() + " does not hold executions for another gateway")
		return
	}
	live := xs.kept.start(t.ID)
	xs.followToEnd(ctx, t, sb, live, adoptedNotice, lost)
}

// adoptAttachWait bounds the pauses between attempts to reach an adopted task's sandbox
// (250 ms doubling: about 16 s in all).
const adoptAttachWait = 8 * time.Second

// adoptedNotice is the notice of an execution another gateway finished.
const adoptedNotice = "the gateway that started this execution stopped while it ran; another gateway followed it in its sandbox to its end"
