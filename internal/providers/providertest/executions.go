package providertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// executions checks kept executions (providers.Executions): background processes that
// outlive their call, an input that stays open, a terminal — and the honesty of providers
// that declare neither capability.
func (s *suite) executions(t *testing.T) {
	s.leaf(t, "honesty", needShell, func(e *env) {
		sb := e.create()
		_, isExecutions := sb.(providers.Executions)
		if e.caps.Interactive || e.caps.Background {
			require.True(e.t, isExecutions, "a provider declaring interactive or background must give sandboxes that implement providers.Executions")
		}
		if !e.caps.Interactive {
			r := e.run(e.ctx, sb, providers.ExecSpec{Command: "cat", StdinOpen: true, ID: e.id("honest"), Timeout: time.Minute})
			requireKind(e.t, r.err, fault.Capability, "an open stdin without the interactive capability")
		}
		if !e.caps.Background && isExecutions {
			_, err := sb.(providers.Executions).Start(e.ctx, providers.ExecSpec{Command: "sleep 1", Background: true, ID: e.id("honest-bg")})
			requireKind(e.t, err, fault.Capability, "a background process without the background capability")
		}
	})

	s.leaf(t, "background_outlives_its_call", needShell|needBackground, func(e *env) {
		sb := e.create()
		x := sb.(providers.Executions)
		id := e.id("bg")
		info, err := x.Start(e.ctx, providers.ExecSpec{Command: "echo started; while :; do sleep 0.05; done", Background: true, ID: id})
		require.NoError(e.t, err)
		assert.Equal(e.t, id, info.ID)
		// Another execution runs meanwhile, and sees the background process.
		out := e.sh(sb, "echo beside")
		require.Equal(e.t, "beside\n", out)
		_, err = x.Start(e.ctx, providers.ExecSpec{Command: "true", Background: true, ID: id})
		requireKind(e.t, err, fault.Conflict, "an id in use")

		// A follower from before the stop gets the output as it comes. The stop waits for the
		// output: Start returns once the program runs, which need not have written yet.
		early := &awaitWriter{want: "started\n", seen: make(chan struct{})}
		ended := make(chan error, 1)
		go func() {
			_, err := x.Reattach(context.WithoutCancel(e.ctx), id, providers.Output{Stdout: early})
			ended <- err
		}()
		select {
		case <-early.seen:
		case err := <-ended:
			e.t.Fatalf("following a running background process ended before its output (%v); it wrote %q", err, early.String())
		case <-time.After(time.Minute):
			e.t.Fatalf("a background process's output did not reach its follower; it has %q", early.String())
		}
		require.NoError(e.t, x.Stop(e.ctx, id))
		select {
		case err := <-ended:
			require.ErrorIs(e.t, err, providers.ErrExecutionStopped)
		case <-time.After(time.Minute):
			e.t.Fatal("a stopped background process is still followed")
		}
		assert.Equal(e.t, "started\n", early.String())

		// A follower that comes after the stop still gets the output it kept, and the stop.
		var late bytes.Buffer
		_, err = x.Reattach(e.ctx, id, providers.Output{Stdout: &late})
		require.ErrorIs(e.t, err, providers.ErrExecutionStopped)
		assert.Equal(e.t, "started\n", late.String(), "a stopped background process keeps its output for later followers")

		_, err = x.Reattach(e.ctx, e.id("never"), providers.Output{})
		requireKind(e.t, err, fault.NotFound, "an id never started")
	})

	s.leaf(t, "open_stdin", needShell|needInteractive, func(e *env) {
		sb := e.create()
		x := sb.(providers.Executions)
		id := e.id("in")
		done := make(chan result, 1)
		go func() {
			done <- e.run(e.ctx, sb, providers.ExecSpec{Command: "cat; echo end", StdinOpen: true, Stdin: strings.NewReader("a "), ID: id, Timeout: time.Minute})
		}()
		require.Eventually(e.t, func() bool {
			_, err := x.WriteStdin(e.ctx, id, strings.NewReader("b "), false)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "the execution takes input once it runs")
		_, err := x.WriteStdin(e.ctx, id, strings.NewReader("c\n"), true)
		require.NoError(e.t, err)
		var r result
		select {
		case r = <-done:
		case <-time.After(time.Minute):
			e.t.Fatal("closing the input did not end cat")
		}
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 0, r.status.ExitCode)
		assert.Equal(e.t, "a b c\nend\n", string(r.stdout))
		_, err = x.WriteStdin(e.ctx, id, strings.NewReader("late"), false)
		require.Error(e.t, err, "an ended execution takes no input")
		assert.True(e.t, fault.IsKind(err, fault.Conflict) || fault.IsKind(err, fault.NotFound), "got %v", err)
	})

	s.leaf(t, "terminal", needShell|needInteractive, func(e *env) {
		sb := e.create()
		x := sb.(providers.Executions)
		id := e.id("tty")
		done := make(chan result, 1)
		go func() {
			done <- e.run(e.ctx, sb, providers.ExecSpec{Command: `test -t 1 && echo tty; read line; stty size; echo "got $line"`,
				PTY: &providers.TermSize{Rows: 24, Cols: 80}, ID: id, Timeout: time.Minute})
		}()
		require.Eventually(e.t, func() bool {
			return x.Resize(e.ctx, id, providers.TermSize{Rows: 33, Cols: 99}) == nil
		}, 30*time.Second, 20*time.Millisecond, "the terminal can be resized once it runs")
		_, err := x.WriteStdin(e.ctx, id, strings.NewReader("hi\n"), false)
		require.NoError(e.t, err)
		var r result
		select {
		case r = <-done:
		case <-time.After(time.Minute):
			e.t.Fatal("the terminal program did not end")
		}
		require.NoError(e.t, r.err)
		out := string(r.stdout)
		assert.Contains(e.t, out, "tty")
		assert.Contains(e.t, out, "33 99")
		assert.Contains(e.t, out, "got hi")
		assert.Empty(e.t, r.stderr, "a terminal has one output stream")
	})
}

// id is an execution id unique to the test.
func (e *env) id(what string) string {
	return strings.NewReplacer("/", "-", " ", "-").Replace(what + "-" + strings.ToLower(rand.Text()[:12]))
}

// awaitWriter collects a stream and closes seen once it holds want.
type awaitWriter struct {
	want string
	seen chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (w *awaitWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *awaitWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
