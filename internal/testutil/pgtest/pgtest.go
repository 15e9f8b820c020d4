// Package pgtest gives tests a real, migrated Postgres database of their own.
//
// With SANDGATE_TEST_DATABASE_URL set (a URL whose user may CREATE DATABASE), databases are
// created on that server. Otherwise a throwaway server is started from the machine's Postgres
// binaries under $TMPDIR/sandgate-test-pg (shared by every test process, reused across runs).
// Each test gets a fresh database cloned from a migrated template and dropped afterwards.
//
// Without any Postgres the tests skip with the reason — except under CI=true, where they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/migrations"
)

// template is the migrated database each test's database is cloned from. Its name carries a
// digest of the migrations, so checkouts with different migrations (branches, worktrees)
// sharing one test server never migrate each other's template.
var template = "sandgate_test_template_" + migrationsDigest()

// migrationsDigest is 12 hex digits of SHA-256 over the embedded migrations' names and bytes.
func migrationsDigest() string {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("pgtest: reading the embedded migrations: %v", err))
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

var (
	once     sync.Once
	adminURL string // a URL of the server's "postgres" database
	setupErr error
)

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if u := os.Getenv("SANDGATE_TEST_DATABASE_URL"); u != "" {
		adminURL = u
	} else {
		dir := filepath.Join(os.TempDir(), "sandgate-test-pg")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			setupErr = err
			return
		}
		unlock, err := flock(dir + ".lock")
		if err != nil {
			setupErr = err
			return
		}
		defer unlock()
		inst, err := devdb.Start(ctx, dir)
		if err != nil {
			setupErr = err
			return
		}
		adminURL = inst.URL("postgres")
	}
	setupErr = ensureTemplate(ctx)
}

// ensureTemplate creates and migrates the template database once per server (under a lock
// shared by concurrent test processes through Postgres itself).
func ensureTemplate(ctx context.Context) error {
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock(424242)`); err != nil {
		return err
	}
	defer c.Exec(context.Background(), `SELECT pg_advisory_unlock(424242)`) //nolint:errcheck
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, template).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := c.Exec(ctx, "CREATE DATABASE "+template); err != nil {
			return err
		}
	}
	// Always migrate: a newer migration must reach an existing template.
	st, err := postgres.Open(ctx, dbURL(template), 2)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = st.Migrate(ctx)
	return err
}

func dbURL(name string) string {
	u, err := url.Parse(adminURL)
	if err != nil {
		return adminURL
	}
	u.Path = "/" + name
	return u.String()
}

func flock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// URL returns the URL of a fresh migrated database for t, dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	if setupErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: Postgres is required under CI: %v", setupErr)
		}
		t.Skipf("pgtest: no Postgres for this test (%v); set SANDGATE_TEST_DATABASE_URL or install PostgreSQL", setupErr)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer c.Close(ctx)
	// CREATE DATABASE ... TEMPLATE fails while another session is connected to the template.
	for i := 0; ; i++ {
		_, err = c.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template))
		if err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return dbURL(name)
}

// Store opens a store on a fresh database for t, closed when t ends.
func Store(t testing.TB) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), URL(t), 10)
	if err != nil {
		t.Fatalf("pgtest: open store: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}
