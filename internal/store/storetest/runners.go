package storetest

import (
	"time"

	"github.com/stretchr/testify/require"
)

var runnerTests = []test{
	{"heartbeat", testHeartbeat},
	{"remove", testRemoveRunner},
	{"delete_stale", testDeleteStaleRunners},
}

// lost reports whether MarkLostTasks, with staleBefore, finds task id's runner gone.
func (f *fixture) lost(id string, staleBefore time.Time) bool {
	f.t.Helper()
	_, err := f.st.MarkLostTasks(f.ctx, staleBefore, at(10*time.Hour), time.Hour)
	require.NoError(f.t, err)
	return f.getTask(id).Status == "lost"
}

// The latest heartbeat is the one that counts, even when its time is earlier.
func testHeartbeat(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	f.task(newTask("t02", alice, "s01", "r2", at(0)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "r1", "h", at(time.Hour)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "r2", "h", at(time.Hour)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "r2", "h", at(0)))
	require.False(t, f.lost("t01", at(30*time.Minute)))
	require.True(t, f.lost("t02", at(30*time.Minute)))
}

func testRemoveRunner(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "r1", "h", at(time.Hour)))
	require.False(t, f.lost("t01", at(0)))
	require.NoError(t, f.st.RemoveRunner(f.ctx, "r1"))
	require.NoError(t, f.st.RemoveRunner(f.ctx, "r1"), "removing again is no error")
	require.True(t, f.lost("t01", at(0)))
}

func testDeleteStaleRunners(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.task(newTask("t01", alice, "s01", "r1", at(0)))
	f.task(newTask("t02", alice, "s01", "r2", at(0)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "r1", "h", at(time.Hour)))
	require.NoError(t, f.st.Heartbeat(f.ctx, "r2", "h", at(2*time.Hour)))
	require.NoError(t, f.st.DeleteStaleRunners(f.ctx, at(2*time.Hour)))
	require.False(t, f.lost("t02", at(0)), "a heartbeat at the cutoff is kept")
	require.True(t, f.lost("t01", at(0)), "forgotten: its tasks are lost whatever staleBefore")
}
