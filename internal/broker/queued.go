package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/store"
)

// Delivery outcomes (QueuedOptions.Observe).
const (
	DeliveryRun       = "run"       // handed to the worker's run
	DeliveryDuplicate = "duplicate" // the task had finished (or expired): acknowledged, skipped
	DeliveryDeferred  = "deferred"  // out of its session's turn, or held by a live worker: later
	DeliveryFailed    = "failed"    // given up (max_receive_count, dead letter, undecodable)
)

// statusFailed is the task status of an operation the queue gave up on (the domain's
// TaskFailed; the broker does not import the domain).
const statusFailed = "failed"

// QueuedOptions builds a Queued.
type QueuedOptions struct {
	// Store is the response store every gateway and worker of the fleet shares (the
	// Postgres store in production).
	Store     store.Queue
	Transport queue.Transport
	// RunnerID is this process in task rows (a worker's attempts are recorded under it).
	RunnerID string
	// InlinePayloadMaxBytes bounds a serialized envelope; 0 = none.
	InlinePayloadMaxBytes int
	// The limits below are required (> 0): the composition root passes the configuration's
	// (sandbox.broker.*, defaults applied there), so no default is repeated here.

	// WaitPoll is how often a waiter re-reads the store when no notification arrives.
	WaitPoll time.Duration
	// MaxReceiveCount bounds how often one task may start.
	MaxReceiveCount int
	// LostAfter is how long a runner may miss heartbeats before it counts as dead.
	LostAfter time.Duration
	// ResponseTTL is how long a finished task is kept.
	ResponseTTL time.Duration
	Now         func() time.Time // default time.Now
	Logger      *slog.Logger
	// Observe, when set, is told how each delivery went (one of the Delivery* outcomes) and
	// whether it is a redelivery: the task had started on a worker before (metrics). It must
	// not block.
	Observe func(outcome string, redelivered bool)
}

// Queued is the queue flavor (docs/semantics.md §10 queue). On a gateway it records each
// execution's task and sends its envelope to the worker fleet — in the task row's own
// transaction when the transport stores messages in Postgres — and waits for the completion
// in the response store. On a worker it turns deliveries into runs: a delivery may arrive
// more than once, so a finished task is acknowledged and skipped, one held by a live worker
// is deferred, executions of one session start in submission order across the fleet, and a
// task that has started MaxReceiveCount times — or whose message the transport delivered
// more than MaxReceiveCount times, or dead-lettered — fails for good instead of running
// again.
type Queued struct {
	o       QueuedOptions
	watcher store.TaskWatcher
}

// NewQueued returns the queue flavor over o.Transport; Run must be running for waits to hear
// of completions before their poll interval. Like Registry.Register it panics on a wiring
// bug: no Store or Transport, or a required limit that is not > 0.
func NewQueued(o QueuedOptions) *Queued {
	if o.Store == nil || o.Transport == nil || o.WaitPoll <= 0 || o.MaxReceiveCount <= 0 || o.LostAfter <= 0 || o.ResponseTTL <= 0 {
		panic(fmt.Sprintf("broker.NewQueued: Store and Transport (set: %v) and positive WaitPoll (%v), MaxReceiveCount (%d), LostAfter (%v) and ResponseTTL (%v) are required",
			o.Store != nil && o.Transport != nil, o.WaitPoll, o.MaxReceiveCount, o.LostAfter, o.ResponseTTL))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observe == nil {
		o.Observe = func(string, bool) {}
	}
	return &Queued{o: o, watcher: o.Store.WatchTasks(o.Logger)}
}

// Run listens for completions until ctx ends.
func (q *Queued) Run(ctx context.Context) { q.watcher.Run(ctx) }

// Enqueue records t within limit unfinished executions of its owner and sends req.
//
// Errors: store.ErrQuota over the limit; fault.TooLarge for an envelope over
// InlinePayloadMaxBytes (nothing recorded); fault.Broker when the transport refuses it (the
// task, if already recorded, is finished as failed).
func (q *Queued) Enqueue(ctx context.Context, t store.Task, limit int, req Request) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if max := q.o.InlinePayloadMaxBytes; max > 0 && len(body) > max {
		return fault.New(fault.TooLarge, "serialized %s request is %d bytes, over sandbox.broker.inline_payload_max_bytes=%d; pass large inputs as files or raise the limit",
			req.Operation, len(body), max)
	}
	msg := queue.Message{TaskID: req.TaskID, GroupID: req.SessionID, Body: body}
	joins := q.o.Transport.JoinsTransaction()
	_, err = q.o.Store.CreateQueuedTask(ctx, t, limit, func(ctx context.Context, tx any, _ int64) error {
		if !joins {
			return nil
		}
		pgTx, ok := tx.(pgx.Tx)
		if !ok {
			return fmt.Errorf("the queue transport joins the task's Postgres transaction, and the response store (%T) offers none", q.o.Store)
		}
		return q.o.Transport.Enqueue(ctx, pgTx, msg)
	})
	if err != nil {
		if errors.Is(err, store.ErrQuota) {
			return err
		}
		return fault.Wrap(fault.Broker, err, "could not queue the operation")
	}
	if !joins {
		if err := q.o.Transport.Enqueue(ctx, nil, msg); err != nil {
			q.fail(context.WithoutCancel(ctx), t.ID, "", fault.Broker, "could not queue the operation: "+err.Error())
			return fault.Wrap(fault.Broker, err, "could not queue the operation")
		}
	}
	return nil
}

// Wait waits up to wait for task id to finish, wherever it runs; wait ≤ 0 checks once.
func (q *Queued) Wait(ctx context.Context, id string, wait time.Duration) (bool, error) {
	return q.watcher.Wait(ctx, id, wait, q.o.WaitPoll)
}

// ResultLimit is the transport's message limit for results (queue.ResultLimiter), or 0.
func (q *Queued) ResultLimit() int {
	if l, ok := q.o.Transport.(queue.ResultLimiter); ok {
		return l.ResultLimit()
	}
	return 0
}

// Handler returns the worker's delivery handler, which admits a delivery (see Queued) and
// submits its request, with its task row, to local — the worker's own broker, whose Executor
// runs it to its end and records the completion. An error from local (it is closing, or the
// run was interrupted because the worker is stopping) makes the transport redeliver the
// message.
func (q *Queued) Handler(local Broker) queue.Handler {
	return func(ctx context.Context, d queue.Delivery) error { return q.deliver(ctx, d, local) }
}

// fifoWait bounds how long a delivery waits (keeping its message) for earlier operations of
// its session before it is put back.
const fifoWait = 2 * time.Second

func (q *Queued) deliver(ctx context.Context, d queue.Delivery, local Broker) error {
	outcome, redelivered := DeliveryDeferred, false
	defer func() { q.o.Observe(outcome, redelivered) }()
	var req Request
	if err := json.Unmarshal(d.Body, &req); err != nil {
		q.o.Logger.Error("undecodable queued operation dropped", "task_id", d.TaskID, "err", err)
		if d.TaskID != "" {
			q.fail(ctx, d.TaskID, "", fault.Broker, "the queued operation could not be decoded: "+err.Error())
		}
		outcome = DeliveryFailed
		return nil
	}
	t, err := q.o.Store.GetTask(ctx, req.TaskID, "")
	if errors.Is(err, store.ErrNotFound) || (err == nil && t.FinishedAt != nil) {
		outcome = DeliveryDuplicate
		return nil // expired, cancelled or a duplicate delivery
	}
	if err != nil {
		return err
	}
	// The transport's own count (docs/semantics.md §10 queue): a delivery past
	// max_receive_count, or one the transport dead-lettered, fails the task for good.
	if limit := q.o.MaxReceiveCount; d.DeadLettered || d.ReceiveCount > limit {
		failed, why := "after "+strconv.Itoa(d.ReceiveCount-1)+" deliveries", "the workers running it stopped or failed before it finished"
		if d.DeadLettered {
			failed, why = "after "+strconv.Itoa(d.ReceiveCount)+" deliveries", "the queue moved it to its dead-letter queue"
			if d.ReceiveCount <= 0 {
				failed = "after repeated deliveries"
			}
		}
		outcome, redelivered = DeliveryFailed, t.Attempts > 0
		return q.fail(ctx, req.TaskID, req.SessionID, fault.Broker,
			fmt.Sprintf("sandbox execution failed %s (sandbox.broker.queue.max_receive_count=%d): %s", failed, limit, why))
	}
	if !req.Ephemeral {
		if err := q.awaitTurn(ctx, d, req.SessionID, t.Seq); err != nil {
			return err
		}
	}
	now := q.o.Now()
	attempts, err := q.o.Store.BeginAttempt(ctx, req.TaskID, q.o.RunnerID, now, now.Add(-q.o.LostAfter))
	switch {
	case errors.Is(err, store.ErrNotFound):
		outcome = DeliveryDuplicate
		return nil
	case errors.Is(err, store.ErrTaskHeld):
		// A live worker runs it (the transport offered it again early): look again once
		// that worker could have been declared dead.
		return &queue.RetryError{After: q.o.LostAfter}
	case err != nil:
		return err
	}
	redelivered = attempts > 1
	if max := q.o.MaxReceiveCount; attempts > max {
		outcome = DeliveryFailed
		return q.fail(ctx, req.TaskID, req.SessionID, fault.Broker,
			fmt.Sprintf("sandbox execution failed after %d deliveries (sandbox.broker.queue.max_receive_count=%d): the workers running it stopped before it finished", attempts-1, max))
	}
	outcome = DeliveryRun
	req.Task, req.Delivered = t, true
	_, err = local.Submit(ctx, req, -1)
	return err
}

// awaitTurn waits, at most fifoWait and keeping d's message, until no earlier operation of
// session (before seq) is unfinished; queue.ErrOutOfTurn when one still is.
func (q *Queued) awaitTurn(ctx context.Context, d queue.Delivery, session string, seq int64) error {
	deadline := time.Now().Add(fifoWait)
	for {
		earlier, err := q.o.Store.EarlierUnfinished(ctx, session, seq)
		if err != nil {
			return err
		}
		if !earlier {
			return nil
		}
		if time.Now().After(deadline) {
			return queue.ErrOutOfTurn
		}
		d.InProgress()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fail finishes task id as failed with a machinery error of kind.
func (q *Queued) fail(ctx context.Context, id, sessionID string, kind fault.Kind, msg string) error {
	_, err := q.o.Store.FinishTask(ctx, id, store.Completion{Status: statusFailed, Error: msg, ErrorType: string(kind), SessionID: sessionID}, q.o.Now(), q.o.ResponseTTL)
	return err
}
