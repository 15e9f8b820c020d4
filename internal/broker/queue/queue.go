// Package queue holds the queue flavor's transports (docs/semantics.md §10 queue): the gateway
// enqueues each operation, `gateway worker` processes consume them. Delivery is at least
// once; the domain (internal/sandbox) makes a redelivered operation safe to receive twice and
// caps how often one may start, so transports only move bytes and redeliver.
//
// Built in: postgres (River jobs, inserted in the task row's own transaction), nats (a
// JetStream work queue with in-progress heartbeats) and in_memory (one process). Kafka or SQS
// can be added by implementing Transport; nothing else changes.
package queue

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one operation on the wire.
type Message struct {
	TaskID string // also the deduplication id
	// GroupID is the session id: transports that can keep per-group order should; the domain
	// enforces per-session FIFO either way.
	GroupID string
	Body    []byte
}

// Delivery is a received message.
type Delivery struct {
	Message
	// InProgress tells the transport the handler is still working (extends ack deadlines).
	InProgress func()
}

// Handler processes one delivery. nil acknowledges it; ErrRetryLater puts it back without
// counting against anything (the operation could not start yet); any other error makes the
// transport redeliver it later.
type Handler func(ctx context.Context, d Delivery) error

// ErrRetryLater asks for a later redelivery (after RetryDelay) of a message that could not
// start yet; wrap it in a *RetryError to choose the delay.
var ErrRetryLater = errors.New("queue: retry later")

// RetryDelay is how long a message put back with ErrRetryLater waits.
const RetryDelay = 250 * time.Millisecond

// RetryError is ErrRetryLater with its own delay.
type RetryError struct{ After time.Duration }

func (e *RetryError) Error() string        { return "queue: retry in " + e.After.String() }
func (e *RetryError) Is(target error) bool { return target == ErrRetryLater }

// retryDelay is the delay err asks for.
func retryDelay(err error) time.Duration {
	var re *RetryError
	if errors.As(err, &re) && re.After > 0 {
		return re.After
	}
	return RetryDelay
}

// Transport moves messages from gateways to workers.
// ResultLimiter is implemented by a transport whose results travel on messages with a hard
// size limit (SQS: 256 KiB; Kafka: its configured max.message.bytes). The worker then cuts a
// result to ResultLimit() bytes serialized, keeping the head and tail of each stream.
// Transports without it (postgres, nats, in_memory) record results in the response store
// (Postgres), which has no such limit: queued executions keep sandbox.max_output_bytes per
// stream, as the thread flavor does.
type ResultLimiter interface {
	ResultLimit() int
}

type Transport interface {
	// Enqueue sends m. tx is the transaction that inserts the task row: a transport that
	// stores messages in Postgres joins it so both commit together; others send after it.
	Enqueue(ctx context.Context, tx pgx.Tx, m Message) error
	// JoinsTransaction reports whether Enqueue uses tx (otherwise the caller sends after commit).
	JoinsTransaction() bool
	// Consume runs h on received messages with at most `consumers` at once until ctx ends,
	// then waits for running handlers to return.
	Consume(ctx context.Context, consumers int, h Handler) error
	// Close releases connections.
	Close() error
}
