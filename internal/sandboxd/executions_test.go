//go:build unix

package sandboxd_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// follow waits for kept execution e to end and returns its end and what it kept of stdout.
func follow(t *testing.T, e *sandboxd.Execution) (sandboxd.Result, string, error) {
	t.Helper()
	select {
	case <-e.Done():
	case <-time.After(slow):
		t.Fatal("the execution did not end")
	}
	var out bytes.Buffer
	evs, _, _, _ := e.Log().Read(0)
	for _, ev := range evs {
		if ev.Stream == "stdout" {
			out.Write(ev.Data)
		}
	}
	res, err := e.End()
	return res, out.String(), err
}

func TestStartKeepsAnExecutionAndItsInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, err := b.rt.Start(sandboxd.ExecRequest{ID: "cat", Command: "cat; echo done", StdinOpen: true, Stdin: []byte("one ")})
	require.NoError(t, err)
	info := e.Info()
	assert.Positive(t, info.PID)
	assert.True(t, info.StdinOpen)
	assert.Nil(t, info.EndedAt)

	n, err := b.rt.WriteStdin(t.Context(), "cat", strings.NewReader("two "), false)
	require.NoError(t, err)
	assert.Equal(t, int64(4), n)
	_, err = b.rt.WriteStdin(t.Context(), "cat", strings.NewReader("three\n"), true)
	require.NoError(t, err)
	require.NoError(t, b.rt.CloseStdin("cat"), "closing again is no error")

	res, out, err := follow(t, e)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "one two three\ndone\n", out)
	ended := e.Info()
	require.NotNil(t, ended.EndedAt)
	require.NotNil(t, ended.Result)

	_, err = b.rt.WriteStdin(t.Context(), "cat", strings.NewReader("late"), false)
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "an ended execution takes no input")
	_, err = b.rt.Start(sandboxd.ExecRequest{ID: "cat", Command: "true"})
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "its id stays taken while it is kept")
	b.rt.Forget("cat")
	_, err = b.rt.Execution("cat")
	assert.Equal(t, fault.NotFound, fault.KindOf(err))
}

// cutReader gives "a", then ends its caller's context and fails: a request body the gateway
// cut while its handler was writing it to an execution's input.
type cutReader struct {
	cancel context.CancelFunc
	sent   bool
}

func (r *cutReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		return copy(p, "a"), nil
	}
	r.cancel()
	return 0, errors.New("the request body was cut")
}

// A write to an execution's input that ends with its caller's context leaves the input
// usable: the next write goes through (the interruption of the first one once landed after
// the write had ended, and every later write failed with "i/o timeout").
func TestAnInterruptedInputWriteLeavesTheInputUsable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, err := b.rt.Start(sandboxd.ExecRequest{ID: "cat", Command: "cat > /dev/null", StdinOpen: true})
	require.NoError(t, err)
	for i := range 100 {
		ctx, cancel := context.WithCancel(t.Context())
		_, err := b.rt.WriteStdin(ctx, "cat", &cutReader{cancel: cancel}, false)
		require.ErrorIs(t, err, context.Canceled)
		n, err := b.rt.WriteStdin(t.Context(), "cat", strings.NewReader("b"), false)
		require.NoError(t, err, "write %d after an interrupted one", i)
		require.EqualValues(t, 1, n)
	}
	require.NoError(t, b.rt.CloseStdin("cat"))
	res, _, err := follow(t, e)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
}

func TestStartRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, req := range map[string]sandboxd.ExecRequest{
		"no id":              {Command: "true"},
		"bad id":             {ID: "a/b", Command: "true"},
		"pty in context":     {ID: "x", Code: "1", Language: "python", Context: "c", PTY: &sandboxd.TermSize{Rows: 2, Cols: 2}},
		"background context": {ID: "x", Code: "1", Language: "python", Context: "c", Background: true},
		"bad size":           {ID: "x", Command: "true", PTY: &sandboxd.TermSize{Rows: 0, Cols: 80}},
	} {
		_, err := b.rt.Start(req)
		assert.Equal(t, fault.Validation, fault.KindOf(err), name)
	}
	for name, req := range map[string]sandboxd.ExecRequest{
		"stdin_open": {Command: "true", StdinOpen: true},
		"pty":        {Command: "true", PTY: &sandboxd.TermSize{Rows: 2, Cols: 2}},
		"background": {Command: "true", Background: true},
	} {
		_, err := b.rt.Exec(t.Context(), req, sandboxd.Streams{})
		assert.Equal(t, fault.Validation, fault.KindOf(err), "Exec refuses %s: it needs a kept execution", name)
	}
	e, err := b.rt.Start(sandboxd.ExecRequest{ID: "plain", Command: "true"})
	require.NoError(t, err)
	follow(t, e)
	_, err = b.rt.WriteStdin(t.Context(), "plain", strings.NewReader("x"), false)
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "started without an open input")
	assert.Equal(t, fault.Conflict, fault.KindOf(b.rt.Resize("plain", sandboxd.TermSize{Rows: 5, Cols: 5})), "no terminal")
}

func TestStartOnATerminal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, err := b.rt.Start(sandboxd.ExecRequest{
		ID: "tty", PTY: &sandboxd.TermSize{Rows: 24, Cols: 80},
		Command: `test -t 0 && test -t 1 && echo "term=$TERM"; stty size; read line; stty size; echo "got $line"`,
	})
	require.NoError(t, err)
	assert.True(t, e.Info().PTY)
	require.Eventually(t, func() bool {
		evs, _, _, _ := e.Log().Read(0)
		var s string
		for _, ev := range evs {
			s += string(ev.Data)
		}
		return strings.Contains(s, "24 80")
	}, slow, 10*time.Millisecond, "the first size is the one asked for")
	require.NoError(t, b.rt.Resize("tty", sandboxd.TermSize{Rows: 50, Cols: 132}))
	_, err = b.rt.WriteStdin(t.Context(), "tty", strings.NewReader("hello\n"), false)
	require.NoError(t, err)
	res, out, err := follow(t, e)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Contains(t, out, "term=xterm-256color")
	assert.Contains(t, out, "50 132")
	assert.Contains(t, out, "got hello")
	assert.Contains(t, out, "\r\n", "a terminal's line ends")
}

func TestStopEndsAKeptExecution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, err := b.rt.Start(sandboxd.ExecRequest{ID: "srv", Command: "echo up; sleep 60", Background: true})
	require.NoError(t, err)
	list := b.rt.Executions()
	require.Len(t, list, 1)
	assert.True(t, list[0].Background)
	assert.Equal(t, "echo up; sleep 60", list[0].Program)
	require.Eventually(t, func() bool { return e.Log().Written("stdout") > 0 }, slow, 5*time.Millisecond)
	require.NoError(t, b.rt.Stop("srv"))
	_, out, err := follow(t, e)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "up\n", out, "the output before the stop is kept")
	assert.NotEmpty(t, e.Info().Error)
	assert.Equal(t, fault.NotFound, fault.KindOf(b.rt.Stop("none")))
}

func TestCloseEndsKeptExecutions(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: testGrace, DrainDelay: testGrace})
	require.NoError(t, err)
	e, err := rt.Start(sandboxd.ExecRequest{ID: "bg", Command: "sleep 60", Background: true, StdinOpen: true})
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	_, _, err = follow(t, e)
	assert.Equal(t, fault.Gone, fault.KindOf(err))
	_, err = rt.Start(sandboxd.ExecRequest{ID: "late", Command: "true"})
	assert.Equal(t, fault.Gone, fault.KindOf(err))
}

// TestStopEndsTheWholeTree: stopping a background process also ends a descendant that started
// a session of its own (setsid) and ignores SIGTERM, whose parent ends on the SIGTERM — with
// neither a cgroup nor a subreaper to find it.
func TestStopEndsTheWholeTree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, err := b.rt.Start(sandboxd.ExecRequest{ID: "tree", Background: true,
		Command: `setsid sh -c 'trap "" TERM; echo $$ > pid; while :; do sleep 0.05; done' & echo up; wait`})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(b.workspace, "pid"))
		return err == nil && len(data) > 0 && e.Log().Written("stdout") > 0
	}, slow, 5*time.Millisecond)
	require.NoError(t, b.rt.Stop("tree"))
	_, _, err = follow(t, e)
	assert.ErrorIs(t, err, context.Canceled)
	requireGone(t, b.workspace)
}
