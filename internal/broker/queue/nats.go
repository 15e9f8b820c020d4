package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSConfig configures the JetStream transport.
type NATSConfig struct {
	URL           string        // nats://host:4222
	Stream        string        // stream name, e.g. SANDGATE_TASKS
	SubjectPrefix string        // e.g. sandgate.tasks; messages go to <prefix>.<task id>
	AckWait       time.Duration // redelivery after a silent consumer; heartbeats extend it
}

// NATS is the JetStream transport: a work-queue stream, one durable pull consumer shared by
// every worker, deduplication by task id, and in-progress heartbeats so a long execution keeps
// its message while a dead worker's message is redelivered after AckWait.
type NATS struct {
	cfg NATSConfig
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
}

const natsConsumer = "sandgate-workers"

// NewNATS connects and declares the stream (idempotent).
func NewNATS(ctx context.Context, cfg NATSConfig, log *slog.Logger) (*NATS, error) {
	nc, err := nats.Connect(cfg.URL, nats.Name("sandgate"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("queue: connect to NATS at %s: %w", cfg.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.SubjectPrefix + ".>"},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 10 * time.Minute,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("queue: declare stream %s: %w", cfg.Stream, err)
	}
	return &NATS{cfg: cfg, nc: nc, js: js, log: log}, nil
}

// JoinsTransaction reports false: messages are published after the task row commits.
func (q *NATS) JoinsTransaction() bool { return false }

// Enqueue publishes m (deduplicated by task id).
func (q *NATS) Enqueue(ctx context.Context, _ pgx.Tx, m Message) error {
	msg := nats.NewMsg(q.cfg.SubjectPrefix + "." + m.TaskID)
	msg.Header.Set(jetstream.MsgIDHeader, m.TaskID)
	msg.Header.Set("Sandgate-Group", m.GroupID)
	msg.Data = m.Body
	_, err := q.js.PublishMsg(ctx, msg)
	return err
}

// Consume pulls messages with at most consumers in flight until ctx ends, then waits for
// running handlers.
func (q *NATS) Consume(ctx context.Context, consumers int, h Handler) error {
	consumers = max(consumers, 1)
	cons, err := q.js.CreateOrUpdateConsumer(ctx, q.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       natsConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.cfg.AckWait,
		MaxDeliver:    -1, // the domain caps executions (max_receive_count)
		MaxAckPending: 1000,
		FilterSubject: q.cfg.SubjectPrefix + ".>",
	})
	if err != nil {
		return fmt.Errorf("queue: consumer %s: %w", natsConsumer, err)
	}
	sem := make(chan struct{}, consumers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			<-sem
			if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				q.log.Warn("nats fetch failed", "err", err)
				time.Sleep(time.Second)
			}
			continue
		}
		got := false
		for msg := range batch.Messages() {
			got = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				q.handle(ctx, msg, h)
			}()
		}
		if !got {
			<-sem
		}
	}
	return nil
}

func (q *NATS) handle(ctx context.Context, msg jetstream.Msg, h Handler) {
	taskID := msg.Headers().Get(jetstream.MsgIDHeader)
	hbCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { // keep the message while the operation runs
		t := time.NewTicker(max(q.cfg.AckWait/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	d := Delivery{
		Message:    Message{TaskID: taskID, GroupID: msg.Headers().Get("Sandgate-Group"), Body: msg.Data()},
		InProgress: func() { _ = msg.InProgress() },
	}
	// Handlers run to completion even when a drain begins; ctx only stops new fetches.
	err := h(context.WithoutCancel(ctx), d)
	switch {
	case err == nil:
		_ = msg.Ack()
	case errors.Is(err, ErrRetryLater):
		_ = msg.NakWithDelay(retryDelay(err))
	default:
		q.log.Warn("operation failed; it will be redelivered", "task_id", taskID, "err", err)
		_ = msg.NakWithDelay(time.Second)
	}
}

// Close drains the connection.
func (q *NATS) Close() error {
	return q.nc.Drain()
}
