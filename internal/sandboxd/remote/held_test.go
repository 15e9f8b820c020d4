//go:build unix

package remote_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// counting is an output writer that also counts the bytes it was told were skipped.
type counting struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	skipped int64
}

func (c *counting) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *counting) Skip(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skipped += n
}

func (c *counting) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// rawHeldExec starts held execution id with a plain HTTP request and returns once its first
// output frame arrived; closing the returned body drops the connection (a gateway that dies).
func (b *testBundle) rawHeldExec(t *testing.T, id, command string) io.ReadCloser {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", b.socket)
	}}}
	body, _ := json.Marshal(map[string]any{"command": command})
	req, err := http.NewRequest(http.MethodPost, "http://sandboxd/v1/exec", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Execution-Id", id)
	resp, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var head [5]byte
	_, err = io.ReadFull(resp.Body, head[:])
	require.NoError(t, err)
	require.Equal(t, remote.FrameStdout, head[0])
	_, err = io.CopyN(io.Discard, resp.Body, int64(binary.BigEndian.Uint32(head[1:])))
	require.NoError(t, err)
	return resp.Body
}

// TestHeldExecutionOutlivesItsConnection: an execution started with an id runs on when its
// client's connection drops, and another client follows it again from its start to its end.
func TestHeldExecutionOutlivesItsConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := b.rawHeldExec(t, "task-1", "echo first; sleep 0.5; echo second >&2; echo third")
	require.NoError(t, body.Close()) // the gateway died

	var out, errOut counting
	res, err := b.client.Reattach(t.Context(), "task-1", sandboxd.Streams{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "first\nthird\n", out.String(), "the whole output, from the start")
	assert.Equal(t, "second\n", errOut.String())

	// It stays followable after it ended.
	out = counting{}
	_, err = b.client.Reattach(t.Context(), "task-1", sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "first\nthird\n", out.String())

	_, err = b.client.Reattach(t.Context(), "never-ran", sandboxd.Streams{})
	requireKind(t, err, fault.NotFound)
	// An Exec whose id is held already follows that execution (its first attempt's answer
	// was lost with its connection) instead of running anything again.
	out = counting{}
	res, err = b.client.Exec(t.Context(), sandboxd.ExecRequest{Command: "echo ran again", ID: "task-1"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "first\nthird\n", out.String())
	_, err = b.client.Exec(t.Context(), sandboxd.ExecRequest{Command: "true", ID: "no spaces"}, sandboxd.Streams{})
	requireKind(t, err, fault.Validation)
}

// TestHeldExecutionStopsWithItsCaller: cancelling the caller's context still stops a held
// execution (its whole tree), and a later follower learns it was stopped.
func TestHeldExecutionStopsWithItsCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	var out counting
	done := make(chan error, 1)
	go func() {
		_, err := b.client.Exec(ctx, sandboxd.ExecRequest{Command: "echo started; exec sleep 300", ID: "task-2"}, sandboxd.Streams{Stdout: &out})
		done <- err
	}()
	require.Eventually(t, func() bool { return out.String() == "started\n" }, slow, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(slow):
		t.Fatal("Exec did not return after its context ended")
	}
	_, err := b.client.Reattach(t.Context(), "task-2", sandboxd.Streams{})
	requireKind(t, err, fault.NotFound) // its caller got its end: not kept

	// A follower of an execution someone stops learns it was stopped.
	body := b.rawHeldExec(t, "task-4", "echo started; exec sleep 300")
	require.NoError(t, body.Close())
	followed := make(chan error, 1)
	go func() {
		_, err := b.client.Reattach(t.Context(), "task-4", sandboxd.Streams{})
		followed <- err
	}()
	require.NoError(t, b.client.StopExecution(t.Context(), "task-4"))
	require.ErrorIs(t, <-followed, remote.ErrStopped)
	require.NoError(t, b.client.StopExecution(t.Context(), "task-4"), "stopping an ended one is no error")
}

// TestHeldExecutionKeepsStartAndEnd: a follower that comes late gets the start and the end of
// a long output and is told how much of the middle was dropped.
func TestHeldExecutionKeepsStartAndEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := b.rawHeldExec(t, "task-3", "echo begin; head -c 5000000 /dev/zero | tr '\\0' x; echo; echo end")
	require.NoError(t, body.Close())
	// Come late, once it ended (a first follower waits for that): a follower that keeps up
	// may get every byte; this one must find the middle gone.
	_, err := b.client.Reattach(t.Context(), "task-3", sandboxd.Streams{Stdout: io.Discard})
	require.NoError(t, err)
	var out counting
	_, err = b.client.Reattach(t.Context(), "task-3", sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	got := out.String()
	assert.True(t, strings.HasPrefix(got, "begin\nxxx"), got[:20])
	assert.True(t, strings.HasSuffix(got, "xxx\nend\n"))
	assert.Equal(t, int64(len("begin\n")+5000000+len("\nend\n")), int64(len(got))+out.skipped, "kept and skipped bytes add up")
	assert.Positive(t, out.skipped)
}
