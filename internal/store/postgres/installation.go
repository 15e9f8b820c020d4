package postgres

import (
	"context"
	"fmt"
	"time"
)

// Installation returns the id of the installation this database belongs to. The first call
// on a database records candidate as that id (with now as its creation time); every later
// call — from any replica, concurrently or not — returns the recorded one and ignores its
// candidate. It is one statement: of replicas starting together exactly one candidate wins
// and all of them read it.
//
// Errors: the database's, wrapped (a schema without the installation table: run `gateway
// migrate`).
func (st *Store) Installation(ctx context.Context, candidate string, now time.Time) (string, error) {
	var id string
	// ON CONFLICT DO UPDATE (not DO NOTHING) returns the row that is there, also when another
	// transaction committed it after this statement's snapshot was taken.
	err := st.pool.QueryRow(ctx, `INSERT INTO installation (id, created_at) VALUES ($1, $2)
		ON CONFLICT (singleton) DO UPDATE SET id = installation.id
		RETURNING id`, candidate, now).Scan(&id)
	if err != nil {
		return "", fmt.Errorf("store: reading the installation id: %w", err)
	}
	return id, nil
}
