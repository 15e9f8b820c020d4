// Package storetest is the conformance suite of store.Store, the domain's response store:
// every backend runs it and must pass it the same way (as dex's storage/conformance). The
// Postgres store (internal/store/postgres) and the in-memory one (internal/store/memory) run
// it in their conformance_test.go; it imports neither them nor the domain.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return newStore(t) })
//	}
//
// The suite describes the Postgres store as it behaves: where its statements have a
// consequence worth knowing (defaults count against the session quota, a task finishing
// twice still touches its session, pending tasks of a dead runner are lost too), a test
// says so. Each test gets a store of its own from newStore and runs in parallel with the
// others. Ids are short lowercase letters and digits of equal length, so that their order
// is the same under any collation.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

// LockQueuer is implemented by stores — or a test's wrapper of one — that can tell how many
// tickets a session's lock has (its holder and its waiters). The lock-order tests need it to
// know that a LockSession call is waiting before the next one arrives, without sleeping;
// without it they are skipped.
type LockQueuer interface {
	LockQueueLen(ctx context.Context, sessionID string) (int, error)
}

// T0 is the time the suite's rows start at (whole seconds: no rounding in any backend).
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at is T0 + d.
func at(d time.Duration) time.Time { return T0.Add(d) }

type test struct {
	name string
	run  func(f *fixture)
}

// Run runs the suite; newStore returns an empty store for one test.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, group := range []struct {
		name  string
		tests []test
	}{
		{"sessions", sessionTests},
		{"park", parkTests},
		{"snapshots", snapshotTests},
		{"tasks", taskTests},
		{"locks", lockTests},
		{"turns", turnTests},
		{"principals", principalTests},
		{"runners", runnerTests},
		{"audit", auditTests},
		{"api_keys", apiKeyTests},
		{"secrets", secretTests},
		{"quotas", quotaTests},
	} {
		t.Run(group.name, func(t *testing.T) {
			for _, tc := range group.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					t.Cleanup(cancel)
					st := newStore(t)
					require.NotNil(t, st, "newStore returned nil")
					tc.run(&fixture{t: t, st: st, ctx: ctx})
				})
			}
		})
	}
}

// fixture is one test's store.
type fixture struct {
	t   *testing.T
	st  store.Store
	ctx context.Context
}

// owner records principal subject and returns its id.
func (f *fixture) owner(subject string) string {
	f.t.Helper()
	p, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://issuer.storetest.invalid", Subject: subject}, T0)
	require.NoError(f.t, err)
	require.NotEmpty(f.t, p.ID)
	return p.ID
}

// newSession is a session row of owner ("" = shared) created at created.
func newSession(id, owner string, created time.Time) store.Session {
	return store.Session{
		ID: id, OwnerID: owner, Profile: "default", Provider: "fake", Scope: "per_session",
		Labels: map[string]string{}, Status: "active", CreatedAt: created, LastUsedAt: created,
	}
}

// session inserts s (no quota) and returns it.
func (f *fixture) session(s store.Session) store.Session {
	f.t.Helper()
	require.NoError(f.t, f.st.CreateSessionWithin(f.ctx, s, 0), "create session %s", s.ID)
	return s
}

// get reads session id, which must exist.
func (f *fixture) get(id string) store.Session {
	f.t.Helper()
	s, err := f.st.GetSession(f.ctx, id)
	require.NoError(f.t, err, "get session %s", id)
	return s
}

// newTask is a pending task of owner in session, submitted at submitted on runner.
func newTask(id, owner, session, runner string, submitted time.Time) store.Task {
	return store.Task{
		ID: id, SessionID: session, OwnerID: owner, Profile: "default", Operation: "execute_code",
		Status: "pending", RunnerID: runner, SubmittedAt: submitted,
	}
}

// task inserts t (no quota) and returns it.
func (f *fixture) task(t store.Task) store.Task {
	f.t.Helper()
	require.NoError(f.t, f.st.CreateTaskWithin(f.ctx, t, 0), "create task %s", t.ID)
	return t
}

// getTask reads task id, which must exist.
func (f *fixture) getTask(id string) store.Task {
	f.t.Helper()
	t, err := f.st.GetTask(f.ctx, id, "")
	require.NoError(f.t, err, "get task %s", id)
	return t
}

// finish finishes task id at t as status and requires that this completion was stored.
func (f *fixture) finish(id, status string, t time.Time) {
	f.t.Helper()
	ok, err := f.st.FinishTask(f.ctx, id, store.Completion{Status: status}, t, time.Hour)
	require.NoError(f.t, err)
	require.True(f.t, ok, "finish %s", id)
}

// sameTime fails unless got is want (as an instant).
func sameTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.Truef(t, want.Equal(got), "%s: got %v, want %v", what, got, want)
}

func sameTimePtr(t *testing.T, want time.Time, got *time.Time, what string) {
	t.Helper()
	require.NotNil(t, got, what)
	sameTime(t, want, *got, what)
}

func sessionIDs(rows []store.Session) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func taskIDs(rows []store.Task) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}
