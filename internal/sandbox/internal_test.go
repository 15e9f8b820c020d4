package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"

	"testing"

	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/store"
)

func TestCaptureKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	c := newCapture(10)
	for _, chunk := range []string{"01234", "56789", "abcdefghij", "XYZ"} {
		_, _ = c.Write([]byte(chunk))
	}
	out, trunc, total, head := c.bytes()
	require.True(t, trunc)
	require.EqualValues(t, 23, total)
	require.Equal(t, "01234hijXYZ"[:5]+"ijXYZ", string(out))
	require.EqualValues(t, 5, head, "the first 5 bytes are the stream's start")

	c = newCapture(10) // a character cut at the start's end is trimmed: the split says so
	_, _ = c.Write([]byte("0123é56789abc"))
	out, _, _, head = c.bytes()
	require.EqualValues(t, 4, head)
	require.Equal(t, "0123", string(out[:head]))

	c = newCapture(100)
	_, _ = c.Write([]byte("short"))
	out, trunc, total, _ = c.bytes()
	require.False(t, trunc)
	require.EqualValues(t, 5, total)
	require.Equal(t, "short", string(out))
}

func TestCaptureNeverSplitsRunes(t *testing.T) {
	t.Parallel()
	for limit := int64(2); limit < 40; limit++ {
		c := newCapture(limit)
		_, _ = c.Write([]byte(strings.Repeat("é€😀", 20)))
		out, _, _, _ := c.bytes()
		require.True(t, utf8.Valid(out), "limit %d: %q", limit, out)
	}
	// Invalid input stays as it is (and is reported base64 by encodeStreams).
	_, _, enc := encodeStreams([]byte{0xff}, nil, false)
	require.Equal(t, "base64", enc)
	_, _, enc = encodeStreams([]byte("ok"), []byte("ok"), false)
	require.Equal(t, "utf-8", enc)
}

// A result over a transport's record limit keeps the head and tail of each stream (never an
// empty stream), keeps the byte counts, sets the flags and fits the limit — also for output
// whose JSON escaping makes the record larger than the output (newlines), and for base64.
func TestTrimToRecordKeepsHeadAndTail(t *testing.T) {
	var full strings.Builder
	for i := 1; i <= 150000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	full.WriteString("END\n")
	out := full.String()
	const limit = 131072
	res := &Result{Status: ResultCompleted, Stdout: out, Stderr: "warning: é\n", StdoutBytes: int64(len(out)), StderrBytes: 12, Encoding: "utf-8"}
	trimToRecord(res, limit)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), limit)
	assert.Greater(t, len(res.Stdout), limit/2, "most of the record is output")
	assert.True(t, strings.HasPrefix(res.Stdout, "1\n2\n3\n"), "the head is kept")
	assert.True(t, strings.HasSuffix(res.Stdout, "149999\n150000\nEND\n"), "the tail is kept")
	assert.True(t, res.StdoutTruncated)
	assert.EqualValues(t, len(out), res.StdoutBytes)
	assert.Equal(t, "warning: é\n", res.Stderr, "the short stream is whole")
	assert.False(t, res.StderrTruncated)
	assert.Contains(t, res.Notice, "record limit")

	bin := make([]byte, 600<<10)
	for i := range bin {
		bin[i] = byte(i)
	}
	enc := base64.StdEncoding.EncodeToString(bin)
	res = &Result{Status: ResultCompleted, Stdout: enc, Stderr: enc, Encoding: "base64"}
	trimToRecord(res, limit)
	b, err = json.Marshal(res)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(b), limit)
	for _, s := range []string{res.Stdout, res.Stderr} {
		got, err := base64.StdEncoding.DecodeString(s)
		require.NoError(t, err, "still base64")
		require.NotEmpty(t, got)
		assert.Equal(t, bin[:16], got[:16])
		assert.Equal(t, bin[len(bin)-16:], got[len(got)-16:])
	}
	assert.True(t, res.StdoutTruncated && res.StderrTruncated)

	small := &Result{Stdout: "ok\n"}
	trimToRecord(small, limit)
	assert.Equal(t, "ok\n", small.Stdout)
	assert.Empty(t, small.Notice)
}

// Cutting an output that was cut already keeps each byte where it was in its stream: the
// new start from the old start, the new end from the old end, and the split recorded.
func TestTrimToRecordKeepsTheSplit(t *testing.T) {
	head, tail := strings.Repeat("h", 60000), strings.Repeat("t", 20000)
	split := int64(len(head))
	res := &Result{Status: ResultCompleted, Stdout: head + tail, StdoutBytes: 1 << 20, StdoutTruncated: true, StdoutHead: &split, Encoding: "utf-8"}
	trimToRecord(res, 65536)
	require.NotNil(t, res.StdoutHead)
	h := *res.StdoutHead
	assert.Equal(t, strings.Repeat("h", int(h)), res.Stdout[:h], "the start comes from the old start")
	assert.Equal(t, strings.Repeat("t", len(res.Stdout)-int(h)), res.Stdout[h:], "the end from the old end")
	assert.Positive(t, h)
	assert.Greater(t, len(res.Stdout), int(h), "both kept")

	whole := &Result{Status: ResultCompleted, Stdout: strings.Repeat("w", 100000), StdoutBytes: 100000, Encoding: "utf-8"}
	trimToRecord(whole, 65536)
	require.True(t, whole.StdoutTruncated)
	require.NotNil(t, whole.StdoutHead, "a stream cut here records its split")
	assert.InDelta(t, len(whole.Stdout)/2, *whole.StdoutHead, 1)

	unknown := &Result{Status: ResultCompleted, Stdout: strings.Repeat("u", 100000), StdoutBytes: 1 << 20, StdoutTruncated: true, Encoding: "utf-8"}
	trimToRecord(unknown, 65536)
	assert.Nil(t, unknown.StdoutHead, "a split that was not known is not made up")
}

// A queued execution refused by the contexts quota on its worker reaches its caller as a
// quota with Retry-After; kinds a worker cannot mean (internal, unknown) are broker.
func TestFailureOfQueuedTask(t *testing.T) {
	t.Parallel()
	err := failureOf(Task{Task: store.Task{ErrorType: string(fault.Quota), Error: "you hold 2 named contexts"}})
	var fe *fault.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fault.Quota, fe.Kind)
	assert.Equal(t, contextRetry, fe.RetryAfter)
	assert.Equal(t, fault.Broker, fault.KindOf(failureOf(Task{Task: store.Task{ErrorType: string(fault.Internal)}})))
	assert.Equal(t, fault.Policy, fault.KindOf(failureOf(Task{Task: store.Task{ErrorType: string(fault.Policy)}})))
}
