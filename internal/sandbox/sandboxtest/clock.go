package sandboxtest

import (
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandbox"
)

// Clock is a manual clock: it tells the time it was set to and moves only when told. It is
// safe for concurrent use.
//
// Its timers and tickers fire when Advance (or Set) moves the clock to or past their time —
// a test skips a wait by advancing over it — and, so that a test that never advances still
// ends, also once their duration has passed in real time, whichever comes first. Only Now
// is manual: the time a timer delivers is the clock's.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*manualTimer]struct{} // armed
}

var _ sandbox.Clock = (*Clock)(nil)

// NewClock returns a clock stopped at t0.
func NewClock(t0 time.Time) *Clock { return &Clock{now: t0, timers: map[*manualTimer]struct{}{}} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward for d < 0), fires the timers and tickers
// it passes, and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.fireDue(now)
	return now
}

// Set sets the clock to t, firing the timers and tickers it reaches.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
	c.fireDue(t)
}

// NewTimer returns a timer firing once, d after now.
func (c *Clock) NewTimer(d time.Duration) sandbox.Timer {
	t := &manualTimer{clock: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// NewTicker returns a ticker firing every d (d > 0).
func (c *Clock) NewTicker(d time.Duration) sandbox.Ticker {
	if d <= 0 {
		panic("sandboxtest: non-positive interval for NewTicker")
	}
	t := &manualTimer{clock: c, ch: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return manualTicker{t}
}

// manualTicker is a ticker's face of a manualTimer.
type manualTicker struct{ t *manualTimer }

func (t manualTicker) C() <-chan time.Time { return t.t.ch }
func (t manualTicker) Stop()               { t.t.Stop() }

// AfterFunc calls f in its own goroutine d after now, unless stopped first.
func (c *Clock) AfterFunc(d time.Duration, f func()) sandbox.Timer {
	t := &manualTimer{clock: c, f: f}
	t.Reset(d)
	return t
}

// fireDue fires the armed timers whose time is at or before now.
func (c *Clock) fireDue(now time.Time) {
	type arming struct {
		t *manualTimer
		n uint64
	}
	c.mu.Lock()
	var due []arming
	for t := range c.timers {
		if !t.at.After(now) {
			due = append(due, arming{t, t.n})
		}
	}
	c.mu.Unlock()
	for _, a := range due {
		a.t.fire(now, a.n)
	}
}

// manualTimer is a Clock's timer, ticker (period > 0) or AfterFunc (f != nil). Its state is
// guarded by its clock's mutex.
type manualTimer struct {
	clock  *Clock
	ch     chan time.Time
	f      func()
	period time.Duration
	at     time.Time   // when it fires next, on the clock
	real   *time.Timer // the real-time fallback of the current arming
	armed  bool
	n      uint64 // arming generation: a fallback of an earlier arming does nothing
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

// arm schedules the timer d after the clock's now; call holding the clock's mutex.
func (t *manualTimer) arm(d time.Duration) {
	c := t.clock
	t.n++
	n := t.n
	t.at, t.armed = c.now.Add(d), true
	if c.timers == nil {
		c.timers = map[*manualTimer]struct{}{}
	}
	c.timers[t] = struct{}{}
	if t.real != nil {
		t.real.Stop()
	}
	t.real = time.AfterFunc(max(d, 0), func() { t.fire(c.Now(), n) })
}

// disarm stops the timer; call holding the clock's mutex. It reports whether it was armed.
func (t *manualTimer) disarm() bool {
	was := t.armed
	t.armed = false
	t.n++
	delete(t.clock.timers, t)
	if t.real != nil {
		t.real.Stop()
		t.real = nil
	}
	return was
}

// fire delivers the arming n of the timer at now (once): a ticker is armed again for its
// next period.
func (t *manualTimer) fire(now time.Time, n uint64) {
	c := t.clock
	c.mu.Lock()
	if !t.armed || t.n != n {
		c.mu.Unlock()
		return
	}
	if t.period > 0 {
		t.arm(t.period)
	} else {
		t.disarm()
	}
	c.mu.Unlock()
	if t.f != nil {
		go t.f()
		return
	}
	select {
	case t.ch <- now:
	default: // a tick not yet read: this one is dropped, as time.Ticker drops it
	}
}

func (t *manualTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.disarm()
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.armed
	t.arm(d)
	return was
}
