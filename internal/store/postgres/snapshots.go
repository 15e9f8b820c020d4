package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

const snapshotCols = `id, COALESCE(owner_id::text, ''), session_id, profile, provider, name, kind, ref, size_bytes, created_at`

func scanSnapshot(row pgx.Row) (store.Snapshot, error) {
	var s store.Snapshot
	err := row.Scan(&s.ID, &s.OwnerID, &s.SessionID, &s.Profile, &s.Provider, &s.Name, &s.Kind, &s.Ref, &s.SizeBytes, &s.CreatedAt)
	return s, notFound(err)
}

// CreateSnapshotWithin inserts s unless it is of kind SnapshotUser with an owner who already
// has lim.Count such snapshots (ErrQuota) or whose snapshots, idle captures included, would
// take more than lim.Bytes with s (ErrSnapshotBytes); nothing is inserted then. Checked in
// the same statement. Idle captures and snapshots without an owner are never refused. A
// duplicate id is an error.
func (st *Store) CreateSnapshotWithin(ctx context.Context, s store.Snapshot, lim store.SnapshotLimits) error {
	var inserted bool
	var count int
	var bytes int64
	err := st.pool.QueryRow(ctx, `
WITH held AS (
  SELECT count(*) FILTER (WHERE kind = 'user') AS n, COALESCE(sum(size_bytes), 0)::bigint AS bytes
    FROM snapshots WHERE owner_id = $2::uuid),
ins AS (
INSERT INTO snapshots (id, owner_id, session_id, profile, provider, name, kind, ref, size_bytes, created_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
 WHERE $2::uuid IS NULL OR $7 <> 'user'
    OR (($11::int <= 0 OR (SELECT n FROM held) < $11) AND ($12::bigint <= 0 OR (SELECT bytes FROM held) + $9 <= $12))
RETURNING 1)
SELECT EXISTS (SELECT 1 FROM ins), (SELECT n FROM held), (SELECT bytes FROM held)`,
		s.ID, nullable(s.OwnerID), s.SessionID, s.Profile, s.Provider, s.Name, s.Kind, s.Ref, s.SizeBytes, s.CreatedAt,
		lim.Count, lim.Bytes).Scan(&inserted, &count, &bytes)
	switch {
	case err != nil:
		return err
	case inserted:
		return nil
	case lim.Count > 0 && count >= lim.Count:
		return store.ErrQuota
	}
	return store.ErrSnapshotBytes
}

// GetSnapshot returns snapshot id.
func (st *Store) GetSnapshot(ctx context.Context, id string) (store.Snapshot, error) {
	return scanSnapshot(st.pool.QueryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = $1`, id))
}

// ListSnapshots returns the filter's snapshots (the owner's, or all with f.All), newest
// first (created_at, then id).
func (st *Store) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error) {
	if f.Limit <= 0 {
		return nil, errors.New("store: ListSnapshots needs a positive limit")
	}
	if !f.All && f.OwnerID == "" {
		return []store.Snapshot{}, nil // nobody's: no rows (the idle captures of shared sessions need All)
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
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Snapshot, error) { return scanSnapshot(r) })
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
