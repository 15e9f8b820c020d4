package outlog_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/outlog"
)

func data(evs []outlog.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Stream+":"+string(e.Data))
	}
	return out
}

func TestLogKeepsHeadAndTailOfEachStream(t *testing.T) {
	l := outlog.New(20) // 10 bytes of the start and 10 of the end, per stream
	for _, p := range []string{"aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"} {
		l.Append("stdout", []byte(p))
	}
	l.Append("stderr", []byte("x"))
	evs, gap, closed, _ := l.Read(0)
	assert.Equal(t, []string{"stdout:aaaaa", "stdout:bbbbb", "stdout:ddddd", "stdout:eeeee", "stderr:x"}, data(evs))
	assert.False(t, gap, "from the start, the first event is there")
	assert.False(t, closed)
	assert.Equal(t, int64(15), evs[2].Offset, "offsets count dropped bytes")
	assert.Equal(t, int64(25), l.Written("stdout"))

	evs, gap, _, _ = l.Read(2)
	assert.True(t, gap, "event 3 was dropped")
	assert.Equal(t, int64(4), evs[0].Seq)
}

// TestLogKeepsAPieceWhole: a piece larger than half the limit is never cut; at the end of a
// stream it takes the place of the older pieces there (it used to spin forever).
func TestLogKeepsAPieceWhole(t *testing.T) {
	l := outlog.New(20)
	l.Append("result", []byte("head-piece"))
	l.Append("result", []byte("tail"))
	l.Append("result", []byte("a piece of thirty bytes, whole"))
	evs, _, _, _ := l.Read(0)
	assert.Equal(t, []string{"result:head-piece", "result:a piece of thirty bytes, whole"}, data(evs))
	l.Append("result", []byte("next"))
	evs, _, _, _ = l.Read(0)
	assert.Equal(t, []string{"result:head-piece", "result:next"}, data(evs))
}

func TestLogWakesReadersAndCloses(t *testing.T) {
	l := outlog.New(100)
	_, _, _, changed := l.Read(0)
	l.Append("stdout", []byte("hi"))
	<-changed
	evs, _, _, changed := l.Read(0)
	assert.Len(t, evs, 1)
	l.Close()
	<-changed
	evs, gap, closed, _ := l.Read(1)
	assert.Empty(t, evs)
	assert.False(t, gap)
	assert.True(t, closed)
	l.Append("stdout", []byte("late"))
	evs, _, _, _ = l.Read(1)
	assert.Empty(t, evs, "nothing is appended after Close")
}

// The log keeps copies: a writer may reuse its buffer, and what a reader got stays as it was
// while the log drops old pieces.
func TestLogCopiesIn(t *testing.T) {
	l := outlog.New(8) // 4 bytes of head, 4 of tail
	buf := []byte("ab")
	l.Append("stdout", buf)
	copy(buf, "XX")
	events, _, _, _ := l.Read(0)
	require.Len(t, events, 1)
	require.Equal(t, "ab", string(events[0].Data), "the writer's later changes do not reach the log")

	for _, s := range []string{"cd", "ef", "gh", "ij", "kl"} {
		l.Append("stdout", []byte(s))
	}
	first, _, _, _ := l.Read(0)
	require.Equal(t, "abcdijkl", joined(first), "head and tail kept")
	for _, s := range []string{"mn", "op", "qr"} {
		l.Append("stdout", []byte(s))
	}
	require.Equal(t, "abcdijkl", joined(first), "events read earlier stay as they were")
	latest, _, _, _ := l.Read(0)
	require.Equal(t, "abcdopqr", joined(latest))
}

func joined(evs []outlog.Event) string {
	s := ""
	for _, e := range evs {
		s += string(e.Data)
	}
	return s
}

// Readers share the log's pieces: however many read a log, its bytes are in memory once, and
// reading all of a 2 MiB log allocates nothing in proportion to its bytes.
func TestReadersShareThePieces(t *testing.T) {
	l := outlog.New(4 << 20)
	piece := make([]byte, 64<<10)
	for i := range 32 { // 2 MiB
		piece[0] = byte(i)
		l.Append("stdout", piece)
	}
	l.Close()
	a, _, _, _ := l.Read(0)
	b, _, _, _ := l.Read(0)
	require.NotEmpty(t, a)
	require.Same(t, &a[0].Data[0], &b[0].Data[0], "two readers get the same bytes, not copies")

	readAll := func() {
		var after int64
		for {
			evs, _, closed, _ := l.Read(after)
			if len(evs) == 0 && closed {
				return
			}
			after = evs[len(evs)-1].Seq
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 90 {
		readAll()
	}
	runtime.ReadMemStats(&after)
	// 90 copies would be 180 MiB; the event headers of 90 full reads are a few KiB each.
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "90 readers of 2 MiB allocate far less than one copy each")
}

// One Read returns at most MaxRead bytes (and at least one event); the log says it is
// closed only with its last event read.
func TestReadIsBounded(t *testing.T) {
	l := outlog.New(8 << 20)
	piece := make([]byte, 100<<10)
	for range 6 {
		l.Append("stdout", piece)
	}
	big := make([]byte, outlog.MaxRead+1)
	l.Append("stderr", big)
	l.Close()
	var after int64
	var sizes []int
	for {
		evs, _, closed, _ := l.Read(after)
		n := 0
		for _, e := range evs {
			n += len(e.Data)
		}
		if len(evs) > 0 {
			sizes = append(sizes, n)
			after = evs[len(evs)-1].Seq
		}
		if closed {
			require.Equal(t, int64(7), after, "closed once every event was read")
			break
		}
		require.NotEmpty(t, evs)
	}
	assert.Equal(t, []int{200 << 10, 200 << 10, 200 << 10, outlog.MaxRead + 1}, sizes)
}

// meter is a budget for tests: it refuses growth past limit and counts what it allowed.
type meter struct {
	limit, held int64
	refused     int
}

func (m *meter) Grow(n int64) bool {
	if m.held+n > m.limit {
		m.refused++
		return false
	}
	m.held += n
	return true
}

func (m *meter) Shrink(n int64) { m.held -= n }

// A metered log asks before it keeps a piece and says what it let go: what the meter counts
// is exactly what the log holds. A refused piece is not kept but counted in its offsets.
func TestMeteredLogCountsWhatItHolds(t *testing.T) {
	m := &meter{limit: 1 << 20}
	l := outlog.NewMetered(20, m) // 10 bytes of each stream's start, 10 of its end
	for _, p := range []string{"aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee"} {
		l.Append("stdout", []byte(p))
	}
	l.Append("stderr", []byte("x"))
	evs, _, _, _ := l.Read(0)
	require.Len(t, evs, 5)
	assert.Equal(t, 5*(5+outlog.EventOverhead)-5+1, l.Held(), "four pieces of 5 bytes and one of 1, each with its overhead")
	assert.Equal(t, l.Held(), m.held, "the meter counts what the log holds")

	m.limit = m.held // full: the next piece is refused
	l.Append("stdout", []byte("fffff"))
	assert.Equal(t, 1, m.refused)
	assert.Equal(t, l.Held(), m.held)
	assert.Equal(t, int64(30), l.Written("stdout"), "a refused piece still counts in its stream")
	evs, gap, _, _ := l.Read(6) // after "x"
	assert.Empty(t, evs)
	assert.True(t, gap, "a reader learns it missed a piece")

	l.Close()
	l.Append("stdout", []byte("late"))
	assert.Equal(t, l.Held(), m.held, "a piece after Close is counted back")
}

// Drop lets every piece go and keeps nothing more; readers are woken and learn it.
func TestDrop(t *testing.T) {
	m := &meter{limit: 1 << 20}
	l := outlog.NewMetered(100, m)
	l.Append("stdout", []byte("hello"))
	_, _, _, changed := l.Read(1)
	l.Drop()
	<-changed
	assert.True(t, l.Dropped())
	assert.Zero(t, l.Held())
	evs, _, _, _ := l.Read(0)
	assert.Empty(t, evs)
	held := m.held
	l.Append("stdout", []byte("more"))
	assert.Equal(t, held, m.held, "nothing is kept after Drop")
	assert.Equal(t, int64(9), l.Written("stdout"))
}
