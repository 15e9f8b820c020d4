package queue

import (
	"context"
	"errors"
	"fmt"
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
	// ReceiveCount is how many times the transport has delivered this message, this delivery
	// included, as far as the transport can tell; 0 when it cannot (postgres, nats,
	// in_memory: the domain's count of started attempts bounds those). Deliveries that ended
	// in a handler error count; a message put back with ErrRetryLater does not. kafka counts
	// failed deliveries in a record header (a worker that dies does not raise it), sqs reads
	// SQS's ApproximateReceiveCount (a worker that dies does raise it).
	ReceiveCount int
	// DeadLettered says the transport itself gave up on the message (sqs: SQS moved it to the
	// dead-letter queue of the input queue's redrive policy). The handler must record the
	// operation's permanent failure instead of running it.
	DeadLettered bool
	// InProgress tells the transport the handler is still working (extends ack deadlines).
	InProgress func()
}

// Handler processes one delivery. nil acknowledges it; ErrRetryLater puts it back without
// counting against anything (the operation could not start yet); any other error makes the
// transport redeliver it later, counted as a failed delivery.
type Handler func(ctx context.Context, d Delivery) error

// ErrRetryLater asks for a later redelivery (after RetryDelay) of a message that could not
// start yet; wrap it in a *RetryError to choose the delay.
var ErrRetryLater = errors.New("queue: retry later")

// ErrOutOfTurn is ErrRetryLater for a message whose group (session) has an earlier
// unfinished operation. A transport that hands out each group strictly in order (a Kafka
// partition, an SQS FIFO message group) must not hold such a message at the head of its
// group: the earlier operation's message may be behind it (two gateways enqueue in the
// opposite order of their commits). It sends the message again behind the group's later
// ones, uncounted, and acknowledges this copy. Other transports treat it as ErrRetryLater.
var ErrOutOfTurn = fmt.Errorf("%w: an earlier operation of its group is unfinished", ErrRetryLater)

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

// ResultLimiter is implemented by a transport whose results travel on messages with a hard
// size limit. The worker then cuts a result to ResultLimit() bytes serialized, keeping the
// head and tail of each stream. No built-in transport implements it: every one of them
// carries requests only, and workers record results in the response store (Postgres), which
// has no such limit, so queued executions keep sandbox.max_output_bytes per stream, as the
// thread flavor does.
type ResultLimiter interface {
	ResultLimit() int
}

// Transport moves messages from gateways to workers.
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
