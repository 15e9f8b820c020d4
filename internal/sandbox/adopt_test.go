package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
	"github.com/sandgate/sandgate/internal/store"
)

// orphan records task id of session sid as started by a runner that never was (a gateway that
// died), as a crashed replica leaves it.
func (b *bundle) orphan(t *testing.T, id, sid string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.Store.CreateTaskWithin(ctx, store.Task{ID: id, SessionID: sid, OwnerID: b.alice.ID, Profile: "default",
		Operation: sandbox.OpExecuteCommand, Status: sandbox.TaskPending, RunnerID: "dead-runner", SubmittedAt: sandboxtest.T0}, 0))
	require.NoError(t, b.Store.StartTask(ctx, id, sandboxtest.T0))
}

// TestOrphanedTaskIsAdoptedFromItsSandbox: a task whose gateway died while its sandbox held
// the execution is finished by another gateway, with the output the sandbox kept; one whose
// sandbox no longer holds it is lost, saying why.
func TestOrphanedTaskIsAdoptedFromItsSandbox(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	first := b.exec(t, b.alice, sandbox.ExecInput{Code: "make the sandbox"})
	sid := first.SessionID
	fake := b.Provider(t, "default")

	b.orphan(t, "held-task", sid)
	fake.HoldExecution("held-task", sandboxtest.Reply(3, "all of it\n", "warned\n"))
	b.orphan(t, "gone-task", sid)

	b.Service.SweepNow(b.ctx)
	held := b.finished(t, b.alice, "held-task")
	assert.Equal(t, sandbox.TaskSucceeded, held.Status)
	require.NotNil(t, held.Result)
	assert.Equal(t, "all of it\n", held.Result.Stdout)
	assert.Equal(t, "warned\n", held.Result.Stderr)
	require.NotNil(t, held.Result.ExitCode)
	assert.Equal(t, 3, *held.Result.ExitCode)
	assert.Contains(t, held.Notice, "another gateway followed it")

	gone := b.finished(t, b.alice, "gone-task")
	assert.Equal(t, sandbox.TaskLost, gone.Status)
	assert.Contains(t, gone.Error, "no longer holds the execution")

	// The adopted one was followable while it ran, as if it had run here.
	f, err := b.Service.Follow(b.ctx, b.alice, "held-task", sandbox.Position{})
	require.NoError(t, err)
	batch, err := f.Next(b.ctx, time.Second)
	require.NoError(t, err)
	require.NotEmpty(t, batch.Events)
}

// An adopted execution holds its session's lock like one that runs here: an execution
// submitted while it is followed waits for its end, then runs.
func TestAdoptedExecutionHoldsTheSessionLock(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	sid := b.exec(t, b.alice, sandbox.ExecInput{Code: "make the sandbox"}).SessionID
	fake := b.Provider(t, "default")
	gate := sandboxtest.NewGate()
	b.orphan(t, "held-task", sid)
	fake.HoldExecution("held-task", gate.Program)

	b.Service.SweepNow(b.ctx)
	waitFor(t, gate.Started(), "the adopted execution is followed")
	execs := len(fake.Execs())
	next := b.submit(t, b.alice, sandbox.ExecInput{SessionID: sid, Code: "after", Wait: wait(0)})
	time.Sleep(100 * time.Millisecond)
	assert.Len(t, fake.Execs(), execs, "the next execution waited for the adopted one")
	got, err := b.Service.GetTask(b.ctx, b.alice, next.ID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskPending, got.Status)

	gate.Release(0, "done\n", "")
	assert.Equal(t, sandbox.TaskSucceeded, b.finished(t, b.alice, "held-task").Status)
	assert.Equal(t, sandbox.TaskSucceeded, b.finished(t, b.alice, next.ID).Status)
}
