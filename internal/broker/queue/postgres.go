package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// riverQueue is the River queue name Sandgate's jobs use.
const riverQueue = "sandgate"

// execArgs is a River job carrying one operation.
type execArgs struct {
	TaskID  string `json:"task_id"`
	GroupID string `json:"group_id"`
	Body    []byte `json:"body"`
}

// Kind names the job kind in River's tables.
func (execArgs) Kind() string { return "sandgate_operation" }

// Postgres is the River transport: a job per operation, inserted in the same transaction as
// the task row, so an operation is never queued without its task or the reverse.
type Postgres struct {
	pool        *pgxpool.Pool
	log         *slog.Logger
	rescueAfter time.Duration
	insert      *river.Client[pgx.Tx]
}

// NewPostgres prepares River's schema (its own migrations, serialised by an advisory lock)
// and returns the transport. rescueAfter is how long a claimed job may run before River offers
// it again (the domain defers it while its runner lives).
func NewPostgres(ctx context.Context, pool *pgxpool.Pool, rescueAfter time.Duration, log *slog.Logger) (*Postgres, error) {
	if err := migrateRiver(ctx, pool); err != nil {
		return nil, fmt.Errorf("queue: river migrations: %w", err)
	}
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: log})
	if err != nil {
		return nil, err
	}
	return &Postgres{pool: pool, log: log, rescueAfter: rescueAfter, insert: ins}, nil
}

func migrateRiver(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(1936, 5150)`); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock(1936, 5150)`) //nolint:errcheck
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// JoinsTransaction reports true: the job is inserted in the task row's transaction.
func (q *Postgres) JoinsTransaction() bool { return true }

// Enqueue inserts m as a River job within tx (or on its own when tx is nil).
func (q *Postgres) Enqueue(ctx context.Context, tx pgx.Tx, m Message) error {
	args := execArgs(m)
	// The domain caps executions itself; River's attempts only bound redelivery churn.
	opts := &river.InsertOpts{Queue: riverQueue, MaxAttempts: 1000}
	var err error
	if tx != nil {
		_, err = q.insert.InsertTx(ctx, tx, args, opts)
	} else {
		_, err = q.insert.Insert(ctx, args, opts)
	}
	return err
}

type riverWorker struct {
	river.WorkerDefaults[execArgs]
	h Handler
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[execArgs]) error {
	// River cancels a job's context after JobTimeout; the domain enforces the operation's own
	// timeout, so the handler only stops early when the worker is told to stop.
	err := w.h(context.WithoutCancel(ctx), Delivery{Message: Message{TaskID: job.Args.TaskID, GroupID: job.Args.GroupID, Body: job.Args.Body}, InProgress: func() {}})
	if errors.Is(err, ErrRetryLater) {
		return river.JobSnooze(retryDelay(err))
	}
	return err
}

// retryPolicy redelivers failed jobs after a second (River's default backs off for hours).
type retryPolicy struct{}

func (retryPolicy) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Second) }

// Consume runs a River client working Sandgate's queue until ctx ends, then stops it,
// letting running handlers finish.
func (q *Postgres) Consume(ctx context.Context, consumers int, h Handler) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{h: h})
	c, err := river.NewClient(riverpgxv5.New(q.pool), &river.Config{
		Logger:  q.log,
		Queues:  map[string]river.QueueConfig{riverQueue: {MaxWorkers: max(consumers, 1)}},
		Workers: workers,
		// River only rescues jobs past their timeout; the handler ignores River's timeout (see
		// Work), so a dead worker's job is offered again after rescueAfter, and a live
		// worker's job that River offers again is deferred by the domain.
		JobTimeout:           max(q.rescueAfter/2, time.Second),
		RescueStuckJobsAfter: max(q.rescueAfter, 2*time.Second+time.Millisecond),
		RetryPolicy:          retryPolicy{},
		FetchCooldown:        20 * time.Millisecond,
		FetchPollInterval:    250 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return c.Stop(stopCtx) // waits for running jobs
}

// Close is a no-op: the pool belongs to the store.
func (q *Postgres) Close() error { return nil }
