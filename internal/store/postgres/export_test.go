package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// UseAPIKeySQL is UseAPIKey's statement, for the test that reads its plan.
const UseAPIKeySQL = useAPIKeySQL

// FinishTogether sends the completions cs of tasks ids as one group commit would
// (finishes.send with them as one batch), and returns each one's answer.
func (st *Store) FinishTogether(ctx context.Context, ids []string, cs []store.Completion, t time.Time, ttl time.Duration) ([]bool, []error) {
	batch := make([]*finishOne, len(ids))
	for i, id := range ids {
		c := cs[i]
		touch, unlocks := "", ""
		if c.Touch {
			touch = c.SessionID
		}
		if c.Unlock.Token != "" {
			unlocks = c.Unlock.SessionID
		}
		batch[i] = &finishOne{ctx: ctx, sessionID: touch, taskID: id, unlocks: unlocks, deferred: c.Deferred, answer: make(chan finishAnswer, 1),
			args: []any{id, c.Status, nullable(c.Notice), nullable(c.Error), nullable(c.ErrorType), []byte(nil), t, t.Add(ttl), touch, c.Unlock.Token, c.ExitCode, c.DurationMS, max(c.OutputBytes, 0), c.ReplacesLost, "on"}}
	}
	answers := slices.Clone(batch)
	st.finishes.send(batch)
	stored, errs := make([]bool, len(ids)), make([]error, len(ids))
	for i, one := range answers {
		a := <-one.answer
		stored[i], errs[i] = a.stored, a.err
	}
	return stored, errs
}

// DeferredKept is how many deferred completions the store keeps until it sees them on disk.
func (st *Store) DeferredKept() int {
	st.finishes.mu.Lock()
	defer st.finishes.mu.Unlock()
	return len(st.finishes.retained)
}

// FlushDeferred reads the WAL positions until the kept deferred completions are on disk (or
// ctx ends); restarted pretends the server restarted before the first read (they are
// written again).
func (st *Store) FlushDeferred(ctx context.Context, restarted bool) error {
	if restarted {
		st.finishes.mu.Lock()
		st.finishes.started = time.Unix(1, 0)
		st.finishes.mu.Unlock()
	}
	for st.finishes.pending() {
		if err := st.finishes.flush(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
