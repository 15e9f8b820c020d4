// Package broker moves executions from the API to where they run and tells the caller whether
// each finished within its wait (docs/semantics.md §10). It makes no decisions: an execution
// is data (Request), the same in every flavor, and the broker hands it to an Executor — the
// domain (internal/sandbox), which also persists every completion in Postgres so any replica
// can answer a task poll.
//
// Flavors:
//   - embedded: executes each request inline on the caller's goroutine; never promotes.
//   - thread (default): executes each request on its own goroutine, detached from the
//     request; the caller waits up to `wait`, after which it keeps running as a background
//     task.
//   - queue (Queued): the request travels as JSON to a `gateway worker`, whose own embedded
//     broker executes it (Queued.Handler).
package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// Executor executes requests where the broker runs them: in process for the thread and
// embedded flavors, on the worker for the queue flavor.
type Executor interface {
	// Execute runs req to completion, persisting its outcome itself. ctx is cancelled when
	// the task is cancelled or the broker shuts down past its drain period — then with cause
	// fault.ErrShutdown (context.Cause). An error says the execution did not end here: it was
	// interrupted and left running in its sandbox or for redelivery (a queue worker then
	// asks its transport for redelivery).
	Execute(ctx context.Context, req Request) error
}

// Broker runs requests through its Executor.
type Broker interface {
	// Submit starts req (keyed by req.TaskID) and waits up to wait for it (wait < 0: until
	// it ends). done=false means it was promoted and keeps running in the background; err is
	// then the broker's refusal (fault.Broker, e.g. the broker is closed) and req did not
	// start. done=true: it ended within the wait, and err is the Executor's.
	Submit(ctx context.Context, req Request, wait time.Duration) (done bool, err error)
	// Cancel cancels the running execution of taskID; false if this broker does not run it.
	Cancel(taskID string) bool
	// Close stops accepting requests, waits for running ones until ctx ends, then cancels
	// them and waits for them to return. Idempotent.
	Close(ctx context.Context) error
}

// Flavor names.
const (
	FlavorEmbedded = "embedded"
	FlavorThread   = "thread"
)

// New returns the broker of flavor executing through ex. Unknown flavors are a fault.Config
// error listing the built-ins (the queue flavor runs with `gateway worker` fleets and is
// configured elsewhere: NewQueued).
func New(flavor string, ex Executor) (Broker, error) {
	switch flavor {
	case FlavorEmbedded:
		return newRunner(false, ex), nil
	case FlavorThread, "":
		return newRunner(true, ex), nil
	}
	return nil, fault.New(fault.Config, "unknown sandbox broker flavor %q; built-in flavors: [embedded thread]", flavor)
}

// runner implements both flavors: detached=false runs requests inline (embedded).
type runner struct {
	detached bool
	ex       Executor
	base     context.Context
	stop     func() // ends base with cause fault.ErrShutdown

	mu      sync.Mutex
	closed  bool
	running map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func newRunner(detached bool, ex Executor) *runner {
	base, stop := context.WithCancelCause(context.Background())
	return &runner{detached: detached, ex: ex, base: base, stop: func() { stop(fault.ErrShutdown) }, running: map[string]context.CancelFunc{}}
}

func (r *runner) Submit(ctx context.Context, req Request, wait time.Duration) (bool, error) {
	taskID := req.TaskID
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false, fault.New(fault.Broker, "the sandbox broker is shutting down; retry against another replica")
	}
	if _, dup := r.running[taskID]; dup {
		r.mu.Unlock()
		return false, fault.New(fault.Broker, "task %s is already running", taskID)
	}
	var jobCtx context.Context
	var cancel context.CancelFunc
	if r.detached {
		jobCtx, cancel = context.WithCancel(r.base)
	} else {
		// Embedded: the job belongs to the request, and also ends when the broker stops
		// (with the broker's cause).
		var cancelCause context.CancelCauseFunc
		jobCtx, cancelCause = context.WithCancelCause(ctx)
		cancel = func() { cancelCause(nil) }
		stop := context.AfterFunc(r.base, func() { cancelCause(context.Cause(r.base)) })
		defer stop()
	}
	r.running[taskID] = cancel
	r.wg.Add(1)
	r.mu.Unlock()

	done := make(chan struct{})
	var ended error // the Executor's; read once done is closed
	run := func() {
		defer r.wg.Done()
		defer close(done)
		defer func() {
			r.mu.Lock()
			delete(r.running, taskID)
			r.mu.Unlock()
			cancel()
		}()
		ended = r.ex.Execute(jobCtx, req)
	}
	if !r.detached {
		run()
		return true, ended
	}
	go run()
	if wait < 0 {
		<-done
		return true, ended
	}
	if wait == 0 {
		return false, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true, ended
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		// The caller went away; the job goes on as a task they can still poll.
		return false, nil
	}
}

func (r *runner) Cancel(taskID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cancel, ok := r.running[taskID]
	if ok {
		cancel()
	}
	return ok
}

func (r *runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	drained := make(chan struct{})
	go func() { r.wg.Wait(); close(drained) }()
	select {
	case <-drained:
		r.stop()
		return nil
	case <-ctx.Done():
	}
	r.stop() // cancel what is still running, then wait for it to return
	select {
	case <-drained:
		return fmt.Errorf("broker: running jobs were cancelled at shutdown: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		return errors.New("broker: jobs did not return within 30s of cancellation")
	}
}
