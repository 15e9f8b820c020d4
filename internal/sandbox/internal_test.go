package sandbox

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestCaptureKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	c := newCapture(10)
	for _, chunk := range []string{"01234", "56789", "abcdefghij", "XYZ"} {
		_, _ = c.Write([]byte(chunk))
	}
	out, trunc, total := c.bytes()
	require.True(t, trunc)
	require.EqualValues(t, 23, total)
	require.Equal(t, "01234hijXYZ"[:5]+"ijXYZ", string(out))

	c = newCapture(100)
	_, _ = c.Write([]byte("short"))
	out, trunc, total = c.bytes()
	require.False(t, trunc)
	require.EqualValues(t, 5, total)
	require.Equal(t, "short", string(out))
}

func TestCaptureNeverSplitsRunes(t *testing.T) {
	t.Parallel()
	for limit := int64(2); limit < 40; limit++ {
		c := newCapture(limit)
		_, _ = c.Write([]byte(strings.Repeat("é€😀", 20)))
		out, _, _ := c.bytes()
		require.True(t, utf8.Valid(out), "limit %d: %q", limit, out)
	}
	// Invalid input stays as it is (and is reported base64 by encodeStreams).
	_, _, enc := encodeStreams([]byte{0xff}, nil, false)
	require.Equal(t, "base64", enc)
	_, _, enc = encodeStreams([]byte("ok"), []byte("ok"), false)
	require.Equal(t, "utf-8", enc)
}

func TestFIFOLockOrder(t *testing.T) {
	t.Parallel()
	l := newFIFOLocks()
	unlock, err := l.lock(context.Background(), "s")
	require.NoError(t, err)
	var mu sync.Mutex
	var order bytes.Buffer
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := l.lock(context.Background(), "s")
			require.NoError(t, err)
			mu.Lock()
			order.WriteByte(byte('0' + i))
			mu.Unlock()
			u()
		}()
		time.Sleep(20 * time.Millisecond) // arrival order 0..4
	}
	unlock()
	wg.Wait()
	require.Equal(t, "01234", order.String())

	// A waiter that gives up leaves the queue without holding the lock.
	unlock, _ = l.lock(context.Background(), "s")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = l.lock(ctx, "s")
	require.Error(t, err)
	unlock()
	u, err := l.lock(context.Background(), "s")
	require.NoError(t, err)
	u()
	require.Empty(t, l.queues)
}
