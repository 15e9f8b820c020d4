// Package broker moves operations from the API to where they run and tells the caller whether
// each finished within its wait (docs/semantics.md §10). It makes no decisions: the job it runs
// is the domain's (internal/sandbox), which also persists every completion in Postgres so any
// replica can answer a task poll.
//
// Flavors:
//   - embedded: runs the job inline on the caller's goroutine; never promotes.
//   - thread (default): runs each job on its own goroutine, detached from the request; the
//     caller waits up to `wait`, after which the job keeps running as a background task.
package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// Job runs one operation to completion, persisting its outcome itself. ctx is cancelled when
// the task is cancelled or the broker shuts down past its drain period — then with cause
// fault.ErrShutdown (context.Cause).
type Job func(ctx context.Context)

// Broker runs jobs.
type Broker interface {
	// Submit starts job for taskID and waits up to wait for it (wait < 0: until it ends).
	// done=false means the job was promoted and keeps running in the background.
	// Errors are fault.Broker (e.g. the broker is closed).
	Submit(ctx context.Context, taskID string, wait time.Duration, job Job) (done bool, err error)
	// Cancel cancels the running job of taskID; false if this broker does not run it.
	Cancel(taskID string) bool
	// Close stops accepting jobs, waits for running ones until ctx ends, then cancels them
	// and waits for them to return. Idempotent.
	Close(ctx context.Context) error
}

// Flavor names.
const (
	FlavorEmbedded = "embedded"
	FlavorThread   = "thread"
)

// New returns the broker of flavor. Unknown flavors are a fault.Config error listing the
// built-ins (the queue flavor runs with `gateway worker` fleets and is configured elsewhere).
func New(flavor string) (Broker, error) {
	switch flavor {
	case FlavorEmbedded:
		return newRunner(false), nil
	case FlavorThread, "":
		return newRunner(true), nil
	}
	return nil, fault.New(fault.Config, "unknown sandbox broker flavor %q; built-in flavors: [embedded thread]", flavor)
}

// runner implements both flavors: detached=false runs jobs inline (embedded).
type runner struct {
	detached bool
	base     context.Context
	stop     func() // ends base with cause fault.ErrShutdown

	mu      sync.Mutex
	closed  bool
	running map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func newRunner(detached bool) *runner {
	base, stop := context.WithCancelCause(context.Background())
	return &runner{detached: detached, base: base, stop: func() { stop(fault.ErrShutdown) }, running: map[string]context.CancelFunc{}}
}

func (r *runner) Submit(ctx context.Context, taskID string, wait time.Duration, job Job) (bool, error) {
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
	run := func() {
		defer r.wg.Done()
		defer close(done)
		defer func() {
			r.mu.Lock()
			delete(r.running, taskID)
			r.mu.Unlock()
			cancel()
		}()
		job(jobCtx)
	}
	if !r.detached {
		run()
		return true, nil
	}
	go run()
	if wait < 0 {
		<-done
		return true, nil
	}
	if wait == 0 {
		return false, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true, nil
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
