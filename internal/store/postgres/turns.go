package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

// BeginTask records an execution's start in one round trip: it inserts task t (its Status
// is ignored) unless its owner already has a.Limit unfinished tasks of t's kind, and with
// a.Lock also takes a place in the lock line of session t.SessionID, which must exist and
// take new work (Admission.Lock), and reads that session.
//
// Without lock, or when the place is the first in line, the task is inserted running,
// started at t.SubmittedAt; otherwise pending, and AwaitTurn waits for its turn. A place is
// given up by the completion that carries it (Completion.Unlock) or by ReleaseTurn.
//
// With a.Deferred the transaction commits without waiting for the WAL flush (visible to
// every replica at once; on disk within Postgres's WAL writer cycle, or with the next
// synchronous commit, such as PromoteTask's).
//
// Errors: ErrQuota, or with lock ErrNotFound for an unknown session and ErrRefused (with
// Begun.Session) for one that takes no new work — nothing inserted in any case; the
// database's error (then a place may have been taken with its answer lost: it is released in
// the background, and the task may exist: finish it).
func (st *Store) BeginTask(ctx context.Context, t store.Task, a store.Admission) (store.Begun, error) {
	digest, excerpt, size := programAudit(t)
	limit, lock := a.Limit, a.Lock
	commit := "on" // synchronous_commit
	if a.Deferred {
		commit = "off"
	}
	if !lock {
		var n int
		err := st.pool.QueryRow(ctx, `WITH task AS (INSERT INTO tasks (id, session_id, owner_id, profile, operation, status, runner_id, submitted_at, started_at, program, background, interactive)
			SELECT $1, $2, $3, $4, $5, 'running', $6, $7, $7, $9, $10, $11 WHERE `+ownerUnder("$8", "$10")+` RETURNING id, submitted_at),
			`+auditTaskInsert("$3", "$2", "$4", "$5", "$12", "$13", "$14", "$15")+`
			SELECT count(*), set_config('synchronous_commit', $16, true) FROM task`,
			t.ID, t.SessionID, t.OwnerID, t.Profile, t.Operation, t.RunnerID, t.SubmittedAt, limit, store.ProgramOf(t.Program), t.Background, t.Interactive,
			digest, excerpt, size, t.APIKeyID, commit).Scan(&n, new(string))
		if err == nil && n == 0 {
			return store.Begun{}, store.ErrQuota
		}
		return store.Begun{First: err == nil}, err
	}
	l := st.locks
	l.start()
	if err := l.waitPresent(ctx); err != nil {
		return store.Begun{}, err
	}
	place := store.Place{SessionID: t.SessionID, Token: randomToken()}
	var within, usable, first bool
	var sess store.Session
	b := &pgx.Batch{}
	b.Queue(lineLock, t.SessionID)
	// One row when the session exists (none: ErrNotFound), saying whether the session takes
	// new work, whether the owner was within its limit, and the place taken.
	b.Queue(`WITH s AS (SELECT `+sessionCols+` FROM sessions WHERE id = $2),
		ok AS (SELECT `+ownerUnder("$8", "$12")+` AS within),
		open AS (SELECT status <> 'closed' AND (paused_at IS NULL OR paused_idle OR $17::boolean) AS usable FROM s),
		place AS (INSERT INTO session_locks (session_id, holder_key, token)
			SELECT $2, $9, $10 FROM ok, s, open WHERE ok.within AND open.usable RETURNING ticket),
		line AS (SELECT place.ticket, `+firstInLine("$2", "place.ticket")+` AS first FROM place),
		task AS (INSERT INTO tasks (id, session_id, owner_id, profile, operation, status, runner_id, submitted_at, started_at, program, background, interactive)
			SELECT $1, $2, $3, $4, $5, CASE WHEN line.first THEN 'running' ELSE 'pending' END, $6, $7,
				CASE WHEN line.first THEN $7::timestamptz END, $11, $12, $13 FROM line RETURNING id, submitted_at),
		`+auditTaskInsert("$3", "$2", "$4", "$5", "$14", "$15", "$16", "$18")+`
		SELECT ok.within, open.usable, COALESCE(line.ticket, 0), COALESCE(line.first, false), set_config('synchronous_commit', $19, true), s.*
		FROM s CROSS JOIN ok CROSS JOIN open LEFT JOIN line ON true`,
		t.ID, t.SessionID, t.OwnerID, t.Profile, t.Operation, t.RunnerID, t.SubmittedAt, limit, l.key, place.Token, store.ProgramOf(t.Program), t.Background, t.Interactive,
		digest, excerpt, size, a.WakesPaused, t.APIKeyID, commit).
		QueryRow(func(row pgx.Row) error {
			var err error
			sess, err = scanSessionAfter(row, &within, &usable, &place.Ticket, &first, new(string))
			return err
		})
	switch err := st.pool.SendBatch(ctx, b).Close(); {
	case errors.Is(err, store.ErrNotFound):
		return store.Begun{}, store.ErrNotFound
	case err != nil:
		l.release(place.SessionID, place.Token)
		return store.Begun{}, fmt.Errorf("store: begin task: %w", err)
	case !usable:
		return store.Begun{Session: sess}, store.ErrRefused
	case !within:
		return store.Begun{}, store.ErrQuota
	}
	return store.Begun{Place: place, First: first, Session: sess}, nil
}

// AwaitTurn waits until place holds its session's lock, then marks task taskID running at
// now() and returns the session as the holder sees it — one round trip once the turn has
// come; a woken waiter whose turn has not come costs one more. The place stays taken when
// AwaitTurn fails: give it up with the completion or ReleaseTurn.
//
// Errors: ctx.Err() when ctx ends first; ErrNotFound when the session is gone (the task is
// marked running all the same; finish it); the database's error.
func (st *Store) AwaitTurn(ctx context.Context, place store.Place, taskID string, now func() time.Time) (store.Session, error) {
	l := st.locks
	l.start()
	wake := l.register(place.SessionID)
	defer l.unregister(place.SessionID, wake)
	poll := time.NewTicker(lockPoll)
	defer poll.Stop()
	for {
		var first bool
		var sess store.Session
		var found bool
		b := &pgx.Batch{}
		b.Queue(`WITH line AS (SELECT `+firstInLine("$1", "$2")+` AS first),
			started AS (UPDATE tasks SET status = 'running', started_at = $4
				WHERE id = $3 AND finished_at IS NULL AND (SELECT first FROM line))
			SELECT first FROM line`, place.SessionID, place.Ticket, taskID, now()).
			QueryRow(func(row pgx.Row) error { return row.Scan(&first) })
		b.Queue(`SELECT `+sessionCols+` FROM sessions WHERE id = $1`, place.SessionID).
			QueryRow(func(row pgx.Row) error {
				var err error
				sess, err = scanSession(row)
				found = err == nil
				if errors.Is(err, store.ErrNotFound) {
					return nil
				}
				return err
			})
		if err := st.pool.SendBatch(ctx, b).Close(); err != nil {
			if ctx.Err() != nil {
				return store.Session{}, ctx.Err()
			}
			return store.Session{}, fmt.Errorf("store: wait for the session lock: %w", err)
		}
		if first {
			if !found {
				return store.Session{}, store.ErrNotFound
			}
			return sess, nil
		}
		select {
		case <-ctx.Done():
			return store.Session{}, ctx.Err()
		case <-l.ctx.Done():
			return store.Session{}, errStoreClosed
		case <-wake:
		case <-poll.C:
		}
	}
}

// ReleaseTurn gives place up without a completion (in the background, retried until it is
// deleted or the store closes). Releasing a place twice, or the zero Place, does nothing.
func (st *Store) ReleaseTurn(place store.Place) {
	if place.Token != "" {
		st.locks.release(place.SessionID, place.Token)
	}
}
