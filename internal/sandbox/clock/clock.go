// Package clock is the domain's time port: the Clock every room of internal/sandbox tells
// time and waits with, the system clock production uses, and Sleep. Tests use the manual
// clock in internal/sandbox/sandboxtest. It is the lowest room: it imports only the standard
// library, so every room can take a Clock.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and measures the domain's waits (timeouts, polls, retries, sweeps):
// the domain reads no other clock. Production uses System; tests a manual one
// (sandboxtest.Clock), whose time moves only when told.
type Clock interface {
	// Now is the time: timestamps of rows, idle expiry, durations measured.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d (d > 0), dropping ticks a slow
	// reader misses (as time.Ticker).
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine d after now, unless the returned timer is
	// stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a Clock's single event (time.Timer's shape).
type Timer interface {
	// C delivers the time the timer fired (nil for AfterFunc timers).
	C() <-chan time.Time
	// Stop prevents the timer from firing; false when it had fired or been stopped.
	Stop() bool
	// Reset makes the timer fire d after now; false when it had fired or been stopped.
	Reset(d time.Duration) bool
}

// Ticker is a Clock's repeating event (time.Ticker's shape).
type Ticker interface {
	// C delivers the times of ticks.
	C() <-chan time.Time
	// Stop turns the ticker off; no tick is delivered after it.
	Stop()
}

// System is the wall clock and the runtime's timers (package time).
type System struct{}

var _ Clock = System{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (System) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

// NewTicker returns a time.Ticker.
func (System) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

// AfterFunc returns time.AfterFunc(d, f).
func (System) AfterFunc(d time.Duration, f func()) Timer {
	return systemTimer{time.AfterFunc(d, f)}
}

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type systemTicker struct{ t *time.Ticker }

func (t systemTicker) C() <-chan time.Time { return t.t.C }
func (t systemTicker) Stop()               { t.t.Stop() }

// Func is a Clock telling the time f tells, with the system's timers: a gateway given
// only a time source (gateway.Options.Now) waits in real time.
type Func func() time.Time

var _ Clock = Func(nil)

// Now returns f().
func (f Func) Now() time.Time { return f() }

// NewTimer is System's.
func (Func) NewTimer(d time.Duration) Timer { return System{}.NewTimer(d) }

// NewTicker is System's.
func (Func) NewTicker(d time.Duration) Ticker { return System{}.NewTicker(d) }

// AfterFunc is System's.
func (Func) AfterFunc(d time.Duration, f func()) Timer { return System{}.AfterFunc(d, f) }

// Sleep waits d on clock c, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
