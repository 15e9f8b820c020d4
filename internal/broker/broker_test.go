package broker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestThreadPromotesAfterWait(t *testing.T) {
	t.Parallel()
	b, err := broker.New(broker.FlavorThread)
	require.NoError(t, err)
	defer b.Close(context.Background())

	release := make(chan struct{})
	var finished atomic.Bool
	done, err := b.Submit(context.Background(), "t1", 50*time.Millisecond, func(ctx context.Context) {
		<-release
		finished.Store(true)
	})
	require.NoError(t, err)
	require.False(t, done, "a job still running after wait is promoted")
	close(release)
	require.Eventually(t, finished.Load, 5*time.Second, 10*time.Millisecond)

	done, err = b.Submit(context.Background(), "t2", time.Second, func(context.Context) {})
	require.NoError(t, err)
	require.True(t, done)

	done, err = b.Submit(context.Background(), "t3", 0, func(context.Context) {})
	require.NoError(t, err)
	require.False(t, done, "wait 0 always promotes")
}

func TestThreadSurvivesCallerAndCancels(t *testing.T) {
	t.Parallel()
	b, err := broker.New(broker.FlavorThread)
	require.NoError(t, err)
	defer b.Close(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := b.Submit(ctx, "t1", time.Hour, func(jctx context.Context) {
			<-jctx.Done()
			got <- jctx.Err()
		})
		require.NoError(t, err)
	}()
	time.Sleep(50 * time.Millisecond)
	cancel() // the caller leaves: the job goes on
	select {
	case <-got:
		t.Fatal("the job was cancelled with its caller")
	case <-time.After(100 * time.Millisecond):
	}
	require.True(t, b.Cancel("t1"))
	require.ErrorIs(t, <-got, context.Canceled)
	require.Eventually(t, func() bool { return !b.Cancel("t1") }, time.Second, 10*time.Millisecond)
}

func TestEmbeddedRunsInline(t *testing.T) {
	t.Parallel()
	b, err := broker.New(broker.FlavorEmbedded)
	require.NoError(t, err)
	ran := false
	done, err := b.Submit(context.Background(), "t1", 0, func(context.Context) { ran = true })
	require.NoError(t, err)
	require.True(t, done, "embedded never promotes")
	require.True(t, ran)
	require.NoError(t, b.Close(context.Background()))
}

func TestCloseDrainsThenRefuses(t *testing.T) {
	t.Parallel()
	b, err := broker.New(broker.FlavorThread)
	require.NoError(t, err)
	var finished atomic.Bool
	_, err = b.Submit(context.Background(), "t1", 0, func(context.Context) {
		time.Sleep(100 * time.Millisecond)
		finished.Store(true)
	})
	require.NoError(t, err)
	require.NoError(t, b.Close(context.Background()))
	require.True(t, finished.Load(), "close waits for running jobs")
	_, err = b.Submit(context.Background(), "t2", 0, func(context.Context) {})
	require.True(t, fault.IsKind(err, fault.Broker))

	// Past the drain deadline, running jobs are cancelled.
	b2, _ := broker.New(broker.FlavorThread)
	_, _ = b2.Submit(context.Background(), "t3", 0, func(ctx context.Context) { <-ctx.Done() })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.Error(t, b2.Close(ctx))

	_, err = broker.New("kafka-ish")
	require.True(t, fault.IsKind(err, fault.Config))
}
