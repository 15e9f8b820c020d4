package broker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run is an Executor of one function (the domain is the real one).
type run func(ctx context.Context, req broker.Request) error

func (f run) Execute(ctx context.Context, req broker.Request) error { return f(ctx, req) }

// jobs is an Executor running, for each request, the function given for its task id.
type jobs struct {
	mu sync.Mutex
	by map[string]func(ctx context.Context)
}

func (j *jobs) Execute(ctx context.Context, req broker.Request) error {
	j.mu.Lock()
	f := j.by[req.TaskID]
	j.mu.Unlock()
	f(ctx)
	return nil
}

// submit submits task id to b with wait, to run f.
func (j *jobs) submit(ctx context.Context, b broker.Broker, id string, wait time.Duration, f func(ctx context.Context)) (bool, error) {
	j.mu.Lock()
	j.by[id] = f
	j.mu.Unlock()
	return b.Submit(ctx, broker.Request{TaskID: id}, wait)
}

func newBroker(t *testing.T, flavor string) (broker.Broker, *jobs) {
	t.Helper()
	j := &jobs{by: map[string]func(context.Context){}}
	b, err := broker.New(flavor, j)
	require.NoError(t, err)
	return b, j
}

func TestThreadPromotesAfterWait(t *testing.T) {
	t.Parallel()
	b, j := newBroker(t, broker.FlavorThread)
	defer b.Close(context.Background())

	release := make(chan struct{})
	var finished atomic.Bool
	done, err := j.submit(context.Background(), b, "t1", 50*time.Millisecond, func(ctx context.Context) {
		<-release
		finished.Store(true)
	})
	require.NoError(t, err)
	require.False(t, done, "a request still running after wait is promoted")
	close(release)
	require.Eventually(t, finished.Load, 5*time.Second, 10*time.Millisecond)

	done, err = j.submit(context.Background(), b, "t2", time.Second, func(context.Context) {})
	require.NoError(t, err)
	require.True(t, done)

	done, err = j.submit(context.Background(), b, "t3", 0, func(context.Context) {})
	require.NoError(t, err)
	require.False(t, done, "wait 0 always promotes")
}

func TestThreadSurvivesCallerAndCancels(t *testing.T) {
	t.Parallel()
	b, j := newBroker(t, broker.FlavorThread)
	defer b.Close(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := j.submit(ctx, b, "t1", time.Hour, func(jctx context.Context) {
			<-jctx.Done()
			got <- jctx.Err()
		})
		require.NoError(t, err)
	}()
	time.Sleep(50 * time.Millisecond)
	cancel() // the caller leaves: the execution goes on
	select {
	case <-got:
		t.Fatal("the execution was cancelled with its caller")
	case <-time.After(100 * time.Millisecond):
	}
	require.True(t, b.Cancel("t1"))
	require.ErrorIs(t, <-got, context.Canceled)
	require.Eventually(t, func() bool { return !b.Cancel("t1") }, time.Second, 10*time.Millisecond)
}

func TestEmbeddedRunsInline(t *testing.T) {
	t.Parallel()
	b, j := newBroker(t, broker.FlavorEmbedded)
	ran := false
	done, err := j.submit(context.Background(), b, "t1", 0, func(context.Context) { ran = true })
	require.NoError(t, err)
	require.True(t, done, "embedded never promotes")
	require.True(t, ran)
	require.NoError(t, b.Close(context.Background()))
}

func TestSubmitReturnsTheExecutorsErrorOnlyWhenDone(t *testing.T) {
	t.Parallel()
	left := errors.New("left running")
	var saw broker.Request
	for _, flavor := range []string{broker.FlavorEmbedded, broker.FlavorThread} {
		b, err := broker.New(flavor, run(func(_ context.Context, req broker.Request) error { saw = req; return left }))
		require.NoError(t, err)
		done, err := b.Submit(context.Background(), broker.Request{TaskID: "t1", Command: "echo hi"}, -1)
		require.True(t, done, flavor)
		require.ErrorIs(t, err, left, flavor)
		require.Equal(t, "echo hi", saw.Command, "the executor gets the request as submitted")
		require.NoError(t, b.Close(context.Background()))
	}
}

func TestCloseDrainsThenRefuses(t *testing.T) {
	t.Parallel()
	b, j := newBroker(t, broker.FlavorThread)
	var finished atomic.Bool
	_, err := j.submit(context.Background(), b, "t1", 0, func(context.Context) {
		time.Sleep(100 * time.Millisecond)
		finished.Store(true)
	})
	require.NoError(t, err)
	require.NoError(t, b.Close(context.Background()))
	require.True(t, finished.Load(), "close waits for running executions")
	done, err := j.submit(context.Background(), b, "t2", 0, func(context.Context) {})
	require.False(t, done)
	require.True(t, fault.IsKind(err, fault.Broker))

	// Past the drain deadline, running executions are cancelled.
	b2, j2 := newBroker(t, broker.FlavorThread)
	_, _ = j2.submit(context.Background(), b2, "t3", 0, func(ctx context.Context) { <-ctx.Done() })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.Error(t, b2.Close(ctx))

	_, err = broker.New("kafka-ish", run(nil))
	require.True(t, fault.IsKind(err, fault.Config))
}
