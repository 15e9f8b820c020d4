package postgres

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

const taskDoneChannel = "sandgate_task_done"

// TaskWatcher tells waiters when a task finishes, on whichever replica or worker finished it:
// one connection LISTENs for FinishTask's notifications and wakes the waiters of that task.
// Waiters also poll, so a lost notification only delays them.
type TaskWatcher struct {
	st  *Store
	log *slog.Logger

	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// WatchTasks returns a *TaskWatcher; Run must be running for notifications to arrive.
func (st *Store) WatchTasks(log *slog.Logger) store.TaskWatcher {
	return &TaskWatcher{st: st, log: log, waiters: map[string][]chan struct{}{}}
}

// Run listens until ctx ends, reconnecting after errors.
func (w *TaskWatcher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.listen(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("task notifications interrupted; reconnecting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (w *TaskWatcher) listen(ctx context.Context) error {
	conn, err := w.st.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A LISTENing connection must not go back to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+taskDoneChannel); err != nil {
		return err
	}
	w.wakeAll() // anything that finished while we were not listening
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		w.wake(n.Payload)
	}
}

func (w *TaskWatcher) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.waiters[id] {
		close(ch)
	}
	delete(w.waiters, id)
}

func (w *TaskWatcher) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, chs := range w.waiters {
		for _, ch := range chs {
			close(ch)
		}
		delete(w.waiters, id)
	}
}

// Wait blocks until task id has finished, wait has passed, or ctx ends; it reports whether the
// task finished. poll is the fallback polling interval.
func (w *TaskWatcher) Wait(ctx context.Context, id string, wait, poll time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		ch := make(chan struct{})
		w.mu.Lock()
		w.waiters[id] = append(w.waiters[id], ch)
		w.mu.Unlock()
		var finished bool
		err := w.st.pool.QueryRow(ctx, `SELECT finished_at IS NOT NULL FROM tasks WHERE id = $1`, id).Scan(&finished)
		if err != nil || finished {
			w.drop(id, ch)
			return finished, notFound(err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			w.drop(id, ch)
			return false, nil
		}
		t := time.NewTimer(min(left, poll))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			w.drop(id, ch)
			return false, nil
		}
		t.Stop()
		w.drop(id, ch)
	}
}

func (w *TaskWatcher) drop(id string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	chs := w.waiters[id]
	for i, c := range chs {
		if c == ch {
			w.waiters[id] = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(w.waiters[id]) == 0 {
		delete(w.waiters, id)
	}
}
