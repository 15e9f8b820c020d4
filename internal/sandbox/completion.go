package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// Retry pacing of a completion the store refused: the first retry after completionRetryMin,
// doubling up to completionRetryMax; each attempt bounded by completionAttemptTimeout.
const (
	completionRetryMin       = 100 * time.Millisecond
	completionRetryMax       = 30 * time.Second
	completionAttemptTimeout = 10 * time.Second
)

// recordCompletion stores task id's completion c, finished now. Once a completion exists it
// is never dropped because the response store is unavailable (docs/semantics.md §9
// Completion): when the store fails, the execution is not run again — the same completion is
// retried in the background, with backoff, until it is stored, the task turns out to have
// finished otherwise (cancelled, or reported lost by another replica), or the service closes.
func (s *Service) recordCompletion(ctx context.Context, id string, c store.Completion) {
	at := s.now()
	ok, err := s.store.FinishTask(ctx, id, c, at, s.ttl())
	if err == nil {
		if !ok {
			s.log.Info("task had already finished (cancelled or lost)", "task_id", id)
		}
		return
	}
	s.log.Warn("recording task completion failed; retrying until the response store answers", "task_id", id, "err", err)
	// The session's lock is not kept for as long as the retries take: it is given up on its
	// own (with its own retries), and the completion retried without it.
	s.store.ReleaseTurn(c.Unlock)
	c.Unlock = store.Place{}
	s.retrying.Add(1)
	go func() {
		defer s.retrying.Done()
		delay := completionRetryMin
		for attempt := 2; ; attempt++ {
			t := time.NewTimer(delay)
			select {
			case <-s.closing:
				t.Stop()
				s.log.Error("task completion not recorded: the gateway stopped while the response store was unavailable", "task_id", id, "attempts", attempt-1)
				return
			case <-t.C:
			}
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completionAttemptTimeout)
			_, err := s.store.FinishTask(actx, id, c, at, s.ttl())
			cancel()
			if err == nil {
				s.log.Info("task completion recorded after the response store came back", "task_id", id, "attempts", attempt)
				return
			}
			delay = min(delay*2, completionRetryMax)
		}
	}()
}

// stopRetries gives completions still being retried until ctx ends, then stops them.
func (s *Service) stopRetries(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.retrying.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.closeOnce.Do(func() { close(s.closing) })
	<-done
}
