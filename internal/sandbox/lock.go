package sandbox

import (
	"context"
	"sync"
)

// fifoLocks serialises work per key inside one process in arrival order (sync.Mutex makes no
// ordering promise). Across replicas the store's session lock takes over.
type fifoLocks struct {
	mu     sync.Mutex
	queues map[string]*fifoQueue
}

type fifoQueue struct {
	held    bool
	waiters []chan struct{}
}

func newFIFOLocks() *fifoLocks { return &fifoLocks{queues: map[string]*fifoQueue{}} }

// lock waits for key in arrival order; the returned func releases it.
func (l *fifoLocks) lock(ctx context.Context, key string) (func(), error) {
	return l.reserve(key).wait(ctx)
}

// ticket is a place in key's line, taken by reserve before the work that waits on it starts
// (so work submitted one after another keeps its order even when its goroutines start in
// another). Exactly one of wait or cancel must be called.
type ticket struct {
	l   *fifoLocks
	key string
	ch  chan struct{} // closed when it is this ticket's turn
}

// reserve takes the next place in key's line now, without waiting.
func (l *fifoLocks) reserve(key string) *ticket {
	t := &ticket{l: l, key: key, ch: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[key]
	if q == nil {
		q = &fifoQueue{}
		l.queues[key] = q
	}
	if !q.held {
		q.held = true
		close(t.ch)
	} else {
		q.waiters = append(q.waiters, t.ch)
	}
	return t
}

// wait waits for the ticket's turn; the returned func releases the lock. When ctx ends first
// the place is given up (passed on if the turn had just come) and ctx.Err() returned.
func (t *ticket) wait(ctx context.Context) (func(), error) {
	l := t.l
	select {
	case <-t.ch:
		return func() { l.unlock(t.key) }, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[t.key]
	for i, w := range q.waiters {
		if w == t.ch {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return nil, ctx.Err()
		}
	}
	// Handed the lock just as ctx ended: pass it on.
	l.unlockLocked(t.key)
	return nil, ctx.Err()
}

// cancel gives the place up without waiting (the work will not run).
func (t *ticket) cancel() {
	ctx, done := context.WithCancel(context.Background())
	done()
	_, _ = t.wait(ctx)
}

func (l *fifoLocks) unlock(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unlockLocked(key)
}

func (l *fifoLocks) unlockLocked(key string) {
	q := l.queues[key]
	if len(q.waiters) == 0 {
		delete(l.queues, key)
		return
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	close(next) // ownership passes directly; held stays true
}
