package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

// Counts reads the database-wide counts in one round trip (three grouped scans).
func (st *Store) Counts(ctx context.Context) (store.Counts, error) {
	var c store.Counts
	b := &pgx.Batch{}
	collect := func(dst *[]store.Count) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			var err error
			*dst, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Count, error) {
				var n store.Count
				err := r.Scan(&n.Profile, &n.State, &n.N)
				return n, err
			})
			return err
		}
	}
	b.Queue(`SELECT profile, CASE WHEN status = '` + store.SessionClosed + `' THEN '` + store.SessionDestroyFailed + `'
			WHEN sandbox_id IS NULL OR sandbox_id = '' THEN '` + store.SessionUnprovisioned + `' ELSE '` + store.SessionProvisioned + `' END AS state, count(*)
		FROM sessions GROUP BY 1, 2 ORDER BY 1, 2`).Query(collect(&c.Sessions))
	b.Queue(`SELECT profile, status, count(*) FROM tasks GROUP BY 1, 2 ORDER BY 1, 2`).Query(collect(&c.Tasks))
	b.Queue(`SELECT count(*) FROM tasks WHERE queued AND started_at IS NULL AND finished_at IS NULL`).
		QueryRow(func(r pgx.Row) error { return r.Scan(&c.QueueDepth) })
	if err := st.pool.SendBatch(ctx, b).Close(); err != nil {
		return store.Counts{}, err
	}
	return c, nil
}
