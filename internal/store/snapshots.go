package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Snapshot kinds.
const (
	SnapshotUser = "user" // taken by a caller: counts against sandbox.quotas.snapshots
	SnapshotIdle = "idle" // parks an idle session (idle_action snapshot) until its next use
)

// Snapshot is a persisted capture of a session's sandbox. OwnerID is "" for the idle capture
// of a shared per_runtime session.
type Snapshot struct {
	ID        string
	OwnerID   string
	SessionID string // the session whose sandbox was captured (it may be gone since)
	Profile   string
	Provider  string
	Name      string
	Kind      string // SnapshotUser or SnapshotIdle
	Ref       string // the provider's handle (an image, a folder)
	SizeBytes int64
	CreatedAt time.Time
}

const snapshotCols = `id, COALESCE(owner_id::text, ''), session_id, profile, provider, name, kind, ref, size_bytes, created_at`

func scanSnapshot(row pgx.Row) (Snapshot, error) {
	var s Snapshot
	err := row.Scan(&s.ID, &s.OwnerID, &s.SessionID, &s.Profile, &s.Provider, &s.Name, &s.Kind, &s.Ref, &s.SizeBytes, &s.CreatedAt)
	return s, notFound(err)
}

// CreateSnapshotWithin inserts s unless its owner already has limit snapshots of kind
// SnapshotUser (limit ≤ 0, an owner "" or s of another kind: no limit), then ErrQuota and
// nothing inserted; checked in the same statement. A duplicate id is an error.
func (st *Store) CreateSnapshotWithin(ctx context.Context, s Snapshot, limit int) error {
	tag, err := st.pool.Exec(ctx, `
INSERT INTO snapshots (id, owner_id, session_id, profile, provider, name, kind, ref, size_bytes, created_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
 WHERE $2::uuid IS NULL OR $11::int <= 0 OR $7 <> 'user'
    OR (SELECT count(*) FROM snapshots WHERE owner_id = $2 AND kind = 'user') < $11`,
		s.ID, nullable(s.OwnerID), s.SessionID, s.Profile, s.Provider, s.Name, s.Kind, s.Ref, s.SizeBytes, s.CreatedAt, limit)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrQuota
	}
	return err
}

// GetSnapshot returns snapshot id.
func (st *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	return scanSnapshot(st.pool.QueryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = $1`, id))
}

// SnapshotFilter selects snapshots for ListSnapshots.
type SnapshotFilter struct {
	OwnerID      string // with All "": every owner's
	All          bool
	SessionID    string
	Limit        int
	AfterCreated time.Time // keyset cursor: strictly older than (AfterCreated, AfterID)
	AfterID      string
}

// ListSnapshots returns the filter's snapshots (the owner's, or all with f.All), newest
// first (created_at, then id).
func (st *Store) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error) {
	if f.Limit <= 0 {
		return nil, errors.New("store: ListSnapshots needs a positive limit")
	}
	if !f.All && f.OwnerID == "" {
		return []Snapshot{}, nil // nobody's: no rows (the idle captures of shared sessions need All)
	}
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if !f.All {
		where = append(where, "owner_id = "+arg(f.OwnerID))
	}
	if f.SessionID != "" {
		where = append(where, "session_id = "+arg(f.SessionID))
	}
	if f.AfterID != "" {
		where = append(where, "(created_at, id) < ("+arg(f.AfterCreated)+", "+arg(f.AfterID)+")")
	}
	q := `SELECT ` + snapshotCols + ` FROM snapshots`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT " + arg(f.Limit)
	rows, err := st.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Snapshot, error) { return scanSnapshot(r) })
}

// DeleteSnapshot removes snapshot id; false when there was none.
func (st *Store) DeleteSnapshot(ctx context.Context, id string) (bool, error) {
	tag, err := st.pool.Exec(ctx, `DELETE FROM snapshots WHERE id = $1`, id)
	return tag.RowsAffected() == 1, err
}

// SigningKey returns the key named name, recording candidate (made at now) as that key when
// there is none yet: every replica gets the key the first one recorded.
func (st *Store) SigningKey(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error) {
	var key []byte
	err := st.pool.QueryRow(ctx, `WITH ins AS (
		INSERT INTO signing_keys (name, key, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING RETURNING key)
		SELECT key FROM ins UNION ALL SELECT key FROM signing_keys WHERE name = $1 LIMIT 1`, name, candidate, now).Scan(&key)
	return key, err
}
