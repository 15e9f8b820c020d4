package e2b_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// syncBuffer is a buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type followed struct {
	st  providers.ExitStatus
	err error
}

// follow runs Reattach of id on x in the background; its output goes to out.
func follow(t *testing.T, x providers.Executions, id string, out *syncBuffer) <-chan followed {
	t.Helper()
	done := make(chan followed, 1)
	go func() {
		st, err := x.Reattach(t.Context(), id, providers.Output{Stdout: out, Stderr: out})
		done <- followed{st, err}
	}()
	return done
}

func ended(t *testing.T, c <-chan followed) followed {
	t.Helper()
	select {
	case f := <-c:
		return f
	case <-time.After(time.Minute):
		t.Fatal("the follower did not return")
		return followed{}
	}
}

// twoGateways is one sandbox seen by two providers pointed at one fake: the gateway that made
// it and another one (a replica, or the gateway that adopts its tasks).
func twoGateways(t *testing.T) (mine, other providers.Executions) {
	t.Helper()
	r := newRig(t, rigOpts{template: "base"})
	p2 := newProvider(t, r.fake, rigOpts{template: "base"})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	sb2, err := p2.Attach(t.Context(), sb.ID(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	return sb.(providers.Executions), sb2.(providers.Executions)
}

// The gateway that starts a background process follows it from its first byte; another one
// connects by the execution id and sees what it writes from then on (envd replays nothing),
// and can feed its input.
func TestBackgroundOutputOnlyItsStarterSeesWhole(t *testing.T) {
	mine, other := twoGateways(t)
	id := "bg-replay"
	info, err := mine.Start(t.Context(), providers.ExecSpec{Command: `echo early; while read line; do echo "got $line"; done; echo bye`, Background: true, StdinOpen: true, ID: id})
	require.NoError(t, err)
	assert.Positive(t, info.PID)

	var local, remote syncBuffer
	localDone := follow(t, mine, id, &local)
	require.Eventually(t, func() bool { return local.String() == "early\n" }, 30*time.Second, 20*time.Millisecond)
	remoteDone := follow(t, other, id, &remote)
	require.Eventually(t, func() bool {
		_, err := other.WriteStdin(t.Context(), id, strings.NewReader("ping\n"), false)
		require.NoError(t, err, "another gateway feeds the input by the execution id")
		return strings.Contains(remote.String(), "got ping")
	}, 30*time.Second, 100*time.Millisecond, "the other gateway's follower is connected")
	_, err = other.WriteStdin(t.Context(), id, strings.NewReader("last\n"), true)
	require.NoError(t, err)

	l, r := ended(t, localDone), ended(t, remoteDone)
	require.NoError(t, l.err)
	require.NoError(t, r.err)
	assert.Equal(t, 0, l.st.ExitCode)
	assert.Equal(t, 0, r.st.ExitCode)
	assert.True(t, strings.HasPrefix(local.String(), "early\ngot ping\n"), "the starter sees all: %q", local.String())
	assert.True(t, strings.HasSuffix(local.String(), "got last\nbye\n"), "%q", local.String())
	assert.NotContains(t, remote.String(), "early", "output written before the Connect is not replayed")
	assert.True(t, strings.HasSuffix(remote.String(), "got last\nbye\n"), "%q", remote.String())

	// envd keeps the exit of an ended process for a while: a late follower learns how it ended.
	st, err := other.Reattach(t.Context(), id, providers.Output{})
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	_, err = other.Reattach(t.Context(), "never-started", providers.Output{})
	assert.Equal(t, fault.NotFound, fault.KindOf(err), "%v", err)
}

// A stop from another gateway is a stop for every follower (the sandbox records it), not a
// death by SIGKILL; a stopped process takes no more input, and stopping it again finds nothing.
func TestStopFromAnotherGatewayIsAStop(t *testing.T) {
	mine, other := twoGateways(t)
	id := "bg-stop"
	_, err := mine.Start(t.Context(), providers.ExecSpec{Command: "while :; do echo tick; sleep 0.05; done", Background: true, ID: id})
	require.NoError(t, err)
	var local, remote syncBuffer
	localDone, remoteDone := follow(t, mine, id, &local), follow(t, other, id, &remote)
	require.Eventually(t, func() bool { return strings.Contains(remote.String(), "tick") }, 30*time.Second, 20*time.Millisecond,
		"the other gateway's follower is connected")
	require.NoError(t, other.Stop(t.Context(), id))
	assert.ErrorIs(t, ended(t, localDone).err, providers.ErrExecutionStopped)
	assert.ErrorIs(t, ended(t, remoteDone).err, providers.ErrExecutionStopped)
	assert.True(t, strings.HasPrefix(local.String(), "tick\n"))
	assert.Equal(t, fault.NotFound, fault.KindOf(other.Stop(t.Context(), id)), "an ended process is no longer there")
}

// A background process's timeout is its lifetime: it is killed then and reported TimedOut.
// Without one it runs on.
func TestBackgroundTimeoutIsItsLifetime(t *testing.T) {
	mine, _ := twoGateways(t)
	_, err := mine.Start(t.Context(), providers.ExecSpec{Command: "exec sleep 600", Background: true, ID: "bg-timeout", Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	st, err := mine.Reattach(t.Context(), "bg-timeout", providers.Output{})
	require.NoError(t, err)
	assert.True(t, st.TimedOut)

	_, err = mine.Start(t.Context(), providers.ExecSpec{Command: "sleep 1; echo done", Background: true, ID: "bg-untimed"})
	require.NoError(t, err)
	var out syncBuffer
	st, err = mine.Reattach(t.Context(), "bg-untimed", providers.Output{Stdout: &out})
	require.NoError(t, err)
	assert.False(t, st.TimedOut)
	assert.Equal(t, "done\n", out.String())
}

// A gateway that closes its provider leaves its background processes running; another one
// follows and ends them.
func TestClosedGatewayLeavesProcessesRunning(t *testing.T) {
	r := newRig(t, rigOpts{template: "base"})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	mine := sb.(providers.Executions)
	_, err = mine.Start(t.Context(), providers.ExecSpec{Command: "cat", Background: true, StdinOpen: true, ID: "bg-orphan"})
	require.NoError(t, err)
	require.NoError(t, r.p.Close())
	_, err = mine.Reattach(t.Context(), "bg-orphan", providers.Output{})
	require.Error(t, err, "the closed gateway follows no more")

	p2 := newProvider(t, r.fake, rigOpts{template: "base"})
	sb2, err := p2.Attach(t.Context(), sb.ID(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	other := sb2.(providers.Executions)
	var out syncBuffer
	done := follow(t, other, "bg-orphan", &out)
	require.Eventually(t, func() bool {
		_, err := other.WriteStdin(t.Context(), "bg-orphan", strings.NewReader("still here\n"), false)
		require.NoError(t, err)
		return strings.Contains(out.String(), "still here")
	}, 30*time.Second, 100*time.Millisecond)
	_, err = other.WriteStdin(t.Context(), "bg-orphan", nil, true)
	require.NoError(t, err)
	f := ended(t, done)
	require.NoError(t, f.err)
	assert.Equal(t, 0, f.st.ExitCode)
}

// Another gateway types into a terminal and resizes it without knowing it is one (envd
// refuses standard input to a terminal, and the provider types instead); eof is ^D. Input and
// resize of executions without an input or a terminal are conflicts.
func TestTerminalFromAnotherGateway(t *testing.T) {
	r := newRig(t, rigOpts{template: "base"})
	p2 := newProvider(t, r.fake, rigOpts{template: "base"})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	sb2, err := p2.Attach(t.Context(), sb.ID(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	other := sb2.(providers.Executions)

	done := make(chan outcome, 1)
	go func() {
		done <- run(t, sb, providers.ExecSpec{Command: `stty -echo; read line; stty size; echo "term=$TERM got $line"; cat`,
			PTY: &providers.TermSize{Rows: 10, Cols: 40}, ID: "tty-remote"})
	}()
	require.Eventually(t, func() bool {
		return other.Resize(t.Context(), "tty-remote", providers.TermSize{Rows: 12, Cols: 50}) == nil
	}, 30*time.Second, 20*time.Millisecond)
	_, err = other.WriteStdin(t.Context(), "tty-remote", strings.NewReader("hello\n"), false)
	require.NoError(t, err)
	_, err = other.WriteStdin(t.Context(), "tty-remote", nil, true)
	require.NoError(t, err, "eof on a terminal is ^D, which ends cat")
	var o outcome
	select {
	case o = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the terminal's program did not end")
	}
	require.NoError(t, o.err)
	assert.Equal(t, 0, o.st.ExitCode)
	assert.Contains(t, o.stdout, "12 50")
	assert.Contains(t, o.stdout, "term=xterm-256color got hello")
	assert.Empty(t, o.stderr)

	_, err = sb.(providers.Executions).Start(t.Context(), providers.ExecSpec{Command: "exec sleep 600", Background: true, ID: "no-input"})
	require.NoError(t, err)
	_, err = other.WriteStdin(t.Context(), "no-input", strings.NewReader("x"), false)
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "%v", err)
	err = other.Resize(t.Context(), "no-input", providers.TermSize{Rows: 5, Cols: 5})
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "%v", err)
	require.NoError(t, other.Stop(context.WithoutCancel(t.Context()), "no-input"))
}

// A background process on a terminal (the console's shell): typed into, resized, followed.
func TestBackgroundTerminal(t *testing.T) {
	mine, other := twoGateways(t)
	id := "bg-tty"
	_, err := mine.Start(t.Context(), providers.ExecSpec{Command: `read line; stty size; echo "got $line"`, Background: true,
		PTY: &providers.TermSize{Rows: 20, Cols: 70}, ID: id})
	require.NoError(t, err)
	var out syncBuffer
	done := follow(t, mine, id, &out)
	require.NoError(t, other.Resize(t.Context(), id, providers.TermSize{Rows: 21, Cols: 71}))
	_, err = other.WriteStdin(t.Context(), id, strings.NewReader("typed\r"), false)
	require.NoError(t, err)
	f := ended(t, done)
	require.NoError(t, f.err)
	assert.Equal(t, 0, f.st.ExitCode)
	assert.Contains(t, out.String(), "21 71")
	assert.Contains(t, out.String(), "got typed\r\n", "a terminal's output, CR LF line ends")
}
