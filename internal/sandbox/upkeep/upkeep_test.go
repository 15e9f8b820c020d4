package upkeep

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After an outage no runner is judged by its heartbeat until lost_after after this replica's
// own heartbeat went through again: every runner could not beat meanwhile.
func TestOutageWatchHoldsJudgementForLostAfter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	const lostAfter = 30 * time.Second
	var o outageWatch
	require.True(t, o.judging(t0, lostAfter), "no outage seen")
	o.beat(true, t0)
	require.True(t, o.judging(t0, lostAfter))
	o.beat(false, t0.Add(time.Second))
	require.False(t, o.judging(t0.Add(time.Hour), lostAfter), "while this replica cannot beat either")
	o.beat(true, t0.Add(2*time.Minute))
	require.False(t, o.judging(t0.Add(2*time.Minute+lostAfter-time.Millisecond), lostAfter), "the others had no lost_after to beat yet")
	require.True(t, o.judging(t0.Add(2*time.Minute+lostAfter), lostAfter))
	o.beat(true, t0.Add(3*time.Minute))
	require.True(t, o.judging(t0.Add(3*time.Minute), lostAfter), "a later beat does not restart the wait")
}
