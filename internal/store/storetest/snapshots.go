package storetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var parkTests = []test{
	{"pause_and_resume", testPauseResumeSession},
	{"paused_sessions_are_not_idle", testPausedNotIdle},
	{"park", testParkSession},
	{"bind_clears_pause_and_park", testBindClearsPark},
	{"restore_keeps_the_notice", testRestoreSession},
}

func testRestoreSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	_, err := f.st.ParkSession(f.ctx, "s01", "sb1", "snap1", "parked while idle")
	require.NoError(t, err)
	require.NoError(t, f.st.RestoreSession(f.ctx, "s01", "sb2", at(time.Hour)))
	got := f.get("s01")
	require.Equal(t, "sb2", got.SandboxID)
	require.Empty(t, got.ParkedSnapshot)
	require.Equal(t, "parked while idle", got.PendingNotice, "the next execution still says what happened")
	sameTime(t, at(time.Hour), got.LastUsedAt, "last_used_at")
	require.NoError(t, f.st.RestoreSession(f.ctx, "s01", "sb3", at(time.Minute)))
	sameTime(t, at(time.Hour), f.get("s01").LastUsedAt, "never moved back")
	require.NoError(t, f.st.RestoreSession(f.ctx, "nope", "sb", at(0)))
}

var snapshotTests = []test{
	{"create_and_get", testSnapshotCreateGet},
	{"quota_counts_user_snapshots", testSnapshotQuota},
	{"quota_bounds_snapshot_bytes", testSnapshotBytesQuota},
	{"owner_must_be_a_principal", testSnapshotOwner},
	{"list", testListSnapshots},
	{"delete", testDeleteSnapshot},
	{"usage", testSnapshotUsage},
	{"signing_key", testSigningKey},
}

func testPauseResumeSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	f.session(newSession("s02", alice, at(0))) // no sandbox

	ok, err := f.st.PauseSession(f.ctx, "s01", "other", at(time.Minute), false, "")
	require.NoError(t, err)
	require.False(t, ok, "another sandbox: nothing paused")
	ok, err = f.st.PauseSession(f.ctx, "s02", "", at(time.Minute), false, "")
	require.NoError(t, err)
	require.False(t, ok, "a session without a sandbox is never paused")

	ok, err = f.st.PauseSession(f.ctx, "s01", "sb1", at(time.Minute), true, "it was paused")
	require.NoError(t, err)
	require.True(t, ok)
	got := f.get("s01")
	sameTime(t, at(time.Minute), got.PausedAt, "paused_at")
	require.True(t, got.PausedIdle)
	require.Equal(t, "it was paused", got.PendingNotice)
	require.Equal(t, "sb1", got.SandboxID, "a paused session keeps its sandbox")

	ok, err = f.st.PauseSession(f.ctx, "s01", "sb1", at(2*time.Minute), false, "again")
	require.NoError(t, err)
	require.False(t, ok, "paused already")
	sameTime(t, at(time.Minute), f.get("s01").PausedAt, "paused_at stays")

	require.NoError(t, f.st.ResumeSession(f.ctx, "s01"))
	got = f.get("s01")
	require.True(t, got.PausedAt.IsZero())
	require.False(t, got.PausedIdle)
	require.Equal(t, "it was paused", got.PendingNotice, "the notice waits for the next operation")
	require.NoError(t, f.st.ResumeSession(f.ctx, "nope"))

	// A pause without a notice keeps the one pending.
	ok, err = f.st.PauseSession(f.ctx, "s01", "sb1", at(3*time.Minute), false, "")
	require.NoError(t, err)
	require.True(t, ok)
	got = f.get("s01")
	require.Equal(t, "it was paused", got.PendingNotice)
	require.False(t, got.PausedIdle)

	// A reset unpauses.
	ok, err = f.st.ResetSession(f.ctx, "s01", "reset", at(time.Hour), "sb1")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, f.get("s01").PausedAt.IsZero())
}

func testPausedNotIdle(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	for _, id := range []string{"i01", "i02"} {
		s := newSession(id, alice, at(0))
		s.SandboxID = "sb-" + id
		f.session(s)
	}
	ok, err := f.st.PauseSession(f.ctx, "i01", "sb-i01", at(time.Minute), true, "")
	require.NoError(t, err)
	require.True(t, ok)
	rows, err := f.st.IdleSessions(f.ctx, "default", at(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"i02"}, sessionIDs(rows), "a paused session is not idle: it is parked already")
}

func testParkSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	_, err := f.st.PauseSession(f.ctx, "s01", "sb1", at(time.Minute), true, "")
	require.NoError(t, err)

	ok, err := f.st.ParkSession(f.ctx, "s01", "other", "snap1", "parked")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = f.st.ParkSession(f.ctx, "s01", "sb1", "snap1", "parked")
	require.NoError(t, err)
	require.True(t, ok)
	got := f.get("s01")
	require.Empty(t, got.SandboxID)
	require.Equal(t, "snap1", got.ParkedSnapshot)
	require.Equal(t, "parked", got.PendingNotice)
	require.True(t, got.PausedAt.IsZero(), "a parked session is not paused")
	sameTime(t, at(0), got.CreatedAt, "parking keeps created_at")

	ok, err = f.st.ParkSession(f.ctx, "s01", "", "snap2", "again")
	require.NoError(t, err)
	require.False(t, ok, "no sandbox: nothing to park")
	rows, err := f.st.IdleSessions(f.ctx, "default", at(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, rows)
}

func testBindClearsPark(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	_, err := f.st.ParkSession(f.ctx, "s01", "sb1", "snap1", "parked")
	require.NoError(t, err)
	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb2", "active", at(time.Minute)))
	got := f.get("s01")
	require.Equal(t, "sb2", got.SandboxID)
	require.Empty(t, got.ParkedSnapshot, "a restored session is parked no more")
	require.Empty(t, got.PendingNotice)

	_, err = f.st.PauseSession(f.ctx, "s01", "sb2", at(2*time.Minute), false, "")
	require.NoError(t, err)
	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb3", "active", at(3*time.Minute)))
	require.True(t, f.get("s01").PausedAt.IsZero(), "a sandbox just bound runs")

	// The insert takes none of it from the row.
	n := newSession("s02", alice, at(0))
	n.PausedAt, n.PausedIdle, n.ParkedSnapshot = at(time.Minute), true, "snap"
	f.session(n)
	got = f.get("s02")
	require.True(t, got.PausedAt.IsZero())
	require.False(t, got.PausedIdle)
	require.Empty(t, got.ParkedSnapshot)
}

func newSnapshot(id, owner, session string, created time.Time) store.Snapshot {
	return store.Snapshot{ID: id, OwnerID: owner, SessionID: session, Profile: "default", Provider: "fake",
		Kind: store.SnapshotUser, Ref: "ref-" + id, SizeBytes: 42, CreatedAt: created}
}

func (f *fixture) snapshot(s store.Snapshot) store.Snapshot {
	f.t.Helper()
	require.NoError(f.t, f.st.CreateSnapshotWithin(f.ctx, s, store.SnapshotLimits{}), "create snapshot %s", s.ID)
	return s
}

func testSnapshotCreateGet(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSnapshot("n01", alice, "s01", at(0))
	s.Name = "before the refactor"
	f.snapshot(s)
	got, err := f.st.GetSnapshot(f.ctx, "n01")
	require.NoError(t, err)
	sameTime(t, at(0), got.CreatedAt, "created_at")
	got.CreatedAt = time.Time{}
	s.CreatedAt = time.Time{}
	require.Equal(t, s, got)

	err = f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n01", alice, "s02", at(1)), store.SnapshotLimits{})
	require.Error(t, err, "duplicate id")
	require.NotErrorIs(t, err, store.ErrQuota)

	idle := newSnapshot("n02", "", "shared", at(0))
	idle.Kind = store.SnapshotIdle
	f.snapshot(idle)
	got, err = f.st.GetSnapshot(f.ctx, "n02")
	require.NoError(t, err)
	require.Empty(t, got.OwnerID, "a shared session's capture has no owner")

	_, err = f.st.GetSnapshot(f.ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testSnapshotQuota(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	two := store.SnapshotLimits{Count: 2}
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n01", alice, "s", at(0)), two))
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n02", alice, "s", at(0)), two))
	err := f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n03", alice, "s", at(0)), two)
	require.ErrorIs(t, err, store.ErrQuota)
	require.NotErrorIs(t, err, store.ErrSnapshotBytes, "the count, not the bytes")
	_, err = f.st.GetSnapshot(f.ctx, "n03")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing inserted over the quota")
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n04", bob, "s", at(0)), two), "per owner")
	idle := newSnapshot("n05", alice, "s", at(0))
	idle.Kind = store.SnapshotIdle
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, idle, store.SnapshotLimits{Count: 2, Bytes: 1}), "idle captures are never refused")
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n06", alice, "s", at(0)), store.SnapshotLimits{}), "no limit")
	_, err = f.st.DeleteSnapshot(f.ctx, "n01")
	require.NoError(t, err)
	_, err = f.st.DeleteSnapshot(f.ctx, "n02")
	require.NoError(t, err)
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n07", alice, "s", at(0)), two), "deleting makes room")
}

// The bytes of every snapshot of an owner, idle captures included, bound its new user
// snapshots: one that would take the total past the limit is refused as ErrSnapshotBytes
// (also ErrQuota), one that lands exactly on it is not.
func testSnapshotBytesQuota(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	sized := func(id, owner, kind string, size int64) store.Snapshot {
		s := newSnapshot(id, owner, "s", at(0))
		s.Kind, s.SizeBytes = kind, size
		return s
	}
	lim := store.SnapshotLimits{Count: 10, Bytes: 1000}
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, sized("n01", alice, store.SnapshotUser, 600), lim))
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, sized("n02", alice, store.SnapshotIdle, 300), lim), "an idle capture is not refused")
	err := f.st.CreateSnapshotWithin(f.ctx, sized("n03", alice, store.SnapshotUser, 101), lim)
	require.ErrorIs(t, err, store.ErrSnapshotBytes, "600 + 300 + 101 > 1000")
	require.ErrorIs(t, err, store.ErrQuota)
	_, err = f.st.GetSnapshot(f.ctx, "n03")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing inserted over the quota")
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, sized("n04", alice, store.SnapshotUser, 100), lim), "exactly the limit")
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, sized("n05", bob, store.SnapshotUser, 1000), lim), "per owner")
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, sized("n06", alice, store.SnapshotIdle, 5000), lim), "idle captures may pass it")
	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.Equal(t, int64(600+300+100+5000), held.SnapshotBytes)
	require.ErrorIs(t, f.st.CreateSnapshotWithin(f.ctx, sized("n07", alice, store.SnapshotUser, 0), lim), store.ErrSnapshotBytes,
		"past the limit, even an empty snapshot waits")
	shared := sized("n08", "", store.SnapshotIdle, 1<<40)
	require.NoError(t, f.st.CreateSnapshotWithin(f.ctx, shared, lim), "a shared session's capture has no owner to bound")
}

func testSnapshotOwner(f *fixture) {
	t := f.t
	err := f.st.CreateSnapshotWithin(f.ctx, newSnapshot("n01", notAPrincipal, "s", at(0)), store.SnapshotLimits{})
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrQuota)
}

func testListSnapshots(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	for id, c := range map[string]time.Duration{"a01": 1, "a02": 2, "a03": 2, "a04": 3} {
		f.snapshot(newSnapshot(id, alice, "s1", at(c*time.Minute)))
	}
	f.snapshot(newSnapshot("a05", alice, "s2", at(5*time.Minute)))
	f.snapshot(newSnapshot("b01", bob, "s3", at(4*time.Minute)))
	shared := newSnapshot("x01", "", "sh", at(6*time.Minute))
	shared.Kind = store.SnapshotIdle
	f.snapshot(shared)
	list := func(flt store.SnapshotFilter) []string {
		t.Helper()
		rows, err := f.st.ListSnapshots(f.ctx, flt)
		require.NoError(t, err)
		ids := []string{}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	require.Equal(t, []string{"a05", "a04", "a03", "a02", "a01"}, list(store.SnapshotFilter{OwnerID: alice, Limit: 10}), "newest first, ties by id")
	require.Equal(t, []string{"b01"}, list(store.SnapshotFilter{OwnerID: bob, Limit: 10}))
	require.Equal(t, []string{"x01", "a05", "b01", "a04", "a03", "a02", "a01"}, list(store.SnapshotFilter{All: true, Limit: 10}))
	require.Empty(t, list(store.SnapshotFilter{Limit: 10}), "nobody's without All")
	require.Equal(t, []string{"a04", "a03", "a02", "a01"}, list(store.SnapshotFilter{OwnerID: alice, SessionID: "s1", Limit: 10}))
	require.Equal(t, []string{"a05", "a04"}, list(store.SnapshotFilter{OwnerID: alice, Limit: 2}))
	require.Equal(t, []string{"a02", "a01"}, list(store.SnapshotFilter{OwnerID: alice, Limit: 10, AfterCreated: at(2 * time.Minute), AfterID: "a03"}))
}

func testDeleteSnapshot(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.snapshot(newSnapshot("n01", alice, "s", at(0)))
	ok, err := f.st.DeleteSnapshot(f.ctx, "n01")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.st.DeleteSnapshot(f.ctx, "n01")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = f.st.GetSnapshot(f.ctx, "n01")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testSnapshotUsage(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.snapshot(newSnapshot("n01", alice, "s", at(0)))
	f.snapshot(newSnapshot("n02", alice, "s", at(0)))
	idle := newSnapshot("n03", alice, "s", at(0))
	idle.Kind = store.SnapshotIdle
	f.snapshot(idle)
	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.Equal(t, 2, held.Snapshots, "user snapshots only")
	require.Equal(t, int64(3*42), held.SnapshotBytes, "the bytes of all of them, idle captures included")
}

func testSigningKey(f *fixture) {
	t := f.t
	k, err := f.st.SigningKey(f.ctx, "links", []byte("first-key"), at(0))
	require.NoError(t, err)
	require.Equal(t, []byte("first-key"), k)
	k, err = f.st.SigningKey(f.ctx, "links", []byte("second-key"), at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []byte("first-key"), k, "the first key recorded stays")
	k, err = f.st.SigningKey(f.ctx, "other", []byte("other-key"), at(0))
	require.NoError(t, err)
	require.Equal(t, []byte("other-key"), k, "one key per name")
}
