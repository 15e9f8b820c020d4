package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group commit of completions (FinishTask). A completion is one statement; under load many
// arrive at once, and each as a transaction of its own costs Postgres a commit (a WAL flush
// with synchronous_commit=on, and the serialised commit of its notification) per execution.
// FinishTask therefore hands its statement to one of finishWriters writers: a writer takes
// one completion and every other one waiting at that moment (at most finishBatch), and sends
// them in one batch — one round trip, one implicit transaction (pgx runs a batch's
// statements up to its single Sync as one). A completion alone is sent as it is: nothing
// waits for company, so a lone execution pays no delay; batches form only while the writers
// are busy, which is when they pay. The caller still waits for its commit: a completion
// FinishTask returned without error is as durable as before.
//
// Batches lock session rows (the touch) in session id order, so two batches (of two
// replicas) never wait for each other in a cycle. A batch that fails as a whole for
// another reason than an unreachable database (a deadlock with some other statement, a
// statement's own error) is sent again one completion at a time, so one bad completion
// never fails its neighbours.
//
// Deferred completions (store.Completion.Deferred: the caller already holds the result) are
// committed with synchronous_commit=off: visible to every replica at once, but FinishTask
// returns without waiting for Postgres to flush its WAL to disk. The Store keeps each such
// completion (at most finishRetained) until it sees the WAL flushed past it: every
// finishFlushEvery while any is kept it reads the server's WAL insert and flush positions —
// a completion committed before one read is on disk once a later read's flush position
// passes that read's insert position (Postgres's WAL writer flushes asynchronous commits
// within 3 × wal_writer_delay, 600 ms by default). When a read shows that the server
// restarted (pg_postmaster_start_time changed) the kept completions are written again,
// synchronously (a completion's write is idempotent: the first completion wins, a place is
// given up once, a touch keeps the latest time). With finishRetained kept, a deferred
// completion commits synchronously instead (memory stays bounded; the caller waits for the
// disk). Close waits (at most finishCloseFlush) for the kept ones to reach the disk.

const (
	// finishWriters bounds the completion batches in flight per Store (a share of the pool:
	// the default pool has 4 connections per CPU, at least 4).
	finishWriters = 4
	// finishBatch bounds the completions in one batch.
	finishBatch = 64
	// finishBatchTimeout bounds one batch's round trip (the callers' own contexts bound
	// their wait; a batch outlives a caller that stopped waiting).
	finishBatchTimeout = 30 * time.Second
	// finishRetained bounds the deferred completions kept until they are on disk.
	finishRetained = 8192
	// finishFlushEvery is how often the WAL positions are read while deferred completions
	// are kept.
	finishFlushEvery = 50 * time.Millisecond
	// finishCloseFlush bounds how long Close waits for kept completions to reach the disk.
	finishCloseFlush = 5 * time.Second
)

// finishOne is a completion on its way: FinishTask's statement arguments, and where its
// answer goes.
type finishOne struct {
	ctx       context.Context // the caller's: an item whose caller left before its batch is dropped
	sessionID string          // the session it touches ("": none), for the lock order
	taskID    string
	unlocks   string            // the session whose place it gives up ("": none), whose waiters it wakes
	deferred  bool              // store.Completion.Deferred
	args      []any             // finishSQL's; the last one is the batch's synchronous_commit
	answer    chan finishAnswer // buffered: a caller that left does not block the writer
}

// finishAnswer is what FinishTask returns.
type finishAnswer struct {
	stored bool
	err    error
}

// finishes are the writers of a Store's completions and the keeper of its deferred ones,
// started on first use.
type finishes struct {
	st      *Store
	in      chan *finishOne // unbuffered: completions wait in their callers until a writer takes them
	start   sync.Once
	stop    chan struct{} // closed by close: the writers end
	writers sync.WaitGroup
	last    chan struct{} // closed once the writers ended: the keeper's last flush
	kept    chan struct{} // closed when the keeper ended

	mu       sync.Mutex
	started  time.Time     // the server's start (pg_postmaster_start_time) as last read (Open, flush)
	retained []retained    // deferred completions not yet seen on disk, oldest first
	kick     chan struct{} // 1-buffered: something was retained
}

// retained is a deferred completion committed but not yet seen on disk; lsn is the WAL
// insert position of the first read after its commit (0: none yet).
type retained struct {
	one *finishOne
	lsn uint64
}

// readStart reads the server's start time, against which flush tells a restart (Open).
func (f *finishes) readStart(ctx context.Context) error {
	var start time.Time
	if err := f.st.pool.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&start); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = start
	return nil
}

func newFinishes(st *Store) *finishes {
	return &finishes{st: st, in: make(chan *finishOne), stop: make(chan struct{}), last: make(chan struct{}),
		kept: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// close stops the writers once their batches are written, then waits (at most
// finishCloseFlush) for the deferred completions to reach the disk; a FinishTask after it
// fails with errStoreClosed.
func (f *finishes) close() {
	select {
	case <-f.stop:
		return
	default:
		close(f.stop)
	}
	started := true
	f.start.Do(func() { started = false }) // never started: now it never will
	f.writers.Wait()
	if started {
		close(f.last)
		<-f.kept
	}
}

// do writes one completion and returns its answer; it ends early (ctx.Err()) when ctx does
// (the completion may still be written: its batch was on its way).
func (f *finishes) do(ctx context.Context, one *finishOne) (bool, error) {
	f.start.Do(func() {
		for range finishWriters {
			f.writers.Add(1)
			go f.write()
		}
		go f.keep()
	})
	one.ctx, one.answer = ctx, make(chan finishAnswer, 1)
	select {
	case f.in <- one:
	case <-f.stop:
		return false, errStoreClosed
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case a := <-one.answer:
		return a.stored, a.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// write is one writer: it takes a completion, gathers the others already waiting, and
// writes them.
func (f *finishes) write() {
	defer f.writers.Done()
	batch := make([]*finishOne, 0, finishBatch)
	for {
		select {
		case <-f.stop:
			return
		case one := <-f.in:
			batch = append(batch[:0], one)
		}
	gather:
		for len(batch) < finishBatch {
			select {
			case one := <-f.in:
				batch = append(batch, one)
			default:
				break gather
			}
		}
		f.send(batch)
		clear(batch) // let the answered completions go
	}
}

// send writes batch: one statement alone, else one batch in session order; a batch that
// fails as a whole (but for an unreachable database, which would fail each the same) is sent
// again one completion at a time.
func (f *finishes) send(batch []*finishOne) {
	live := batch[:0]
	for _, one := range batch {
		if err := one.ctx.Err(); err != nil {
			one.answer <- finishAnswer{err: err}
			continue
		}
		live = append(live, one)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), finishBatchTimeout)
	defer cancel()
	// One synchronous completion makes the batch synchronous (its commit flushes them all).
	deferred := !f.full()
	for _, one := range live {
		deferred = deferred && one.deferred
	}
	mode := "on"
	if deferred {
		mode = "off"
	}
	for _, one := range live {
		one.args[len(one.args)-1] = mode
	}
	if len(live) == 1 {
		f.sendOne(ctx, live[0], deferred)
		return
	}
	slices.SortFunc(live, func(a, b *finishOne) int {
		if c := strings.Compare(a.sessionID, b.sessionID); c != 0 {
			return c
		}
		return strings.Compare(a.taskID, b.taskID)
	})
	b := &pgx.Batch{}
	stored := make([]bool, len(live))
	for i, one := range live {
		b.Queue(finishSQL, one.args...).QueryRow(func(row pgx.Row) error { return row.Scan(&stored[i], new(int64), new(string)) })
	}
	err := f.st.pool.SendBatch(ctx, b).Close()
	switch {
	case err == nil:
		if deferred {
			f.retain(live)
		}
		for i, one := range live {
			f.answer(one, stored[i], nil)
		}
	case Unavailable(err) || errors.Is(err, context.DeadlineExceeded):
		for _, one := range live {
			f.answer(one, false, classified(err))
		}
	default:
		for _, one := range live {
			f.sendOne(ctx, one, deferred)
		}
	}
}

// sendOne writes one completion as its own statement (deferred: one.args say
// synchronous_commit=off, and it is kept until seen on disk).
func (f *finishes) sendOne(ctx context.Context, one *finishOne, deferred bool) {
	var stored bool
	err := f.st.pool.QueryRow(ctx, finishSQL, one.args...).Scan(&stored, new(int64), new(string))
	if err == nil && deferred {
		f.retain([]*finishOne{one})
	}
	f.answer(one, stored, err)
}

// full reports that finishRetained deferred completions are kept.
func (f *finishes) full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.retained) >= finishRetained
}

// retain keeps committed deferred completions until they are seen on disk.
func (f *finishes) retain(ones []*finishOne) {
	f.mu.Lock()
	for _, one := range ones {
		f.retained = append(f.retained, retained{one: one})
	}
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// keep follows the kept deferred completions to the disk (above): while any is kept, it
// reads the WAL positions every finishFlushEvery, forgets those flushed, and writes them
// all again when the server restarted. After close's last call it flushes once more, for at
// most finishCloseFlush.
func (f *finishes) keep() {
	defer close(f.kept)
	for {
		select {
		case <-f.kick:
		case <-f.last:
			f.flushLast()
			return
		}
		delay := finishFlushEvery
		for f.pending() {
			select {
			case <-time.After(delay):
			case <-f.last:
				f.flushLast()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), finishBatchTimeout)
			err := f.flush(ctx)
			cancel()
			if err != nil { // the server does not answer: read again less often, up to 1 s
				delay = min(2*delay, time.Second)
			} else {
				delay = finishFlushEvery
			}
		}
	}
}

// flushLast is close's flush: until every kept completion is on disk, or finishCloseFlush.
func (f *finishes) flushLast() {
	ctx, cancel := context.WithTimeout(context.Background(), finishCloseFlush)
	defer cancel()
	for f.pending() && ctx.Err() == nil {
		if err := f.flush(ctx); err != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(finishFlushEvery / 5):
		}
	}
	f.mu.Lock()
	n := len(f.retained)
	f.mu.Unlock()
	if n > 0 {
		f.st.logger().Warn("closing the store with deferred task completions not yet seen on disk: should Postgres crash now, their history is lost (their callers had their results)", "completions", n)
	}
}

// pending reports that deferred completions are kept.
func (f *finishes) pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.retained) > 0
}

// flush reads the WAL positions once and forgets the kept completions they show on disk;
// when the server restarted since the last read (f.started), it writes every kept one again
// first, synchronously.
func (f *finishes) flush(ctx context.Context) error {
	var insert, flushed uint64
	var start time.Time
	err := f.st.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, pg_current_wal_flush_lsn() - '0/0'::pg_lsn, pg_postmaster_start_time()`).
		Scan(&insert, &flushed, &start)
	if err != nil {
		return err
	}
	f.mu.Lock()
	restarted := !f.started.IsZero() && !start.Equal(f.started)
	f.mu.Unlock()
	if restarted {
		if err := f.rewrite(ctx); err != nil {
			return err // the start is read again (and the kept ones rewritten) next time
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = start
	n := 0
	for n < len(f.retained) && f.retained[n].lsn != 0 && f.retained[n].lsn <= flushed {
		n++
	}
	clear(f.retained[:n])
	f.retained = f.retained[n:]
	for i := range f.retained {
		if f.retained[i].lsn == 0 {
			f.retained[i].lsn = insert
		}
	}
	return nil
}

// rewrite writes every kept completion again, synchronously (the server restarted: those
// not yet on disk may be gone), and forgets them.
func (f *finishes) rewrite(ctx context.Context) error {
	f.mu.Lock()
	kept := slices.Clone(f.retained)
	f.mu.Unlock()
	b := &pgx.Batch{}
	for _, r := range kept {
		args := slices.Clone(r.one.args)
		args[len(args)-1] = "on"
		b.Queue(finishSQL, args...)
	}
	if err := f.st.pool.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	f.st.logger().Warn("Postgres restarted: deferred task completions not yet seen on disk written again", "completions", len(kept))
	written := make(map[*finishOne]bool, len(kept))
	for _, r := range kept {
		written[r.one] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retained = slices.DeleteFunc(f.retained, func(r retained) bool { return written[r.one] })
	return nil
}

// answer hands one its answer, after waking this replica's waiters for the place it gave up.
func (f *finishes) answer(one *finishOne, stored bool, err error) {
	if err == nil && one.unlocks != "" {
		f.st.locks.wake(one.unlocks) // this replica's waiters need not wait for the notification
	}
	one.answer <- finishAnswer{stored: stored, err: err}
}
