package broker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// queuedEnv is a Queued over a real Postgres and the in-memory transport, with the messages
// it sent readable through recv.
type queuedEnv struct {
	o     broker.QueuedOptions
	st    store.Queue
	q     *broker.Queued
	owner principal.Principal
	recv  chan queue.Delivery
}

func newQueued(t *testing.T, o broker.QueuedOptions) *queuedEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	ctx := context.Background()
	st := pgtest.Store(t)
	row, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://issuer.test", Subject: "alice"}, time.Now())
	require.NoError(t, err)
	tr := queue.NewInMemory()
	o.Store, o.Transport, o.RunnerID = st, tr, "runner-test"
	// The configuration's defaults where the test sets nothing (the gateway passes config's).
	o.WaitPoll = cmp.Or(o.WaitPoll, 500*time.Millisecond)
	o.MaxReceiveCount = cmp.Or(o.MaxReceiveCount, 3)
	o.LostAfter = cmp.Or(o.LostAfter, 30*time.Second)
	o.ResponseTTL = cmp.Or(o.ResponseTTL, 24*time.Hour)
	e := &queuedEnv{o: o, st: st, q: broker.NewQueued(o), owner: principal.Principal{ID: row.ID, Subject: "alice"}, recv: make(chan queue.Delivery, 16)}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { defer func() { done <- struct{}{} }(); e.q.Run(runCtx) }()
	go func() {
		defer func() { done <- struct{}{} }()
		_ = tr.Consume(runCtx, 1, func(_ context.Context, d queue.Delivery) error { e.recv <- d; return nil })
	}()
	t.Cleanup(func() { stop(); <-done; <-done })
	return e
}

// worker is another worker process (runner) of the same fleet.
func (e *queuedEnv) worker(runnerID string) *broker.Queued {
	o := e.o
	o.RunnerID = runnerID
	return broker.NewQueued(o)
}

func (e *queuedEnv) task(id, session string) store.Task {
	return store.Task{ID: id, SessionID: session, OwnerID: e.owner.ID, Profile: "default", Operation: "execute_command", Status: "pending", SubmittedAt: time.Now()}
}

// local is a worker's own broker, executing each delivery with f.
func local(f func(ctx context.Context, req broker.Request) error) broker.Broker {
	b, err := broker.New(broker.FlavorEmbedded, run(f))
	if err != nil {
		panic(err)
	}
	return b
}

func (e *queuedEnv) envelope(id, session string) broker.Request {
	return broker.Request{TaskID: id, SessionID: session, Profile: "default", Operation: "execute_command", Principal: e.owner, Command: "echo hi", TimeoutMS: 1000}
}

// enqueue sends one task and returns the delivery the fleet received.
func (e *queuedEnv) enqueue(t *testing.T, id, session string) queue.Delivery {
	t.Helper()
	require.NoError(t, e.q.Enqueue(context.Background(), e.task(id, session), 0, e.envelope(id, session)))
	select {
	case d := <-e.recv:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no message reached the transport")
		return queue.Delivery{}
	}
}

func TestQueuedEnqueueRecordsTheTaskAndSendsTheRequest(t *testing.T) {
	t.Parallel()
	e := newQueued(t, broker.QueuedOptions{})
	d := e.enqueue(t, "t1", "s1")
	assert.Equal(t, "t1", d.TaskID)
	assert.Equal(t, "s1", d.GroupID, "the session orders the messages")
	var env broker.Request
	require.NoError(t, json.Unmarshal(d.Body, &env))
	assert.Equal(t, "echo hi", env.Command)
	assert.Equal(t, e.owner.ID, env.Principal.ID)
	row, err := e.st.GetTask(context.Background(), "t1", "")
	require.NoError(t, err)
	assert.True(t, row.Queued)
	assert.Zero(t, e.q.ResultLimit(), "the in-memory transport records results in Postgres only")
}

func TestQueuedEnqueueRefusesWhatItCannotCarry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newQueued(t, broker.QueuedOptions{InlinePayloadMaxBytes: 512})
	big := e.envelope("big", "s1")
	big.Stdin = []byte(strings.Repeat("x", 1024))
	err := e.q.Enqueue(ctx, e.task("big", "s1"), 0, big)
	require.Equal(t, fault.TooLarge, fault.KindOf(err))
	assert.Contains(t, err.Error(), "inline_payload_max_bytes=512")
	_, err = e.st.GetTask(ctx, "big", "")
	assert.ErrorIs(t, err, store.ErrNotFound, "a refused envelope leaves no task behind")

	e.enqueue(t, "first", "s1")
	err = e.q.Enqueue(ctx, e.task("second", "s2"), 1, e.envelope("second", "s2"))
	assert.ErrorIs(t, err, store.ErrQuota, "one unfinished task is the limit")
}

func TestQueuedDeliveryRunsOnceAndSkipsDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newQueued(t, broker.QueuedOptions{})
	d := e.enqueue(t, "t1", "s1")
	runs := 0
	h := e.q.Handler(local(func(ctx context.Context, req broker.Request) error {
		task := req.Task
		runs++
		assert.True(t, req.Delivered)
		assert.Equal(t, "t1", task.ID)
		assert.Equal(t, 1, task.Attempts+1, "the run sees the task as read before its attempt began")
		_, err := e.st.FinishTask(ctx, task.ID, store.Completion{Status: "succeeded"}, time.Now(), time.Hour)
		return err
	}))
	require.NoError(t, h(ctx, d))
	require.NoError(t, h(ctx, d), "a duplicate delivery is acknowledged")
	assert.Equal(t, 1, runs)

	finished, err := e.q.Wait(ctx, "t1", time.Second)
	require.NoError(t, err)
	assert.True(t, finished)
}

func TestQueuedDeliveryWaitsForEarlierWorkOfItsSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newQueued(t, broker.QueuedOptions{})
	e.enqueue(t, "earlier", "s1")
	later := e.enqueue(t, "later", "s1")
	h := e.q.Handler(local(func(context.Context, broker.Request) error {
		t.Error("the later operation must not start before the earlier one finished")
		return nil
	}))
	err := h(ctx, later)
	assert.ErrorIs(t, err, queue.ErrRetryLater, "put back without counting an attempt")
	assert.ErrorIs(t, err, queue.ErrOutOfTurn, "an ordered transport puts it behind its session's later messages")
	row, err := e.st.GetTask(ctx, "later", "")
	require.NoError(t, err)
	assert.Zero(t, row.Attempts)
}

func TestQueuedDeliveryGivesUpAfterMaxReceiveCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var observed []string
	e := newQueued(t, broker.QueuedOptions{MaxReceiveCount: 2, Observe: func(outcome string, redelivered bool) {
		mu.Lock()
		defer mu.Unlock()
		observed = append(observed, fmt.Sprintf("%s/%v", outcome, redelivered))
	}})
	d := e.enqueue(t, "t1", "s1")
	interrupted := errors.New("worker stopping")
	runs := 0
	run := local(func(context.Context, broker.Request) error { runs++; return interrupted })
	// Each worker stops mid-run (none heartbeats, so each counts as dead for the next one).
	require.ErrorIs(t, e.worker("w1").Handler(run)(ctx, d), interrupted)
	var retry *queue.RetryError
	require.ErrorAs(t, e.worker("w1").Handler(run)(ctx, d), &retry, "the runner holding it is not offered it again")
	require.ErrorIs(t, e.worker("w2").Handler(run)(ctx, d), interrupted)
	require.NoError(t, e.worker("w3").Handler(run)(ctx, d), "the third start fails the task instead of running it")
	assert.Equal(t, 2, runs)
	row, err := e.st.GetTask(ctx, "t1", "")
	require.NoError(t, err)
	assert.Equal(t, "failed", row.Status)
	assert.Equal(t, string(fault.Broker), row.ErrorType)
	assert.Contains(t, row.Error, "max_receive_count=2")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"run/false", "deferred/false", "run/true", "failed/true"}, observed,
		"the metrics hear of each delivery; the second and third starts are redeliveries")
}

func TestQueuedDeliveryDropsWhatItCannotDecode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newQueued(t, broker.QueuedOptions{})
	d := e.enqueue(t, "t1", "s1")
	d.Body = []byte("{not json")
	h := e.q.Handler(local(func(context.Context, broker.Request) error {
		t.Error("an undecodable operation must not run")
		return nil
	}))
	require.NoError(t, h(ctx, d), "acknowledged: redelivering it cannot help")
	row, err := e.st.GetTask(ctx, "t1", "")
	require.NoError(t, err)
	assert.Equal(t, "failed", row.Status)
	assert.Contains(t, row.Error, "could not be decoded")
}

// The transport's own count (kafka's failed-delivery header, SQS's ApproximateReceiveCount)
// and its dead letters end a task as the attempts cap does.
func TestQueuedDeliveryHonoursTheTransportsCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newQueued(t, broker.QueuedOptions{MaxReceiveCount: 2})
	run := local(func(context.Context, broker.Request) error {
		t.Error("a delivery past the limit must not run")
		return nil
	})
	d := e.enqueue(t, "over", "s1")
	d.ReceiveCount = 3
	require.NoError(t, e.q.Handler(run)(ctx, d), "acknowledged: the failure is recorded")
	row, err := e.st.GetTask(ctx, "over", "")
	require.NoError(t, err)
	assert.Equal(t, "failed", row.Status)
	assert.Equal(t, string(fault.Broker), row.ErrorType)
	assert.Contains(t, row.Error, "after 2 deliveries")
	assert.Contains(t, row.Error, "max_receive_count=2")
	assert.Zero(t, row.Attempts, "it never started")

	d = e.enqueue(t, "dead", "s2")
	d.DeadLettered, d.ReceiveCount = true, 5
	require.NoError(t, e.q.Handler(run)(ctx, d))
	row, err = e.st.GetTask(ctx, "dead", "")
	require.NoError(t, err)
	assert.Equal(t, "failed", row.Status)
	assert.Contains(t, row.Error, "after 5 deliveries")
	assert.Contains(t, row.Error, "dead-letter queue")

	// Within the limit it runs; a finished task's dead letter changes nothing.
	d = e.enqueue(t, "ok", "s3")
	d.ReceiveCount = 2
	ran := false
	require.NoError(t, e.q.Handler(local(func(ctx context.Context, req broker.Request) error {
		ran = true
		_, err := e.st.FinishTask(ctx, req.Task.ID, store.Completion{Status: "succeeded"}, time.Now(), time.Hour)
		return err
	}))(ctx, d))
	assert.True(t, ran)
	d.DeadLettered = true
	require.NoError(t, e.q.Handler(run)(ctx, d))
	row, err = e.st.GetTask(ctx, "ok", "")
	require.NoError(t, err)
	assert.Equal(t, "succeeded", row.Status)
}
