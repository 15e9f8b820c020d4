package queue

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// InMemory is a transport inside one process (tests and dev): gateway and worker share it.
type InMemory struct {
	ch chan Message
}

// NewInMemory returns an in-process transport buffering up to 10000 messages.
func NewInMemory() *InMemory { return &InMemory{ch: make(chan Message, 10000)} }

// JoinsTransaction reports false: messages are sent after the task row commits.
func (q *InMemory) JoinsTransaction() bool { return false }

// Enqueue queues m.
func (q *InMemory) Enqueue(ctx context.Context, _ pgx.Tx, m Message) error {
	select {
	case q.ch <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Consume runs h on queued messages.
func (q *InMemory) Consume(ctx context.Context, consumers int, h Handler) error {
	var wg sync.WaitGroup
	for range max(consumers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-q.ch:
					if err := h(ctx, Delivery{Message: m, InProgress: func() {}}); err != nil && ctx.Err() == nil {
						err := err
						go func() { // put back after a pause
							t := time.NewTimer(retryDelay(err))
							defer t.Stop()
							select {
							case <-t.C:
								q.ch <- m
							case <-ctx.Done():
							}
						}()
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// Close is a no-op.
func (q *InMemory) Close() error { return nil }
