package sandbox

import (
	"context"
	"sync"
)

// fifoLocks serialises work per key inside one process in arrival order (sync.Mutex makes no
// ordering promise). Across replicas the store's advisory lock takes over.
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
	l.mu.Lock()
	q := l.queues[key]
	if q == nil {
		q = &fifoQueue{}
		l.queues[key] = q
	}
	if !q.held {
		q.held = true
		l.mu.Unlock()
		return func() { l.unlock(key) }, nil
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	l.mu.Unlock()
	select {
	case <-ch:
		return func() { l.unlock(key) }, nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				return nil, ctx.Err()
			}
		}
		// Handed the lock just as ctx ended: pass it on.
		l.unlockLocked(key)
		return nil, ctx.Err()
	}
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
