package outlog_test

import (
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
// while the log drops and reuses the buffers of old pieces.
func TestLogCopiesInAndOut(t *testing.T) {
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
	got := ""
	for _, e := range first {
		got += string(e.Data)
	}
	require.Equal(t, "abcdijkl", got, "head and tail kept")
	for _, s := range []string{"mn", "op", "qr"} { // reuses the dropped pieces' buffers
		l.Append("stdout", []byte(s))
	}
	again := ""
	for _, e := range first {
		again += string(e.Data)
	}
	require.Equal(t, got, again, "events read earlier are the reader's own")
	latest, _, _, _ := l.Read(0)
	got = ""
	for _, e := range latest {
		got += string(e.Data)
	}
	require.Equal(t, "abcdopqr", got)
}
