package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var lockTests = []test{
	{"exclusive_until_unlocked", testLockExcludes},
	{"arrival_order", testLockArrivalOrder},
	{"cancelled_wait", testLockCancelledWait},
	{"cancelled_before", testLockCancelledBefore},
	{"sessions_independent", testLockSessionsIndependent},
	{"unlock_idempotent", testUnlockIdempotent},
	{"try_exclusive", testTryExclusive},
}

// lockAttempt is a LockSession call running on its own goroutine.
type lockAttempt struct {
	done   chan struct{}
	unlock func()
	err    error
}

// lockAsync calls LockSession(ctx, id) on a goroutine; granted, if set, runs on it once the
// lock is held, with its unlock.
func (f *fixture) lockAsync(ctx context.Context, id string, granted func(unlock func())) *lockAttempt {
	a := &lockAttempt{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.unlock, a.err = f.st.LockSession(ctx, id)
		if a.err == nil && granted != nil {
			granted(a.unlock)
		}
	}()
	return a
}

// await waits for a to return.
func (f *fixture) await(a *lockAttempt) {
	f.t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		f.t.Fatal("LockSession did not return within 30s")
	}
}

// lock takes session id's lock, which must be granted soon.
func (f *fixture) lock(id string) func() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	unlock, err := f.st.LockSession(ctx, id)
	require.NoError(f.t, err, "lock %s", id)
	return unlock
}

// queue waits until session id's lock has n tickets; it skips the test for a store that
// cannot tell (see LockQueuer).
func (f *fixture) queue(id string, n int) {
	f.t.Helper()
	q, ok := f.st.(LockQueuer)
	if !ok {
		f.t.Skipf("storetest: %T does not implement LockQueuer: lock order cannot be checked without sleeping", f.st)
	}
	var got int
	var err error
	require.Eventually(f.t, func() bool {
		got, err = q.LockQueueLen(f.ctx, id)
		return err == nil && got == n
	}, 30*time.Second, 5*time.Millisecond, "session %s: want %d lock tickets, have %d (%v)", id, n, got, err)
}

func testLockExcludes(f *fixture) {
	unlock := f.lock("s01")
	f.queue("s01", 1)
	a := f.lockAsync(f.ctx, "s01", nil)
	f.queue("s01", 2)
	select {
	case <-a.done:
		f.t.Fatal("a second caller got the lock while it was held")
	default:
	}
	unlock()
	f.await(a)
	require.NoError(f.t, a.err)
	a.unlock()
}

// Waiters get the lock in the order they asked for it.
func testLockArrivalOrder(f *fixture) {
	unlock := f.lock("s01")
	var mu sync.Mutex
	var order []int
	var attempts []*lockAttempt
	for i := range 4 {
		a := f.lockAsync(f.ctx, "s01", func(unlock func()) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			unlock() // the next one's turn
		})
		attempts = append(attempts, a)
		f.queue("s01", i+2) // waiting before the next one asks
	}
	unlock()
	for _, a := range attempts {
		f.await(a)
		require.NoError(f.t, a.err)
	}
	require.Equal(f.t, []int{0, 1, 2, 3}, order)
}

// A waiter whose ctx ends returns ctx.Err() and leaves the queue; the others keep their turn.
func testLockCancelledWait(f *fixture) {
	unlock := f.lock("s01")
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	gaveUp := f.lockAsync(ctx, "s01", nil)
	f.queue("s01", 2)
	next := f.lockAsync(f.ctx, "s01", nil)
	f.queue("s01", 3)
	cancel()
	f.await(gaveUp)
	require.ErrorIs(f.t, gaveUp.err, context.Canceled)
	f.queue("s01", 2)
	unlock()
	f.await(next)
	require.NoError(f.t, next.err)
	next.unlock()
}

func testLockCancelledBefore(f *fixture) {
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err := f.st.LockSession(ctx, "s01")
	require.ErrorIs(f.t, err, context.Canceled, "a done ctx fails even when the lock is free")
	f.lock("s01")()
}

func testLockSessionsIndependent(f *fixture) {
	unlock := f.lock("s01")
	defer unlock()
	f.lock("s02")()
}

func testUnlockIdempotent(f *fixture) {
	unlock := f.lock("s01")
	unlock()
	unlock()
	other := f.lock("s01")
	unlock() // a stale unlock must not release another holder's lock
	a := f.lockAsync(f.ctx, "s01", nil)
	f.queue("s01", 2)
	select {
	case <-a.done:
		f.t.Fatal("a stale unlock released another holder's lock")
	default:
	}
	other()
	f.await(a)
	require.NoError(f.t, a.err)
	a.unlock()
}

func testTryExclusive(f *fixture) {
	t := f.t
	ran := false
	err := f.st.TryExclusive(f.ctx, 42, func(ctx context.Context) error {
		ran = true
		require.ErrorIs(t, f.st.TryExclusive(ctx, 42, func(context.Context) error {
			t.Error("ran a second holder of key 42")
			return nil
		}), store.ErrLockHeld, "held: another caller does not wait")
		inner := false
		require.NoError(t, f.st.TryExclusive(ctx, 43, func(context.Context) error { inner = true; return nil }))
		require.True(t, inner, "another key is free")
		return nil
	})
	require.NoError(t, err)
	require.True(t, ran)

	boom := errors.New("boom")
	require.ErrorIs(t, f.st.TryExclusive(f.ctx, 42, func(context.Context) error { return boom }), boom)

	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- f.st.TryExclusive(f.ctx, 42, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	require.ErrorIs(t, f.st.TryExclusive(f.ctx, 42, func(context.Context) error { return nil }), store.ErrLockHeld)
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, f.st.TryExclusive(f.ctx, 42, func(context.Context) error { return nil }), "free again")
}
