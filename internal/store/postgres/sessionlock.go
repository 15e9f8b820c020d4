package postgres

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sandgate/sandgate/internal/fault"
)

// The per-session lock (docs/semantics.md §9 step 5: executions and writes of one session run one at a
// time, in arrival order, across replicas) is a queue of tickets in table session_locks:
// the holder is the oldest ticket of the session whose replica is still present. No
// connection is held while a lock is held or awaited, so locks are not a scarce resource:
// any number of sessions execute at once, and one principal's many long executions cannot
// keep another's from starting (they used to share a pool of 64 lock connections).
//
// Presence: each replica holds one connection for its life, on which it holds the bigint
// advisory lock holder_key that its tickets carry and LISTENs for releases. When the
// replica dies, Postgres ends that connection's locks, and its tickets stop counting at once
// (sandgate_holder_present); they are deleted by the next sweep.
const (
	lockReleasedChannel = "sandgate_session_unlocked"
	// lockPoll is how often a waiter re-checks without a notification (a missed notification,
	// a holder whose replica died without releasing).
	lockPoll = time.Second
	// presenceRetry is the pause before reconnecting a lost presence connection.
	presenceRetry = time.Second
	// presenceWait bounds how long a lock waits for a presence connection that is down.
	presenceWait = 5 * time.Second
)

// errStoreClosed is returned by LockSession after Close.
var errStoreClosed = errors.New("store: closed")

type sessionLocks struct {
	st   *Store
	cfg  *pgx.ConnConfig
	key  int64 // this replica's presence key (positive, random)
	once sync.Once

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the presence loop has ended

	mu       sync.Mutex
	present  chan struct{} // closed while the presence connection is up; replaced when it drops
	waiters  map[string]map[chan struct{}]struct{}
	releases sync.WaitGroup
}

func newSessionLocks(st *Store, cfg *pgx.ConnConfig) *sessionLocks {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &sessionLocks{
		st: st, cfg: cfg, key: int64(binary.BigEndian.Uint64(b[:]) >> 1),
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		present: make(chan struct{}), waiters: map[string]map[chan struct{}]struct{}{},
	}
}

// start runs the presence loop, once, on first use (a Store that never locks, such as the
// one `gateway migrate` opens, never opens the connection).
func (l *sessionLocks) start() {
	l.once.Do(func() { go l.run() })
}

func (l *sessionLocks) close() {
	l.cancel()
	l.once.Do(func() { close(l.done) }) // never started
	<-l.done
	l.releases.Wait()
}

func (l *sessionLocks) run() {
	defer close(l.done)
	for l.ctx.Err() == nil {
		err := l.hold()
		if l.ctx.Err() != nil {
			return
		}
		l.st.logger().Warn("session-lock presence connection lost; reconnecting (other replicas may take this replica's session locks meanwhile)", "err", err)
		select {
		case <-l.ctx.Done():
		case <-time.After(presenceRetry):
		}
	}
}

// hold connects, takes the presence lock, LISTENs and wakes waiters until the connection ends.
func (l *sessionLocks) hold() error {
	conn, err := pgx.ConnectConfig(l.ctx, l.cfg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(l.ctx, `SELECT pg_advisory_lock($1)`, l.key); err != nil {
		return err
	}
	if _, err := conn.Exec(l.ctx, "LISTEN "+lockReleasedChannel); err != nil {
		return err
	}
	l.mu.Lock()
	present := l.present
	close(present)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.present = make(chan struct{})
		l.mu.Unlock()
	}()
	l.wakeAll() // anything released while we were not listening
	l.sweep()
	sweepAt := time.Now().Add(time.Minute)
	for {
		wctx, cancel := context.WithTimeout(l.ctx, time.Minute)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.wake(n.Payload)
		case l.ctx.Err() != nil:
			return nil
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		if time.Now().After(sweepAt) {
			l.sweep()
			sweepAt = time.Now().Add(time.Minute)
		}
	}
}

// sweep deletes the tickets of replicas that are gone (they no longer count anyway).
func (l *sessionLocks) sweep() {
	ctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	if _, err := l.st.pool.Exec(ctx, `DELETE FROM session_locks WHERE NOT sandgate_holder_present(holder_key)`); err != nil && l.ctx.Err() == nil {
		l.st.logger().Warn("deleting the session-lock tickets of departed replicas failed", "err", err)
	}
}

// waitPresent waits until this replica's presence connection is up, at most presenceWait:
// a lock taken meanwhile would not count. Errors: fault.Unavailable when it stays down (the
// database does not answer), ctx.Err(), errStoreClosed.
func (l *sessionLocks) waitPresent(ctx context.Context) error {
	l.mu.Lock()
	present := l.present
	l.mu.Unlock()
	select {
	case <-present:
		return nil
	default:
	}
	t := time.NewTimer(presenceWait)
	defer t.Stop()
	select {
	case <-present:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		return errStoreClosed
	case <-t.C:
		return fault.New(fault.Unavailable, "the response store (Postgres) does not answer: this replica's session-lock connection is down; retry shortly")
	}
}

func (l *sessionLocks) register(id string) chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.waiters[id]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		l.waiters[id] = m
	}
	m[ch] = struct{}{}
	return ch
}

func (l *sessionLocks) unregister(id string, ch chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.waiters[id]; m != nil {
		delete(m, ch)
		if len(m) == 0 {
			delete(l.waiters, id)
		}
	}
}

func (l *sessionLocks) wake(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.waiters[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (l *sessionLocks) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.waiters {
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// firstInLine is the condition "no present ticket of session is older than ticket".
func firstInLine(session, ticket string) string {
	return `NOT EXISTS (SELECT 1 FROM session_locks o
	WHERE o.session_id = ` + session + ` AND o.ticket < ` + ticket + ` AND sandgate_holder_present(o.holder_key))`
}

// lineLock serialises, per session, the statements that take a place in its line and decide
// whether that place is first: without it two replicas inserting at once would each decide
// on a snapshot without the other's ticket, and both hold the lock. It is a
// transaction-scoped advisory lock on the two-int4 key (0x73676c6e "sgln", hashtext(session)),
// a key space apart from the bigint presence keys (PostgreSQL manual, "Advisory Locks"), and
// it is queued first in the same batch — one implicit transaction, no extra round trip —
// so the statement after it takes its snapshot holding it. Sessions whose hashes collide
// only take their places one after the other.
const lineLock = `SELECT pg_advisory_xact_lock(1936157806, hashtext($1))`

// LockSession blocks until it holds the lock of session id: executions and writes of one
// session are serialised across replicas, granted in arrival order (ticket order). The
// returned unlock releases it without waiting (the release round trip runs in the
// background). No connection is held meanwhile; an uncontended lock costs one round trip to
// take and one to release. A lock of a replica that dies is freed as soon as Postgres sees
// its presence connection end.
//
// Errors: ctx.Err() when ctx ends first (no lock is left behind); the database's error.
func (st *Store) LockSession(ctx context.Context, id string) (unlock func(), err error) {
	l := st.locks
	l.start()
	if err := l.waitPresent(ctx); err != nil {
		return nil, err
	}
	wake := l.register(id)
	defer l.unregister(id, wake)
	token := randomToken()
	release := func() { l.release(id, token) }
	var ticket int64
	var first bool
	b := &pgx.Batch{}
	b.Queue(lineLock, id)
	b.Queue(`WITH t AS (INSERT INTO session_locks (session_id, holder_key, token) VALUES ($1, $2, $3) RETURNING ticket)
		SELECT t.ticket, `+firstInLine("$1", "t.ticket")+` FROM t`,
		id, l.key, token).QueryRow(func(row pgx.Row) error { return row.Scan(&ticket, &first) })
	if err = st.pool.SendBatch(ctx, b).Close(); err != nil {
		release() // the insert may have committed with its answer lost
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("store: take the session lock: %w", err)
	}
	poll := time.NewTicker(lockPoll)
	defer poll.Stop()
	for !first {
		select {
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		case <-l.ctx.Done():
			release()
			return nil, errStoreClosed
		case <-wake:
		case <-poll.C:
		}
		if err := st.pool.QueryRow(ctx, `SELECT `+firstInLine("$1", "$2"), id, ticket).Scan(&first); err != nil {
			release()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("store: wait for the session lock: %w", err)
		}
	}
	var once sync.Once
	return func() { once.Do(release) }, nil
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// release deletes the ticket token of session id in the background and tells the waiters,
// retrying until it succeeds or the store closes: a ticket of a present replica that was
// never deleted would block its session for good.
func (l *sessionLocks) release(id, token string) {
	l.releases.Add(1)
	go func() {
		defer l.releases.Done()
		const q = `WITH d AS (DELETE FROM session_locks WHERE token = $1 RETURNING session_id)
			SELECT pg_notify('` + lockReleasedChannel + `', session_id) FROM d`
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := l.st.pool.Exec(ctx, q, token)
			cancel()
			if err == nil {
				l.wake(id) // this replica's waiters need not wait for the notification
				return
			}
			if l.ctx.Err() != nil {
				// Closing: the presence connection ends with the Store, and with it the
				// ticket's weight.
				return
			}
			l.st.logger().Warn("releasing a session lock failed; retrying", "session_id", id, "err", err)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	}()
}

func (st *Store) logger() *slog.Logger { return slog.Default() }
