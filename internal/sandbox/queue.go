package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
)

// awaitQueuedProcess waits up to wait (at least 30 s: the start is the answer) for a queued
// background process to start on a worker, or to fail to, and returns its task.
func (xs *executions) awaitQueuedProcess(ctx context.Context, p principal.Principal, id string, wait time.Duration) (Outcome, error) {
	s := xs.s
	deadline := s.clock.NewTimer(max(wait, 30*time.Second))
	defer deadline.Stop()
	for expired := false; ; {
		t, err := s.GetTask(context.WithoutCancel(ctx), p, id)
		if err != nil {
			return Outcome{}, err
		}
		switch {
		case t.FinishedAt != nil && t.Result == nil:
			return Outcome{}, failureOf(t)
		case t.PID > 0 || t.FinishedAt != nil || expired:
			return Outcome{Task: &t}, nil
		}
		poll := s.clock.NewTimer(s.cfg.Queue.WaitPoll / 5)
		select {
		case <-ctx.Done():
			poll.Stop()
			return Outcome{Task: &t}, nil
		case <-deadline.C():
			expired = true // read once more, then answered as it stands
		case <-poll.C():
		}
		poll.Stop()
	}
}

// failureOf is the fault of task t that finished without a result. The one quota a worker
// can meet — the other quotas are checked when the task is recorded — is the contexts quota
// (contextquota.go), so a quota failure carries its Retry-After.
func failureOf(t Task) error {
	kind := fault.Kind(t.ErrorType)
	if kind == fault.Quota {
		return fault.OverQuota(contextRetry, "%s", t.Error)
	}
	if _, known := knownKinds[kind]; !known {
		kind = fault.Broker
	}
	return fault.New(kind, "%s", t.Error)
}

var knownKinds = map[fault.Kind]struct{}{
	fault.Config: {}, fault.Capability: {}, fault.Policy: {}, fault.Timeout: {}, fault.Provision: {}, fault.Gone: {},
	fault.NotFound: {}, fault.Broker: {}, fault.Unavailable: {}, fault.Validation: {}, fault.Forbidden: {}, fault.Conflict: {}, fault.TooLarge: {},
	fault.Paused: {},
}
