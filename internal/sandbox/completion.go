package sandbox

import (
	"context"
	"encoding/json"
	"errors"
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
// Completion): when the store fails, the execution is not run again — the completion is
// written to the spool (when the service has one) before this returns, so it outlives this
// process, and retried in the background, with backoff, until it is stored, the task turns
// out to have finished otherwise (cancelled), or the service closes; a completion left in
// the spool then is recorded by the next gateway on the same spool (recordSpooled).
//
// c replaces a `lost` verdict recorded meanwhile (store.Completion.ReplacesLost): it comes
// from the runner that followed the execution, so it is what happened — and the caller that
// waited may already hold its result.
func (xs *executions) recordCompletion(ctx context.Context, id string, c store.Completion) {
	s := xs.s
	at := s.now()
	c.ReplacesLost = true
	ok, err := s.store.FinishTask(ctx, id, c, at, s.cfg.ResponseTTL)
	if err == nil {
		if !ok {
			s.log.Info("task had already finished (cancelled)", "task_id", id)
		}
		return
	}
	s.log.Warn("recording task completion failed; retrying until the response store answers", "task_id", id, "err", err)
	// The session's lock is not kept for as long as the retries take: it is given up on its
	// own (with its own retries), and the completion retried without it.
	s.store.ReleaseTurn(c.Unlock)
	c.Unlock = store.Place{}
	spooled := xs.spoolCompletion(id, c, at)
	xs.retrying.Add(1)
	go func() {
		defer xs.retrying.Done()
		delay := completionRetryMin
		for attempt := 2; ; attempt++ {
			t := s.clock.NewTimer(delay)
			select {
			case <-xs.closing:
				t.Stop()
				if spooled {
					s.log.Warn("task completion not recorded yet: the gateway stopped while the response store was unavailable; it waits in the spool for the next gateway",
						"task_id", id, "attempts", attempt-1, "spool", xs.spool.Dir())
				} else {
					s.log.Error("task completion not recorded: the gateway stopped while the response store was unavailable", "task_id", id, "attempts", attempt-1)
				}
				return
			case <-t.C():
			}
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completionAttemptTimeout)
			_, err := s.store.FinishTask(actx, id, c, at, s.cfg.ResponseTTL)
			cancel()
			if err == nil {
				s.log.Info("task completion recorded after the response store came back", "task_id", id, "attempts", attempt)
				if spooled {
					xs.unspool(id)
				}
				return
			}
			delay = min(delay*2, completionRetryMax)
		}
	}()
}

// spoolRecord is a completion as the spool keeps it: what FinishTask needs to record it
// later, from another process (JSON, version 1).
type spoolRecord struct {
	Version     int             `json:"v"`
	TaskID      string          `json:"task_id"`
	RunnerID    string          `json:"runner_id"`
	FinishedAt  time.Time       `json:"finished_at"`
	TTL         time.Duration   `json:"ttl_ns"`
	Status      string          `json:"status"`
	Notice      string          `json:"notice,omitempty"`
	Error       string          `json:"error,omitempty"`
	ErrorType   string          `json:"error_type,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	SessionID   string          `json:"session_id,omitempty"`
	Touch       bool            `json:"touch,omitempty"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	DurationMS  *int64          `json:"duration_ms,omitempty"`
	OutputBytes int64           `json:"output_bytes,omitempty"`
}

// spoolCompletion writes task id's completion c, finished at at, to the spool, and reports
// whether it is there. A spool that is full or failing is logged as an error: the completion
// then lives in this process only.
func (xs *executions) spoolCompletion(id string, c store.Completion, at time.Time) bool {
	s := xs.s
	if xs.spool == nil {
		return false
	}
	rec := spoolRecord{
		Version: 1, TaskID: id, RunnerID: xs.runnerID, FinishedAt: at, TTL: s.cfg.ResponseTTL,
		Status: c.Status, Notice: c.Notice, Error: c.Error, ErrorType: c.ErrorType,
		SessionID: c.SessionID, Touch: c.Touch, ExitCode: c.ExitCode, DurationMS: c.DurationMS, OutputBytes: c.OutputBytes,
	}
	b, err := json.Marshal(c.Result)
	if err == nil && c.Result != nil {
		rec.Result = b
	}
	if err == nil {
		b, err = json.Marshal(rec)
	}
	if err == nil {
		err = xs.spool.Put(id, b)
	}
	if err != nil {
		s.log.Error("keeping a task completion in the spool failed: it waits in memory only, and is lost if this gateway stops before the response store answers again",
			"task_id", id, "spool", xs.spool.Dir(), "bytes", len(b), "err", err)
		return false
	}
	s.log.Info("task completion kept in the spool until the response store takes it", "task_id", id, "spool", xs.spool.Dir())
	return true
}

// unspool removes task id's record from the spool once the store has its completion.
func (xs *executions) unspool(id string) {
	s := xs.s
	if err := xs.spool.Remove(id); err != nil {
		s.log.Warn("removing a recorded completion from the spool failed; the next pass records it again, which changes nothing", "task_id", id, "err", err)
	}
}

// recordSpooled records the completions waiting in the spool — this process's and those an
// earlier process on the same spool left — into the store, and removes each the store took,
// or that the store does not need: its task finished otherwise (cancelled), or is unknown
// past the time it would have expired (a record of a task the store never had, or forgot,
// is kept until then: the spool may be shared with a gateway of another database). A
// record replaces a `lost` verdict (store.Completion.ReplacesLost): a task another replica
// reported lost while its completion waited here ends as it really did. It stops at the
// first store error (the store is still unavailable; the next pass tries again). Maintain
// runs it when it starts, before its first sweep, and before every sweep after.
func (x *executions) recordSpooled(ctx context.Context) {
	s := x.s
	if x.spool == nil {
		return
	}
	ids, err := x.spool.IDs()
	if err != nil {
		s.log.Warn("reading the completion spool failed", "spool", x.spool.Dir(), "err", err)
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		if err := x.recordSpooledOne(ctx, id); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("recording the spooled completions failed; trying again with the next sweep", "task_id", id, "err", err)
			}
			return
		}
	}
}

// recordSpooledOne records spool record id; an error means the store failed.
func (xs *executions) recordSpooledOne(ctx context.Context, id string) error {
	s := xs.s
	b, err := xs.spool.Get(id)
	if err != nil {
		return nil // recorded and removed meanwhile (by this process's retry, or another process)
	}
	var rec spoolRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version != 1 || rec.TaskID != id {
		// Kept for the operator to look at (said once per process): no record this gateway wrote.
		if _, said := xs.badSpool.LoadOrStore(id, struct{}{}); said {
			return nil
		}
		s.log.Error("a spool record is no completion this gateway can read; left in place", "task_id", id, "spool", xs.spool.Dir(),
			"version", rec.Version, "err", err)
		return nil
	}
	c := store.Completion{
		Status: rec.Status, Notice: rec.Notice, Error: rec.Error, ErrorType: rec.ErrorType, SessionID: rec.SessionID,
		Touch: rec.Touch, ExitCode: rec.ExitCode, DurationMS: rec.DurationMS, OutputBytes: rec.OutputBytes, ReplacesLost: true,
	}
	if len(rec.Result) > 0 {
		c.Result = rec.Result
	}
	actx, cancel := context.WithTimeout(ctx, completionAttemptTimeout)
	defer cancel()
	ok, err := s.store.FinishTask(actx, id, c, rec.FinishedAt, rec.TTL)
	if err != nil {
		return err
	}
	if !ok {
		_, err := s.store.GetTask(actx, id, "")
		switch {
		case errors.Is(err, store.ErrNotFound) && s.now().Before(rec.FinishedAt.Add(rec.TTL)):
			return nil // not this database's task, or not yet: kept until it would have expired
		case errors.Is(err, store.ErrNotFound):
			s.log.Info("a spooled completion's task is unknown past its expiry; dropped", "task_id", id)
		case err != nil:
			return err
		default:
			s.log.Info("a spooled completion's task had finished otherwise; dropped", "task_id", id)
		}
		xs.unspool(id)
		return nil
	}
	s.log.Info("spooled task completion recorded", "task_id", id, "status", rec.Status, "runner", rec.RunnerID)
	xs.unspool(id)
	return nil
}

// stopRetries gives completions still being retried until ctx ends, then stops them.
func (x *executions) stopRetries(ctx context.Context) {
	done := make(chan struct{})
	go func() { x.retrying.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	x.closeOnce.Do(func() { close(x.closing) })
	<-done
}
