package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/execute"
	"github.com/sandgate/sandgate/internal/store"
)

// execJob is one execution as it runs on this process (seed BrokerWorkerCore.run + process):
// its request — the data every broker flavor carries (broker.Request) — and the state of its
// run here. A job is made at submission (the thread and embedded flavors: it waits for the
// broker in executions.jobs) or from a delivered request on a queue worker (deliveredJob).
type execJob struct {
	s    *Service
	req  broker.Request // the execution; req.Task is its task row
	prof *Profile
	sess store.Session
	spec providers.ExecSpec // the program, as req gives it (specOf)

	// The submission's state (thread and embedded flavors; zero on a queue worker).

	// viaDefault: the caller addressed the session as its default (DefaultSessionID).
	viaDefault bool
	started    func(taskID string) // ExecInput.Started
	// place is the task's place in its session's lock line, taken with the task row at
	// submission; the completion gives it up. turn reports that the place holds the lock.
	place store.Place
	turn  bool
	live  *liveOutput // followable output; nil for jobs delivered from a queue
	// answer hands the job's answer to its submitter, once, when the job ends (buffered: a
	// promoted submitter no longer reads it).
	answer chan jobAnswer

	// The run's state.
	touch     bool    // the execution reached its session's sandbox: its completion counts as use
	result    *Result // set when the program ran (whatever its exit)
	err       error   // set on a machinery failure
	abandoned bool    // interrupted by shutdown and left for redelivery or adoption
	refused   bool    // err turned the execution away before it started (refusal)

	mu        sync.Mutex // promoted, withdrawn and settled: the submitter's and the job's last word
	promoted  bool       // the caller stopped waiting: the task is the answer
	withdrawn bool       // refused while the caller waited: the refusal is the answer
	settled   bool       // ended while the caller waited: the job's answer is the answer (settle)
}

// jobAnswer is how a job ended, for its submitter: the Result of a program that ran, or the
// machinery failure.
type jobAnswer struct {
	result *Result
	err    error
}

// newJob is the job of request req on profile prof in session sess (as last read).
func (xs *executions) newJob(req broker.Request, prof *Profile, sess store.Session) *execJob {
	s := xs.s
	return &execJob{s: s, req: req, prof: prof, sess: sess, spec: xs.specOf(req), answer: make(chan jobAnswer, 1)}
}

// specOf is the program request req runs, for a provider.
func (xs *executions) specOf(req broker.Request) providers.ExecSpec {
	s := xs.s
	spec := providers.ExecSpec{
		ID: req.TaskID, Command: req.Command, Code: req.Code, Language: req.Language, Env: req.Env, Dir: req.Dir, Context: req.Context,
		Timeout: time.Duration(req.TimeoutMS) * time.Millisecond, StdinOpen: req.StdinOpen, Background: req.Background,
	}
	if req.PTYRows > 0 && req.PTYCols > 0 {
		spec.PTY = &providers.TermSize{Rows: req.PTYRows, Cols: req.PTYCols}
	}
	if req.Operation == OpExecuteCode {
		spec.MaxResultBytes = s.cfg.MaxOutputBytes // the results' own budget, as each stream has one
	}
	return spec
}

// reply hands the job's answer to its submitter.
func (j *execJob) reply() { j.answer <- jobAnswer{result: j.result, err: j.err} }

// promote records that the caller stopped waiting, unless the job withdrew its task first
// (false: the caller gets the job's answer, the refusal).
func (j *execJob) promote() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.promoted = !j.withdrawn && !j.settled
	return j.promoted
}

// plainCall reports that j's caller just waits for the answer: not a background process, a
// call that follows or feeds the execution (Started, open input, a terminal), or a request
// delivered from a queue. Its task row need not be on disk before it starts
// (store.Admission.Deferred): the row is flushed before the caller can learn the task's id
// (its promotion commits synchronously), and until then the caller holds the call.
func (j *execJob) plainCall() bool {
	return !j.req.Delivered && !j.req.Background && !j.req.StdinOpen && j.req.PTYRows == 0 && j.started == nil
}

// settle makes the job's answer the answer of the caller that waits for it — it can no
// longer be promoted — and reports whether it did: its completion then need not be on disk
// before the answer (store.Completion.Deferred), because the caller holds the result. Only a
// plain waiting call settles: not one already promoted, a background process, a call that
// follows or feeds the execution (Started, open input, a terminal), or a request delivered
// from a queue.
func (j *execJob) settle() bool {
	if !j.plainCall() || j.live == nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.settled = !j.promoted
	return j.settled
}

// withdraw removes the task of a refused execution whose caller still waits for the answer,
// and gives its place in the session's line up; it reports whether it did. A task the
// caller already holds (promoted) or that came through a queue stays, and fails with the
// refusal.
func (j *execJob) withdraw(ctx context.Context) bool {
	if j.req.Delivered {
		return false
	}
	j.mu.Lock()
	j.withdrawn = !j.promoted
	withdrawn := j.withdrawn
	j.mu.Unlock()
	if !withdrawn {
		return false
	}
	if ok, err := j.s.store.WithdrawTask(ctx, j.req.Task.ID); err != nil || !ok {
		return false // recorded as failed instead: the caller gets the refusal either way
	}
	j.s.store.ReleaseTurn(j.place)
	return true
}

func (j *execJob) run(ctx context.Context) {
	s := j.s
	began := s.now()
	ctx, span := s.obs.Tracer().Start(broker.ExtractTrace(ctx, j.req), "sandbox.execution", trace.WithAttributes(
		attrProfile.String(j.prof.Name), attrProvider.String(j.prof.Provider.Type()), attrSession.String(j.sess.ID),
		attrTask.String(j.req.Task.ID), attrOp.String(j.req.Task.Operation)))
	bg := context.WithoutCancel(ctx) // persistence must happen even after cancellation
	completion := store.Completion{SessionID: j.sess.ID}
	defer func() {
		span.SetAttributes(attrStatus.String(completion.Status))
		endSpan(span, j.err)
		defer j.reply()
		if j.abandoned {
			s.runs.forgetCancelled(j.req.Task.ID)
			return
		}
		if rec := recover(); rec != nil {
			s.log.Error("execution panicked", "task_id", j.req.Task.ID, "panic", rec)
			j.err = fault.New(fault.Internal, "execution panicked: %v", rec)
			j.refused = false
			completion = store.Completion{Status: TaskFailed, Error: j.err.Error(), ErrorType: string(fault.Internal)}
		}
		if !j.refused || !j.withdraw(bg) {
			completion.SessionID, completion.Touch = j.sess.ID, j.touch && !j.req.Ephemeral
			completion.Unlock = j.place // the next execution of the session starts once this one is recorded
			completion.Deferred = j.settle()
			j.live.noteDropped(&completion, j.result)
			s.runs.recordCompletion(bg, j.req.Task.ID, completion)
		}
		if !j.refused {
			s.obs.ExecutionFinished(j.prof.Name, j.prof.Provider.Type(), completion.Status, s.since(began))
		}
		s.upkeep.KeepWithin(j.req.Principal.ID, s.quota.RetainedOutputBytes(j.req.Principal), completion.OutputBytes)
		s.runs.forgetCancelled(j.req.Task.ID)
		if j.live != nil {
			j.live.finish(j.result, j.err)
		}
	}()
	res, err := j.execute(ctx)
	switch {
	case err != nil:
		j.err = err
		completion.Status, completion.Error, completion.ErrorType = TaskFailed, err.Error(), string(fault.KindOf(err))
		j.refused = isRefusal(err) && !s.runs.wasCancelled(j.req.Task.ID)
		if s.runs.wasCancelled(j.req.Task.ID) {
			completion.Status, completion.ErrorType = TaskCancelled, "cancelled"
			completion.Error = s.runs.cancelReason(j.req.Task.ID)
		} else if ctx.Err() != nil && j.req.Delivered {
			j.abandoned = true // another worker will run it again
		} else if ctx.Err() != nil && errors.Is(err, fault.ErrLeftRunning) {
			// This gateway stops; the sandbox holds the execution. The task stays running
			// and the gateway that adopts it (adopt.go) follows it to its end.
			j.abandoned = true
			s.log.Info("left a running execution in its sandbox for another gateway to adopt", "task_id", j.req.Task.ID, "session_id", j.sess.ID)
		} else if ctx.Err() != nil {
			completion.Status, completion.ErrorType = TaskLost, "lost"
			completion.Error = "the gateway shut down before the task finished"
		}
	default:
		if j.req.Delivered {
			execute.TrimToRecord(res, s.runs.route.resultLimit())
		}
		j.result = res
		completeWith(&completion, res, fmt.Sprintf("sandbox operation '%s' exceeded timeout %gs", j.req.Task.Operation, j.spec.Timeout.Seconds()), s.runs.cancelReason(j.req.Task.ID))
	}
}

// completeWith records finished result res on c: its status (a timeout with timedOut as the
// error, a cancellation with cancelled), the result and its notice.
func completeWith(c *store.Completion, res *Result, timedOut, cancelled string) {
	c.Result, c.Notice, c.OutputBytes = res, res.Notice, outputBytes(res)
	ms := res.DurationMS
	c.ExitCode, c.DurationMS = res.ExitCode, &ms
	switch res.Status {
	case ResultTimedOut:
		c.Status, c.Error, c.ErrorType = TaskTimedOut, timedOut, string(fault.Timeout)
	case ResultCancelled:
		c.Status, c.Error, c.ErrorType = TaskCancelled, cancelled, "cancelled"
	default:
		c.Status = TaskSucceeded
	}
}

// execute takes the job's lease on its session's sandbox and runs the program.
func (j *execJob) execute(ctx context.Context) (*Result, error) {
	s, prof := j.s, j.prof
	l, err := j.lease(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Release()
	sb, notice := l.Sandbox, l.Notice
	redact := s.outputSecrets(ctx, prof, l.Session)
	if !j.req.Ephemeral {
		if err := s.quota.HoldContext(ctx, j.req.Principal, j.sess.ID, sb.ID(), j.spec.Context); err != nil {
			if fault.KindOf(err) == fault.Quota {
				err = refused(err) // the contexts quota: nothing ran
			}
			return nil, err
		}
	}

	spec := j.spec
	spec.ID = j.req.Task.ID // a sandbox that can hold executions keeps this one for another gateway
	out := s.runs.newOutputs(j.live)
	defer out.flush()
	// The provider enforces spec.Timeout; the gateway bounds it too (guard.go): the context
	// ends at the timeout + the backstop, and a call that has not returned at the timeout +
	// the grace is left behind, its later output dropped at the gate.
	var g gate
	defer g.close()
	spec.Output = g.output(out.output())
	var (
		runCtx context.Context
		cancel context.CancelFunc
		limit  time.Duration // 0: none
	)
	if spec.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, spec.Timeout+s.cfg.backstop())
		limit = spec.Timeout + s.cfg.ExecGrace
	} else {
		runCtx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	var (
		stMu sync.Mutex
		st   providers.ExitStatus
	)
	exec := func(ctx context.Context) error {
		got, err := sb.Exec(ctx, j.withStdin(spec))
		stMu.Lock()
		st = got
		stMu.Unlock()
		return err
	}
	start := s.now()
	err = s.runs.callWithin(runCtx, limit, prof, "exec", exec)
	if errors.Is(err, providers.ErrUnreached) && ctx.Err() == nil {
		// The handle was trusted without a round trip and its sandbox could not be reached:
		// nothing ran. Attach again — the ordinary path, which recreates a vanished sandbox —
		// and run once more.
		if err = j.renew(ctx, l); err != nil {
			return nil, err
		}
		sb = l.Sandbox
		if limit > 0 {
			limit = max(limit-s.since(start), time.Millisecond)
		}
		err = s.runs.callWithin(runCtx, limit, prof, "exec", exec)
	}
	unanswered := errors.Is(err, errUnanswered)
	if unanswered {
		cancel() // the call left behind ends on its own
		g.close()
	}
	if notice == "" {
		notice = l.Healed
	}
	stMu.Lock()
	final := st
	stMu.Unlock()
	if unanswered {
		final = providers.ExitStatus{}
	}
	return s.runs.resultOf(ended{
		st: final, err: err, elapsed: s.since(start), out: out, base64: j.req.Base64,
		cancelled:  ctx.Err() != nil && s.runs.wasCancelled(j.req.Task.ID),
		backstop:   runCtx.Err() != nil && ctx.Err() == nil,
		unanswered: unanswered, timeout: spec.Timeout,
		sessionID: j.sess.ID, taskID: j.req.Task.ID, notice: notice, warnings: j.req.Warnings, context: spec.Context,
		redact: redact,
	})
}

// withStdin is spec reading the job's stdin from its start.
func (j *execJob) withStdin(spec providers.ExecSpec) providers.ExecSpec {
	if j.req.Stdin != nil {
		spec.Stdin = bytes.NewReader(j.req.Stdin)
	}
	return spec
}

// lease takes the job's session's sandbox (leases.lease): in the job's turn (takeTurn: the
// place it took at submission, or, delivered from a queue, one it takes now),
// the session as it now stands must take the execution — not closed, not paused (a session
// the profile resumes on use is woken: the notice says so) — or it is refused (refusal);
// an idle one is reset; the sandbox is attached or created and the binding recorded when it
// changed. A per_call sandbox is made for the job and destroyed at Release. Lease.Healed
// says a vanished sandbox was recreated.
func (j *execJob) lease(ctx context.Context) (*Lease, error) {
	opts := leaseOpts{order: orderNone, reach: reachCreate, ephemeral: true}
	if !j.req.Ephemeral {
		t := turn{task: j.req.TaskID, place: j.place, first: j.turn, sess: j.sess}
		opts = leaseOpts{order: orderLock, turn: t, reach: reachCreate, bind: bindChanged, refuse: true, resetIdle: true}
	}
	l, err := j.s.leases().lease(ctx, j.req.Principal, j.prof, j.sess, opts)
	if err != nil {
		return nil, err
	}
	j.sess = l.Session
	j.touch = !j.req.Ephemeral
	return l, nil
}

// renew reaches the job's sandbox again in its turn (its handle could not be reached).
func (j *execJob) renew(ctx context.Context, l *Lease) error {
	err := l.renew(ctx)
	j.sess = l.Session
	return err
}
