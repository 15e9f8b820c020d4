package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

const taskCols = `id, session_id, owner_id::text, profile, operation, status, promoted, runner_id, submitted_at,
	started_at, finished_at, expires_at, COALESCE(notice, ''), COALESCE(error, ''), COALESCE(error_type, ''), result, cancel_requested, seq, queued, attempts,
	program, background, COALESCE(pid, 0), interactive`

// taskSummaryCols are taskCols without the result (scanTask reads a NULL).
var taskSummaryCols = strings.Replace(taskCols, ", result,", ", NULL::jsonb,", 1)

func scanTask(row pgx.Row) (store.Task, error) {
	var t store.Task
	var res []byte
	err := row.Scan(&t.ID, &t.SessionID, &t.OwnerID, &t.Profile, &t.Operation, &t.Status, &t.Promoted, &t.RunnerID, &t.SubmittedAt,
		&t.StartedAt, &t.FinishedAt, &t.ExpiresAt, &t.Notice, &t.Error, &t.ErrorType, &res, &t.CancelRequested, &t.Seq, &t.Queued, &t.Attempts,
		&t.Program, &t.Background, &t.PID, &t.Interactive)
	if err != nil {
		return store.Task{}, notFound(err)
	}
	if len(res) > 0 {
		t.Result = res
	}
	return t, nil
}

// CreateTask inserts t (status pending).
func (st *Store) CreateTask(ctx context.Context, t store.Task) error {
	return st.CreateTaskWithin(ctx, t, 0)
}

// ownerUnder is the condition "limit $n ≤ 0 (none), or owner $3 has fewer than $n unfinished
// tasks of the kind $bg (background processes, or executions)", for the inserts that a quota
// bounds.
func ownerUnder(n, bg string) string {
	return `(` + n + `::int <= 0 OR (SELECT count(*) FROM tasks WHERE owner_id = $3 AND finished_at IS NULL AND background = ` + bg + `::boolean) < ` + n + `)`
}

// CreateTaskWithin is CreateTask unless the owner already has limit unfinished tasks of t's
// kind (background processes, or executions; limit ≤ 0: no limit), then ErrQuota and nothing
// inserted — in the same statement, so the check costs no round trip. (Concurrent inserts
// may pass it together; the limit is a bound on what one principal holds, not an exact
// count.)
func (st *Store) CreateTaskWithin(ctx context.Context, t store.Task, limit int) error {
	digest, excerpt, size := programAudit(t)
	var n int
	err := st.pool.QueryRow(ctx, `WITH task AS (INSERT INTO tasks (id, session_id, owner_id, profile, operation, status, runner_id, submitted_at, program, background, interactive)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $10, $11, $12 WHERE `+ownerUnder("$9", "$11")+` RETURNING id, submitted_at),
		`+auditTaskInsert("$3", "$2", "$4", "$5", "$13", "$14", "$15", "$16")+`
		SELECT count(*) FROM task`,
		t.ID, t.SessionID, t.OwnerID, t.Profile, t.Operation, t.Status, t.RunnerID, t.SubmittedAt, limit, store.ProgramOf(t.Program), t.Background, t.Interactive,
		digest, excerpt, size, t.APIKeyID).Scan(&n)
	if err == nil && n == 0 {
		return store.ErrQuota
	}
	return err
}

// CreateQueuedTask inserts t as a queued task and, in the same transaction, calls enqueue
// (which may use tx, a pgx.Tx, to insert its own job, or ignore it); both happen or neither
// does. Returns the task's seq. limit > 0 bounds the owner's unfinished tasks of t's kind as
// CreateTaskWithin does (ErrQuota).
func (st *Store) CreateQueuedTask(ctx context.Context, t store.Task, limit int, enqueue store.EnqueueFunc) (int64, error) {
	var seq int64
	err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		digest, excerpt, size := programAudit(t)
		err := tx.QueryRow(ctx, `WITH task AS (INSERT INTO tasks (id, session_id, owner_id, profile, operation, status, runner_id, submitted_at, queued, program, background, interactive)
			SELECT $1, $2, $3, $4, $5, $6, '', $7, true, $9, $10, $11 WHERE `+ownerUnder("$8", "$10")+` RETURNING id, submitted_at, seq),
			`+auditTaskInsert("$3", "$2", "$4", "$5", "$12", "$13", "$14", "$15")+`
			SELECT seq FROM task`,
			t.ID, t.SessionID, t.OwnerID, t.Profile, t.Operation, t.Status, t.SubmittedAt, limit, store.ProgramOf(t.Program), t.Background, t.Interactive,
			digest, excerpt, size, t.APIKeyID).Scan(&seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrQuota
		}
		if err != nil {
			return err
		}
		return enqueue(ctx, tx, seq)
	})
	return seq, err
}

// BeginAttempt claims unfinished task id for runnerID and counts one more started execution.
// A task already running — on this runner, or on another whose heartbeat is newer than
// staleBefore — is not taken (ErrTaskHeld): a redelivery only takes over from a dead runner.
// A finished task: ErrNotFound.
func (st *Store) BeginAttempt(ctx context.Context, id, runnerID string, now, staleBefore time.Time) (int, error) {
	var attempts int
	err := st.pool.QueryRow(ctx, `
UPDATE tasks t SET attempts = attempts + 1, runner_id = $2, status = 'running', started_at = COALESCE(started_at, $3)
 WHERE id = $1 AND finished_at IS NULL
   AND (t.runner_id = '' -- never started
        OR (t.runner_id <> $2 AND NOT EXISTS (SELECT 1 FROM runners r WHERE r.id = t.runner_id AND r.heartbeat_at >= $4)))
RETURNING attempts`, id, runnerID, now, staleBefore).Scan(&attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		var finished bool
		if err := st.pool.QueryRow(ctx, `SELECT finished_at IS NOT NULL FROM tasks WHERE id = $1`, id).Scan(&finished); err != nil {
			return 0, notFound(err)
		}
		if finished {
			return 0, store.ErrNotFound
		}
		return 0, store.ErrTaskHeld
	}
	return attempts, err
}

// EarlierUnfinished reports whether session sessionID has an unfinished task submitted before
// seq (per-session FIFO across a worker fleet); a background process that started
// (StartedProcess) no longer holds the line.
func (st *Store) EarlierUnfinished(ctx context.Context, sessionID string, seq int64) (bool, error) {
	var exists bool
	err := st.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE session_id = $1 AND seq < $2 AND finished_at IS NULL
		AND NOT (background AND pid IS NOT NULL))`, sessionID, seq).Scan(&exists)
	return exists, err
}

// StartTask marks task id running at t (unless it already finished, e.g. cancelled).
func (st *Store) StartTask(ctx context.Context, id string, t time.Time) error {
	_, err := st.pool.Exec(ctx, `UPDATE tasks SET status = 'running', started_at = $2 WHERE id = $1 AND finished_at IS NULL`, id, t)
	return err
}

// StartTaskInSession marks task id running at t and returns session sessionID as it is now,
// in one round trip (call it holding the session lock). Errors: ErrNotFound when the session
// is gone (the task is marked running all the same; finish it).
func (st *Store) StartTaskInSession(ctx context.Context, id, sessionID string, t time.Time) (store.Session, error) {
	return scanSession(st.pool.QueryRow(ctx, `WITH started AS (
			UPDATE tasks SET status = 'running', started_at = $2 WHERE id = $1 AND finished_at IS NULL)
		SELECT `+sessionCols+` FROM sessions WHERE id = $3`, id, t, sessionID))
}

// PromoteTask marks task id as handed to the caller as a background task. It commits
// synchronously, so the task row is on disk (with the WAL before it: a deferred BeginTask's)
// before the caller learns its id.
func (st *Store) PromoteTask(ctx context.Context, id string) error {
	_, err := st.pool.Exec(ctx, `UPDATE tasks SET promoted = true WHERE id = $1`, id)
	return err
}

// FinishTask records task id's completion at t, kept until t+ttl, and notifies waiters on
// every replica (TaskWatcher), in one statement — which also touches the session (c.Touch)
// and gives up c.Unlock. A task already finished keeps its first completion, but that a
// completion with c.ReplacesLost replaces a `lost` one; the return says whether this one was
// stored (false also for an unknown task). Completions that arrive together are committed
// together (finishes.go: one transaction per batch); FinishTask returns once its own is
// committed. When ctx ends first it returns ctx.Err() and the completion may still be
// stored.
func (st *Store) FinishTask(ctx context.Context, id string, c store.Completion, t time.Time, ttl time.Duration) (bool, error) {
	var res []byte
	if c.Result != nil {
		var err error
		if res, err = json.Marshal(c.Result); err != nil {
			return false, err
		}
	}
	touch := ""
	if c.Touch && c.SessionID != "" {
		touch = c.SessionID
	}
	unlocks := ""
	if c.Unlock.Token != "" {
		unlocks = c.Unlock.SessionID
	}
	args := []any{id, c.Status, nullable(c.Notice), nullable(c.Error), nullable(c.ErrorType), res, t, t.Add(ttl), touch, c.Unlock.Token, c.ExitCode, c.DurationMS, max(c.OutputBytes, 0), c.ReplacesLost, "on"}
	return st.finishes.do(ctx, &finishOne{sessionID: touch, taskID: id, unlocks: unlocks, deferred: c.Deferred, args: args})
}

// finishSQL is FinishTask's statement.
//
// Releasing a place notifies the other replicas only when another place is in the session's
// line (a notification serialises commits; most executions have no waiter). A place taken
// in the very instant of this statement may go unseen by both: its taker's first look
// (AwaitTurn's, right after) finds the line free, or else its poll does (lockPoll), so such
// a rare waiter is late by at most that, never stuck. $15 is the transaction's
// synchronous_commit (finishes.go: "off" for a batch of deferred completions).
const finishSQL = `WITH done AS (
		UPDATE tasks SET status = $2, notice = $3, error = $4, error_type = $5, result = $6,
			finished_at = $7, expires_at = $8, output_bytes = $13
		WHERE id = $1 AND (finished_at IS NULL OR ($14::boolean AND status = 'lost' AND $2 <> 'lost')) RETURNING id, started_at),
	audited AS (
		UPDATE audit_events a SET status = $2, error_type = COALESCE($5, ''), exit_code = $11, finished_at = $7,
			duration_ms = COALESCE($12::bigint, (extract(epoch FROM $7::timestamptz - done.started_at) * 1000)::bigint)
		FROM done WHERE a.task_id = done.id),
	touched AS (
		UPDATE sessions SET last_used_at = GREATEST(last_used_at, $7) WHERE id = $9 AND $9 <> ''),
	freed AS (
		DELETE FROM session_locks WHERE token = $10 AND $10 <> '' RETURNING session_id)
	SELECT (SELECT count(pg_notify('` + taskDoneChannel + `', id)) FROM done) = 1,
		(SELECT count(pg_notify('` + lockReleasedChannel + `', session_id)) FROM freed
			WHERE EXISTS (SELECT 1 FROM session_locks w WHERE w.session_id = freed.session_id AND w.token <> $10)),
		set_config('synchronous_commit', $15, true)`

// WithdrawTask removes task id while it is unfinished and was never promoted (its caller
// still waits for the answer), with its audit event, and wakes its waiters as a finish does
// (TaskWatcher: they then find no task); it reports whether it did. An execution refused
// before it started — its session paused or closed, the contexts quota — leaves no task and
// no event behind (docs/semantics.md §14).
func (st *Store) WithdrawTask(ctx context.Context, id string) (bool, error) {
	var n int
	err := st.pool.QueryRow(ctx, `WITH gone AS (
			DELETE FROM tasks WHERE id = $1 AND finished_at IS NULL AND NOT promoted RETURNING id),
		unaudited AS (DELETE FROM audit_events WHERE task_id IN (SELECT id FROM gone))
		SELECT count(pg_notify('`+taskDoneChannel+`', id)) FROM gone`, id).Scan(&n)
	return n == 1, err
}

// GetTask returns task id if it belongs to ownerID (any owner when ownerID is "").
func (st *Store) GetTask(ctx context.Context, id, ownerID string) (store.Task, error) {
	if ownerID == "" {
		return scanTask(st.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1`, id))
	}
	return scanTask(st.pool.QueryRow(ctx, `SELECT `+taskCols+` FROM tasks WHERE id = $1 AND owner_id = $2`, id, ownerID))
}

// GetTaskSummary is GetTask without the result (Task.Result nil): whether and how task id
// ended, for callers that do not need its output (a finished result holds up to twice
// sandbox.max_output_bytes).
func (st *Store) GetTaskSummary(ctx context.Context, id, ownerID string) (store.Task, error) {
	if ownerID == "" {
		return scanTask(st.pool.QueryRow(ctx, `SELECT `+taskSummaryCols+` FROM tasks WHERE id = $1`, id))
	}
	return scanTask(st.pool.QueryRow(ctx, `SELECT `+taskSummaryCols+` FROM tasks WHERE id = $1 AND owner_id = $2`, id, ownerID))
}

// ListTasks returns the filter's tasks, newest first, without results.
func (st *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	var args []any
	where := []string{"true"}
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if f.OwnerID != "" {
		where = append(where, "owner_id = "+arg(f.OwnerID))
	}
	if f.Background {
		where = append(where, "background")
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(f.Status))
	}
	if f.SessionID != "" {
		where = append(where, "session_id = "+arg(f.SessionID))
	}
	if len(f.SessionLabels) > 0 {
		b, err := json.Marshal(f.SessionLabels)
		if err != nil {
			return nil, err
		}
		where = append(where, "session_id IN (SELECT id FROM sessions WHERE labels @> "+arg(string(b))+"::jsonb)")
	}
	if f.AfterID != "" {
		where = append(where, "(submitted_at, id) < ("+arg(f.AfterSubmitted)+", "+arg(f.AfterID)+")")
	}
	cols := strings.Replace(taskCols, "result,", "NULL::jsonb,", 1)
	rows, err := st.pool.Query(ctx, `SELECT `+cols+` FROM tasks WHERE `+strings.Join(where, " AND ")+
		` ORDER BY submitted_at DESC, id DESC LIMIT `+arg(f.Limit), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Task, error) { return scanTask(r) })
}

// RequestCancel flags unfinished task id for cancellation by its runner.
func (st *Store) RequestCancel(ctx context.Context, id string) error {
	_, err := st.pool.Exec(ctx, `UPDATE tasks SET cancel_requested = true WHERE id = $1 AND finished_at IS NULL`, id)
	return err
}

// UnfinishedTasks returns the ids of session sessionID's unfinished tasks.
func (st *Store) UnfinishedTasks(ctx context.Context, sessionID string) ([]string, error) {
	rows, err := st.pool.Query(ctx, `SELECT id FROM tasks WHERE session_id = $1 AND finished_at IS NULL ORDER BY seq`, sessionID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CancelRequested returns the unfinished tasks of runnerID flagged for cancellation.
func (st *Store) CancelRequested(ctx context.Context, runnerID string) ([]string, error) {
	rows, err := st.pool.Query(ctx, `SELECT id FROM tasks WHERE runner_id = $1 AND cancel_requested AND finished_at IS NULL`, runnerID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// OrphanedTasks returns up to limit running tasks (started, unfinished, not queued unless a
// started background process, which its transport no longer delivers) whose
// runner has not sent a heartbeat since staleBefore (or is unknown), oldest first: the ones
// another runner may adopt (AdoptTask) before MarkLostTasks gives them up.
func (st *Store) OrphanedTasks(ctx context.Context, staleBefore time.Time, limit int) ([]store.Task, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+taskCols+` FROM tasks t
		WHERE t.finished_at IS NULL AND t.started_at IS NOT NULL AND (NOT t.queued OR t.pid IS NOT NULL)
		  AND NOT EXISTS (SELECT 1 FROM runners r WHERE r.id = t.runner_id AND r.heartbeat_at >= $1)
		ORDER BY t.started_at, t.id LIMIT $2`, staleBefore, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Task, error) { return scanTask(row) })
}

// AdoptTask makes runnerID the runner of task id if it is still unfinished and its runner
// still has sent no heartbeat since staleBefore; it reports whether it did (false: finished,
// or adopted by someone else first).
func (st *Store) AdoptTask(ctx context.Context, id, runnerID string, staleBefore time.Time) (bool, error) {
	tag, err := st.pool.Exec(ctx, `UPDATE tasks t SET runner_id = $2
		WHERE t.id = $1 AND t.finished_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM runners r WHERE r.id = t.runner_id AND r.heartbeat_at >= $3)`, id, runnerID, staleBefore)
	return tag.RowsAffected() == 1, err
}

// MarkLostTasks finishes every unfinished task whose runner has not sent a heartbeat since
// staleBefore (or is unknown) as `lost`, and returns how many. The error says whether the
// task had started (its outcome is unknown) or never ran (submit it again: its request was
// only in the dead process).
func (st *Store) MarkLostTasks(ctx context.Context, staleBefore, now time.Time, ttl time.Duration) (int64, error) {
	var n int64
	err := st.pool.QueryRow(ctx, `WITH lost AS (
UPDATE tasks t SET status = 'lost', finished_at = $2, expires_at = $3, error_type = 'lost',
       error = CASE WHEN t.started_at IS NULL
         THEN 'the gateway process holding this task stopped before it started (runner ' || t.runner_id || '); it never ran: submit it again'
         ELSE 'the gateway process running this task stopped before it finished (runner ' || t.runner_id || '); its outcome is unknown' END
 WHERE t.finished_at IS NULL
   AND (NOT t.queued OR t.pid IS NOT NULL) -- a queued task is redelivered by its transport, unless it is a started background process
   AND NOT EXISTS (SELECT 1 FROM runners r WHERE r.id = t.runner_id AND r.heartbeat_at >= $1)
 RETURNING t.id, t.started_at),
	audited AS (
UPDATE audit_events a SET status = 'lost', error_type = 'lost', finished_at = $2,
       duration_ms = (extract(epoch FROM $2::timestamptz - lost.started_at) * 1000)::bigint
  FROM lost WHERE a.task_id = lost.id)
SELECT count(*) FROM lost`,
		staleBefore, now, now.Add(ttl)).Scan(&n)
	return n, err
}

// DeleteExpiredTasks removes finished tasks past their TTL.
func (st *Store) DeleteExpiredTasks(ctx context.Context, now time.Time) (int64, error) {
	tag, err := st.pool.Exec(ctx, `DELETE FROM tasks WHERE expires_at < $1`, now)
	return tag.RowsAffected(), err
}

// Usage is what a principal holds now: its sessions, its unfinished executions, its
// background processes, its live named contexts, the output its finished tasks keep, its
// snapshots and their bytes.
func (st *Store) Usage(ctx context.Context, ownerID string) (store.Held, error) {
	var h store.Held
	err := st.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM sessions WHERE owner_id = $1),
		count(*) FILTER (WHERE NOT background), count(*) FILTER (WHERE background),
		(SELECT count(*) FROM contexts c WHERE c.owner_id = $1 AND `+liveContexts+`),
		(SELECT COALESCE(sum(output_bytes), 0) FROM tasks WHERE owner_id = $1 AND output_bytes > 0),
		(SELECT count(*) FROM snapshots WHERE owner_id = $1 AND kind = 'user'),
		(SELECT COALESCE(sum(size_bytes), 0)::bigint FROM snapshots WHERE owner_id = $1)
		FROM tasks WHERE owner_id = $1 AND finished_at IS NULL`, ownerID).Scan(&h.Sessions, &h.Executions, &h.Background, &h.Contexts, &h.RetainedOutputBytes, &h.Snapshots, &h.SnapshotBytes)
	return h, err
}

// StartedProcess records that background process id started as process pid in its sandbox:
// it no longer holds its session's line (EarlierUnfinished), and OrphanedTasks offers it for
// adoption when its runner stops, queued or not.
func (st *Store) StartedProcess(ctx context.Context, id string, pid int) error {
	_, err := st.pool.Exec(ctx, `UPDATE tasks SET pid = $2 WHERE id = $1 AND background`, id, max(pid, 0))
	return err
}
