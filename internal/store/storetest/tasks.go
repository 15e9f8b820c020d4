package storetest

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var taskTests = []test{
	{"create_and_get", testTaskCreateGet},
	{"seq_in_submission_order", testTaskSeq},
	{"duplicate_id", testTaskDuplicateID},
	{"quota", testTaskQuota},
	{"start", testStartTask},
	{"start_in_session", testStartTaskInSession},
	{"promote", testPromoteTask},
	{"first_finish_wins", testFinishTask},
	{"finish_touches_session", testFinishTouches},
	{"cancel", testCancel},
	{"unfinished", testUnfinishedTasks},
	{"lost", testMarkLostTasks},
	{"real_completion_replaces_lost", testReplacesLost},
	{"withdraw", testWithdrawTask},
	{"adopt", testAdoptTasks},
	{"expiry", testDeleteExpiredTasks},
	{"usage", testUsage},
	{"background_processes", testBackgroundProcesses},
	{"list", testListTasks},
}

func testTaskCreateGet(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	in := newTask("t01", alice, "s01", "r1", at(time.Minute))
	// The insert takes the submission only: nothing of how a task ends.
	in.Promoted, in.Notice, in.Error, in.Result, in.CancelRequested, in.Attempts = true, "n", "e", []byte(`{}`), true, 3
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, in, 0))

	got := f.getTask("t01")
	sameTime(t, at(time.Minute), got.SubmittedAt, "submitted_at")
	require.Positive(t, got.Seq)
	got.SubmittedAt, got.Seq = time.Time{}, 0
	require.Equal(t, store.Task{
		ID: "t01", SessionID: "s01", OwnerID: alice, Profile: "default", Operation: "execute_code", Status: "pending", RunnerID: "r1",
	}, got)

	own, err := f.st.GetTask(f.ctx, "t01", alice)
	require.NoError(t, err)
	require.Equal(t, "t01", own.ID)
	_, err = f.st.GetTask(f.ctx, "t01", bob)
	require.ErrorIs(t, err, store.ErrNotFound, "another owner's task")
	_, err = f.st.GetTask(f.ctx, "nope", "")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testTaskSeq(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	// Submission times out of order: seq follows the inserts.
	for i, id := range []string{"t03", "t01", "t05", "t02", "t04"} {
		f.task(newTask(id, alice, "s01", "r1", at(time.Duration(5-i)*time.Minute)))
	}
	var last int64
	for _, id := range []string{"t03", "t01", "t05", "t02", "t04"} {
		seq := f.getTask(id).Seq
		require.Greater(t, seq, last, "task %s", id)
		last = seq
	}
}

func testTaskDuplicateID(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	err := f.st.CreateTaskWithin(f.ctx, newTask("t01", alice, "s02", "r1", at(0)), 10)
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrQuota)
	require.Equal(t, "s01", f.getTask("t01").SessionID)
}

func testTaskQuota(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, newTask("t01", alice, "s01", "r1", at(0)), 2))
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, newTask("t02", alice, "s01", "r1", at(0)), 2))
	require.ErrorIs(t, f.st.CreateTaskWithin(f.ctx, newTask("t03", alice, "s01", "r1", at(0)), 2), store.ErrQuota)
	_, err := f.st.GetTask(f.ctx, "t03", "")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing inserted over the quota")
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, newTask("t04", bob, "s02", "r1", at(0)), 2), "another owner's tasks do not count")
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, newTask("t05", alice, "s01", "r1", at(0)), 0), "limit 0: none")
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, newTask("t06", alice, "s01", "r1", at(0)), -1), "limit < 0: none")

	for _, id := range []string{"t01", "t05", "t06"} {
		f.finish(id, "succeeded", at(time.Minute))
	}
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, newTask("t07", alice, "s01", "r1", at(0)), 2), "finished tasks do not count")
	require.ErrorIs(t, f.st.CreateTaskWithin(f.ctx, newTask("t08", alice, "s01", "r1", at(0)), 2), store.ErrQuota)
}

func testStartTask(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.NoError(t, f.st.StartTask(f.ctx, "t01", at(time.Second)))
	got := f.getTask("t01")
	require.Equal(t, "running", got.Status)
	sameTimePtr(t, at(time.Second), got.StartedAt, "started_at")

	f.task(newTask("t02", alice, "s01", "r1", at(0)))
	f.finish("t02", "cancelled", at(time.Second))
	require.NoError(t, f.st.StartTask(f.ctx, "t02", at(2*time.Second)))
	got = f.getTask("t02")
	require.Equal(t, "cancelled", got.Status, "a finished task is not started")
	require.Nil(t, got.StartedAt)
	require.NoError(t, f.st.StartTask(f.ctx, "nope", at(0)))
}

func testStartTaskInSession(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("s01", alice, at(0))
	s.SandboxID = "sb1"
	f.session(s)
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	sess, err := f.st.StartTaskInSession(f.ctx, "t01", "s01", at(time.Second))
	require.NoError(t, err)
	require.Equal(t, "s01", sess.ID)
	require.Equal(t, "sb1", sess.SandboxID)
	require.Equal(t, "running", f.getTask("t01").Status)

	f.task(newTask("t02", alice, "gone01", "r1", at(0)))
	_, err = f.st.StartTaskInSession(f.ctx, "t02", "gone01", at(time.Second))
	require.ErrorIs(t, err, store.ErrNotFound)
	got := f.getTask("t02")
	require.Equal(t, "running", got.Status, "the task is started all the same")
	sameTimePtr(t, at(time.Second), got.StartedAt, "started_at")
}

func testPromoteTask(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.NoError(t, f.st.PromoteTask(f.ctx, "t01"))
	require.True(t, f.getTask("t01").Promoted)
	require.NoError(t, f.st.PromoteTask(f.ctx, "nope"))
}

func testFinishTask(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.NoError(t, f.st.StartTask(f.ctx, "t01", at(time.Second)))
	result := map[string]any{"status": "completed", "exit_code": 3, "stdout": "out\n"}
	ok, err := f.st.FinishTask(f.ctx, "t01", store.Completion{
		Status: "succeeded", Notice: "a notice", Error: "an error", ErrorType: "provision", Result: result,
	}, at(time.Minute), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	got := f.getTask("t01")
	require.Equal(t, "succeeded", got.Status)
	require.Equal(t, "a notice", got.Notice)
	require.Equal(t, "an error", got.Error)
	require.Equal(t, "provision", got.ErrorType)
	require.JSONEq(t, `{"status":"completed","exit_code":3,"stdout":"out\n"}`, string(got.Result))
	sameTimePtr(t, at(time.Second), got.StartedAt, "started_at")
	sameTimePtr(t, at(time.Minute), got.FinishedAt, "finished_at")
	sameTimePtr(t, at(time.Minute+time.Hour), got.ExpiresAt, "expires_at = finished + ttl")
	summary, err := f.st.GetTaskSummary(f.ctx, "t01", alice)
	require.NoError(t, err)
	require.Nil(t, summary.Result, "a summary carries no result")
	got.Result = nil
	require.Equal(t, got, summary, "the rest is GetTask's")
	_, err = f.st.GetTaskSummary(f.ctx, "t01", f.owner("bob"))
	require.ErrorIs(t, err, store.ErrNotFound, "another owner's task")

	ok, err = f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "lost", Error: "late"}, at(2*time.Minute), time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "a finished task keeps its first completion")
	again := f.getTask("t01")
	require.Equal(t, "succeeded", again.Status)
	require.Equal(t, "an error", again.Error)
	sameTimePtr(t, at(time.Minute), again.FinishedAt, "finished_at")

	ok, err = f.st.FinishTask(f.ctx, "nope", store.Completion{Status: "succeeded"}, at(0), time.Hour)
	require.NoError(t, err)
	require.False(t, ok)

	f.task(newTask("t02", alice, "s01", "r1", at(0)))
	f.finish("t02", "failed", at(time.Minute))
	got = f.getTask("t02")
	require.Nil(t, got.Result, "no result: none stored")
	require.Empty(t, got.Notice)
	require.Empty(t, got.Error)
}

// FinishTask with Touch moves the session's last use to the completion (never back) — also
// when the task had finished already and this completion is not stored.
func testFinishTouches(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	f.task(newTask("t02", alice, "s01", "r1", at(0)))

	ok, err := f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "succeeded", SessionID: "s01"}, at(time.Hour), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, at(0), f.get("s01").LastUsedAt, "no touch without Touch")

	ok, err = f.st.FinishTask(f.ctx, "t02", store.Completion{Status: "succeeded", SessionID: "s01", Touch: true}, at(2*time.Hour), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	sameTime(t, at(2*time.Hour), f.get("s01").LastUsedAt, "touched at the completion")

	ok, err = f.st.FinishTask(f.ctx, "t02", store.Completion{Status: "lost", SessionID: "s01", Touch: true}, at(3*time.Hour), time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
	sameTime(t, at(3*time.Hour), f.get("s01").LastUsedAt, "touched although the completion was not stored")

	ok, err = f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "lost", SessionID: "s01", Touch: true}, at(time.Hour), time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
	sameTime(t, at(3*time.Hour), f.get("s01").LastUsedAt, "never back")
}

func testCancel(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	f.task(newTask("t02", alice, "s01", "r1", at(0)))
	f.task(newTask("t03", alice, "s01", "r2", at(0)))
	f.task(newTask("t04", alice, "s01", "r1", at(0)))
	f.finish("t04", "succeeded", at(0))

	for _, id := range []string{"t01", "t03", "t04"} {
		require.NoError(t, f.st.RequestCancel(f.ctx, id))
	}
	require.True(t, f.getTask("t01").CancelRequested)
	require.False(t, f.getTask("t02").CancelRequested)
	require.False(t, f.getTask("t04").CancelRequested, "a finished task is not flagged")

	ids, err := f.st.CancelRequested(f.ctx, "r1")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"t01"}, ids)
	ids, err = f.st.CancelRequested(f.ctx, "r2")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"t03"}, ids)

	f.finish("t01", "cancelled", at(time.Second))
	ids, err = f.st.CancelRequested(f.ctx, "r1")
	require.NoError(t, err)
	require.Empty(t, ids, "finished tasks are not listed")
	require.NoError(t, f.st.RequestCancel(f.ctx, "nope"))
}

func testUnfinishedTasks(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	for _, id := range []string{"t03", "t01", "t02", "t04"} {
		f.task(newTask(id, alice, "s01", "r1", at(0)))
	}
	f.task(newTask("t05", alice, "s02", "r1", at(0)))
	f.finish("t02", "succeeded", at(0))
	ids, err := f.st.UnfinishedTasks(f.ctx, "s01")
	require.NoError(t, err)
	require.Equal(t, []string{"t03", "t01", "t04"}, ids, "in submission order")
	ids, err = f.st.UnfinishedTasks(f.ctx, "s09")
	require.NoError(t, err)
	require.Empty(t, ids)
}

// A task is lost when its runner has sent no heartbeat since staleBefore (or never did) —
// pending tasks too, not only running ones.
func testMarkLostTasks(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	stale := at(-time.Minute)
	require.NoError(t, f.st.Heartbeat(f.ctx, "alive", "h", at(0)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "edge", "h", stale))
	require.NoError(t, f.st.Heartbeat(f.ctx, "dead", "h", at(-time.Hour)))
	for _, r := range []string{"alive", "edge", "dead", "never"} {
		f.task(newTask("run"+r, alice, "s01", r, at(-2*time.Hour)))
		require.NoError(t, f.st.StartTask(f.ctx, "run"+r, at(-2*time.Hour)))
	}
	f.task(newTask("pendingdead", alice, "s01", "dead", at(-2*time.Hour)))
	f.task(newTask("donedead", alice, "s01", "dead", at(-2*time.Hour)))
	f.finish("donedead", "succeeded", at(-90*time.Minute))

	n, err := f.st.MarkLostTasks(f.ctx, stale, at(0), time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	for _, id := range []string{"rundead", "runnever", "pendingdead"} {
		got := f.getTask(id)
		require.Equal(t, "lost", got.Status, id)
		require.Equal(t, "lost", got.ErrorType, id)
		require.Contains(t, got.Error, "runner "+got.RunnerID, id)
		sameTimePtr(t, at(0), got.FinishedAt, id+" finished_at")
		sameTimePtr(t, at(time.Hour), got.ExpiresAt, id+" expires_at")
	}
	require.Contains(t, f.getTask("rundead").Error, "its outcome is unknown")
	require.Contains(t, f.getTask("pendingdead").Error, "it never ran: submit it again", "a task that never started says so")
	require.Equal(t, "running", f.getTask("runalive").Status)
	require.Equal(t, "running", f.getTask("runedge").Status, "a heartbeat at staleBefore is recent enough")
	require.Equal(t, "succeeded", f.getTask("donedead").Status)

	n, err = f.st.MarkLostTasks(f.ctx, stale, at(0), time.Hour)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A completion from the runner that ran the execution (ReplacesLost) replaces a `lost`
// verdict — the sweeper's or one recorded before — with what happened, its output counted and
// its audit event completed again; it never replaces another completion, and a `lost` one
// never replaces `lost`.
func testReplacesLost(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	f.task(newTask("t01", alice, "s01", "gone", at(0)))
	require.NoError(t, f.st.StartTask(f.ctx, "t01", at(time.Second)))
	n, err := f.st.MarkLostTasks(f.ctx, at(time.Minute), at(2*time.Minute), time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, "lost", f.getTask("t01").Status)

	late := store.Completion{Status: "succeeded", Result: map[string]any{"stdout": "kept\n"}, OutputBytes: 5, SessionID: "s01"}
	ok, err := f.st.FinishTask(f.ctx, "t01", late, at(time.Minute), time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "without ReplacesLost the first completion stays")

	late.ReplacesLost = true
	ok, err = f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "lost", Error: "shut down", ReplacesLost: true}, at(time.Minute), time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "lost does not replace lost")
	ok, err = f.st.FinishTask(f.ctx, "t01", late, at(time.Minute), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)
	got := f.getTask("t01")
	require.Equal(t, "succeeded", got.Status)
	require.Empty(t, got.Error)
	require.Empty(t, got.ErrorType)
	require.JSONEq(t, `{"stdout":"kept\n"}`, string(got.Result))
	sameTimePtr(t, at(time.Minute), got.FinishedAt, "finished when it really did")
	sameTimePtr(t, at(time.Minute+time.Hour), got.ExpiresAt, "expires ttl after that")
	ev := f.auditOf("t01")
	require.Equal(t, "succeeded", ev.Status, "the audit event says what happened")
	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.EqualValues(t, 5, held.RetainedOutputBytes)

	ok, err = f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "failed", ReplacesLost: true}, at(time.Minute), time.Hour)
	require.NoError(t, err)
	require.False(t, ok, "a real completion is never replaced")
	require.Equal(t, "succeeded", f.getTask("t01").Status)
}

// Running tasks of a stale runner are orphans another runner may adopt, once: pending,
// finished and queued ones are not, nor those of live runners.
func testAdoptTasks(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	stale := at(-time.Minute)
	require.NoError(t, f.st.Heartbeat(f.ctx, "alive", "h", at(0)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "dead", "h", at(-time.Hour)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "new", "h", at(0)))
	f.task(newTask("second", alice, "s01", "dead", at(-2*time.Hour)))
	require.NoError(t, f.st.StartTask(f.ctx, "second", at(-80*time.Minute)))
	f.task(newTask("first", alice, "s01", "never", at(-2*time.Hour)))
	require.NoError(t, f.st.StartTask(f.ctx, "first", at(-90*time.Minute)))
	f.task(newTask("livetask", alice, "s01", "alive", at(-2*time.Hour)))
	require.NoError(t, f.st.StartTask(f.ctx, "livetask", at(-2*time.Hour)))
	f.task(newTask("pending", alice, "s01", "dead", at(-2*time.Hour)))
	f.task(newTask("done", alice, "s01", "dead", at(-2*time.Hour)))
	require.NoError(t, f.st.StartTask(f.ctx, "done", at(-2*time.Hour)))
	f.finish("done", "succeeded", at(-90*time.Minute))

	orphans, err := f.st.OrphanedTasks(f.ctx, stale, 10)
	require.NoError(t, err)
	var ids []string
	for _, o := range orphans {
		ids = append(ids, o.ID)
	}
	require.Equal(t, []string{"first", "second"}, ids, "running tasks of stale runners, oldest start first")
	orphans, err = f.st.OrphanedTasks(f.ctx, stale, 1)
	require.NoError(t, err)
	require.Len(t, orphans, 1)

	ok, err := f.st.AdoptTask(f.ctx, "second", "new", stale)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "new", f.getTask("second").RunnerID)
	require.Equal(t, "running", f.getTask("second").Status)
	ok, err = f.st.AdoptTask(f.ctx, "second", "other", stale)
	require.NoError(t, err)
	require.False(t, ok, "adopted once: its runner is alive now")
	for _, id := range []string{"livetask", "done", "missing"} {
		ok, err = f.st.AdoptTask(f.ctx, id, "new", stale)
		require.NoError(t, err)
		require.False(t, ok, id)
	}
	orphans, err = f.st.OrphanedTasks(f.ctx, stale, 10)
	require.NoError(t, err)
	require.Len(t, orphans, 1)
	require.Equal(t, "first", orphans[0].ID)
}

func testDeleteExpiredTasks(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	for _, id := range []string{"t01", "t02", "t03"} {
		f.task(newTask(id, alice, "s01", "r1", at(0)))
	}
	ok, err := f.st.FinishTask(f.ctx, "t01", store.Completion{Status: "succeeded"}, at(0), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.st.FinishTask(f.ctx, "t02", store.Completion{Status: "succeeded"}, at(0), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)

	n, err := f.st.DeleteExpiredTasks(f.ctx, at(time.Minute))
	require.NoError(t, err)
	require.Zero(t, n, "expiring at now is not expired yet")
	n, err = f.st.DeleteExpiredTasks(f.ctx, at(time.Minute+time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = f.st.GetTask(f.ctx, "t01", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	f.getTask("t02")

	n, err = f.st.DeleteExpiredTasks(f.ctx, at(1000*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	f.getTask("t03") // unfinished tasks never expire
}

func testUsage(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	_, err := f.st.EnsureDefaultSession(f.ctx, newSession("s01", alice, at(0)))
	require.NoError(t, err)
	f.session(newSession("s02", alice, at(0)))
	f.session(newSession("s03", bob, at(0)))
	shared := newSession("s04", "", at(0))
	shared.Profile = "rt"
	f.session(shared)
	for _, id := range []string{"t01", "t02", "t03"} {
		f.task(newTask(id, alice, "s01", "r1", at(0)))
	}
	f.task(newTask("t04", bob, "s03", "r1", at(0)))
	f.finish("t03", "succeeded", at(0))

	bg := newTask("t05", alice, "s02", "r1", at(0))
	bg.Background = true
	f.task(bg)

	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.Equal(t, store.Held{Sessions: 2, Executions: 2, Background: 1}, held, "the default session counts; the shared one is nobody's")
	carol := f.owner("carol")
	held, err = f.st.Usage(f.ctx, carol)
	require.NoError(t, err)
	require.Zero(t, held)
}

// testBackgroundProcesses: a background process keeps its program, counts against its own
// quota, and once started no longer holds its session's line and is adopted, queued or not.
func testBackgroundProcesses(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))

	long := strings.Repeat("é", store.MaxProgram) // twice the bound in bytes
	bg := newTask("t01", alice, "s01", "r1", at(0))
	bg.Background, bg.Program = true, "python3 -m http.server "+long
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, bg, 1))
	got := f.getTask("t01")
	require.True(t, got.Background)
	require.LessOrEqual(t, len(got.Program), store.MaxProgram)
	require.True(t, strings.HasPrefix(got.Program, "python3 -m http.server é"))
	require.True(t, strings.HasSuffix(got.Program, "é…"), "cut on a character boundary, marked")
	require.True(t, utf8.ValidString(got.Program))
	require.Zero(t, got.PID)

	bg2 := newTask("t02", alice, "s01", "r1", at(0))
	bg2.Background = true
	require.ErrorIs(t, f.st.CreateTaskWithin(f.ctx, bg2, 1), store.ErrQuota, "one background process is the limit")
	ex := newTask("t03", alice, "s01", "r1", at(0))
	ex.Program = "echo hi"
	require.NoError(t, f.st.CreateTaskWithin(f.ctx, ex, 1), "executions have their own quota")
	require.Equal(t, "echo hi", f.getTask("t03").Program)
	_, err := f.st.BeginTask(f.ctx, bg2, store.Admission{Limit: 1, Lock: true})
	require.ErrorIs(t, err, store.ErrQuota, "BeginTask counts background processes apart too")

	require.NoError(t, f.st.StartTask(f.ctx, "t01", at(time.Second)))
	require.NoError(t, f.st.StartedProcess(f.ctx, "t01", 4242))
	require.Equal(t, 4242, f.getTask("t01").PID)
	require.NoError(t, f.st.StartedProcess(f.ctx, "t03", 7), "not a background process: nothing recorded")
	require.Zero(t, f.getTask("t03").PID)

	// Its runner r1 sent no heartbeat: the started background process is offered for
	// adoption; so is the running execution t03 only once started.
	orphans, err := f.st.OrphanedTasks(f.ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"t01"}, taskIDs(orphans))
}

func testListTasks(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	for id, submitted := range map[string]time.Duration{"t01": 1, "t02": 2, "t03": 2, "t04": 3, "t05": 4} {
		f.task(newTask(id, alice, "s01", "r1", at(submitted*time.Minute)))
	}
	f.task(newTask("t06", alice, "s02", "r1", at(5*time.Minute)))
	f.task(newTask("t07", bob, "s03", "r1", at(6*time.Minute)))
	ok, err := f.st.FinishTask(f.ctx, "t04", store.Completion{Status: "succeeded", Result: map[string]any{"stdout": "x"}}, at(time.Hour), time.Hour)
	require.NoError(t, err)
	require.True(t, ok)

	list := func(filter store.TaskFilter) []store.Task {
		t.Helper()
		filter.OwnerID = alice
		if filter.Limit == 0 {
			filter.Limit = 10
		}
		rows, err := f.st.ListTasks(f.ctx, filter)
		require.NoError(t, err)
		return rows
	}
	all := list(store.TaskFilter{})
	require.Equal(t, []string{"t06", "t05", "t04", "t03", "t02", "t01"}, taskIDs(all), "own tasks, newest first")
	for _, r := range all {
		require.Nil(t, r.Result, "listings carry no results")
	}
	require.Equal(t, "succeeded", all[2].Status)
	require.NotNil(t, all[2].FinishedAt)
	require.Equal(t, []string{"t04"}, taskIDs(list(store.TaskFilter{Status: "succeeded"})))
	require.Equal(t, []string{"t06"}, taskIDs(list(store.TaskFilter{SessionID: "s02"})))

	for _, limit := range []int{1, 2, 4} {
		var got []string
		var last *store.Task
		for range 10 {
			filter := store.TaskFilter{Limit: limit}
			if last != nil {
				filter.AfterSubmitted, filter.AfterID = last.SubmittedAt, last.ID
			}
			rows := list(filter)
			if len(rows) == 0 {
				break
			}
			got = append(got, taskIDs(rows)...)
			last = &rows[len(rows)-1]
		}
		require.Equal(t, taskIDs(all), got, "pages of %d", limit)
	}
}

// An unfinished task its caller still waits for (never promoted) can be withdrawn — it and
// its audit event go, and its waiters wake — but not a promoted or finished one.
func testWithdrawTask(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	for _, id := range []string{"t01", "t02", "t03"} {
		f.task(newTask(id, alice, "s01", "r1", at(0)))
	}
	require.NoError(t, f.st.PromoteTask(f.ctx, "t02"))
	f.finish("t03", "failed", at(time.Second))

	ok, err := f.st.WithdrawTask(f.ctx, "t01")
	require.NoError(t, err)
	require.True(t, ok)
	_, err = f.st.GetTask(f.ctx, "t01", "")
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, e := range f.audit(store.AuditFilter{}) {
		require.NotEqual(t, "t01", e.TaskID, "its audit event goes with it")
	}
	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.Equal(t, 1, held.Executions, "t02 only")

	for _, id := range []string{"t02", "t03", "t01", "nope"} {
		ok, err = f.st.WithdrawTask(f.ctx, id)
		require.NoError(t, err)
		require.False(t, ok, id)
	}
	require.Equal(t, "pending", f.getTask("t02").Status)
	require.Equal(t, "failed", f.getTask("t03").Status)
}
