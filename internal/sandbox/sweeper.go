package sandbox

import (
	"context"
	"fmt"

	"github.com/sandgate/sandgate/internal/sandbox/upkeep"
)

// The upkeep room (internal/sandbox/upkeep) owns the heartbeat, the outage watch and the
// sweeps; what a sweep does to sessions and tasks it is handed as hooks (upkeepHooks).

// Maintain keeps this replica's heartbeat, picks up cancellations requested through other
// replicas, records the completions waiting in its spool (first thing, and before every
// sweep), and — on one replica at a time — reports tasks of dead runners as lost, forgets
// expired tasks and frees idle sandboxes (upkeep.Sweeper.Maintain). It returns when ctx ends
// (after removing this runner's row).
func (s *Service) Maintain(ctx context.Context) { s.upkeep.Maintain(ctx) }

// Heartbeat records this runner as alive now; serve calls it once before accepting requests.
func (s *Service) Heartbeat(ctx context.Context) error { return s.upkeep.Heartbeat(ctx) }

// SweepNow runs one full sweep pass (tests and the first pass after start).
func (s *Service) SweepNow(ctx context.Context) { s.upkeep.SweepNow(ctx) }

// upkeepHooks are the other rooms' parts of a sweep, in the order a pass runs them.
func (s *Service) upkeepHooks() upkeep.Hooks {
	return upkeep.Hooks{
		Spooled:  s.recordSpooled,
		Cancels:  s.pollCancels,
		Adopt:    s.adoptOrphans,
		Frequent: []func(context.Context){s.retryDestroys, s.park.SweepExpired},
		Idle: []func(context.Context) error{s.account.SweepAudit, s.account.SweepAPIKeys, func(ctx context.Context) error {
			s.park.SweepIdle(ctx)
			return nil
		}},
	}
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
