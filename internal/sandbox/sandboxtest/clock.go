package sandboxtest

import (
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandbox"
)

// Clock is a manual clock: it tells the time it was set to and moves only when told. It is
// safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

var _ sandbox.Clock = (*Clock)(nil)

// NewClock returns a clock stopped at t0.
func NewClock(t0 time.Time) *Clock { return &Clock{now: t0} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward for d < 0) and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
