package postgres_test

import (
	"context"
	"testing"

	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/store/storetest"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// TestConformance runs the store.Store conformance suite against Postgres, each test on a
// database of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return countingLocks{pgtest.Store(t)} })
}

// countingLocks lets the suite see a session lock's queue (storetest.LockQueuer): the
// tickets in session_locks, the holder's and the waiters'.
type countingLocks struct{ *postgres.Store }

func (s countingLocks) LockQueueLen(ctx context.Context, sessionID string) (int, error) {
	var n int
	err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM session_locks WHERE session_id = $1`, sessionID).Scan(&n)
	return n, err
}
