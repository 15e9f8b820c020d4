package gatewaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// ListingSeed is what SeedListing writes: sessions of one principal and finished executions
// spread over them.
type ListingSeed struct {
	// Issuer and Subject name the principal; it is recorded if it is not yet.
	Issuer, Subject string
	// Profile and Provider (its type) are the sessions' and tasks'.
	Profile, Provider string
	// Sessions and Tasks are how many of each (Tasks > 0 needs Sessions > 0).
	Sessions, Tasks int
}

// Listing is what SeedListing wrote: the principal's id and its sessions' and tasks' ids.
// Sessions[i] and Tasks[i] were made i+1 seconds before the seeding started, so a listing's
// order (newest first) is theirs.
type Listing struct {
	OwnerID  string
	Sessions []string
	Tasks    []string
}

// seedWorkers is how many statements SeedListing has in flight.
const seedWorkers = 8

// SeedListing writes s into the migrated database at url through the response store's own
// statements, as a gateway writes them — for measuring listings at scale (bench/), not for
// running anything: the sessions have no sandbox, and each task is an execution of
// `true` that succeeded with empty output, kept for a day, its audit event recorded. The
// tables' planner statistics are refreshed at the end. Ids
// are the hex SHA-256 of "s<i>" and "t<i>" cut to 32 digits; seeding twice in one database
// fails on the duplicates.
func SeedListing(ctx context.Context, url string, s ListingSeed) (Listing, error) {
	if s.Tasks > 0 && s.Sessions <= 0 {
		return Listing{}, fmt.Errorf("gatewaytest: %d tasks need a session", s.Tasks)
	}
	st, err := postgres.Open(ctx, url, seedWorkers)
	if err != nil {
		return Listing{}, err
	}
	defer st.Close()
	start := time.Now().Truncate(time.Second)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: s.Issuer, Subject: s.Subject, Username: s.Subject}, start)
	if err != nil {
		return Listing{}, fmt.Errorf("gatewaytest: record the principal: %w", err)
	}
	l := Listing{OwnerID: p.ID, Sessions: make([]string, s.Sessions), Tasks: make([]string, s.Tasks)}
	for i := range l.Sessions {
		l.Sessions[i] = seedID("s", i)
	}
	for i := range l.Tasks {
		l.Tasks[i] = seedID("t", i)
	}
	ago := func(i int) time.Time { return start.Add(-time.Duration(i+1) * time.Second) }
	err = inParallel(ctx, s.Sessions, func(ctx context.Context, i int) error {
		return st.CreateSessionWithin(ctx, store.Session{
			ID: l.Sessions[i], OwnerID: p.ID, Profile: s.Profile, Provider: s.Provider, Scope: "per_session",
			Name: fmt.Sprintf("s%d", i), Labels: map[string]string{}, Status: store.SessionActive, CreatedAt: ago(i), LastUsedAt: ago(i),
		}, 0)
	})
	if err != nil {
		return Listing{}, fmt.Errorf("gatewaytest: seed sessions: %w", err)
	}
	err = inParallel(ctx, s.Tasks, func(ctx context.Context, i int) error {
		t := store.Task{
			ID: l.Tasks[i], SessionID: l.Sessions[i%s.Sessions], OwnerID: p.ID, Profile: s.Profile, Operation: "execute_command",
			RunnerID: "seed", SubmittedAt: ago(i), Program: "true",
		}
		if _, err := st.BeginTask(ctx, t, store.Admission{}); err != nil {
			return err
		}
		_, err := st.FinishTask(ctx, t.ID, store.Completion{
			Status: "succeeded", SessionID: t.SessionID, Result: map[string]any{"exit_code": 0, "stdout": "", "stderr": ""},
		}, ago(i), 24*time.Hour)
		return err
	})
	if err != nil {
		return Listing{}, fmt.Errorf("gatewaytest: seed tasks: %w", err)
	}
	// Fresh planner statistics, as once autovacuum has caught up: listings are then measured
	// on the plans a settled database uses, not on those of an empty one.
	if _, err := st.Pool().Exec(ctx, "ANALYZE sessions, tasks"); err != nil {
		return Listing{}, fmt.Errorf("gatewaytest: analyze: %w", err)
	}
	return l, nil
}

func seedID(kind string, i int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s%d", kind, i))
	return hex.EncodeToString(h[:16])
}

// inParallel runs f for 0 … n-1 on seedWorkers goroutines and returns the first error (the
// others then stop taking work).
func inParallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range seedWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
