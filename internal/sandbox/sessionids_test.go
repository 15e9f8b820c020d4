package sandbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// An execution takes its session's identity from the cache of what never changes about it
// (no round trip); a session another replica destroyed is found gone by the BeginTask that
// follows: an explicit id is then unknown (404, no task recorded), a default session is made
// again.
func TestExecutionOfASessionDestroyedElsewhere(t *testing.T) {
	a := setup(t, sandboxtest.Options{})
	b := setup(t, sandboxtest.Options{Store: a.Store, Clock: a.Clock, RunnerID: "runner-2"})

	sess, err := a.Service.CreateSession(a.ctx, a.alice, sandbox.CreateSessionInput{Profile: "default"})
	require.NoError(t, err)
	a.exec(t, a.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"}) // its identity is cached now
	_, err = b.Service.DestroySession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	_, err = a.Service.Execute(a.ctx, a.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	requireKind(t, err, fault.NotFound)
	require.ErrorContains(t, err, "unknown sandbox session '"+sess.ID+"'")
	tasks, _, err := a.Service.ListTasks(a.ctx, a.alice, sandbox.TaskFilter{SessionID: sess.ID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, tasks, 1, "only the execution before the destroy was recorded")

	first := a.exec(t, a.alice, sandbox.ExecInput{Code: "x"})
	_, err = b.Service.DestroySession(b.ctx, b.alice, first.SessionID, "")
	require.NoError(t, err)
	again := a.exec(t, a.alice, sandbox.ExecInput{Code: "x"})
	require.NotEqual(t, first.SessionID, again.SessionID, "the default session is made again")
	got, err := a.Service.GetSession(a.ctx, a.alice, sandbox.DefaultSessionID, "")
	require.NoError(t, err)
	require.Equal(t, again.SessionID, got.ID)

	// Another principal never resolves a cached session it cannot see.
	_, err = a.Service.Execute(a.ctx, a.bob, sandbox.ExecInput{SessionID: again.SessionID, Code: "x"})
	requireKind(t, err, fault.NotFound)
}
