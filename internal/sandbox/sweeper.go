package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// sweeperLockKey is the advisory lock that makes one replica at a time sweep.
const sweeperLockKey = 0x5a6e_6761_7465 // "Zngate"

// Maintain keeps this replica's heartbeat, picks up cancellations requested through other
// replicas, records the completions waiting in its spool (first thing, and before every
// sweep), and — on one replica at a time — reports tasks of dead runners as lost, forgets
// expired tasks and frees idle sandboxes. It returns when ctx ends (after removing this
// runner's row).
func (s *Service) Maintain(ctx context.Context) {
	lostAfter := s.cfg.LostAfter
	beat := max(lostAfter/3, 200*time.Millisecond)
	sweepEvery := s.cfg.SweepInterval
	s.heartbeat(ctx)
	s.recordSpooled(ctx)
	hb := s.clock.NewTicker(beat)
	defer hb.Stop()
	// Cancellations requested through another replica are picked up within a second.
	cancels := s.clock.NewTicker(time.Second)
	defer cancels.Stop()
	lost := s.clock.NewTicker(max(lostAfter/2, 200*time.Millisecond))
	defer lost.Stop()
	idle := s.clock.NewTicker(sweepEvery)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.store.RemoveRunner(rctx, s.runnerID)
			cancel()
			return
		case <-hb.C():
			s.heartbeat(ctx)
		case <-cancels.C():
			s.pollCancels(ctx)
		case <-lost.C():
			s.sweep(ctx, lostAfter, false)
		case <-idle.C():
			s.sweep(ctx, lostAfter, true)
		}
	}
}

// Heartbeat records this runner as alive now; serve calls it once before accepting requests.
func (s *Service) Heartbeat(ctx context.Context) error {
	return s.store.Heartbeat(ctx, s.runnerID, s.hostname, s.now())
}

func (s *Service) heartbeat(ctx context.Context) {
	err := s.Heartbeat(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		s.log.Warn("runner heartbeat failed", "runner_id", s.runnerID, "err", err)
	}
	s.outage.beat(err == nil, s.now())
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

func (s *Service) pollCancels(ctx context.Context) {
	ids, err := s.store.CancelRequested(ctx, s.runnerID)
	if err != nil {
		return
	}
	for _, id := range ids {
		s.mu.Lock()
		if s.cancelled[id] == "" {
			s.cancelled[id] = "cancelled by the caller"
		}
		s.mu.Unlock()
		s.broker.Cancel(id)
	}
}

// SweepNow runs one full sweep pass (tests and the first pass after start).
func (s *Service) SweepNow(ctx context.Context) {
	s.sweep(ctx, s.cfg.LostAfter, true)
}

func (s *Service) sweep(ctx context.Context, lostAfter time.Duration, idle bool) {
	// This replica's spooled completions first: a task whose completion waits there is
	// recorded as it ended, not reported lost (and one reported lost meanwhile is corrected).
	s.recordSpooled(ctx)
	err := s.store.TryExclusive(ctx, sweeperLockKey, func(ctx context.Context) error {
		now := s.now()
		if s.outage.judging(now, lostAfter) {
			s.adoptOrphans(ctx, now.Add(-lostAfter))
			if n, err := s.store.MarkLostTasks(ctx, now.Add(-lostAfter), now, s.ttl()); err != nil {
				return err
			} else if n > 0 {
				s.log.Warn("tasks of stopped runners reported lost", "count", n)
			}
		}
		s.retryDestroys(ctx)
		s.sweepExpired(ctx)
		if _, err := s.store.DeleteExpiredTasks(ctx, now); err != nil {
			return err
		}
		if err := s.store.DeleteStaleRunners(ctx, now.Add(-24*time.Hour)); err != nil {
			return err
		}
		if idle {
			if err := s.account.SweepAudit(ctx); err != nil {
				return err
			}
			if err := s.account.SweepAPIKeys(ctx); err != nil {
				return err
			}
			s.sweepIdle(ctx)
			s.sweepOrphans(ctx)
			if _, err := s.store.DeleteStaleContexts(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrLockHeld) && ctx.Err() == nil {
		s.log.Warn("sweep failed", "err", err)
	}
}

// sweepIdle frees the sandboxes of sessions idle past their profile's idle_timeout (attached
// profiles are never touched) as the profile's idle_action says — destroyed (reset), paused,
// or captured in a snapshot and destroyed — and leaves the notice of what happened for their
// next operation.
func (s *Service) sweepIdle(ctx context.Context) {
	for _, prof := range s.profiles.All() {
		name := prof.Name
		if prof.Attached() || prof.Scope == ScopePerCall {
			continue
		}
		cutoff := s.now().Add(-prof.IdleTimeout)
		rows, err := s.store.IdleSessions(ctx, name, cutoff, 100)
		if err != nil {
			s.log.Warn("idle sweep failed", "profile", name, "err", err)
			continue
		}
		for _, sess := range rows {
			if idleAction(prof) != IdleReset {
				s.parkIdle(ctx, prof, sess, cutoff)
				continue
			}
			// Only reset when the row still points at the sandbox we destroy.
			ok, err := s.store.ResetIdleSession(ctx, sess.ID, idleNotice(prof, sess.ID), s.now(), sess.SandboxID, cutoff)
			if err != nil || !ok {
				continue
			}
			_ = s.destroyBackend(ctx, prof, sess.ID, sess.SandboxID)
			s.log.Info("idle sandbox freed", "session_id", sess.ID, "profile", name)
		}
	}
}

// retryDestroys retries removing the sandboxes of closed sessions (StateDestroyFailed) whose
// next attempt is due: a session whose provider confirms (or finds the sandbox gone) is
// forgotten, the others wait longer (destroyRetryAfter). A session of a profile no longer
// configured waits too: no provider here can remove its sandbox.
func (s *Service) retryDestroys(ctx context.Context) {
	rows, err := s.store.DestroyRetries(ctx, s.now(), 100)
	if err != nil {
		s.log.Warn("listing the sessions whose sandbox removal failed", "err", err)
		return
	}
	for _, sess := range rows {
		if ctx.Err() != nil {
			return
		}
		prof := s.profiles.Get(sess.Profile)
		if prof == nil {
			why := fmt.Sprintf("profile '%s' is not configured on this gateway: no provider can remove its sandbox %s", sess.Profile, sess.SandboxID)
			if _, err := s.store.DestroyFailed(ctx, sess.ID, sess.SandboxID, why, s.now().Add(destroyRetryAfter(sess.DestroyAttempts+1))); err != nil {
				s.log.Warn("recording a failed sandbox removal failed", "session_id", sess.ID, "err", err)
			}
			continue
		}
		out, err := s.finishDestroy(ctx, prof, sess)
		switch {
		case err != nil:
			s.log.Warn("retrying a sandbox removal failed", "session_id", sess.ID, "err", err)
		case !out.Pending:
			s.log.Info("sandbox of a closed session removed at last; session forgotten", "session_id", sess.ID, "profile", sess.Profile, "attempts", sess.DestroyAttempts+1)
		}
	}
}

// sweepOrphans asks each provider that can for sandboxes no session refers to, and removes
// them (a gateway that crashed between creating a sandbox and recording it leaves one).
func (s *Service) sweepOrphans(ctx context.Context) {
	for _, prof := range s.profiles.All() {
		name := prof.Name
		sw, ok := prof.Provider.(orphanSweeper)
		if !ok || prof.Attached() {
			continue
		}
		removed, err := sw.SweepOrphans(ctx, func(id string) bool {
			used, err := s.store.SandboxInUse(ctx, id)
			return err != nil || used // when unsure, keep
		})
		if err != nil {
			s.log.Warn("orphan sweep failed", "profile", name, "err", err)
		}
		if len(removed) > 0 {
			s.log.Info("orphaned sandboxes removed", "profile", name, "count", len(removed))
		}
	}
}
