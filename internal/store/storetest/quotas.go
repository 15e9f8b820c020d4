package storetest

import (
	"encoding/json"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var quotaTests = []test{
	{"contexts", testContexts},
	{"contexts_follow_the_sandbox", testContextsFollowTheSandbox},
	{"retained_output", testRetainedOutput},
}

// withSandbox is s bound to sandbox sb.
func (f *fixture) withSandbox(s store.Session, sb string) store.Session {
	f.t.Helper()
	f.session(s)
	require.NoError(f.t, f.st.UpdateSessionBackend(f.ctx, s.ID, sb, "active", s.CreatedAt))
	return s
}

func (f *fixture) contexts(owner string) int {
	f.t.Helper()
	held, err := f.st.Usage(f.ctx, owner)
	require.NoError(f.t, err)
	return held.Contexts
}

// A context counts against its holder's quota once, however often it is recorded, across
// the holder's sessions, until it is released or its session destroyed.
func testContexts(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	f.withSandbox(newSession("s01", alice, at(0)), "sb1")
	f.withSandbox(newSession("s02", alice, at(0)), "sb2")
	f.withSandbox(newSession("s03", bob, at(0)), "sb3")
	hold := func(session, name, sb, owner string, limit int) error {
		return f.st.HoldContext(f.ctx, store.Context{SessionID: session, Name: name, SandboxID: sb, OwnerID: owner, CreatedAt: at(time.Minute)}, limit)
	}
	require.NoError(t, hold("s01", "a", "sb1", alice, 2))
	require.NoError(t, hold("s01", "a", "sb1", alice, 1), "recording a held context again is not one more")
	require.NoError(t, hold("s02", "b", "sb2", alice, 2), "contexts of all the owner's sessions count together")
	require.ErrorIs(t, hold("s02", "c", "sb2", alice, 2), store.ErrQuota)
	require.NoError(t, hold("s03", "c", "sb3", bob, 2), "another owner's contexts do not count")
	require.NoError(t, hold("s02", "d", "sb2", alice, 0), "limit 0: none")
	require.NoError(t, hold("s02", "e", "sb2", alice, -1), "limit < 0: none")
	require.Equal(t, 4, f.contexts(alice))
	require.Equal(t, 1, f.contexts(bob))

	require.ErrorIs(t, hold("s09", "a", "sb9", alice, 0), store.ErrNotFound, "no such session")

	for _, n := range []string{"d", "e", "nothing"} {
		require.NoError(t, f.st.ReleaseContext(f.ctx, "s02", n))
	}
	require.Equal(t, 2, f.contexts(alice))
	require.ErrorIs(t, hold("s02", "c", "sb2", alice, 2), store.ErrQuota, "still two")
	require.NoError(t, f.st.ReleaseContext(f.ctx, "s02", "b"))
	require.NoError(t, hold("s02", "c", "sb2", alice, 2), "releasing frees the quota")

	require.NoError(t, f.st.DeleteSession(f.ctx, "s02"))
	require.Equal(t, 1, f.contexts(alice), "a destroyed session's contexts go with it")
	f.withSandbox(newSession("s02", alice, at(0)), "sb2")
	require.Equal(t, 1, f.contexts(alice), "and do not come back with a session of the same id")
}

// A context lives in one sandbox: once its session's sandbox is reset or replaced it no
// longer counts, DeleteStaleContexts removes it, and recording it in the new sandbox counts
// it again.
func testContextsFollowTheSandbox(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.withSandbox(newSession("s01", alice, at(0)), "sb1")
	f.withSandbox(newSession("s02", alice, at(0)), "sb2")
	hold := func(session, name, sb string) error {
		return f.st.HoldContext(f.ctx, store.Context{SessionID: session, Name: name, SandboxID: sb, OwnerID: alice, CreatedAt: at(0)}, 2)
	}
	require.NoError(t, hold("s01", "a", "sb1"))
	require.NoError(t, hold("s02", "b", "sb2"))
	require.ErrorIs(t, hold("s01", "c", "sb1"), store.ErrQuota)

	ok, err := f.st.ResetSession(f.ctx, "s01", "", at(time.Hour), "sb1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, f.contexts(alice), "a reset sandbox's contexts are gone")
	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s02", "sb4", "active", at(time.Hour)))
	require.Equal(t, 0, f.contexts(alice), "so are a replaced sandbox's")

	n, err := f.st.DeleteStaleContexts(f.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	n, err = f.st.DeleteStaleContexts(f.ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	require.NoError(t, f.st.UpdateSessionBackend(f.ctx, "s01", "sb3", "active", at(time.Hour)))
	require.NoError(t, hold("s01", "a", "sb3"))
	require.NoError(t, hold("s02", "b", "sb2"), "recorded in a sandbox that is not the session's: it does not count")
	require.NoError(t, hold("s02", "c", "sb4"))
	require.Equal(t, 2, f.contexts(alice))
	require.ErrorIs(t, hold("s02", "b", "sb4"), store.ErrQuota, "moving it into the session's sandbox would make three")
	require.NoError(t, f.st.ReleaseContext(f.ctx, "s02", "c"))
	require.NoError(t, hold("s02", "b", "sb4"), "recording it again moves it to the session's sandbox")
	require.Equal(t, 2, f.contexts(alice))
}

// Finished results count their output bytes for their owner until they expire;
// DropOldestOutputs keeps the newest that fit and merges the blank into the older ones.
func testRetainedOutput(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	f.session(newSession("s01", alice, at(0)))
	f.session(newSession("s02", bob, at(0)))
	finish := func(id, owner, session string, bytes int64, when time.Duration, ttl time.Duration) {
		f.task(newTask(id, owner, session, "r1", at(0)))
		res := map[string]any{"status": "completed", "stdout": "out of " + id, "stderr": "err", "exit_code": 0}
		ok, err := f.st.FinishTask(f.ctx, id, store.Completion{Status: "succeeded", Result: res, OutputBytes: bytes}, at(when), ttl)
		require.NoError(t, err)
		require.True(t, ok)
	}
	finish("t01", alice, "s01", 100, time.Minute, time.Hour)
	finish("t02", alice, "s01", 200, 2*time.Minute, time.Hour)
	finish("t03", alice, "s01", 300, 3*time.Minute, time.Hour)
	finish("t04", bob, "s02", 1000, 4*time.Minute, time.Hour)
	finish("t05", alice, "s01", 0, 5*time.Minute, time.Hour)
	finish("t06", alice, "s01", 50, 6*time.Minute, time.Minute)
	f.task(newTask("t07", alice, "s01", "r1", at(0))) // unfinished: keeps nothing yet

	held, err := f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.EqualValues(t, 650, held.RetainedOutputBytes)

	n, err := f.st.DeleteExpiredTasks(f.ctx, at(8*time.Minute))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	held, err = f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.EqualValues(t, 600, held.RetainedOutputBytes, "expired tasks keep nothing")

	blank := json.RawMessage(`{"stdout": "", "stderr": "", "output_dropped": true}`)
	n, err = f.st.DropOldestOutputs(f.ctx, alice, 550, blank)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "300 + 200 fit in 550, 100 more do not")
	n, err = f.st.DropOldestOutputs(f.ctx, alice, 550, blank)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to drop")

	result := func(id string) map[string]any {
		var r map[string]any
		require.NoError(t, json.Unmarshal(f.getTask(id).Result, &r))
		return r
	}
	require.Equal(t, map[string]any{"status": "completed", "stdout": "", "stderr": "", "exit_code": float64(0), "output_dropped": true}, result("t01"))
	require.Equal(t, "out of t02", result("t02")["stdout"])
	require.Equal(t, "succeeded", f.getTask("t01").Status, "the task stays")
	held, err = f.st.Usage(f.ctx, alice)
	require.NoError(t, err)
	require.EqualValues(t, 500, held.RetainedOutputBytes)

	n, err = f.st.DropOldestOutputs(f.ctx, alice, 250, blank)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the newest alone (300) does not fit in 250: it goes too")
	require.Equal(t, true, result("t03")["output_dropped"])
	held, err = f.st.Usage(f.ctx, bob)
	require.NoError(t, err)
	require.EqualValues(t, 1000, held.RetainedOutputBytes, "another owner's results are not touched")
	require.Equal(t, "out of t04", result("t04")["stdout"])
}
