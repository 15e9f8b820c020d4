package sandboxtest

import (
	"context"
	"io"
	"sync"

	"github.com/sandgate/sandgate/internal/providers"
)

// Program is what a fake sandbox runs for one execution. It writes its output to r.Stdout
// and r.Stderr, reads r.Stdin, may use the workspace through r, and returns how it ended; it
// should return when ctx ends (cancellation, the spec's timeout, the sandbox destroyed or
// lost). What it returns then is replaced by what a real provider reports: ctx.Err() for a
// cancelled execution, a TimedOut status after the timeout, a fault.Gone error for a
// sandbox that went away.
type Program func(ctx context.Context, r *Run) (providers.ExitStatus, error)

// Run is one execution as its Program sees it.
type Run struct {
	// Spec is the execution as the domain asked for it.
	Spec      providers.ExecSpec
	SandboxID string
	Stdin     io.Reader // never nil
	Stdout    io.Writer // never nil
	Stderr    io.Writer // never nil

	ws *workspace
}

// ReadFile returns the content of workspace file path.
func (r *Run) ReadFile(path string) ([]byte, error) { return r.ws.read(path) }

// WriteFile creates or replaces workspace file path (and its parent folders).
func (r *Run) WriteFile(path string, data []byte) error { return r.ws.write(path, data) }

// Reply is a program that prints stdout and stderr and exits with code.
func Reply(code int, stdout, stderr string) Program {
	return func(_ context.Context, r *Run) (providers.ExitStatus, error) {
		_, _ = io.WriteString(r.Stdout, stdout)
		_, _ = io.WriteString(r.Stderr, stderr)
		return providers.ExitStatus{ExitCode: code}, nil
	}
}

// Fail is a program whose execution fails with err, as a provider failing to run it would.
func Fail(err error) Program {
	return func(context.Context, *Run) (providers.ExitStatus, error) { return providers.ExitStatus{}, err }
}

// Gate is a program that blocks until the test releases it or its execution's ctx ends:
// for executions that must still be running while a test looks (promotion, cancellation,
// ordering). A Gate serves one execution.
type Gate struct {
	started, done chan struct{}
	release       chan reply
	startOnce     sync.Once
	doneOnce      sync.Once

	mu  sync.Mutex
	err error
}

type reply struct {
	code           int
	stdout, stderr string
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{started: make(chan struct{}), done: make(chan struct{}), release: make(chan reply, 1)}
}

// Program is the gate's program: it signals Started, then waits for Release (printing and
// exiting as told) or for ctx to end (returning ctx.Err(), kept for Err).
func (g *Gate) Program(ctx context.Context, r *Run) (providers.ExitStatus, error) {
	g.startOnce.Do(func() { close(g.started) })
	defer g.doneOnce.Do(func() { close(g.done) })
	select {
	case rep := <-g.release:
		_, _ = io.WriteString(r.Stdout, rep.stdout)
		_, _ = io.WriteString(r.Stderr, rep.stderr)
		return providers.ExitStatus{ExitCode: rep.code}, nil
	case <-ctx.Done():
		g.mu.Lock()
		g.err = ctx.Err()
		g.mu.Unlock()
		return providers.ExitStatus{}, ctx.Err()
	}
}

// Started is closed once the execution runs.
func (g *Gate) Started() <-chan struct{} { return g.started }

// Done is closed once the program has returned.
func (g *Gate) Done() <-chan struct{} { return g.done }

// Release lets the program end: it prints stdout and stderr and exits with code. Only the
// first call counts; it does not wait for the program.
func (g *Gate) Release(code int, stdout, stderr string) {
	select {
	case g.release <- reply{code, stdout, stderr}:
	default:
	}
}

// Err is why the program stopped waiting without being released — context.Canceled when its
// execution was cancelled, context.DeadlineExceeded at its timeout — or nil. Read it after
// Done.
func (g *Gate) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}
