package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

// principalLabelOf is the SQL for "issuer#subject" of the principal whose id is param.
func principalLabelOf(param string) string {
	return `COALESCE((SELECT issuer || '#' || subject FROM principals WHERE id = ` + param + `), '')`
}

// auditTaskInsert is a CTE (named audit) that records the task the CTE named task inserted
// (it returns id and submitted_at) as an execution's audit event: owner, session, profile,
// operation and program are the task's parameters, program the full text (its digest,
// excerpt and size are taken here, before ProgramOf cuts it), apiKey the task's APIKeyID.
func auditTaskInsert(owner, session, profile, operation, digest, excerpt, size, apiKey string) string {
	return `audit AS (INSERT INTO audit_events (at, kind, principal_id, principal, session_id, profile, task_id, operation, digest, excerpt, size, status, api_key_id)
		SELECT task.submitted_at, '` + store.AuditExecution + `', ` + owner + `, ` + principalLabelOf(owner) + `, ` + session + `, ` + profile + `,
			task.id, ` + operation + `, ` + digest + `, ` + excerpt + `, ` + size + `, '` + store.AuditSubmitted + `', ` + apiKey + ` FROM task)`
}

// programAudit returns the digest, excerpt and size of a task's full program.
func programAudit(t store.Task) (string, string, int64) {
	return store.DigestOf(t.Program), store.ExcerptOf(t.Program), int64(len(t.Program))
}

// AppendAudit records e (its ID and Principal are set by the store; Status defaults to
// "succeeded"). Its principal must be a recorded one.
func (st *Store) AppendAudit(ctx context.Context, e store.AuditEvent) error {
	if e.Status == "" {
		e.Status = "succeeded"
	}
	_, err := st.pool.Exec(ctx, `INSERT INTO audit_events (at, kind, principal_id, principal, session_id, profile, operation, target, digest, excerpt, size, status, error_type, api_key_id)
		VALUES ($1, $2, $3, `+principalLabelOf("$3")+`, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		e.At, e.Kind, e.PrincipalID, e.SessionID, e.Profile, e.Operation, e.Target, e.Digest, e.Excerpt, e.Size, e.Status, e.ErrorType, e.APIKeyID)
	return err
}

const auditCols = `id, at, kind, principal_id::text, principal, session_id, profile, COALESCE(task_id, ''), operation, target, digest, excerpt, size,
	status, error_type, exit_code, duration_ms, finished_at, api_key_id`

// ListAudit returns up to f.Limit events of the filter, newest (highest id) first.
func (st *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error) {
	var args []any
	where := []string{"true"}
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if f.Principal != "" {
		n := arg(f.Principal)
		where = append(where, "(principal = "+n+" OR principal_id::text = "+n+")")
	}
	if f.SessionID != "" {
		where = append(where, "session_id = "+arg(f.SessionID))
	}
	if f.Kind != "" {
		where = append(where, "kind = "+arg(f.Kind))
	}
	if f.APIKeyID != "" {
		where = append(where, "api_key_id = "+arg(f.APIKeyID))
	}
	if !f.Since.IsZero() {
		where = append(where, "at >= "+arg(f.Since))
	}
	if !f.Until.IsZero() {
		where = append(where, "at < "+arg(f.Until))
	}
	if f.BeforeID > 0 {
		where = append(where, "id < "+arg(f.BeforeID))
	}
	rows, err := st.pool.Query(ctx, `SELECT `+auditCols+` FROM audit_events WHERE `+strings.Join(where, " AND ")+
		` ORDER BY id DESC LIMIT `+arg(f.Limit), args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditEvent, error) {
		var e store.AuditEvent
		err := r.Scan(&e.ID, &e.At, &e.Kind, &e.PrincipalID, &e.Principal, &e.SessionID, &e.Profile, &e.TaskID, &e.Operation, &e.Target,
			&e.Digest, &e.Excerpt, &e.Size, &e.Status, &e.ErrorType, &e.ExitCode, &e.DurationMS, &e.FinishedAt, &e.APIKeyID)
		return e, err
	})
}

// auditDeleteBatch bounds the rows one DELETE of DeleteAuditBefore removes, so that a
// retention pass over a large backlog holds no long lock.
const auditDeleteBatch = 5000

// DeleteAuditBefore removes the audit events that happened before cutoff — except those of
// executions still unfinished, whose completion is yet to be recorded — and returns how many.
func (st *Store) DeleteAuditBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := st.pool.Exec(ctx, `DELETE FROM audit_events WHERE id IN (
			SELECT id FROM audit_events WHERE at < $1 AND (task_id IS NULL OR finished_at IS NOT NULL) LIMIT $2)`, cutoff, auditDeleteBatch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < auditDeleteBatch {
			return total, nil
		}
	}
}
