package postgres_test

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
	"github.com/sandgate/sandgate/migrations"
)

// TestMigrateConcurrently starts two "replicas" migrating an empty database at once: the
// advisory lock makes each migration run exactly once and both end at the same version.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	// Start from nothing: the test database is cloned from a migrated template.
	st, err := postgres.Open(ctx, url, 4)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)
	st.Close()

	var wg sync.WaitGroup
	applied := make([][]int64, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(ctx, url, 4)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			applied[i], errs[i] = s.Migrate(ctx)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	all := append(applied[0], applied[1]...)
	sources, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.Len(t, all, len(sources), "each migration must run exactly once")
	require.ElementsMatch(t, slices.Compact(slices.Sorted(slices.Values(all))), all)

	s, err := postgres.Open(ctx, url, 2)
	require.NoError(t, err)
	defer s.Close()
	cur, target, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, target, cur)
	again, err := s.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, again)
}

func TestPrincipalUpsertKeepsFirstSeen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "alice", Groups: []string{"a"}}, t0)
	require.NoError(t, err)
	q, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "alice", Username: "Alice", Groups: []string{"b"}}, t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, p.ID, q.ID)
	require.True(t, q.FirstSeenAt.Equal(t0))
	require.True(t, q.LastSeenAt.Equal(t0.Add(time.Hour)))
	require.Equal(t, []string{"b"}, q.Groups)
	other, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://other", Subject: "alice"}, t0)
	require.NoError(t, err)
	require.NotEqual(t, p.ID, other.ID, "the same subject at another issuer is another principal")
}

func TestDefaultSessionIsCreatedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "alice"}, time.Now())
	require.NoError(t, err)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := st.EnsureDefaultSession(ctx, store.Session{
				ID: string(rune('a'+i)) + "0000000000000000000000000000000", OwnerID: p.ID, Profile: "default",
				Provider: "local_subprocess", Scope: "per_session", Status: "active", CreatedAt: time.Now(),
			})
			require.NoError(t, err)
			ids[i] = s.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
}

func TestLostTasksAndSessionLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t)
	now := time.Now()
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "alice"}, now)
	require.NoError(t, err)
	require.NoError(t, st.Heartbeat(ctx, "alive", "h", now))
	require.NoError(t, st.Heartbeat(ctx, "dead", "h", now.Add(-time.Hour)))
	for _, r := range []string{"alive", "dead", "never-registered"} {
		require.NoError(t, st.CreateTask(ctx, store.Task{ID: "task-" + r, SessionID: "s", OwnerID: p.ID, Profile: "default", Operation: "execute_command", Status: "running", RunnerID: r, SubmittedAt: now}))
	}
	n, err := st.MarkLostTasks(ctx, now.Add(-time.Minute), now, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	tk, err := st.GetTask(ctx, "task-dead", p.ID)
	require.NoError(t, err)
	require.Equal(t, "lost", tk.Status)
	tk, err = st.GetTask(ctx, "task-alive", p.ID)
	require.NoError(t, err)
	require.Equal(t, "running", tk.Status)
	_, err = st.GetTask(ctx, "task-alive", "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, err, store.ErrNotFound)

	// The session lock excludes a second holder until released.
	unlock, err := st.LockSession(ctx, "s1")
	require.NoError(t, err)
	got := make(chan struct{})
	go func() {
		u, err := st.LockSession(ctx, "s1")
		if err == nil {
			u()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second holder got the session lock")
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	<-got
	// A cancelled wait returns an error and leaves the lock free.
	unlock, err = st.LockSession(ctx, "s2")
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = st.LockSession(cctx, "s2")
	require.Error(t, err)
	unlock()
	unlock, err = st.LockSession(ctx, "s2")
	require.NoError(t, err)
	unlock()
}

func TestBeginAttemptOnlyTakesOverFromDeadRunners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t)
	now := time.Now()
	stale := now.Add(-time.Minute)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "alice"}, now)
	require.NoError(t, err)
	_, err = st.CreateQueuedTask(ctx, store.Task{ID: "q1", SessionID: "s", OwnerID: p.ID, Profile: "default", Operation: "execute_command", Status: "pending", SubmittedAt: now},
		0, func(_ context.Context, tx any, _ int64) error {
			_, ok := tx.(pgx.Tx)
			require.True(t, ok, "a queue transport that joins the insert is handed a pgx.Tx, not %T", tx)
			return nil
		})
	require.NoError(t, err)
	require.NoError(t, st.Heartbeat(ctx, "a", "h", now))
	require.NoError(t, st.Heartbeat(ctx, "b", "h", now))

	n, err := st.BeginAttempt(ctx, "q1", "a", now, stale)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = st.BeginAttempt(ctx, "q1", "a", now, stale)
	require.ErrorIs(t, err, store.ErrTaskHeld, "a redelivery to the runner already running it")
	_, err = st.BeginAttempt(ctx, "q1", "b", now, stale)
	require.ErrorIs(t, err, store.ErrTaskHeld, "another live runner holds it")

	require.NoError(t, st.Heartbeat(ctx, "a", "h", now.Add(-2*time.Minute))) // a goes silent
	n, err = st.BeginAttempt(ctx, "q1", "b", now, stale)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	_, err = st.FinishTask(ctx, "q1", store.Completion{Status: "succeeded"}, now, time.Hour)
	require.NoError(t, err)
	_, err = st.BeginAttempt(ctx, "q1", "c", now, stale)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestTaskLifecycleInFewRoundTrips: StartTaskInSession marks the task running and reads the
// session in one statement; FinishTask stores the first completion only, notifies, and touches
// the session when asked.
func TestTaskLifecycleInFewRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "bob"}, now)
	require.NoError(t, err)
	sess := store.Session{ID: "sess-1", OwnerID: p.ID, Profile: "default", Provider: "local_subprocess", Scope: "per_session",
		Labels: map[string]string{}, SandboxID: "sb", Status: "active", CreatedAt: now, LastUsedAt: now}
	require.NoError(t, st.CreateSession(ctx, sess))
	require.NoError(t, st.CreateTask(ctx, store.Task{ID: "task-1", SessionID: sess.ID, OwnerID: p.ID, Profile: "default", Operation: "execute_command", Status: "pending", RunnerID: "r", SubmittedAt: now}))

	got, err := st.StartTaskInSession(ctx, "task-1", sess.ID, now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, "sb", got.SandboxID)
	tk, err := st.GetTask(ctx, "task-1", "")
	require.NoError(t, err)
	require.Equal(t, "running", tk.Status)
	_, err = st.StartTaskInSession(ctx, "task-1", "no-such-session", now)
	require.ErrorIs(t, err, store.ErrNotFound)

	later := now.Add(time.Hour)
	ok, err := st.FinishTask(ctx, "task-1", store.Completion{Status: "succeeded", SessionID: sess.ID, Touch: true}, later, time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	got, err = st.GetSession(ctx, sess.ID)
	require.NoError(t, err)
	require.True(t, got.LastUsedAt.Equal(later), "last_used_at %v, want %v", got.LastUsedAt, later)
	ok, err = st.FinishTask(ctx, "task-1", store.Completion{Status: "failed"}, later, time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "a finished task keeps its first completion")
	tk, err = st.GetTask(ctx, "task-1", "")
	require.NoError(t, err)
	require.Equal(t, "succeeded", tk.Status)
}

// Session locks hold no connection: far more sessions than the pool has connections are
// locked at once, and a lock still waits for its own session only.
func TestSessionLocksAreNotAScarceResource(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := postgres.Open(ctx, pgtest.URL(t), 4)
	require.NoError(t, err)
	defer st.Close()
	var unlocks []func()
	for i := range 200 {
		u, err := st.LockSession(ctx, fmt.Sprintf("busy-%d", i))
		require.NoError(t, err)
		unlocks = append(unlocks, u)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := st.LockSession(quick, "another")
	require.NoError(t, err, "200 held locks must not keep a 201st session from locking")
	u()
	for _, u := range unlocks {
		u()
	}
}

// Two replicas (two Stores on one database) are granted one session's lock in arrival order,
// and a replica that goes away without releasing frees its lock with its presence connection.
func TestSessionLockAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	a, err := postgres.Open(ctx, url, 4)
	require.NoError(t, err)
	defer a.Close()
	b, err := postgres.Open(ctx, url, 4)
	require.NoError(t, err)
	defer b.Close()

	unlock, err := a.LockSession(ctx, "s")
	require.NoError(t, err)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 6 {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := st.LockSession(ctx, "s")
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			u()
		}()
		// Arrival order 0..5: the next waiter comes once this one's ticket is in line (the
		// holder's and i+1 waiters').
		require.Eventually(t, func() bool {
			var n int
			err := a.Pool().QueryRow(ctx, `SELECT count(*) FROM session_locks WHERE session_id = 's'`).Scan(&n)
			return err == nil && n == i+2
		}, 10*time.Second, 5*time.Millisecond, "waiter %d takes its place in line", i)
	}
	unlock()
	wg.Wait()
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order, "granted in arrival order across replicas")

	// A replica that dies holding the lock: the other gets it without waiting for a timeout.
	gone, err := postgres.Open(ctx, url, 2)
	require.NoError(t, err)
	_, err = gone.LockSession(ctx, "held-by-the-dead")
	require.NoError(t, err)
	gone.Close() // no unlock: the ticket stays, its presence does not
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u, err := a.LockSession(wctx, "held-by-the-dead")
	require.NoError(t, err)
	u()
	assert.Less(t, time.Since(start), 3*time.Second)
}

// Replicas racing for one session's lock — LockSession and BeginTask, arriving at the same
// instant — never hold it together: the place is taken and judged first under the line lock,
// not on a snapshot that misses the other replica's ticket.
func TestSessionLockIsExclusiveWhenReplicasRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	var replicas []*postgres.Store
	for range 2 {
		st, err := postgres.Open(ctx, url, 8)
		require.NoError(t, err)
		defer st.Close()
		replicas = append(replicas, st)
	}
	now := time.Now()
	p, err := replicas[0].UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "racer"}, now)
	require.NoError(t, err)
	require.NoError(t, replicas[0].CreateSession(ctx, store.Session{ID: "raced", OwnerID: p.ID, Profile: "default", Provider: "local_subprocess",
		Scope: "per_session", Labels: map[string]string{}, Status: "active", CreatedAt: now, LastUsedAt: now}))

	var holders, most, granted atomic.Int64
	hold := func() {
		n := holders.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		holders.Add(-1)
		granted.Add(1)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		st := replicas[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := range 5 {
				if (i+j)%2 == 0 {
					u, err := st.LockSession(ctx, "raced")
					if !assert.NoError(t, err) {
						return
					}
					hold()
					u()
					continue
				}
				id := fmt.Sprintf("task-%d-%d", i, j)
				b, err := st.BeginTask(ctx, store.Task{ID: id, SessionID: "raced", OwnerID: p.ID, Profile: "default",
					Operation: "execute_command", RunnerID: "r", SubmittedAt: time.Now()}, store.Admission{Lock: true})
				if !assert.NoError(t, err) {
					return
				}
				if !b.First {
					if _, err := st.AwaitTurn(ctx, b.Place, id, time.Now); !assert.NoError(t, err) {
						return
					}
				}
				hold()
				_, err = st.FinishTask(ctx, id, store.Completion{Status: "succeeded", SessionID: "raced", Unlock: b.Place}, time.Now(), time.Hour)
				assert.NoError(t, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 80, granted.Load())
	require.EqualValues(t, 1, most.Load(), "two holders of one session's lock at once")

	// The narrow case: racers that all arrive at an empty line at once. Exactly one is first.
	// (LockSession's unlock releases in the background: wait for the line to be empty.)
	require.Eventually(t, func() bool {
		var n int
		err := replicas[0].Pool().QueryRow(ctx, `SELECT count(*) FROM session_locks WHERE session_id = 'raced'`).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "the line empties")
	for round := range 30 {
		var wg sync.WaitGroup
		var first atomic.Int64
		places := make([]store.Place, 8)
		ids := make([]string, 8)
		start := make(chan struct{})
		for i := range 8 {
			ids[i] = fmt.Sprintf("round-%d-%d", round, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				b, err := replicas[i%2].BeginTask(ctx, store.Task{ID: ids[i], SessionID: "raced", OwnerID: p.ID, Profile: "default",
					Operation: "execute_command", RunnerID: "r", SubmittedAt: time.Now()}, store.Admission{Lock: true})
				if assert.NoError(t, err) {
					places[i] = b.Place
					if b.First {
						first.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, first.Load(), "round %d: racers first at once", round)
		for i, pl := range places {
			_, err := replicas[i%2].FinishTask(ctx, ids[i], store.Completion{Status: "succeeded", Unlock: pl}, time.Now(), time.Hour)
			require.NoError(t, err)
		}
	}
}

// Counts reports a closed session (its sandbox's removal failed) as destroy_failed, apart
// from the provisioned ones.
func TestCountsShowDestroyFailedSessions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := pgtest.Store(t)
	now := time.Now().UTC()
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "carol"}, now)
	require.NoError(t, err)
	for _, id := range []string{"c1", "c2", "c3"} {
		require.NoError(t, st.CreateSession(ctx, store.Session{ID: id, OwnerID: p.ID, Profile: "default", Provider: "fake", Scope: "per_session",
			Labels: map[string]string{}, SandboxID: "sb-" + id, Status: store.SessionActive, CreatedAt: now, LastUsedAt: now}))
	}
	ok, err := st.DestroyFailed(ctx, "c3", "sb-c3", "boom", now.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	c, err := st.Counts(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []store.Count{
		{Profile: "default", State: store.SessionProvisioned, N: 2},
		{Profile: "default", State: store.SessionDestroyFailed, N: 1},
	}, c.Sessions)
}

// Completions committed together (one batch, one transaction) are each stored as FinishTask
// stores one — the session touched, the place given up so the next in line starts — and one
// that Postgres refuses fails alone: the batch is sent again one completion at a time.
func TestFinishTaskGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := pgtest.Store(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "carol"}, now)
	require.NoError(t, err)
	for _, id := range []string{"sess-a", "sess-b"} {
		require.NoError(t, st.CreateSession(ctx, store.Session{ID: id, OwnerID: p.ID, Profile: "default", Provider: "local_subprocess", Scope: "per_session",
			Labels: map[string]string{}, Status: "active", CreatedAt: now, LastUsedAt: now}))
	}
	task := func(id, sess string) store.Task {
		return store.Task{ID: id, SessionID: sess, OwnerID: p.ID, Profile: "default", Operation: "execute_command", RunnerID: "r", SubmittedAt: now}
	}
	first, err := st.BeginTask(ctx, task("a-1", "sess-a"), store.Admission{Lock: true})
	require.NoError(t, err)
	require.True(t, first.First)
	next, err := st.BeginTask(ctx, task("a-2", "sess-a"), store.Admission{Lock: true})
	require.NoError(t, err)
	require.False(t, next.First, "a-2 waits behind a-1")
	for _, id := range []string{"b-1", "b-bad"} {
		_, err := st.BeginTask(ctx, task(id, "sess-b"), store.Admission{})
		require.NoError(t, err)
	}

	later := now.Add(time.Hour)
	stored, errs := st.FinishTogether(ctx, []string{"b-1", "a-1", "b-bad", "no-such-task"}, []store.Completion{
		{Status: "succeeded", SessionID: "sess-b", Touch: true},
		{Status: "succeeded", SessionID: "sess-a", Touch: true, Unlock: first.Place},
		{Status: "failed", Error: "a NUL \x00 Postgres refuses in text"},
		{Status: "succeeded"},
	}, later, time.Hour)
	assert.Equal(t, []bool{true, true, false, false}, stored)
	assert.NoError(t, errs[0])
	assert.NoError(t, errs[1])
	assert.Error(t, errs[2], "Postgres refuses the NUL")
	assert.NoError(t, errs[3], "an unknown task is not stored, without error")
	for _, id := range []string{"a-1", "b-1"} {
		tk, err := st.GetTask(ctx, id, "")
		require.NoError(t, err)
		assert.Equal(t, "succeeded", tk.Status, id)
	}
	tk, err := st.GetTask(ctx, "b-bad", "")
	require.NoError(t, err)
	assert.Equal(t, "running", tk.Status, "the refused completion stored nothing")
	for _, id := range []string{"sess-a", "sess-b"} {
		s, err := st.GetSession(ctx, id)
		require.NoError(t, err)
		assert.True(t, s.LastUsedAt.Equal(later), "%s touched", id)
	}
	// a-1 gave its place up: a-2's turn has come.
	_, err = st.AwaitTurn(ctx, next.Place, "a-2", func() time.Time { return later })
	require.NoError(t, err)
}

// Completions written at once from many goroutines (group-committed as they meet) are each
// stored once, with their own answer.
func TestFinishTaskConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := pgtest.Store(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "dave"}, now)
	require.NoError(t, err)
	const sessions, perSession = 8, 8
	var ids []string
	for s := range sessions {
		sid := fmt.Sprintf("sess-%d", s)
		require.NoError(t, st.CreateSession(ctx, store.Session{ID: sid, OwnerID: p.ID, Profile: "default", Provider: "local_subprocess", Scope: "per_session",
			Labels: map[string]string{}, Status: "active", CreatedAt: now, LastUsedAt: now}))
		for k := range perSession {
			id := fmt.Sprintf("task-%d-%d", s, k)
			require.NoError(t, st.CreateTask(ctx, store.Task{ID: id, SessionID: sid, OwnerID: p.ID, Profile: "default", Operation: "execute_command", Status: "running", RunnerID: "r", SubmittedAt: now}))
			ids = append(ids, id)
		}
	}
	var wg sync.WaitGroup
	stored := make([]bool, len(ids))
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Go(func() {
			stored[i], errs[i] = st.FinishTask(ctx, id, store.Completion{Status: "succeeded", SessionID: fmt.Sprintf("sess-%d", i/perSession), Touch: true}, now.Add(time.Duration(i)*time.Second), time.Hour)
		})
	}
	wg.Wait()
	for i, id := range ids {
		require.NoError(t, errs[i], id)
		require.True(t, stored[i], id)
		again, err := st.FinishTask(ctx, id, store.Completion{Status: "failed"}, now, time.Hour)
		require.NoError(t, err)
		require.False(t, again, "%s keeps its first completion", id)
	}
}

// A deferred completion (its caller holds the result) is visible at once, from any
// connection, and kept by the store until the WAL is seen flushed past it; one kept when
// the server restarted is written again, which changes nothing of what was stored.
func TestDeferredCompletionIsKeptUntilOnDisk(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, 4)
	require.NoError(t, err)
	defer st.Close()
	other, err := postgres.Open(ctx, url, 2) // another replica
	require.NoError(t, err)
	defer other.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://i", Subject: "erin"}, now)
	require.NoError(t, err)
	require.NoError(t, st.CreateSession(ctx, store.Session{ID: "sess-d", OwnerID: p.ID, Profile: "default", Provider: "local_subprocess", Scope: "per_session",
		Labels: map[string]string{}, Status: "active", CreatedAt: now, LastUsedAt: now}))
	first, err := st.BeginTask(ctx, store.Task{ID: "d-1", SessionID: "sess-d", OwnerID: p.ID, Profile: "default", Operation: "execute_command", RunnerID: "r", SubmittedAt: now}, store.Admission{Lock: true})
	require.NoError(t, err)
	next, err := st.BeginTask(ctx, store.Task{ID: "d-2", SessionID: "sess-d", OwnerID: p.ID, Profile: "default", Operation: "execute_command", RunnerID: "r", SubmittedAt: now}, store.Admission{Lock: true})
	require.NoError(t, err)

	ok, err := st.FinishTask(ctx, "d-1", store.Completion{Status: "succeeded", SessionID: "sess-d", Touch: true, Unlock: first.Place, Deferred: true}, now.Add(time.Minute), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	tk, err := other.GetTask(ctx, "d-1", "")
	require.NoError(t, err)
	require.Equal(t, "succeeded", tk.Status, "visible to another replica at once")
	_, err = st.AwaitTurn(ctx, next.Place, "d-2", time.Now)
	require.NoError(t, err, "the place was given up")

	require.Equal(t, 1, st.DeferredKept())
	require.NoError(t, st.FlushDeferred(ctx, false))
	require.Zero(t, st.DeferredKept())

	ok, err = st.FinishTask(ctx, "d-2", store.Completion{Status: "failed", Error: "first", Deferred: true}, now.Add(2*time.Minute), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, st.FlushDeferred(ctx, true))
	require.Zero(t, st.DeferredKept())
	tk, err = other.GetTask(ctx, "d-2", "")
	require.NoError(t, err)
	require.Equal(t, "failed", tk.Status)
	require.Equal(t, "first", tk.Error)
}
