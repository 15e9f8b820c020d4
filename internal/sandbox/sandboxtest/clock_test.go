package sandboxtest_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// long is a wait no test sits through: what fires within a test fired because the clock
// was advanced over it.
const long = time.Hour

// A manual clock's timers fire when it is advanced to their time, with the clock's time, and
// not before; a stopped one never does.
func TestClockTimersFireOnAdvance(t *testing.T) {
	c := sandboxtest.NewClock(sandboxtest.T0)
	tm := c.NewTimer(long)
	stopped := c.NewTimer(long)
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "stopped already")

	c.Advance(long - time.Second)
	select {
	case <-tm.C():
		t.Fatal("fired before its time")
	default:
	}
	at := c.Advance(time.Second)
	require.Equal(t, at, <-tm.C())
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	require.False(t, tm.Stop(), "it had fired")

	require.False(t, tm.Reset(long), "re-armed after firing")
	c.Set(at.Add(long))
	require.Equal(t, at.Add(long), <-tm.C())
}

// A ticker fires once per advance that reaches its next tick (ticks a reader misses are
// dropped), and never after Stop; AfterFunc runs its function once its time is reached.
func TestClockTickersAndAfterFunc(t *testing.T) {
	c := sandboxtest.NewClock(sandboxtest.T0)
	tk := c.NewTicker(long)
	c.Advance(long)
	require.Equal(t, sandboxtest.T0.Add(long), <-tk.C())
	c.Advance(3 * long)
	<-tk.C()
	select {
	case <-tk.C():
		t.Fatal("a missed tick was kept")
	default:
	}
	tk.Stop()
	c.Advance(long)
	select {
	case <-tk.C():
		t.Fatal("ticked after Stop")
	default:
	}

	var ran atomic.Int32
	done := make(chan struct{})
	c.AfterFunc(long, func() { ran.Add(1); close(done) })
	cancelled := c.AfterFunc(long, func() { t.Error("a stopped AfterFunc ran") })
	require.True(t, cancelled.Stop())
	c.Advance(long)
	<-done
	c.Advance(long)
	require.Equal(t, int32(1), ran.Load())
}

// A test that never advances the clock still ends: a timer also fires once its duration
// has passed in real time, delivering the clock's (unmoved) time.
func TestClockTimersAlsoFireInRealTime(t *testing.T) {
	c := sandboxtest.NewClock(sandboxtest.T0)
	tm := c.NewTimer(time.Millisecond)
	require.Equal(t, sandboxtest.T0, <-tm.C())
}
