package postgres

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// Heartbeat records that runner id (a gateway replica) is alive at now.
func (st *Store) Heartbeat(ctx context.Context, id, hostname string, now time.Time) error {
	_, err := st.pool.Exec(ctx, `INSERT INTO runners (id, hostname, started_at, heartbeat_at) VALUES ($1, $2, $3, $3)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at`, id, hostname, now)
	return err
}

// RemoveRunner deletes runner id (clean shutdown).
func (st *Store) RemoveRunner(ctx context.Context, id string) error {
	_, err := st.pool.Exec(ctx, `DELETE FROM runners WHERE id = $1`, id)
	return err
}

// DeleteStaleRunners forgets runners silent since before t.
func (st *Store) DeleteStaleRunners(ctx context.Context, t time.Time) error {
	_, err := st.pool.Exec(ctx, `DELETE FROM runners WHERE heartbeat_at < $1`, t)
	return err
}

// TryExclusive runs fn inside a transaction holding the transaction-scoped advisory lock
// `key`, or returns ErrLockHeld at once when another replica holds it (one sweeper at a time).
func (st *Store) TryExclusive(ctx context.Context, key int64, fn func(ctx context.Context) error) error {
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, key).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return store.ErrLockHeld
	}
	if err := fn(ctx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
