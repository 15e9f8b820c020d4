package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/store"
)

// An execution's route (docs/architecture.md "Three flows"). submit makes the execution's
// request (broker.Request: the data every flavor carries) and its job, and hands them to the
// route New chose once for this process:
//   - localRoute (thread and embedded flavors) records the task and its place in its
//     session's line, and submits the request to this process's broker;
//   - queueRoute (queue flavor) records the task and sends the request to the worker fleet,
//     then waits for the completion in the store.
//
// Either way a broker hands the request to its Executor (executions, below): on this
// process, or on the worker whose queue handler submitted the delivered request to its own
// broker.

// execRoute is how an execution reaches where it runs.
type execRoute interface {
	// dispatch records j's task, starts it on its way and waits up to wait for its answer:
	// the Result, the promoted Task, or a fault (a refusal, a quota, a broker failure).
	dispatch(ctx context.Context, j *execJob, wait time.Duration) (Outcome, error)
	// resultLimit is the serialized size a result must fit (the queue transport's message
	// limit), or 0.
	resultLimit() int
}

// newRoute is the route of a Service with queue q (nil: executions run on this process).
func newRoute(s *Service, q Queue) execRoute {
	if q != nil {
		return queueRoute{s: s, q: q}
	}
	return localRoute{s: s}
}

// quotaOf is the limit of unfinished tasks j counts against, and the fault for being over
// it: background processes and executions have their own quotas.
func (xs *executions) quotaOf(j *execJob) (int, error) {
	s := xs.s
	p := j.req.Principal
	if j.req.Background {
		return s.quota.Background(p), s.quota.BackgroundErr(p)
	}
	return s.quota.Executions(p), s.quota.ExecutionsErr(p)
}

// localRoute runs executions on this process's broker (thread and embedded flavors).
type localRoute struct{ s *Service }

func (localRoute) resultLimit() int { return 0 }

func (r localRoute) dispatch(ctx context.Context, j *execJob, wait time.Duration) (Outcome, error) {
	s, task := r.s, j.req.Task
	if err := r.begin(ctx, j); err != nil {
		return Outcome{}, err
	}
	j.live = s.runs.kept.start(task.ID)
	if j.started != nil {
		j.started(task.ID)
	}
	if j.req.Background {
		wait = -1 // the start is the answer
	}
	s.runs.hold(j)
	done, err := s.runs.broker.Submit(ctx, j.req, wait)
	if !done && err != nil {
		s.runs.take(task.ID)
		j.live.finish(nil, err)
		c := failedCompletion(err)
		c.Unlock = j.place // the job never started
		s.runs.recordCompletion(context.WithoutCancel(ctx), task.ID, c)
		return Outcome{}, err
	}
	switch {
	case done && j.req.Background:
		if a := <-j.answer; a.err != nil {
			return Outcome{}, a.err
		}
		return s.runs.taskOutcome(ctx, j)
	case done:
		a := <-j.answer
		if a.err != nil {
			return Outcome{}, a.err
		}
		return Outcome{Result: a.result}, nil
	case !j.promote():
		// Refused (its task withdrawn) or settled (the caller gets its answer: its completion
		// was deferred), just as the wait ended.
		a := <-j.answer
		if a.err != nil {
			return Outcome{}, a.err
		}
		return Outcome{Result: a.result}, nil
	}
	if err := s.store.PromoteTask(context.WithoutCancel(ctx), task.ID); err != nil {
		s.log.Error("recording task promotion failed", "task_id", task.ID, "err", err)
	}
	return s.runs.taskOutcome(ctx, j)
}

// begin records j's task and, for a session, takes its place in the session's line in the
// same round trip: the order of submission is the order of execution (docs/semantics.md §9
// step 5). A session that takes no new work (paused by its owner, closed) records nothing.
func (r localRoute) begin(ctx context.Context, j *execJob) error {
	s, task := r.s, j.req.Task
	limit, overQuota := s.runs.quotaOf(j)
	begun, err := s.store.BeginTask(ctx, task, store.Admission{Limit: limit, Lock: !j.req.Ephemeral, WakesPaused: j.prof.AutoResume, Deferred: j.plainCall()})
	switch {
	case err == nil:
		j.place, j.turn = begun.Place, begun.First
		if begun.First && !j.req.Ephemeral {
			j.sess = begun.Session // read holding the session lock
		}
		return nil
	case errors.Is(err, store.ErrQuota):
		return overQuota
	case errors.Is(err, store.ErrNotFound):
		return errSessionGone
	case errors.Is(err, store.ErrRefused) && begun.Session.Status == store.SessionClosed && j.viaDefault:
		// A closed default session (remembered by this replica) is no longer the default:
		// resolved again, the default is a new one.
		return errSessionGone
	case errors.Is(err, store.ErrRefused):
		return refusedBy(begun.Session)
	}
	// The insert may have committed with its answer lost: finish that task, if it exists.
	_, _ = s.store.FinishTask(context.WithoutCancel(ctx), task.ID, failedCompletion(err), s.now(), s.cfg.ResponseTTL)
	return classifyAs(err, fault.Broker, "could not record the task")
}

// taskOutcome is the answer of a call that ends with j's task (promoted, or a started
// background process).
func (xs *executions) taskOutcome(ctx context.Context, j *execJob) (Outcome, error) {
	s := xs.s
	t, err := s.GetTask(context.WithoutCancel(ctx), j.req.Principal, j.req.TaskID)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Task: &t}, nil
}

// queueRoute sends executions to `gateway worker` processes (queue flavor) and waits for
// their completions in Postgres (the response store), else returns the pending task.
type queueRoute struct {
	s *Service
	q Queue
}

func (r queueRoute) resultLimit() int { return r.q.ResultLimit() }

func (r queueRoute) dispatch(ctx context.Context, j *execJob, wait time.Duration) (Outcome, error) {
	s, id := r.s, j.req.TaskID
	if c := s.cfg.Queue.WorkerTimeoutCeiling; c > 0 && j.spec.Timeout > c {
		return Outcome{}, fault.New(fault.Policy, "the effective timeout %gs of profile '%s' is over sandbox.broker.worker_timeout_ceiling=%gs; lower timeout_s or the profile's policy timeout",
			j.spec.Timeout.Seconds(), j.prof.Name, c.Seconds())
	}
	if err := r.admits(ctx, j); err != nil {
		return Outcome{}, err
	}
	limit, overQuota := s.runs.quotaOf(j)
	if err := r.q.Enqueue(ctx, j.req.Task, limit, j.req); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return Outcome{}, overQuota
		}
		return Outcome{}, err
	}
	if j.started != nil {
		j.started(id)
	}
	if j.req.Background {
		return s.runs.awaitQueuedProcess(ctx, j.req.Principal, id, wait)
	}
	finished, err := r.q.Wait(ctx, id, wait)
	if err != nil {
		return Outcome{}, err
	}
	bg := context.WithoutCancel(ctx)
	if !finished {
		if err := s.store.PromoteTask(bg, id); err != nil {
			s.log.Error("recording task promotion failed", "task_id", id, "err", err)
		}
		return s.runs.taskOutcome(ctx, j)
	}
	t, err := s.GetTask(bg, j.req.Principal, id)
	if err != nil {
		return Outcome{}, err
	}
	if t.Result != nil {
		return Outcome{Result: t.Result}, nil
	}
	return Outcome{}, failureOf(t)
}

// admits refuses, before anything is recorded, an execution whose session takes no new work
// (the thread flavor's BeginTask checks in its insert; a session paused or closed after this
// read fails the task on the worker instead).
func (r queueRoute) admits(ctx context.Context, j *execJob) error {
	if j.req.Ephemeral {
		return nil
	}
	cur, err := r.s.store.GetSession(ctx, j.sess.ID)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && cur.Status == store.SessionClosed && j.viaDefault:
		return errSessionGone
	case err != nil:
		return err
	case cur.Status == store.SessionClosed || !cur.PausedAt.IsZero() && !cur.PausedIdle && !j.prof.AutoResume:
		return refusedBy(cur)
	}
	return nil
}

// executions is the execution room inside the facade package (a step towards its own
// package, internal/sandbox/execute): it submits executions on their route, is the broker's
// Executor — running a request submitted on this process (its job, with the submission's
// state, waits in jobs) or delivered from a queue (a job made from the request alone,
// deliveredJob) — captures their output (output.go), keeps it for followers (kept.go,
// live.go), records their completions, retrying what the store refused (completion.go), and
// follows background processes and adopted tasks to their end (processes.go, adopt.go). Its
// methods reach the rest of the domain through s.
type executions struct {
	s        *Service
	route    execRoute     // where submitted executions go: chosen once, in New
	broker   broker.Broker // runs executions on this process
	runnerID string        // this process's id in task rows and heartbeats
	newID    func() string // task ids

	// cancelled holds the tasks cancelled by a caller or a destroy (vs. shutdown), with why
	// (tasks.go): a job's completion reads it, and forgets it.
	cancelMu  sync.Mutex
	cancelled map[string]string

	// closing ends at Close (stopRetries): completions being retried (completion.go),
	// adopted tasks (adopt.go) and background processes being followed stop.
	closing   chan struct{}
	closeOnce sync.Once

	mu   sync.Mutex
	jobs map[string]*execJob // by task id, from submission until the broker starts them

	kept     *keptOutputs   // the output of executions kept in memory for followers (kept.go)
	adopting sync.WaitGroup // tasks of stopped runners being followed to their end (adopt.go)

	// Completions the store refused wait in spool (nil: in memory) and are retried in the
	// background (completion.go) until Close: retrying counts them.
	spool    Spool
	retrying sync.WaitGroup
	badSpool sync.Map // task id → struct{}: spool records found unreadable (said once)
}

// hold keeps j for the broker to start.
func (x *executions) hold(j *execJob) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.jobs[j.req.TaskID] = j
}

// take removes and returns the job of task id held for the broker (nil: none).
func (x *executions) take(id string) *execJob {
	x.mu.Lock()
	defer x.mu.Unlock()
	j := x.jobs[id]
	delete(x.jobs, id)
	return j
}

// errLeft is the Executor's error for an execution interrupted on this process and left
// running in its sandbox (for adoption) or for redelivery.
var errLeft = errors.New("the execution was interrupted and left for another runner: this process is stopping")

// Execute runs req to its end and records its completion (broker.Executor).
func (x *executions) Execute(ctx context.Context, req broker.Request) error {
	j := x.take(req.TaskID)
	if j == nil {
		var err error
		if j, err = x.s.runs.deliveredJob(ctx, req); j == nil {
			return err
		}
	}
	if req.Background {
		j.startProcess(ctx)
	} else {
		j.run(ctx)
	}
	if j.abandoned {
		return errLeft
	}
	return nil
}

// deliveredJob is the job of a request a queue worker received (the queue flavor admitted
// it: deduplication, per-session order, the attempts cap). A request for a profile this
// worker does not have fails its task here (no job; the error is the store's).
func (xs *executions) deliveredJob(ctx context.Context, req broker.Request) (*execJob, error) {
	s := xs.s
	prof, ok := s.profiles.Lookup(req.Profile)
	if !ok {
		_, err := s.store.FinishTask(ctx, req.TaskID, store.Completion{Status: TaskFailed, ErrorType: string(fault.Config),
			Error: fmt.Sprintf("unknown sandbox profile '%s' on this worker; workers need the gateway's profiles", req.Profile)}, s.now(), s.cfg.ResponseTTL)
		return nil, err
	}
	sess := store.Session{ID: req.SessionID, OwnerID: req.Principal.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Scope}
	j := xs.newJob(req, prof, sess)
	if req.Background {
		// Started here and followed here until it ends; the delivery is done once it runs.
		j.live = xs.kept.start(req.TaskID)
	}
	return j, nil
}
