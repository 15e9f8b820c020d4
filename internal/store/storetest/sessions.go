package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

// notAPrincipal is a well-formed uuid that no test records as a principal.
const notAPrincipal = "00000000-0000-4000-8000-000000000001"

var sessionTests = []test{
	{"create_and_get", testSessionCreateGet},
	{"duplicate_id", testSessionDuplicateID},
	{"shared", testSessionShared},
	{"owner_must_be_a_principal", testOwnerMustBeAPrincipal},
	{"quota", testSessionQuota},
	{"default_session", testDefaultSession},
	{"default_shared_session", testDefaultSharedSession},
	{"default_session_concurrently", testDefaultSessionConcurrently},
	{"list_visibility", testListSessionsVisibility},
	{"list_filters", testListSessionsFilters},
	{"list_order_and_pages", testListSessionsPages},
	{"update_backend", testUpdateSessionBackend},
	{"touch", testTouchSession},
	{"reset", testResetSession},
	{"reset_idle", testResetIdleSession},
	{"idle_sessions", testIdleSessions},
	{"sandbox_in_use", testSandboxInUse},
	{"session_of_sandbox", testSessionOfSandbox},
	{"delete", testDeleteSession},
	{"destroy_failed_closes", testDestroyFailed},
	{"closed_is_no_default", testClosedIsNoDefault},
	{"microseconds", testMicroseconds},
	{"expiry", testSessionExpiry},
	{"edit", testEditSession},
	{"edit_concurrently", testEditSessionConcurrently},
	{"tasks_by_session_labels", testTasksBySessionLabels},
}

// EditSession writes the name and labels edit leaves (nothing else), and nothing when edit
// fails; the labels written are what a label filter then finds.
func testEditSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.Name, s.Labels, s.SandboxID = "a", map[string]string{"team": "ml", "stage": "dev"}, "sb1"
	f.session(s)
	got, err := f.st.EditSession(f.ctx, "s01", func(r *store.Session) error {
		require.Equal(t, "a", r.Name)
		require.Equal(t, map[string]string{"team": "ml", "stage": "dev"}, r.Labels)
		r.Name = "b"
		delete(r.Labels, "stage")
		r.Labels["owner"] = "x"
		r.SandboxID = "ignored"
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "b", got.Name)
	require.Equal(t, map[string]string{"team": "ml", "owner": "x"}, got.Labels)
	require.Equal(t, "sb1", got.SandboxID, "only the name and labels are written")
	stored := f.get("s01")
	require.Equal(t, got.Name, stored.Name)
	require.Equal(t, got.Labels, stored.Labels)
	require.Equal(t, "sb1", stored.SandboxID)
	rows, err := f.st.ListSessions(f.ctx, store.SessionFilter{OwnerID: alice, Labels: map[string]string{"owner": "x"}, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"s01"}, sessionIDs(rows))

	refused := errors.New("refused")
	_, err = f.st.EditSession(f.ctx, "s01", func(r *store.Session) error {
		r.Name, r.Labels = "c", nil
		return refused
	})
	require.ErrorIs(t, err, refused)
	require.Equal(t, "b", f.get("s01").Name, "a failed edit writes nothing")

	got, err = f.st.EditSession(f.ctx, "s01", func(r *store.Session) error { r.Labels = nil; return nil })
	require.NoError(t, err)
	require.NotNil(t, got.Labels, "labels are never nil")
	require.Empty(t, f.get("s01").Labels)

	_, err = f.st.EditSession(f.ctx, "nope", func(*store.Session) error { return nil })
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Concurrent edits of different labels all apply: each reads the labels the one before it
// wrote.
func testEditSessionConcurrently(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.st.EditSession(f.ctx, "s01", func(r *store.Session) error {
				r.Labels[fmt.Sprintf("k%d", i)] = "v"
				return nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, f.get("s01").Labels, n)
}

// A task filter by session labels finds the tasks of the sessions carrying every label; a
// task whose session is gone never matches.
func testTasksBySessionLabels(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	ml := newSession("s01", alice, at(0))
	ml.Labels = map[string]string{"team": "ml", "env": "dev"}
	web := newSession("s02", alice, at(0))
	web.Labels = map[string]string{"team": "web"}
	f.session(ml)
	f.session(web)
	f.task(newTask("t01", alice, "s01", "r", at(time.Minute)))
	f.task(newTask("t02", alice, "s02", "r", at(2*time.Minute)))
	f.task(newTask("t03", alice, "s01", "r", at(3*time.Minute)))
	f.task(newTask("t04", alice, "gone", "r", at(4*time.Minute)))
	list := func(labels map[string]string) []string {
		t.Helper()
		rows, err := f.st.ListTasks(f.ctx, store.TaskFilter{OwnerID: alice, SessionLabels: labels, Limit: 10})
		require.NoError(t, err)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	require.Equal(t, []string{"t03", "t01"}, list(map[string]string{"team": "ml"}))
	require.Equal(t, []string{"t03", "t01"}, list(map[string]string{"team": "ml", "env": "dev"}))
	require.Empty(t, list(map[string]string{"team": "ml", "env": "prod"}))
	require.Equal(t, []string{"t02"}, list(map[string]string{"team": "web"}))
	require.Len(t, list(nil), 4)
}

// A lifetime: set at creation or later, cleared with the zero time; ExpiredSessions reads
// those whose end came, the longest ended first, never closed ones.
func testSessionExpiry(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s1 := newSession("s01", alice, at(0))
	s1.ExpiresAt, s1.OnExpiry = at(10*time.Minute), store.ExpirePause
	f.session(s1)
	f.session(newSession("s02", alice, at(0)))
	got := f.get("s01")
	sameTime(t, at(10*time.Minute), got.ExpiresAt, "expires_at")
	require.Equal(t, store.ExpirePause, got.OnExpiry)
	require.True(t, f.get("s02").ExpiresAt.IsZero(), "no lifetime")

	expired := func(now time.Time) []string {
		t.Helper()
		rows, err := f.st.ExpiredSessions(f.ctx, now, 10)
		require.NoError(t, err)
		return sessionIDs(rows)
	}
	require.Empty(t, expired(at(9*time.Minute)))
	require.Equal(t, []string{"s01"}, expired(at(10*time.Minute)), "due at its end")

	require.NoError(t, f.st.SetSessionExpiry(f.ctx, "s02", at(5*time.Minute), ""))
	got = f.get("s02")
	sameTime(t, at(5*time.Minute), got.ExpiresAt, "set later")
	require.Equal(t, store.ExpireDestroy, got.OnExpiry, "\"\" keeps what ends it")
	require.Equal(t, []string{"s02", "s01"}, expired(at(time.Hour)), "the longest ended first")

	require.NoError(t, f.st.SetSessionExpiry(f.ctx, "s01", time.Time{}, store.ExpireDestroy))
	got = f.get("s01")
	require.True(t, got.ExpiresAt.IsZero(), "cleared")
	require.Equal(t, store.ExpireDestroy, got.OnExpiry)
	require.Equal(t, []string{"s02"}, expired(at(time.Hour)))

	ok, err := f.st.DestroyFailed(f.ctx, "s02", "sb", "boom", at(time.Hour))
	require.NoError(t, err)
	require.False(t, ok, "s02 has no sandbox sb")
	s3 := newSession("s03", alice, at(0))
	s3.SandboxID, s3.ExpiresAt = "sb3", at(time.Minute)
	f.session(s3)
	ok, err = f.st.DestroyFailed(f.ctx, "s03", "sb3", "boom", at(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"s02"}, expired(at(time.Hour)), "a closed session is being destroyed already")
	require.ErrorIs(t, f.st.SetSessionExpiry(f.ctx, "s03", at(time.Hour), ""), store.ErrNotFound, "closed")
	require.ErrorIs(t, f.st.SetSessionExpiry(f.ctx, "nope", at(time.Hour), ""), store.ErrNotFound)
}

func testSessionCreateGet(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.Name, s.SandboxID = "work", "sb1"
	s.Labels = map[string]string{"conversation": "c1", "team": "x"}
	// A new session was last used when it was created, and has no notice yet: the insert
	// takes neither from the row.
	s.LastUsedAt, s.PendingNotice = at(time.Hour), "ignored"
	f.session(s)

	got := f.get("s01")
	sameTime(t, at(0), got.CreatedAt, "created_at")
	sameTime(t, at(0), got.LastUsedAt, "last_used_at = created_at")
	got.CreatedAt, got.LastUsedAt = time.Time{}, time.Time{}
	require.Equal(t, store.Session{
		ID: "s01", OwnerID: alice, Profile: "default", Provider: "fake", Scope: "per_session", Name: "work",
		Labels: map[string]string{"conversation": "c1", "team": "x"}, SandboxID: "sb1", Status: "active",
		OnExpiry: store.ExpireDestroy, Env: map[string]string{}, Secrets: map[string]string{},
	}, got, "no lifetime; were it given one, destroyed when it ends")

	bare := newSession("s02", alice, at(0))
	bare.Labels = nil
	f.session(bare)
	got = f.get("s02")
	require.NotNil(t, got.Labels, "labels are never nil")
	require.Empty(t, got.Labels)
	require.NotNil(t, got.Env, "nor is the environment")

	withEnv := newSession("s03", alice, at(0))
	withEnv.Env = map[string]string{"TOKEN": "a b=c", "EMPTY": ""}
	f.session(withEnv)
	require.Equal(t, map[string]string{"TOKEN": "a b=c", "EMPTY": ""}, f.get("s03").Env)
	require.Empty(t, got.SandboxID)

	_, err := f.st.GetSession(f.ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testSessionDuplicateID(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	dup := newSession("s01", alice, at(time.Hour))
	dup.Name = "second"
	err := f.st.CreateSessionWithin(f.ctx, dup, 10)
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrQuota)
	require.Empty(t, f.get("s01").Name, "the first row stays")
}

func testSessionShared(f *fixture) {
	t := f.t
	s := newSession("s01", "", at(0))
	s.Profile, s.Scope = "rt", "per_runtime"
	f.session(s)
	require.Empty(t, f.get("s01").OwnerID, "a shared session has no owner")

	again := newSession("s02", "", at(0))
	again.Profile = "rt"
	require.Error(t, f.st.CreateSessionWithin(f.ctx, again, 0), "one shared session per profile")
	other := newSession("s03", "", at(0))
	other.Profile = "rt2"
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, other, 1), "a shared session is never over a quota")
}

func testOwnerMustBeAPrincipal(f *fixture) {
	t := f.t
	err := f.st.CreateSessionWithin(f.ctx, newSession("s01", notAPrincipal, at(0)), 5)
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrQuota)
	_, err = f.st.EnsureDefaultSession(f.ctx, newSession("s02", notAPrincipal, at(0)))
	require.Error(t, err)
	err = f.st.CreateTaskWithin(f.ctx, newTask("t01", notAPrincipal, "s01", "r1", at(0)), 5)
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrQuota)
	_, err = f.st.GetSession(f.ctx, "s01")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// The session quota counts every session the owner has, its default sessions too.
func testSessionQuota(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	_, err := f.st.EnsureDefaultSession(f.ctx, newSession("s01", alice, at(0)))
	require.NoError(t, err)
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, newSession("s02", alice, at(0)), 2))
	require.ErrorIs(t, f.st.CreateSessionWithin(f.ctx, newSession("s03", alice, at(0)), 2), store.ErrQuota,
		"a default and another session are two")
	_, err = f.st.GetSession(f.ctx, "s03")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing inserted over the quota")
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, newSession("s04", bob, at(0)), 2), "another owner's sessions do not count")
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, newSession("s05", alice, at(0)), 0), "limit 0: none")
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, newSession("s06", alice, at(0)), -1), "limit < 0: none")
	shared := newSession("s07", "", at(0))
	shared.Profile = "rt"
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, shared, 1), "shared sessions count for nobody")

	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.Equal(t, 4, held.Sessions)

	for _, id := range []string{"s02", "s05", "s06"} {
		require.NoError(t, f.st.DeleteSession(f.ctx, id))
	}
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, newSession("s08", alice, at(0)), 2), "deleting frees the quota")
}

func testDefaultSession(f *fixture) {
	t := f.t
	alice, bob, carol := f.owner("alice"), f.owner("bob"), f.owner("carol")
	got, err := f.st.EnsureDefaultSession(f.ctx, newSession("s01", alice, at(0)))
	require.NoError(t, err)
	require.Equal(t, "s01", got.ID, "the candidate is inserted")
	require.True(t, got.IsDefault)
	require.True(t, f.get("s01").IsDefault)

	got, err = f.st.EnsureDefaultSession(f.ctx, newSession("s02", alice, at(time.Minute)))
	require.NoError(t, err)
	require.Equal(t, "s01", got.ID, "one default session per owner and profile")
	require.True(t, got.IsDefault)
	_, err = f.st.GetSession(f.ctx, "s02")
	require.ErrorIs(t, err, store.ErrNotFound)

	other := newSession("s03", alice, at(0))
	other.Profile = "other"
	got, err = f.st.EnsureDefaultSession(f.ctx, other)
	require.NoError(t, err)
	require.Equal(t, "s03", got.ID, "a default session per profile")

	got, err = f.st.EnsureDefaultSession(f.ctx, newSession("s04", bob, at(0)))
	require.NoError(t, err)
	require.Equal(t, "s04", got.ID, "a default session per owner")

	f.session(newSession("s05", carol, at(0)))
	got, err = f.st.EnsureDefaultSession(f.ctx, newSession("s06", carol, at(0)))
	require.NoError(t, err)
	require.Equal(t, "s06", got.ID, "an owner's other sessions are not its default")
}

// OwnerID "" addresses the profile's one shared session, whether or not it was inserted as
// a default session.
func testDefaultSharedSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	cand := func(id, owner, profile string) store.Session {
		s := newSession(id, owner, at(0))
		s.Profile, s.Scope = profile, "per_runtime"
		return s
	}
	got, err := f.st.EnsureDefaultSession(f.ctx, cand("s01", "", "rt"))
	require.NoError(t, err)
	require.Equal(t, "s01", got.ID)
	require.True(t, f.get("s01").IsDefault)
	require.Empty(t, f.get("s01").OwnerID)
	got, err = f.st.EnsureDefaultSession(f.ctx, cand("s02", "", "rt"))
	require.NoError(t, err)
	require.Equal(t, "s01", got.ID)

	f.session(cand("s03", "", "rt2"))
	got, err = f.st.EnsureDefaultSession(f.ctx, cand("s04", "", "rt2"))
	require.NoError(t, err)
	require.Equal(t, "s03", got.ID)
	require.False(t, got.IsDefault, "the row as it was inserted")

	got, err = f.st.EnsureDefaultSession(f.ctx, cand("s05", alice, "rt"))
	require.NoError(t, err)
	require.Equal(t, "s05", got.ID, "an owner's default session is never the shared one")
}

func testDefaultSessionConcurrently(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := f.st.EnsureDefaultSession(f.ctx, newSession("s0"+string(rune('1'+i)), alice, at(0)))
			ids[i], errs[i] = s.ID, err
		}()
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i], "every caller gets the same row")
	}
}

func testListSessionsVisibility(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	f.session(newSession("a01", alice, at(time.Minute)))
	f.session(newSession("b01", bob, at(2*time.Minute)))
	shared := newSession("sh1", "", at(3*time.Minute))
	shared.Profile = "rt"
	f.session(shared)

	list := func(filter store.SessionFilter) []string {
		t.Helper()
		rows, err := f.st.ListSessions(f.ctx, filter)
		require.NoError(t, err)
		return sessionIDs(rows)
	}
	require.Equal(t, []string{"sh1", "a01"}, list(store.SessionFilter{OwnerID: alice, Limit: 10}), "own and shared sessions")
	require.Equal(t, []string{"sh1", "b01"}, list(store.SessionFilter{OwnerID: bob, Limit: 10}))
	require.Equal(t, []string{"sh1", "b01", "a01"}, list(store.SessionFilter{All: true, Limit: 10}))
}

func testListSessionsFilters(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s1 := newSession("s01", alice, at(time.Minute))
	s1.Labels = map[string]string{"conversation": "c1"}
	s2 := newSession("s02", alice, at(2*time.Minute))
	s2.Profile, s2.Labels = "other", map[string]string{"conversation": "c2"}
	s3 := newSession("s03", alice, at(3*time.Minute))
	s3.Status, s3.Labels = "failed", map[string]string{"conversation": "c1"}
	s4 := newSession("s04", alice, at(4*time.Minute))
	for _, s := range []store.Session{s1, s2, s3, s4} {
		f.session(s)
	}
	list := func(filter store.SessionFilter) []string {
		t.Helper()
		filter.OwnerID, filter.Limit = alice, 10
		rows, err := f.st.ListSessions(f.ctx, filter)
		require.NoError(t, err)
		return sessionIDs(rows)
	}
	require.Equal(t, []string{"s04", "s03", "s01"}, list(store.SessionFilter{Profile: "default"}))
	require.Equal(t, []string{"s04", "s02", "s01"}, list(store.SessionFilter{Status: "active"}))
	require.Equal(t, []string{"s03", "s01"}, list(store.SessionFilter{Conversation: "c1"}))
	require.Equal(t, []string{"s01"}, list(store.SessionFilter{Profile: "default", Status: "active", Conversation: "c1"}))
	require.Empty(t, list(store.SessionFilter{Conversation: "none"}))

	// Labels: every pair must match (the others the session carries do not matter).
	s5 := newSession("s05", alice, at(5*time.Minute))
	s5.Labels = map[string]string{"conversation": "c1", "team": "x", "odd key/é": "v=1&w"}
	f.session(s5)
	require.Equal(t, []string{"s05", "s03", "s01"}, list(store.SessionFilter{Labels: map[string]string{"conversation": "c1"}}))
	require.Equal(t, []string{"s05"}, list(store.SessionFilter{Labels: map[string]string{"conversation": "c1", "team": "x"}}))
	require.Equal(t, []string{"s05"}, list(store.SessionFilter{Labels: map[string]string{"odd key/é": "v=1&w"}}))
	require.Empty(t, list(store.SessionFilter{Labels: map[string]string{"conversation": "c1", "team": "y"}}))
	require.Empty(t, list(store.SessionFilter{Labels: map[string]string{"team": ""}}), "an empty value is a value, not any")
}

// Newest first: created_at, then id, descending; a page continues strictly after the
// (created_at, id) of the previous page's last row.
func testListSessionsPages(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	for id, created := range map[string]time.Duration{"s01": 1, "s02": 2, "s03": 2, "s04": 3, "s05": 4} {
		f.session(newSession(id, alice, at(created*time.Minute)))
	}
	page := func(limit int, after *store.Session) []store.Session {
		t.Helper()
		filter := store.SessionFilter{OwnerID: alice, Limit: limit}
		if after != nil {
			filter.AfterCreated, filter.AfterID = after.CreatedAt, after.ID
		}
		rows, err := f.st.ListSessions(f.ctx, filter)
		require.NoError(t, err)
		return rows
	}
	all := page(10, nil)
	require.Equal(t, []string{"s05", "s04", "s03", "s02", "s01"}, sessionIDs(all), "ties in created_at by id, descending")

	for _, limit := range []int{1, 2, 3} {
		var got []string
		var last *store.Session
		for range 10 {
			rows := page(limit, last)
			if len(rows) == 0 {
				break
			}
			require.LessOrEqual(t, len(rows), limit)
			got = append(got, sessionIDs(rows)...)
			last = &rows[len(rows)-1]
		}
		require.Equal(t, sessionIDs(all), got, "pages of %d", limit)
	}
	require.Empty(t, page(0, nil), "LIMIT 0")
}

func testUpdateSessionBackend(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb1", "active", at(time.Hour)))
	got := f.get("s01")
	require.Equal(t, "sb1", got.SandboxID)
	sameTime(t, at(time.Hour), got.LastUsedAt, "last_used_at")

	ok, err := f.st.ResetSession(f.ctx, "s01", "a notice", at(2*time.Hour), "sb1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "a notice", f.get("s01").PendingNotice)

	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb2", "busy", at(30*time.Minute)))
	got = f.get("s01")
	require.Equal(t, "sb2", got.SandboxID)
	require.Equal(t, "busy", got.Status)
	require.Empty(t, got.PendingNotice, "the notice was delivered")
	sameTime(t, at(time.Hour), got.LastUsedAt, "last use never moves back")

	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "", "active", at(3*time.Hour)))
	got = f.get("s01")
	require.Empty(t, got.SandboxID)
	sameTime(t, at(3*time.Hour), got.LastUsedAt, "last_used_at")

	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "nope", "sb", "active", at(0)), "an unknown session is no error")
}

func testTouchSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	require.NoError(t, f.st.TouchSession(f.ctx, "s01", at(time.Hour)))
	sameTime(t, at(time.Hour), f.get("s01").LastUsedAt, "touched")
	require.NoError(t, f.st.TouchSession(f.ctx, "s01", at(30*time.Minute)))
	sameTime(t, at(time.Hour), f.get("s01").LastUsedAt, "never back")
	require.NoError(t, f.st.TouchSession(f.ctx, "nope", at(0)))
}

func testResetSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)

	ok, err := f.st.ResetSession(f.ctx, "s01", "n", at(time.Hour), "other")
	require.NoError(t, err)
	require.False(t, ok, "the session moved on to another sandbox")
	require.Equal(t, "sb1", f.get("s01").SandboxID)

	ok, err = f.st.ResetSession(f.ctx, "s01", "the notice", at(time.Hour), "sb1")
	require.NoError(t, err)
	require.True(t, ok)
	got := f.get("s01")
	require.Empty(t, got.SandboxID)
	require.Equal(t, "active", got.Status)
	require.Equal(t, "the notice", got.PendingNotice)
	sameTime(t, at(time.Hour), got.CreatedAt, "restarted")
	sameTime(t, at(0), got.LastUsedAt, "last use unchanged")

	ok, err = f.st.ResetSession(f.ctx, "s01", "n", at(2*time.Hour), "")
	require.NoError(t, err)
	require.False(t, ok, "a session without a sandbox is never reset, not even for ifSandbox \"\"")
	ok, err = f.st.ResetSession(f.ctx, "s01", "n", at(2*time.Hour), "sb1")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = f.st.ResetSession(f.ctx, "nope", "n", at(0), "sb1")
	require.NoError(t, err)
	require.False(t, ok)

	s2 := newSession("s02", alice, at(0))
	s2.SandboxID, s2.Status = "sb2", "failed"
	f.session(s2)
	ok, err = f.st.ResetSession(f.ctx, "s02", "", at(time.Hour), "sb2")
	require.NoError(t, err)
	require.True(t, ok)
	got = f.get("s02")
	require.Equal(t, "active", got.Status)
	require.Empty(t, got.PendingNotice)
}

func testResetIdleSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)

	ok, err := f.st.ResetIdleSession(f.ctx, "s01", "idle", at(time.Hour), "sb1", at(0))
	require.NoError(t, err)
	require.False(t, ok, "last used at the cutoff is not before it")

	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	ok, err = f.st.ResetIdleSession(f.ctx, "s01", "idle", at(time.Hour), "sb1", at(time.Minute))
	require.NoError(t, err)
	require.False(t, ok, "a session with an unfinished task is not idle")

	f.finish("t01", "succeeded", at(0))
	ok, err = f.st.ResetIdleSession(f.ctx, "s01", "idle", at(time.Hour), "other", at(time.Minute))
	require.NoError(t, err)
	require.False(t, ok, "another sandbox")
	ok, err = f.st.ResetIdleSession(f.ctx, "s01", "idle", at(time.Hour), "sb1", at(time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	got := f.get("s01")
	require.Empty(t, got.SandboxID)
	require.Equal(t, "idle", got.PendingNotice)
	sameTime(t, at(time.Hour), got.CreatedAt, "restarted")
}

func testIdleSessions(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	mk := func(id, sandbox, profile string, lastUsed time.Duration) {
		s := newSession(id, alice, at(0))
		s.SandboxID, s.Profile = sandbox, profile
		f.session(s)
		require.NoError(t, f.st.TouchSession(f.ctx, id, at(lastUsed)))
	}
	mk("i01", "sb1", "default", 0)
	mk("i02", "sb2", "default", 20*time.Minute)
	mk("i03", "", "default", 0)            // no sandbox
	mk("i04", "sb4", "other", 0)           // another profile
	mk("i05", "sb5", "default", 0)         // busy, below
	mk("i06", "sb6", "default", time.Hour) // used since
	mk("i07", "sb7", "default", 10*time.Minute)
	f.task(newTask("t01", alice, "i05", "r1", at(0)))

	idle := func(limit int) []string {
		t.Helper()
		rows, err := f.st.IdleSessions(f.ctx, "default", at(30*time.Minute), limit)
		require.NoError(t, err)
		return sessionIDs(rows)
	}
	require.Equal(t, []string{"i01", "i07", "i02"}, idle(10), "least recently used first")
	require.Equal(t, []string{"i01"}, idle(1))
	require.Empty(t, idle(0))
}

func testSandboxInUse(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	inUse := func(id string) bool {
		t.Helper()
		used, err := f.st.SandboxInUse(f.ctx, id)
		require.NoError(t, err)
		return used
	}
	require.True(t, inUse("sb1"))
	require.False(t, inUse("sb9"))
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.False(t, inUse("sb9"), "a session's unfinished task says nothing about other sandboxes")

	// A per_call run records no session: while it runs, no sandbox is known to be unused.
	f.task(newTask("t02", alice, "ephemeral01", "r1", at(0)))
	require.True(t, inUse("sb9"))
	require.True(t, inUse(""))
	f.finish("t02", "succeeded", at(time.Minute))
	require.False(t, inUse("sb9"))
}

func testSessionOfSandbox(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	f.session(newSession("s02", alice, at(time.Second)))
	got, err := f.st.SessionOfSandbox(f.ctx, "sb1")
	require.NoError(t, err)
	require.Equal(t, "s01", got.ID)
	require.Equal(t, alice, got.OwnerID)
	_, err = f.st.SessionOfSandbox(f.ctx, "sb9")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = f.st.SessionOfSandbox(f.ctx, "")
	require.ErrorIs(t, err, store.ErrNotFound, "a session without a sandbox is not the session of sandbox \"\"")
}

func testDeleteSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.NoError(t, f.st.DeleteSession(f.ctx, "s01"))
	_, err := f.st.GetSession(f.ctx, "s01")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, f.st.DeleteSession(f.ctx, "s01"), "deleting again is no error")
	f.getTask("t01")
	ids, err := f.st.UnfinishedTasks(f.ctx, "s01")
	require.NoError(t, err)
	require.Equal(t, []string{"t01"}, ids, "the session's tasks stay")
}

// Times are kept to the microsecond (timestamptz), below it they are cut off.
func testMicroseconds(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	fine := T0.Add(2*time.Millisecond + 1500*time.Nanosecond)
	f.session(newSession("s01", alice, fine))
	f.task(newTask("t01", alice, "s01", "r1", fine))
	want := T0.Add(2*time.Millisecond + time.Microsecond)
	sameTime(t, want, f.get("s01").CreatedAt, "created_at")
	sameTime(t, want, f.getTask("t01").SubmittedAt, "submitted_at")
}

// A failed destroy closes the session — kept with its sandbox, its attempts counted, its
// retry due, its contexts released, its notice dropped — while it still has that sandbox;
// nothing reopens it (binding, reset, restore) and the idle sweep passes it by; DestroyRetries
// lists the closed sessions whose retry is due, longest due first.
func testDestroyFailed(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.withSandbox(newSession("s01", alice, at(0)), "sb1")
	f.withSandbox(newSession("s02", alice, at(0)), "sb2")
	require.NoError(t, f.st.HoldContext(f.ctx, store.Context{SessionID: "s01", Name: "c", SandboxID: "sb1", OwnerID: alice, CreatedAt: at(0)}, 0))
	require.Equal(t, 1, f.contexts(alice))

	ok, err := f.st.DestroyFailed(f.ctx, "s01", "other-sandbox", "boom", at(time.Minute))
	require.NoError(t, err)
	require.False(t, ok, "only while it still has that sandbox")
	ok, err = f.st.DestroyFailed(f.ctx, "nope", "sb1", "boom", at(time.Minute))
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = f.st.DestroyFailed(f.ctx, "s01", "sb1", "engine down", at(time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	got := f.get("s01")
	require.Equal(t, store.SessionClosed, got.Status)
	require.Equal(t, "sb1", got.SandboxID, "the sandbox it still points to")
	require.Equal(t, 1, got.DestroyAttempts)
	require.Equal(t, "engine down", got.DestroyError)
	sameTime(t, at(time.Minute), got.DestroyRetryAt, "destroy_retry_at")
	require.Zero(t, f.contexts(alice), "a closed session's contexts are released")
	ok, err = f.st.DestroyFailed(f.ctx, "s01", "sb1", "still down", at(3*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	got = f.get("s01")
	require.Equal(t, 2, got.DestroyAttempts)
	require.Equal(t, "still down", got.DestroyError)
	ok, err = f.st.DestroyFailed(f.ctx, "s02", "sb2", "x", at(2*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)

	due := func(now time.Time, limit int) []string {
		rows, err := f.st.DestroyRetries(f.ctx, now, limit)
		require.NoError(t, err)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	require.Empty(t, due(at(time.Minute), 10))
	require.Equal(t, []string{"s02"}, due(at(2*time.Minute), 10))
	require.Equal(t, []string{"s02", "s01"}, due(at(time.Hour), 10), "longest due first")
	require.Equal(t, []string{"s02"}, due(at(time.Hour), 1))

	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb9", "active", at(time.Hour)))
	require.NoError(t, f.st.RestoreSession(f.ctx, "s01", "sb9", at(time.Hour)))
	reset, err := f.st.ResetSession(f.ctx, "s01", "n", at(time.Hour), "sb1")
	require.NoError(t, err)
	require.False(t, reset)
	reset, err = f.st.ResetIdleSession(f.ctx, "s01", "n", at(time.Hour), "sb1", at(2*time.Hour))
	require.NoError(t, err)
	require.False(t, reset)
	got = f.get("s01")
	require.Equal(t, store.SessionClosed, got.Status, "nothing reopens a closed session")
	require.Equal(t, "sb1", got.SandboxID)
	idle, err := f.st.IdleSessions(f.ctx, "default", at(48*time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, idle, "the idle sweep leaves closed sessions to their retries")
	used, err := f.st.SandboxInUse(f.ctx, "sb1")
	require.NoError(t, err)
	require.True(t, used, "the orphan sweep keeps the sandbox a closed session points to")

	listed, err := f.st.ListSessions(f.ctx, store.SessionFilter{OwnerID: alice, Status: store.SessionClosed, Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 2, "listed, so its owner sees it")
	require.NoError(t, f.st.DeleteSession(f.ctx, "s01"))
	require.Equal(t, []string{"s02"}, due(at(time.Hour), 10))
}

// A closed session is no longer its owner's default nor its profile's shared session: the
// next EnsureDefaultSession makes a new one beside it.
func testClosedIsNoDefault(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	def := newSession("s01", alice, at(0))
	got, err := f.st.EnsureDefaultSession(f.ctx, def)
	require.NoError(t, err)
	require.Equal(t, "s01", got.ID)
	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb1", "active", at(0)))
	ok, err := f.st.DestroyFailed(f.ctx, "s01", "sb1", "boom", at(time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	got, err = f.st.EnsureDefaultSession(f.ctx, newSession("s02", alice, at(time.Second)))
	require.NoError(t, err)
	require.Equal(t, "s02", got.ID, "a new default beside the closed one")
	require.True(t, f.get("s02").IsDefault)

	shared := newSession("s03", "", at(0))
	shared.Profile, shared.Scope = "rt", "per_runtime"
	_, err = f.st.EnsureDefaultSession(f.ctx, shared)
	require.NoError(t, err)
	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s03", "sb3", "active", at(0)))
	ok, err = f.st.DestroyFailed(f.ctx, "s03", "sb3", "boom", at(time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	next := newSession("s04", "", at(time.Second))
	next.Profile, next.Scope = "rt", "per_runtime"
	got, err = f.st.EnsureDefaultSession(f.ctx, next)
	require.NoError(t, err)
	require.Equal(t, "s04", got.ID, "a new shared session beside the closed one")
}
