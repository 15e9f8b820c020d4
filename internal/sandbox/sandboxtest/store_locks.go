package sandboxtest

import (
	"context"
	"slices"
	"sync"
)

// lockQueue is one session's lock: tickets in arrival order, the first one holds it (as the
// Postgres store's session_locks table).
type lockQueue struct {
	tickets []*ticket
}

type ticket struct {
	granted chan struct{} // closed when the ticket becomes the first
}

// LockSession waits for session id's lock, granted in arrival order; unlock releases it
// (idempotent). Errors: ctx.Err() when ctx ends first — also when it had ended before the
// call, lock free or not, as a Postgres round trip with a done ctx fails — and no lock is
// left behind.
func (s *Store) LockSession(ctx context.Context, id string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tk := &ticket{granted: make(chan struct{})}
	s.mu.Lock()
	q := s.locks[id]
	if q == nil {
		q = &lockQueue{}
		s.locks[id] = q
	}
	q.tickets = append(q.tickets, tk)
	if len(q.tickets) == 1 {
		close(tk.granted)
	}
	s.mu.Unlock()
	select {
	case <-tk.granted:
	case <-ctx.Done():
		// Granted just as ctx ended, or still waiting: either way the ticket goes.
		s.release(id, tk)
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { s.release(id, tk) }) }, nil
}

// release deletes ticket tk of session id and hands the lock to the next ticket.
func (s *Store) release(id string, tk *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.locks[id]
	if q == nil {
		return
	}
	i := slices.Index(q.tickets, tk)
	if i < 0 {
		return
	}
	q.tickets = slices.Delete(q.tickets, i, i+1)
	if len(q.tickets) == 0 {
		delete(s.locks, id)
		return
	}
	if i == 0 {
		close(q.tickets[0].granted)
	}
}

// LockQueueLen is how many tickets session id's lock has: its holder and its waiters. Tests
// use it to know that a LockSession call has arrived (and is waiting) before the next one.
func (s *Store) LockQueueLen(_ context.Context, id string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.locks[id]; q != nil {
		return len(q.tickets), nil
	}
	return 0, nil
}
