package memory

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// lockQueue is one session's lock: tickets in arrival order, the first one holds it (as the
// Postgres store's session_locks table).
type lockQueue struct {
	tickets []*ticket
}

type ticket struct {
	granted chan struct{} // closed when the ticket becomes the first
	token   string        // the holder's handle (BeginTask's places)
}

// enqueue appends tk to session id's line; it reports whether tk is first. Call with mu held.
func (s *Store) enqueue(id string, tk *ticket) bool {
	q := s.locks[id]
	if q == nil {
		q = &lockQueue{}
		s.locks[id] = q
	}
	q.tickets = append(q.tickets, tk)
	if len(q.tickets) == 1 {
		close(tk.granted)
		return true
	}
	return false
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
	s.enqueue(id, tk)
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
	s.releaseLocked(id, tk)
}

// placeTicket is the ticket of place, or nil. Call with mu held.
func (s *Store) placeTicket(place store.Place) *ticket {
	if q := s.locks[place.SessionID]; q != nil && place.Token != "" {
		for _, tk := range q.tickets {
			if tk.token == place.Token {
				return tk
			}
		}
	}
	return nil
}

// ReleaseTurn gives place up (BeginTask's); twice, or the zero Place, does nothing.
func (s *Store) ReleaseTurn(place store.Place) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk := s.placeTicket(place); tk != nil {
		s.releaseLocked(place.SessionID, tk)
	}
}

// AwaitTurn waits until place holds its session's lock, then starts task taskID at now()
// and returns the session (store.ErrNotFound when it is gone; the task is started all the
// same). ctx.Err() when ctx ends first; the place stays taken either way.
func (s *Store) AwaitTurn(ctx context.Context, place store.Place, taskID string, now func() time.Time) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.Lock()
	tk := s.placeTicket(place)
	s.mu.Unlock()
	if tk == nil {
		return store.Session{}, errors.New("memory: AwaitTurn: no such place (released, or never taken)")
	}
	select {
	case <-tk.granted:
	case <-ctx.Done():
		return store.Session{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start(taskID, now())
	r, ok := s.sessions[place.SessionID]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	return copySession(r), nil
}

// releaseLocked is release with mu held.
func (s *Store) releaseLocked(id string, tk *ticket) {
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
