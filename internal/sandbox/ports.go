package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/store"
)

// Spool keeps the completions the Store refused on durable storage until it takes them
// (completion.go; docs/semantics.md §9 Completion): internal/spool, a folder on the
// gateway's disk. A record is opaque bytes under a task id; Put returns once it is durable.
type Spool interface {
	// Put stores record under id (replacing one of the same id); an error when it cannot
	// (full, or the disk failing).
	Put(id string, record []byte) error
	// Get returns record id; an error when there is none.
	Get(id string) ([]byte, error)
	// Remove removes record id (none: no error).
	Remove(id string) error
	// IDs lists the records held.
	IDs() ([]string, error)
	// Dir names the spool in logs.
	Dir() string
}

// Queue is the queue flavor's port (broker.Queued): executions travel to `gateway worker`
// processes and their completions come back through the Store (docs/semantics.md §10 queue).
type Queue interface {
	// Enqueue records t within limit unfinished executions of its owner (store.ErrQuota) and
	// sends env to the fleet, atomically where the transport joins the task's transaction.
	// Errors: fault.TooLarge for an envelope over the inline payload limit, fault.Broker when
	// the transport refuses it.
	Enqueue(ctx context.Context, t store.Task, limit int, env broker.Envelope) error
	// Wait waits up to wait for task id to finish, wherever it runs (wait < 0: until it does).
	Wait(ctx context.Context, id string, wait time.Duration) (finished bool, err error)
	// ResultLimit is the serialized size a result must fit (the transport's message limit),
	// or 0 when results are recorded in the Store only.
	ResultLimit() int
}

// Clock tells the time and measures the domain's waits (timeouts, polls, retries, sweeps):
// the domain reads no other clock. Production uses SystemClock; tests a manual one
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

// SystemClock is the wall clock and the runtime's timers (package time).
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

// NewTicker returns a time.Ticker.
func (SystemClock) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

// AfterFunc returns time.AfterFunc(d, f).
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer {
	return systemTimer{time.AfterFunc(d, f)}
}

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type systemTicker struct{ t *time.Ticker }

func (t systemTicker) C() <-chan time.Time { return t.t.C }
func (t systemTicker) Stop()               { t.t.Stop() }

// ClockFunc is a Clock telling the time f tells, with the system's timers: a gateway given
// only a time source (gateway.Options.Now) waits in real time.
type ClockFunc func() time.Time

var _ Clock = ClockFunc(nil)

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }

// NewTimer is SystemClock's.
func (ClockFunc) NewTimer(d time.Duration) Timer { return SystemClock{}.NewTimer(d) }

// NewTicker is SystemClock's.
func (ClockFunc) NewTicker(d time.Duration) Ticker { return SystemClock{}.NewTicker(d) }

// AfterFunc is SystemClock's.
func (ClockFunc) AfterFunc(d time.Duration, f func()) Timer { return SystemClock{}.AfterFunc(d, f) }

// sleep waits d on clock c, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
