// Package postgres is the response store in Postgres (store.Store and store.Queue):
// principals, sessions, tasks and the runners (gateway replicas) that execute them, shared by
// every replica and worker. It owns the pgx pool and the goose migrations of /migrations; it
// makes no decisions (those belong to internal/sandbox). Only the composition root
// (internal/gateway) imports it.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sandgate/sandgate/migrations"

	"github.com/sandgate/sandgate/internal/store"
)

// Store is the Postgres-backed persistence layer. It is safe for concurrent use.
type Store struct {
	pool db // the pgx pool; its errors of an unreachable database are fault.Unavailable
	// locks grants the per-session locks (sessionlock.go): tickets in a table, no connection
	// held per lock.
	locks *sessionLocks
	// finishes group-commit the completions (finishes.go).
	finishes *finishes
	db       *sql.DB // database/sql view of pool, for goose
}

// Open connects to url (a postgres:// URL or libpq key/value string) with at most maxConns
// connections for queries (0: pgx's default) and checks the connection. It also opens one
// more connection, held for the Store's life, that marks this replica present for the
// session locks and carries their release notifications (see LockSession).
func Open(ctx context.Context, url string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse database.url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to %s: %w", cfg.ConnConfig.Host, err)
	}
	s := &Store{pool: db{pool}, db: stdlib.OpenDBFromPool(pool)}
	s.locks = newSessionLocks(s, cfg.ConnConfig.Copy())
	s.finishes = newFinishes(s)
	if err := s.finishes.readStart(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: read the server's start time: %w", err)
	}
	return s, nil
}

// Pool exposes the pgx pool (for LISTEN/NOTIFY and advisory locks held on one connection).
func (s *Store) Pool() *pgxpool.Pool { return s.pool.Pool }

// Close releases all connections. Session locks still held are released by Postgres with the
// presence connection.
func (s *Store) Close() {
	s.finishes.close()
	s.locks.close()
	_ = s.db.Close()
	s.pool.Close()
}

func (s *Store) migrator() (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, s.db, migrations.FS, goose.WithSessionLocker(locker))
}

// Migrate applies pending migrations. Concurrent callers (two replicas starting together)
// serialise on a Postgres advisory lock, so each migration runs exactly once.
func (s *Store) Migrate(ctx context.Context) (applied []int64, err error) {
	p, err := s.migrator()
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// SchemaVersion returns the database's schema version and the version this binary needs.
func (s *Store) SchemaVersion(ctx context.Context) (current, target int64, err error) {
	p, err := goose.NewProvider(goose.DialectPostgres, s.db, migrations.FS)
	if err != nil {
		return 0, 0, err
	}
	return p.GetVersions(ctx)
}

// Ping checks the database is reachable.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Queue = (*Store)(nil)
)
