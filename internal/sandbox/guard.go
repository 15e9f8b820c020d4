package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// The gateway enforces an execution's timeout itself, whatever its sandbox does: a sandboxd
// that stops answering (a frozen or stopped process, an overloaded node) must not keep a
// task running, its session's line waiting and its owner's quota taken. Two bounds, from the
// moment the provider is asked to run the program, with grace Settings.ExecGrace (10 s):
//
//   - at timeout + 7/10 of the grace the provider's context ends: it stops the program (its
//     own kill should have ended it at the timeout already) and returns;
//   - at timeout + the grace the gateway stops waiting for a provider that has not
//     returned: the task ends timed_out (cancelled, when its caller cancelled it) with the
//     output received so far and a notice that the program may still run in its sandbox;
//     the provider's call is left to end on its own, its later output dropped.

// backstop is when, past the timeout, the provider's context ends.
func (c Settings) backstop() time.Duration { return c.ExecGrace * 7 / 10 }

// errUnanswered is the error of a provider call the gateway stopped waiting for.
var errUnanswered = errors.New("sandbox: the sandbox did not answer within the execution's timeout and grace")

// callWithin runs f (the provider's execution, through the observe room's Call) and returns
// its error, or errUnanswered once limit has passed without it returning (limit 0: no limit).
// A call left behind goes on in its goroutine with ctx, which the caller ends; a panic in it
// is logged.
func (x *executions) callWithin(ctx context.Context, limit time.Duration, prof *Profile, op string, f func(context.Context) error) error {
	s := x.s
	if limit <= 0 {
		return s.obs.Call(ctx, prof, op, f)
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if rec := recover(); rec != nil {
				s.log.Error("provider call panicked", "operation", op, "panic", rec)
				done <- fault.New(fault.Internal, "the provider's %s panicked: %v", op, rec)
			}
		}()
		done <- s.obs.Call(ctx, prof, op, f)
	}()
	timer := s.clock.NewTimer(limit)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C():
		select {
		case err := <-done: // it returned as the limit passed
			return err
		default:
		}
		s.log.Warn("a sandbox did not answer within an execution's timeout and grace; the execution ends without it",
			"profile", prof.Name, "provider", prof.Provider.Type(), "limit", limit)
		return errUnanswered
	}
}

// gate passes writes on to an execution's output until it is closed; after that it drops
// them, so a provider call the gateway stopped waiting for never writes into a result that
// is being read or recorded. Safe for concurrent use.
type gate struct {
	mu     sync.Mutex
	closed bool
}

// close stops the writes; it returns once no write is in progress.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// output wraps out's writers and its ResultFunc.
func (g *gate) output(out providers.Output) providers.Output {
	wrap := func(w io.Writer) io.Writer {
		if w == nil {
			return nil
		}
		return gatedWriter{g: g, w: w}
	}
	gated := providers.Output{Stdout: wrap(out.Stdout), Stderr: wrap(out.Stderr)}
	if f := out.ResultFunc; f != nil {
		gated.ResultFunc = func(r providers.RichResult) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if !g.closed {
				f(r)
			}
		}
	}
	return gated
}

type gatedWriter struct {
	g *gate
	w io.Writer
}

func (w gatedWriter) Write(p []byte) (int, error) {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	if w.g.closed {
		return len(p), nil
	}
	return w.w.Write(p)
}

// Skip passes on dropped bytes (see execute.Capture.Skip) while the gate is open.
func (w gatedWriter) Skip(n int64) {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	if sk, ok := w.w.(interface{ Skip(int64) }); ok && !w.g.closed {
		sk.Skip(n)
	}
}

// unansweredNotice is the notice of an execution whose sandbox did not report its end
// within its timeout and the grace.
func unansweredNotice(timeout, grace time.Duration) string {
	return fmt.Sprintf("the sandbox did not report the end of this execution within its timeout (%gs) and a grace of at most %gs: the gateway ended it without the sandbox; its program may still run there (destroy the session to be sure)",
		timeout.Seconds(), grace.Seconds())
}
