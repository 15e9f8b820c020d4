// Package upkeep is the domain's upkeep room: what keeps a replica and the store in order in
// the background — this runner's heartbeat and how it saw the store lately (the outage
// watch), the sweeps (tasks of dead runners reported lost, expired tasks and stale runners
// forgotten, stale contexts deleted, orphaned sandboxes removed; on one replica at a time),
// and the trimming of retained output over its quota (trim.go).
//
// What a sweep does to sessions, tasks and keys of other rooms (adoption, destroy retries,
// lifetimes, idle parking, audit and API key retention) it is handed as Hooks at
// construction: the room never reaches the facade.
package upkeep

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/store"
)

// sweeperLockKey is the advisory lock that makes one replica at a time sweep.
const sweeperLockKey = 0x5a6e_6761_7465 // "Zngate"

// Store is what the upkeep room reads and writes.
type Store interface {
	store.Runners
	// MarkLostTasks, DeleteExpiredTasks and DropOldestOutputs are store.Tasks's.
	MarkLostTasks(ctx context.Context, staleBefore, now time.Time, ttl time.Duration) (int64, error)
	DeleteExpiredTasks(ctx context.Context, now time.Time) (int64, error)
	DropOldestOutputs(ctx context.Context, ownerID string, keep int64, blank json.RawMessage) (int64, error)
	// DeleteStaleContexts is store.Contexts's.
	DeleteStaleContexts(ctx context.Context) (int64, error)
	// SandboxInUse is store.Sessions's.
	SandboxInUse(ctx context.Context, id string) (bool, error)
}

// Hooks are the other rooms' parts of the upkeep, each called from the sweeper's goroutine.
type Hooks struct {
	// Spooled records this replica's spooled completions: first thing, and before every
	// sweep (a task whose completion waits there is recorded as it ended, not reported lost).
	Spooled func(ctx context.Context)
	// Cancels picks up cancellations requested through other replicas (every second).
	Cancels func(ctx context.Context)
	// Adopt follows the tasks of runners not seen since before, before they are reported lost.
	Adopt func(ctx context.Context, before time.Time)
	// Frequent run on every pass, after lost tasks (destroy retries, session lifetimes).
	Frequent []func(ctx context.Context)
	// Idle run on the idle passes (every SweepInterval): retention sweeps, idle sessions; an
	// error ends the pass.
	Idle []func(ctx context.Context) error
}

// Options build a Sweeper.
type Options struct {
	Store    Store
	Profiles *profile.Set // the providers asked for orphaned sandboxes
	RunnerID string
	Hostname string
	// LostAfter is how long a runner may miss heartbeats before its tasks are lost.
	LostAfter time.Duration
	// SweepInterval is how often the idle passes run.
	SweepInterval time.Duration
	// TaskTTL is how long a task reported lost is kept.
	TaskTTL time.Duration
	Clock   clock.Clock
	Log     *slog.Logger
	Hooks   Hooks
}

// Sweeper keeps this replica's heartbeat and sweeps, and trims retained output (Trimmer,
// embedded: KeepWithin, CloseTrims). Build it with New.
type Sweeper struct {
	*Trimmer
	o      Options
	outage outageWatch
}

// New returns the sweeper.
func New(o Options) *Sweeper { return &Sweeper{Trimmer: NewTrimmer(o.Store, o.Clock, o.Log), o: o} }

// Maintain keeps this replica's heartbeat, picks up cancellations requested through other
// replicas, records the completions waiting in its spool (first thing, and before every
// sweep), and — on one replica at a time — reports tasks of dead runners as lost, forgets
// expired tasks and frees idle sandboxes. It returns when ctx ends (after removing this
// runner's row).
func (w *Sweeper) Maintain(ctx context.Context) {
	lostAfter := w.o.LostAfter
	beat := max(lostAfter/3, 200*time.Millisecond)
	w.heartbeat(ctx)
	w.o.Hooks.Spooled(ctx)
	c := w.o.Clock
	hb := c.NewTicker(beat)
	defer hb.Stop()
	// Cancellations requested through another replica are picked up within a second.
	cancels := c.NewTicker(time.Second)
	defer cancels.Stop()
	lost := c.NewTicker(max(lostAfter/2, 200*time.Millisecond))
	defer lost.Stop()
	idle := c.NewTicker(w.o.SweepInterval)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = w.o.Store.RemoveRunner(rctx, w.o.RunnerID)
			cancel()
			return
		case <-hb.C():
			w.heartbeat(ctx)
		case <-cancels.C():
			w.o.Hooks.Cancels(ctx)
		case <-lost.C():
			w.sweep(ctx, false)
		case <-idle.C():
			w.sweep(ctx, true)
		}
	}
}

// Heartbeat records this runner as alive now.
func (w *Sweeper) Heartbeat(ctx context.Context) error {
	return w.o.Store.Heartbeat(ctx, w.o.RunnerID, w.o.Hostname, w.o.Clock.Now())
}

func (w *Sweeper) heartbeat(ctx context.Context) {
	err := w.Heartbeat(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		w.o.Log.Warn("runner heartbeat failed", "runner_id", w.o.RunnerID, "err", err)
	}
	w.outage.beat(err == nil, w.o.Clock.Now())
}

// SweepNow runs one full sweep pass (tests and the first pass after start).
func (w *Sweeper) SweepNow(ctx context.Context) { w.sweep(ctx, true) }

func (w *Sweeper) sweep(ctx context.Context, idle bool) {
	w.o.Hooks.Spooled(ctx)
	err := w.o.Store.TryExclusive(ctx, sweeperLockKey, func(ctx context.Context) error {
		if err := w.frequent(ctx); err != nil {
			return err
		}
		if idle {
			return w.idle(ctx)
		}
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrLockHeld) && ctx.Err() == nil {
		w.o.Log.Warn("sweep failed", "err", err)
	}
}

// frequent is every pass's part: lost tasks (unless an outage holds judgement), the
// Frequent hooks, expired tasks and stale runners.
func (w *Sweeper) frequent(ctx context.Context) error {
	now, lostAfter := w.o.Clock.Now(), w.o.LostAfter
	if w.outage.judging(now, lostAfter) {
		w.o.Hooks.Adopt(ctx, now.Add(-lostAfter))
		if n, err := w.o.Store.MarkLostTasks(ctx, now.Add(-lostAfter), now, w.o.TaskTTL); err != nil {
			return err
		} else if n > 0 {
			w.o.Log.Warn("tasks of stopped runners reported lost", "count", n)
		}
	}
	for _, f := range w.o.Hooks.Frequent {
		f(ctx)
	}
	if _, err := w.o.Store.DeleteExpiredTasks(ctx, now); err != nil {
		return err
	}
	return w.o.Store.DeleteStaleRunners(ctx, now.Add(-24*time.Hour))
}

// idle is the idle passes' part: the Idle hooks, orphaned sandboxes, stale contexts.
func (w *Sweeper) idle(ctx context.Context) error {
	for _, f := range w.o.Hooks.Idle {
		if err := f(ctx); err != nil {
			return err
		}
	}
	w.sweepOrphans(ctx)
	_, err := w.o.Store.DeleteStaleContexts(ctx)
	return err
}

// orphanSweeper is implemented by providers that can find sandboxes nobody owns any more
// (e.g. containers left by a crashed gateway). keep reports whether an id is still in use.
type orphanSweeper interface {
	SweepOrphans(ctx context.Context, keep func(id string) bool) ([]string, error)
}

// sweepOrphans asks each provider that can for sandboxes no session refers to, and removes
// them (a gateway that crashed between creating a sandbox and recording it leaves one).
func (w *Sweeper) sweepOrphans(ctx context.Context) {
	for _, prof := range w.o.Profiles.All() {
		name := prof.Name
		sw, ok := prof.Provider.(orphanSweeper)
		if !ok || prof.Attached() {
			continue
		}
		removed, err := sw.SweepOrphans(ctx, func(id string) bool {
			used, err := w.o.Store.SandboxInUse(ctx, id)
			return err != nil || used // when unsure, keep
		})
		if err != nil {
			w.o.Log.Warn("orphan sweep failed", "profile", name, "err", err)
		}
		if len(removed) > 0 {
			w.o.Log.Info("orphaned sandboxes removed", "profile", name, "count", len(removed))
		}
	}
}

// outageWatch is how this replica saw the store lately. While the store is down no runner
// can beat, so a runner's stale heartbeat says nothing about it until it had lost_after to
// beat again: a sweep reports no task lost (nor adopts one) until lost_after after this
// replica's own heartbeat went through again — a replica that outlived the outage is then
// not taken for dead, and its completions are recorded by itself (docs/semantics.md §9).
type outageWatch struct {
	mu     sync.Mutex
	failed bool      // the last heartbeat failed
	backAt time.Time // when a heartbeat went through after failing; zero: never failed
}

func (o *outageWatch) beat(ok bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !ok {
		o.failed = true
		return
	}
	if o.failed {
		o.failed, o.backAt = false, now
	}
}

// judging reports whether runners may be judged by their heartbeats now.
func (o *outageWatch) judging(now time.Time, lostAfter time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.failed && (o.backAt.IsZero() || now.Sub(o.backAt) >= lostAfter)
}
