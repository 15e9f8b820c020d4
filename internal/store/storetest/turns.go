package storetest

import (
	"context"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

// turnTests cover BeginTask, AwaitTurn, ReleaseTurn and Completion.Unlock: an execution's
// task row and its place in its session's lock line, taken together and given up with the
// completion (docs/semantics.md §9 step 5; the two round trips of docs/benchmarks.md).
var turnTests = []test{
	{"without_lock_inserts_running", testBeginWithoutLock},
	{"first_place_holds_the_lock", testBeginFirst},
	{"later_place_waits_its_turn", testBeginWaits},
	{"places_keep_submission_order", testBeginOrder},
	{"unknown_session_inserts_nothing", testBeginUnknownSession},
	{"quota_takes_no_place", testBeginQuota},
	{"refused_session_records_nothing", testBeginRefused},
	{"cancelled_wait_keeps_the_place", testAwaitCancelled},
	{"unlock_with_a_second_completion", testUnlockSecondCompletion},
}

// turnAttempt is an AwaitTurn call running on its own goroutine.
type turnAttempt struct {
	done chan struct{}
	sess store.Session
	err  error
}

func (f *fixture) awaitAsync(ctx context.Context, place store.Place, taskID string, now time.Time) *turnAttempt {
	a := &turnAttempt{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.sess, a.err = f.st.AwaitTurn(ctx, place, taskID, func() time.Time { return now })
	}()
	return a
}

func (f *fixture) awaitTurn(a *turnAttempt) {
	f.t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		f.t.Fatal("AwaitTurn did not return within 30s")
	}
}

// waiting fails if a has returned.
func (f *fixture) waiting(a *turnAttempt, what string) {
	f.t.Helper()
	select {
	case <-a.done:
		f.t.Fatalf("%s: AwaitTurn returned (%v) while an earlier place held the lock", what, a.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// begin calls BeginTask with a lock and requires it to succeed.
func (f *fixture) begin(t store.Task) store.Begun {
	f.t.Helper()
	b, err := f.st.BeginTask(f.ctx, t, store.Admission{Limit: 0, Lock: true})
	require.NoError(f.t, err, "begin %s", t.ID)
	require.NotEmpty(f.t, b.Place.Token)
	require.Equal(f.t, t.SessionID, b.Place.SessionID)
	return b
}

// finishUnlocking finishes task id, giving place up in the same call.
func (f *fixture) finishUnlocking(id string, place store.Place, t time.Time) {
	f.t.Helper()
	ok, err := f.st.FinishTask(f.ctx, id, store.Completion{Status: "succeeded", SessionID: place.SessionID, Unlock: place}, t, time.Hour)
	require.NoError(f.t, err)
	require.True(f.t, ok, "finish %s", id)
}

func testBeginWithoutLock(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	in := newTask("t01", alice, "nosession1", "r1", at(time.Minute))
	in.Status = "succeeded" // ignored
	b, err := f.st.BeginTask(f.ctx, in, store.Admission{Limit: 1, Lock: false})
	require.NoError(t, err)
	require.True(t, b.First)
	require.Equal(t, store.Place{}, b.Place, "no place without a lock")
	got := f.getTask("t01")
	require.Equal(t, "running", got.Status, "a task without a lock starts at once")
	sameTimePtr(t, at(time.Minute), got.StartedAt, "started_at")
	require.Nil(t, got.FinishedAt)
	require.Positive(t, got.Seq)

	_, err = f.st.BeginTask(f.ctx, newTask("t02", alice, "nosession1", "r1", at(0)), store.Admission{Limit: 1, Lock: false})
	require.ErrorIs(t, err, store.ErrQuota)
	_, err = f.st.GetTask(f.ctx, "t02", "")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing inserted over the quota")
}

func testBeginFirst(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	b := f.begin(newTask("t01", alice, "s01", "r1", at(time.Second)))
	require.True(t, b.First, "a free lock is taken at once")
	require.Equal(t, "s01", b.Session.ID)
	require.Equal(t, "sb1", b.Session.SandboxID, "the session as it is")
	got := f.getTask("t01")
	require.Equal(t, "running", got.Status)
	sameTimePtr(t, at(time.Second), got.StartedAt, "started_at")
	f.queue("s01", 1)

	a := f.lockAsync(f.ctx, "s01", nil)
	f.queue("s01", 2)
	select {
	case <-a.done:
		t.Fatal("LockSession was granted while a begun task held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	f.finishUnlocking("t01", b.Place, at(2*time.Second))
	f.await(a)
	require.NoError(t, a.err, "the completion gave the lock up")
	a.unlock()
	require.Equal(t, "succeeded", f.getTask("t01").Status)
}

func testBeginWaits(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	unlock := f.lock("s01")
	b := f.begin(newTask("t01", alice, "s01", "r1", at(time.Second)))
	require.False(t, b.First, "the lock is held")
	got := f.getTask("t01")
	require.Equal(t, "pending", got.Status)
	require.Nil(t, got.StartedAt)
	f.queue("s01", 2)

	a := f.awaitAsync(f.ctx, b.Place, "t01", at(5*time.Second))
	f.waiting(a, "t01")
	require.Equal(t, "pending", f.getTask("t01").Status, "not started while it waits")
	unlock()
	f.awaitTurn(a)
	require.NoError(t, a.err)
	require.Equal(t, "s01", a.sess.ID)
	got = f.getTask("t01")
	require.Equal(t, "running", got.Status)
	sameTimePtr(t, at(5*time.Second), got.StartedAt, "started when its turn came")
	f.queue("s01", 1)
	f.finishUnlocking("t01", b.Place, at(6*time.Second))
	f.queue("s01", 0)
}

func testBeginOrder(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	first := f.begin(newTask("t01", alice, "s01", "r1", at(0)))
	require.True(t, first.First)
	second := f.begin(newTask("t02", alice, "s01", "r1", at(0)))
	third := f.begin(newTask("t03", alice, "s01", "r1", at(0)))
	require.False(t, second.First)
	require.False(t, third.First)
	require.Less(t, second.Place.Ticket, third.Place.Ticket, "tickets in submission order")

	a3 := f.awaitAsync(f.ctx, third.Place, "t03", at(time.Second)) // asks first, waits longer
	a2 := f.awaitAsync(f.ctx, second.Place, "t02", at(time.Second))
	f.waiting(a2, "t02")
	f.finishUnlocking("t01", first.Place, at(time.Second))
	f.awaitTurn(a2)
	require.NoError(t, a2.err)
	f.waiting(a3, "t03")
	require.Equal(t, "pending", f.getTask("t03").Status)
	f.finishUnlocking("t02", second.Place, at(2*time.Second))
	f.awaitTurn(a3)
	require.NoError(t, a3.err)
	f.finishUnlocking("t03", third.Place, at(3*time.Second))
	f.queue("s01", 0)
}

func testBeginUnknownSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	_, err := f.st.BeginTask(f.ctx, newTask("t01", alice, "gone01", "r1", at(0)), store.Admission{Limit: 0, Lock: true})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = f.st.GetTask(f.ctx, "t01", "")
	require.ErrorIs(t, err, store.ErrNotFound, "no task for an unknown session")
	f.queue("gone01", 0)
}

func testBeginQuota(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	b, err := f.st.BeginTask(f.ctx, newTask("t01", alice, "s01", "r1", at(0)), store.Admission{Limit: 1, Lock: true})
	require.NoError(t, err)
	_, err = f.st.BeginTask(f.ctx, newTask("t02", alice, "s01", "r1", at(0)), store.Admission{Limit: 1, Lock: true})
	require.ErrorIs(t, err, store.ErrQuota)
	_, err = f.st.GetTask(f.ctx, "t02", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	f.queue("s01", 1) // the first one's place only
	f.finishUnlocking("t01", b.Place, at(time.Second))
	_, err = f.st.BeginTask(f.ctx, newTask("t03", alice, "s01", "r1", at(0)), store.Admission{Limit: 1, Lock: true})
	require.NoError(t, err, "finished tasks do not count")
}

func testAwaitCancelled(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	first := f.begin(newTask("t01", alice, "s01", "r1", at(0)))
	second := f.begin(newTask("t02", alice, "s01", "r1", at(0)))
	ctx, cancel := context.WithCancel(f.ctx)
	a := f.awaitAsync(ctx, second.Place, "t02", at(time.Second))
	f.waiting(a, "t02")
	cancel()
	f.awaitTurn(a)
	require.ErrorIs(t, a.err, context.Canceled)
	f.queue("s01", 2) // the place stays until it is given up

	next := f.lockAsync(f.ctx, "s01", nil)
	f.queue("s01", 3)
	f.finishUnlocking("t01", first.Place, at(time.Second))
	select {
	case <-next.done:
		t.Fatal("the lock skipped a place that was not given up")
	case <-time.After(50 * time.Millisecond):
	}
	f.st.ReleaseTurn(second.Place)
	f.st.ReleaseTurn(second.Place) // twice: nothing more
	f.st.ReleaseTurn(store.Place{})
	f.await(next)
	require.NoError(t, next.err)
	next.unlock()
}

// A task that finished otherwise (cancelled, lost) still gives its place up with the
// completion that comes second.
func testUnlockSecondCompletion(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	b := f.begin(newTask("t01", alice, "s01", "r1", at(0)))
	f.finish("t01", "cancelled", at(time.Second))
	f.queue("s01", 1)
	ok, err := f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "succeeded", Unlock: b.Place}, at(2*time.Second), time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "the first completion stays")
	f.queue("s01", 0)
	require.Equal(t, "cancelled", f.getTask("t01").Status)
}

// A session that takes no new work — closed, or paused by its owner unless the profile wakes
// it — refuses the task: nothing inserted (no task, no audit event, no place), and the
// session is returned to say why. A session the idle sweeper paused takes it.
func testBeginRefused(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.withSandbox(newSession("s01", alice, at(0)), "sb1")
	ok, err := f.st.PauseSession(f.ctx, "s01", "sb1", at(time.Minute), false, "")
	require.NoError(t, err)
	require.True(t, ok)
	b, err := f.st.BeginTask(f.ctx, newTask("t01", alice, "s01", "r1", at(0)), store.Admission{Lock: true})
	require.ErrorIs(t, err, store.ErrRefused)
	require.Equal(t, "s01", b.Session.ID)
	require.False(t, b.Session.PausedAt.IsZero(), "the session says why")
	_, err = f.st.GetTask(f.ctx, "t01", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Empty(t, f.audit(store.AuditFilter{}), "no audit event")
	f.queue("s01", 0)

	b, err = f.st.BeginTask(f.ctx, newTask("t02", alice, "s01", "r1", at(0)), store.Admission{Lock: true, WakesPaused: true})
	require.NoError(t, err, "a profile that resumes on use takes it")
	f.finishUnlocking("t02", b.Place, at(time.Second))

	require.NoError(t, f.st.ResumeSession(f.ctx, "s01"))
	ok, err = f.st.PauseSession(f.ctx, "s01", "sb1", at(time.Minute), true, "idle")
	require.NoError(t, err)
	require.True(t, ok)
	b, err = f.st.BeginTask(f.ctx, newTask("t03", alice, "s01", "r1", at(0)), store.Admission{Lock: true})
	require.NoError(t, err, "paused by the idle sweeper: the next use resumes it")
	f.finishUnlocking("t03", b.Place, at(time.Second))

	ok, err = f.st.DestroyFailed(f.ctx, "s01", "sb1", "boom", at(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	b, err = f.st.BeginTask(f.ctx, newTask("t04", alice, "s01", "r1", at(0)), store.Admission{Lock: true, WakesPaused: true})
	require.ErrorIs(t, err, store.ErrRefused)
	require.Equal(t, store.SessionClosed, b.Session.Status)
	_, err = f.st.GetTask(f.ctx, "t04", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	f.queue("s01", 0)
}
