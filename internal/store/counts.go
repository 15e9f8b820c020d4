package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Session states as Counts reports them.
const (
	// SessionProvisioned: the session holds a sandbox.
	SessionProvisioned = "provisioned"
	// SessionUnprovisioned: no sandbox (not used yet, or freed by an idle reset).
	SessionUnprovisioned = "unprovisioned"
	// SessionDestroyFailed: closed (SessionClosed): destroying its sandbox failed and is
	// retried.
	SessionDestroyFailed = "destroy_failed"
)

// Count is one group of a Counts breakdown.
type Count struct {
	Profile string
	// State is a session state (SessionProvisioned, SessionUnprovisioned,
	// SessionDestroyFailed) or a task status.
	State string
	N     int64
}

// Counts is what the database holds now, for the metrics (docs/semantics.md §14): sessions
// by profile and state, tasks by profile and status (finished ones are kept for
// broker.response_ttl), and the queue's depth — queued executions no worker has started.
type Counts struct {
	Sessions   []Count
	Tasks      []Count
	QueueDepth int64
}

// Counts reads the database-wide counts in one round trip (three grouped scans).
func (st *Store) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	b := &pgx.Batch{}
	collect := func(dst *[]Count) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			var err error
			*dst, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Count, error) {
				var n Count
				err := r.Scan(&n.Profile, &n.State, &n.N)
				return n, err
			})
			return err
		}
	}
	b.Queue(`SELECT profile, CASE WHEN status = '` + SessionClosed + `' THEN '` + SessionDestroyFailed + `'
			WHEN sandbox_id IS NULL OR sandbox_id = '' THEN '` + SessionUnprovisioned + `' ELSE '` + SessionProvisioned + `' END AS state, count(*)
		FROM sessions GROUP BY 1, 2 ORDER BY 1, 2`).Query(collect(&c.Sessions))
	b.Queue(`SELECT profile, status, count(*) FROM tasks GROUP BY 1, 2 ORDER BY 1, 2`).Query(collect(&c.Tasks))
	b.Queue(`SELECT count(*) FROM tasks WHERE queued AND started_at IS NULL AND finished_at IS NULL`).
		QueryRow(func(r pgx.Row) error { return r.Scan(&c.QueueDepth) })
	if err := st.pool.SendBatch(ctx, b).Close(); err != nil {
		return Counts{}, err
	}
	return c, nil
}
