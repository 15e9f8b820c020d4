package sandbox_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// TestUnansweringSandboxEndsAtTimeoutAndGrace: a provider that does not return — its sandbox
// stopped answering and it ignores the end of its context — does not keep the execution
// running: at its timeout plus the grace the task ends timed_out with the output received
// so far and a notice, its session's line and its owner's quota are free, and what the call
// left behind writes later is dropped. A cancelled one ends cancelled the same way.
func TestUnansweringSandboxEndsAtTimeoutAndGrace(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{ExecGrace: 300 * time.Millisecond, Quotas: sandbox.Quotas{ConcurrentExecutions: 1}}})
	prov := b.Provider(t, "default")
	stuck := make(chan struct{})
	entered := make(chan struct{}, 2)
	var left sync.WaitGroup
	t.Cleanup(func() { close(stuck); left.Wait() })
	frozen := func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		left.Add(1)
		defer left.Done()
		_, _ = io.WriteString(r.Stdout, "before\n")
		entered <- struct{}{}
		<-stuck // a sandbox that stopped answering: the end of ctx changes nothing
		_, _ = io.WriteString(r.Stdout, "late\n")
		return providers.ExitStatus{}, nil
	}
	prov.Next(frozen)
	start := time.Now()
	r := b.exec(t, b.alice, sandbox.ExecInput{Code: "x", Timeout: 200 * time.Millisecond})
	assert.Less(t, time.Since(start), 20*time.Second)
	<-entered
	assert.Equal(t, sandbox.ResultTimedOut, r.Status)
	assert.Equal(t, "before\n", r.Stdout)
	assert.Contains(t, r.Notice, "did not report the end of this execution")
	task := b.finished(t, b.alice, r.TaskID)
	assert.Equal(t, sandbox.TaskTimedOut, task.Status)

	usage, err := b.Service.Usage(b.ctx, b.alice)
	require.NoError(t, err)
	assert.Zero(t, usage.ConcurrentExecutions.Used, "the quota is free")
	next := b.exec(t, b.alice, sandbox.ExecInput{Code: "x"})
	assert.Equal(t, sandbox.ResultCompleted, next.Status, "the session's next execution runs")

	// Cancelled while its sandbox does not answer: cancelled, at the same bound.
	prov.Next(frozen)
	started := make(chan string, 1)
	done := make(chan *sandbox.Result, 1)
	go func() {
		out, err := b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{Code: "x", Timeout: 200 * time.Millisecond,
			Started: func(id string) { started <- id }})
		if err != nil || out.Result == nil {
			done <- nil
			return
		}
		done <- out.Result
	}()
	id := <-started
	<-entered // it runs
	_, err = b.Service.CancelTask(b.ctx, b.alice, id)
	require.NoError(t, err)
	select {
	case r := <-done:
		require.NotNil(t, r)
		assert.Equal(t, sandbox.ResultCancelled, r.Status)
		assert.Contains(t, r.Notice, "did not report the end of this execution")
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled execution whose sandbox does not answer still runs")
	}
}
