package sandbox

import (
	"context"

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

// upkeepHooks are the other rooms' parts of a sweep, in the order a pass runs them
// (composition: New builds the upkeep room with them).
func upkeepHooks(s *Service) upkeep.Hooks {
	return upkeep.Hooks{
		Spooled:  s.runs.recordSpooled,
		Cancels:  s.runs.pollCancels,
		Adopt:    s.runs.adoptOrphans,
		Frequent: []func(context.Context){s.sessions.RetryDestroys, s.park.SweepExpired},
		Idle: []func(context.Context) error{s.account.SweepAudit, s.account.SweepAPIKeys, func(ctx context.Context) error {
			s.park.SweepIdle(ctx)
			return nil
		}},
	}
}
