package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandgate/sandgate/internal/store"
)

const sessionCols = `id, COALESCE(owner_id::text, ''), profile, provider, scope, name, labels, is_default,
	COALESCE(sandbox_id, ''), status, COALESCE(pending_notice, ''), created_at, last_used_at,
	paused_at, paused_idle, COALESCE(parked_snapshot, ''), destroy_attempts, destroy_retry_at, COALESCE(destroy_error, ''),
	expires_at, on_expiry, env, COALESCE(cpu, 0), COALESCE(memory_mb, 0), secrets`

func scanSession(row pgx.Row) (store.Session, error) { return scanSessionAfter(row) }

// scanSessionAfter scans a row of the columns of before, then sessionCols.
func scanSessionAfter(row pgx.Row, before ...any) (store.Session, error) {
	var s store.Session
	var labels, env, secrets []byte
	var paused, retry, expires *time.Time
	err := row.Scan(append(before, &s.ID, &s.OwnerID, &s.Profile, &s.Provider, &s.Scope, &s.Name, &labels, &s.IsDefault,
		&s.SandboxID, &s.Status, &s.PendingNotice, &s.CreatedAt, &s.LastUsedAt, &paused, &s.PausedIdle, &s.ParkedSnapshot,
		&s.DestroyAttempts, &retry, &s.DestroyError, &expires, &s.OnExpiry, &env, &s.CPU, &s.MemoryMB, &secrets)...)
	if err != nil {
		return store.Session{}, notFound(err)
	}
	if expires != nil {
		s.ExpiresAt = *expires
	}
	if paused != nil {
		s.PausedAt = *paused
	}
	if retry != nil {
		s.DestroyRetryAt = *retry
	}
	s.Labels, s.Env, s.Secrets = map[string]string{}, map[string]string{}, map[string]string{}
	if len(labels) > 0 {
		if err := json.Unmarshal(labels, &s.Labels); err != nil {
			return store.Session{}, fmt.Errorf("store: session %s labels: %w", s.ID, err)
		}
	}
	if len(env) > 0 {
		if err := json.Unmarshal(env, &s.Env); err != nil {
			return store.Session{}, fmt.Errorf("store: session %s env: %w", s.ID, err)
		}
	}
	if len(secrets) > 0 {
		if err := json.Unmarshal(secrets, &s.Secrets); err != nil {
			return store.Session{}, fmt.Errorf("store: session %s secrets: %w", s.ID, err)
		}
	}
	return s, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullableTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// onExpiry is what the on_expiry column holds for v ("": ExpireDestroy).
func onExpiry(v string) string {
	if v == "" {
		return store.ExpireDestroy
	}
	return v
}

// CreateSession inserts s.
func (st *Store) CreateSession(ctx context.Context, s store.Session) error {
	return st.CreateSessionWithin(ctx, s, 0)
}

// CreateSessionWithin inserts s unless its owner already owns limit sessions (limit ≤ 0: no
// limit), then ErrQuota and nothing inserted; checked in the same statement. A zero
// ExpiresAt is none; an empty OnExpiry is store.ExpireDestroy.
func (st *Store) CreateSessionWithin(ctx context.Context, s store.Session, limit int) error {
	labels, err := json.Marshal(s.Labels)
	if err != nil {
		return err
	}
	if s.Labels == nil {
		labels = []byte("{}")
	}
	env := []byte("{}")
	if len(s.Env) > 0 {
		if env, err = json.Marshal(s.Env); err != nil {
			return err
		}
	}
	secrets := []byte("{}")
	if len(s.Secrets) > 0 {
		if secrets, err = json.Marshal(s.Secrets); err != nil {
			return err
		}
	}
	tag, err := st.pool.Exec(ctx, `
INSERT INTO sessions (id, owner_id, profile, provider, scope, name, labels, is_default, sandbox_id, status, created_at, last_used_at, expires_at, on_expiry, env, cpu, memory_mb, secrets)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $13, $14, $15, NULLIF($16::double precision, 0), NULLIF($17::int, 0), $18
 WHERE $2::uuid IS NULL OR $12::int <= 0 OR (SELECT count(*) FROM sessions WHERE owner_id = $2) < $12`,
		s.ID, nullable(s.OwnerID), s.Profile, s.Provider, s.Scope, s.Name, labels, s.IsDefault, nullable(s.SandboxID), s.Status, s.CreatedAt, limit,
		nullableTime(s.ExpiresAt), onExpiry(s.OnExpiry), env, s.CPU, s.MemoryMB, secrets)
	if err == nil && tag.RowsAffected() == 0 {
		return store.ErrQuota
	}
	return err
}

// EnsureDefaultSession returns the default session of (ownerID, profile) — for ownerID ""
// the profile's shared per_runtime session — inserting candidate when none exists. Concurrent
// callers get the same row. A closed session is neither (SessionClosed).
func (st *Store) EnsureDefaultSession(ctx context.Context, candidate store.Session) (store.Session, error) {
	for range 3 {
		var row pgx.Row
		if candidate.OwnerID == "" {
			row = st.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE owner_id IS NULL AND profile = $1 AND status <> 'closed'`, candidate.Profile)
		} else {
			row = st.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE owner_id = $1 AND profile = $2 AND is_default AND status <> 'closed'`, candidate.OwnerID, candidate.Profile)
		}
		s, err := scanSession(row)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return store.Session{}, err
		}
		candidate.IsDefault = true
		err = st.CreateSession(ctx, candidate)
		var pgErr *pgconn.PgError
		if err == nil {
			return candidate, nil
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" { // unique_violation: lost a race; read again
			return store.Session{}, err
		}
	}
	return store.Session{}, errors.New("store: could not create the default session")
}

// GetSession returns session id.
func (st *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	return scanSession(st.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, id))
}

// ListSessions returns the owner's sessions plus shared per_runtime sessions (or all with
// f.All), newest first.
func (st *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if !f.All {
		where = append(where, "(owner_id = "+arg(f.OwnerID)+" OR owner_id IS NULL)")
	}
	if f.Profile != "" {
		where = append(where, "profile = "+arg(f.Profile))
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(f.Status))
	}
	if f.Conversation != "" {
		where = append(where, "labels->>'conversation' = "+arg(f.Conversation))
	}
	if len(f.Labels) > 0 {
		b, err := json.Marshal(f.Labels)
		if err != nil {
			return nil, err
		}
		where = append(where, "labels @> "+arg(string(b))+"::jsonb")
	}
	if f.AfterID != "" {
		where = append(where, "(created_at, id) < ("+arg(f.AfterCreated)+", "+arg(f.AfterID)+")")
	}
	q := `SELECT ` + sessionCols + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT " + arg(f.Limit)
	rows, err := st.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Session, error) { return scanSession(r) })
}

// UpdateSessionBackend records the session's sandbox handle (sandboxID "" after a destroy),
// its status and last use, and clears a delivered pending notice. A sandbox just bound runs:
// the session is no longer paused nor parked. A closed session is left as it is.
func (st *Store) UpdateSessionBackend(ctx context.Context, id, sandboxID, status string, lastUsed time.Time) error {
	_, err := st.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = $2, status = $3, last_used_at = GREATEST(last_used_at, $4), pending_notice = NULL,
		paused_at = NULL, paused_idle = false, parked_snapshot = NULL WHERE id = $1 AND status <> 'closed'`,
		id, nullable(sandboxID), status, lastUsed)
	return err
}

// ResetSession forgets the sandbox of session id (destroyed elsewhere), records createdAt as
// its new start and leaves notice for its next operation; the session is no longer paused.
// A closed session is left as it is (false).
func (st *Store) ResetSession(ctx context.Context, id string, notice string, createdAt time.Time, ifSandbox string) (bool, error) {
	tag, err := st.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = NULL, status = 'active', created_at = $3, pending_notice = $2,
		paused_at = NULL, paused_idle = false WHERE id = $1 AND sandbox_id = $4 AND status <> 'closed'`, id, nullable(notice), createdAt, ifSandbox)
	return tag.RowsAffected() == 1, err
}

// ResetIdleSession is ResetSession for the idle sweeper: it only resets when the session is
// still unused since before cutoff and has no unfinished task.
func (st *Store) ResetIdleSession(ctx context.Context, id, notice string, createdAt time.Time, ifSandbox string, cutoff time.Time) (bool, error) {
	tag, err := st.pool.Exec(ctx, `UPDATE sessions s SET sandbox_id = NULL, status = 'active', created_at = $3, pending_notice = $2,
		paused_at = NULL, paused_idle = false
		WHERE id = $1 AND sandbox_id = $4 AND last_used_at < $5 AND status <> 'closed'
		  AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = s.id AND t.finished_at IS NULL)`, id, nullable(notice), createdAt, ifSandbox, cutoff)
	return tag.RowsAffected() == 1, err
}

// PauseSession records that the sandbox of session id was paused at at (idle: by the idle
// sweeper) and, unless notice is "", leaves notice for its next operation — only while the
// session still has sandbox ifSandbox and is not paused; false otherwise.
func (st *Store) PauseSession(ctx context.Context, id, ifSandbox string, at time.Time, idle bool, notice string) (bool, error) {
	tag, err := st.pool.Exec(ctx, `UPDATE sessions SET paused_at = $3, paused_idle = $4, pending_notice = COALESCE($5, pending_notice)
		WHERE id = $1 AND sandbox_id = $2 AND paused_at IS NULL`, id, ifSandbox, at, idle, nullable(notice))
	return tag.RowsAffected() == 1, err
}

// ResumeSession records that session id's sandbox runs again (no longer paused).
func (st *Store) ResumeSession(ctx context.Context, id string) error {
	_, err := st.pool.Exec(ctx, `UPDATE sessions SET paused_at = NULL, paused_idle = false WHERE id = $1`, id)
	return err
}

// ParkSession forgets the sandbox of session id (destroyed elsewhere) after its workspace was
// captured in snapshot snapshotID, which the next use restores, and leaves notice for that
// use — only while the session still has sandbox ifSandbox; false otherwise.
func (st *Store) ParkSession(ctx context.Context, id, ifSandbox, snapshotID, notice string) (bool, error) {
	tag, err := st.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = NULL, parked_snapshot = $3, pending_notice = $4, paused_at = NULL, paused_idle = false
		WHERE id = $1 AND sandbox_id = $2`, id, ifSandbox, snapshotID, nullable(notice))
	return tag.RowsAffected() == 1, err
}

// RestoreSession records sandboxID, restored from the snapshot session id was parked in, as
// its sandbox and a use at lastUsed; it is neither parked nor paused any more, and its pending
// notice stays.
func (st *Store) RestoreSession(ctx context.Context, id, sandboxID string, lastUsed time.Time) error {
	_, err := st.pool.Exec(ctx, `UPDATE sessions SET sandbox_id = $2, status = 'active', last_used_at = GREATEST(last_used_at, $3),
		paused_at = NULL, paused_idle = false, parked_snapshot = NULL WHERE id = $1 AND status <> 'closed'`, id, nullable(sandboxID), lastUsed)
	return err
}

// TouchSession records a use of session id at t.
func (st *Store) TouchSession(ctx context.Context, id string, t time.Time) error {
	_, err := st.pool.Exec(ctx, `UPDATE sessions SET last_used_at = GREATEST(last_used_at, $2) WHERE id = $1`, id, t)
	return err
}

// SandboxInUse reports whether a session refers to sandbox id, or an unfinished task of an
// ephemeral (per_call) run might (those are not recorded as sessions).
func (st *Store) SandboxInUse(ctx context.Context, id string) (bool, error) {
	var used bool
	err := st.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE sandbox_id = $1)
		OR EXISTS (SELECT 1 FROM tasks WHERE finished_at IS NULL AND session_id NOT IN (SELECT id FROM sessions))`, id).Scan(&used)
	return used, err
}

// SessionOfSandbox returns the session whose sandbox is sandboxID.
func (st *Store) SessionOfSandbox(ctx context.Context, sandboxID string) (store.Session, error) {
	if sandboxID == "" {
		return store.Session{}, store.ErrNotFound
	}
	return scanSession(st.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE sandbox_id = $1 ORDER BY created_at DESC, id LIMIT 1`, sandboxID))
}

// DestroyFailed records that destroying sandbox sandboxID of session id failed at now with
// error why: the session is closed (SessionClosed) — kept, taking no new work, no longer a
// default nor a shared session, its contexts released, its pending notice dropped — and the
// next attempt is due at retryAt; destroy_attempts counts this one. False (nothing changed)
// when the session is gone or no longer has sandbox sandboxID.
func (st *Store) DestroyFailed(ctx context.Context, id, sandboxID, why string, retryAt time.Time) (bool, error) {
	var n int
	err := st.pool.QueryRow(ctx, `WITH closed AS (
			UPDATE sessions SET status = 'closed', destroy_attempts = destroy_attempts + 1, destroy_retry_at = $3, destroy_error = $4,
				pending_notice = NULL
			WHERE id = $1 AND sandbox_id = $2 RETURNING id),
		released AS (DELETE FROM contexts WHERE session_id IN (SELECT id FROM closed))
		SELECT count(*) FROM closed`, id, sandboxID, retryAt, why).Scan(&n)
	return n == 1, err
}

// DestroyRetries returns up to limit closed sessions whose next destroy attempt is due at now,
// the longest due first.
func (st *Store) DestroyRetries(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE status = 'closed' AND destroy_retry_at <= $1 ORDER BY destroy_retry_at, id LIMIT $2`, now, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Session, error) { return scanSession(r) })
}

// SetSessionExpiry sets when session id's lifetime ends (zero: it has none) and what ends it
// (onExpiry, "" keeps what it was). A closed session is left as it is. ErrNotFound for an
// unknown (or closed) session.
func (st *Store) SetSessionExpiry(ctx context.Context, id string, at time.Time, onExpiry string) error {
	tag, err := st.pool.Exec(ctx, `UPDATE sessions SET expires_at = $2, on_expiry = COALESCE($3, on_expiry) WHERE id = $1 AND status <> 'closed'`,
		id, nullableTime(at), nullable(onExpiry))
	if err == nil && tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return err
}

// EditSession changes session id's name and labels as edit says, the row locked (FOR
// UPDATE) from the read to the write: concurrent edits apply one after the other.
func (st *Store) EditSession(ctx context.Context, id string, edit func(s *store.Session) error) (store.Session, error) {
	var out store.Session
	err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		s, err := scanSession(tx.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if err := edit(&s); err != nil {
			return err
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		labels, err := json.Marshal(s.Labels)
		if err != nil {
			return err
		}
		out, err = scanSession(tx.QueryRow(ctx, `UPDATE sessions SET name = $2, labels = $3 WHERE id = $1 RETURNING `+sessionCols, id, s.Name, labels))
		return err
	})
	if err != nil {
		return store.Session{}, err
	}
	return out, nil
}

// ExpiredSessions returns up to limit sessions whose lifetime ended at now or before, the
// longest ended first; closed ones not (their sandbox is being destroyed).
func (st *Store) ExpiredSessions(ctx context.Context, now time.Time, limit int) ([]store.Session, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE expires_at IS NOT NULL AND expires_at <= $1 AND status <> 'closed' ORDER BY expires_at, id LIMIT $2`, now, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Session, error) { return scanSession(r) })
}

// DeleteSession removes session id.
func (st *Store) DeleteSession(ctx context.Context, id string) error {
	_, err := st.pool.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, id)
	return err
}

// IdleSessions returns up to limit sessions of profile with a sandbox that is not paused,
// unused since before cutoff, with no unfinished task, least recently used first. Shared rows
// included; closed ones not (their sandbox is being destroyed).
func (st *Store) IdleSessions(ctx context.Context, profile string, cutoff time.Time, limit int) ([]store.Session, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+sessionCols+` FROM sessions s
		WHERE sandbox_id IS NOT NULL AND paused_at IS NULL AND profile = $1 AND last_used_at < $2 AND status <> 'closed'
		  AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = s.id AND t.finished_at IS NULL)
		ORDER BY last_used_at LIMIT $3`, profile, cutoff, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Session, error) { return scanSession(r) })
}
