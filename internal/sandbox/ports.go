package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/store"
)

// Spool keeps the completions the Store refused on durable storage until it takes them
// (completion.go; docs/semantics.md §9 Completion): internal/spool, a folder on the
// gateway's disk. A record is opaque bytes under a task id; Put returns once it is durable.
type Spool interface {
	// Put stores record under id (replacing one of the same id); an error when it cannot
	// (full, or the disk failing).
	Put(id string, record []byte) error
	// Get returns record id; an error when there is none.
	Get(id string) ([]byte, error)
	// Remove removes record id (none: no error).
	Remove(id string) error
	// IDs lists the records held.
	IDs() ([]string, error)
	// Dir names the spool in logs.
	Dir() string
}

// Queue is the queue flavor's port (broker.Queued): executions travel to `gateway worker`
// processes and their completions come back through the Store (docs/semantics.md §10 queue).
type Queue interface {
	// Enqueue records t within limit unfinished executions of its owner (store.ErrQuota) and
	// sends req to the fleet, atomically where the transport joins the task's transaction.
	// Errors: fault.TooLarge for a request over the inline payload limit, fault.Broker when
	// the transport refuses it.
	Enqueue(ctx context.Context, t store.Task, limit int, req broker.Request) error
	// Wait waits up to wait for task id to finish, wherever it runs (wait < 0: until it does).
	Wait(ctx context.Context, id string, wait time.Duration) (finished bool, err error)
	// ResultLimit is the serialized size a result must fit (the transport's message limit),
	// or 0 when results are recorded in the Store only.
	ResultLimit() int
}

// Clock is the domain's time port (internal/sandbox/clock): the domain reads no other clock.
type Clock = clock.Clock

// Timer is a Clock's single event.
type Timer = clock.Timer

// Ticker is a Clock's repeating event.
type Ticker = clock.Ticker

// SystemClock is the wall clock and the runtime's timers (package time).
type SystemClock = clock.System

// ClockFunc is a Clock telling the time f tells, with the system's timers.
type ClockFunc = clock.Func

// sleep waits d on c, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, c Clock, d time.Duration) bool { return clock.Sleep(ctx, c, d) }
