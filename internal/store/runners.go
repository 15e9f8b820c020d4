package store

import (
	"context"
	"errors"
	"time"
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

// ErrLockHeld is returned by TryExclusive when another replica holds the lock.
var ErrLockHeld = errors.New("store: lock held elsewhere")

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
		return ErrLockHeld
	}
	if err := fn(ctx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// LockSession blocks until it holds the session-scoped advisory lock for session id (waiters
// are granted in arrival order by Postgres), serialising executions and writes of one session
// across replicas. The returned unlock releases it; it holds one connection of the lock pool
// (never the query pool) meanwhile.
func (st *Store) LockSession(ctx context.Context, id string) (unlock func(), err error) {
	conn, err := st.locks.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(1936, hashtext($1))`, id); err != nil {
		// The wait may have been cancelled just as the lock was granted: never return a
		// connection that might hold it to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
		return nil, err
	}
	// unlock returns at once: the release round trip runs in the background, so the caller's
	// response does not wait for it (the next holder's pg_advisory_lock waits instead).
	return func() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(1936, hashtext($1))`, id); err != nil {
				// The lock cannot be proven released: drop the connection so Postgres frees it.
				_ = conn.Conn().Close(ctx)
			}
			conn.Release()
		}()
	}, nil
}
