package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Operation names (seed ExecutionRequest.operation).
const (
	OpExecuteCode    = "execute_code"
	OpExecuteCommand = "execute_command"
)

// Task statuses.
const (
	TaskPending   = "pending"
	TaskRunning   = "running"
	TaskSucceeded = "succeeded"
	TaskFailed    = "failed"
	TaskTimedOut  = "timed_out"
	TaskCancelled = "cancelled"
	TaskLost      = "lost"
)

// Result statuses.
const (
	ResultCompleted = "completed"
	ResultTimedOut  = "timed_out"
	ResultCancelled = "cancelled"
)

// ExecInput is one execution: exactly one of Command or Code.
type ExecInput struct {
	SessionID string // a session id or DefaultSessionID; ignored by Run
	Profile   string
	Command   string
	Code      string
	Language  string // default python
	Env       map[string]string
	Cwd       string
	// Context names the stateful context that runs Code (only on stateful-capable profiles);
	// "" = the default context when the profile is stateful, else a fresh interpreter.
	Context string
	Stdin   []byte
	// Timeout lowers the profile's policy timeout (never raises it); 0 = the policy's.
	Timeout time.Duration
	// Wait bounds how long the call waits before promoting to a task; nil = broker.wait_timeout.
	Wait   *time.Duration
	Base64 bool // return stdout/stderr base64-encoded
	// Started, when set, is called with the task's id once its row exists, before the call
	// waits: a caller can follow the output (Follow) or cancel the task while it waits.
	Started func(taskID string)
	// StdinOpen keeps the program's standard input open after Stdin: WriteStdin feeds it
	// (by task id) while it runs. Needs the profile's interactive capability.
	StdinOpen bool
	// PTY runs the command on a terminal of this size (one output stream, input open as with
	// StdinOpen, Resize changes the size). Commands only; capability interactive.
	PTY *TermSize
	// Background starts the command as a background process of its session (StartProcess
	// semantics: docs/semantics.md §9 "Background processes"): the call returns once it runs,
	// with its task (Outcome.Task); Timeout applies only when given. Commands only;
	// capability background.
	Background bool
}

// TermSize is a terminal's size in character cells (1 to 1000 each).
type TermSize struct {
	Rows, Cols int
}

// Result is a finished execution. A non-zero exit is a Result, never an error.
type Result struct {
	Status          string   `json:"status"`
	ExitCode        *int     `json:"exit_code"`
	Signal          string   `json:"signal,omitempty"`
	OOMKilled       bool     `json:"oom_killed,omitempty"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutBytes     int64    `json:"stdout_bytes"`
	StderrBytes     int64    `json:"stderr_bytes"`
	StdoutTruncated bool     `json:"stdout_truncated"`
	StderrTruncated bool     `json:"stderr_truncated"`
	Encoding        string   `json:"encoding"`
	DurationMS      int64    `json:"duration_ms"`
	SessionID       string   `json:"session_id"`
	TaskID          string   `json:"task_id,omitempty"`
	Notice          string   `json:"notice,omitempty"`
	Warnings        []string `json:"warnings"`

	// OutputDropped: Stdout and Stderr were dropped after the run, to keep the owner's
	// finished tasks within sandbox.quotas.retained_output_bytes (retained.go).
	OutputDropped bool `json:"output_dropped,omitempty"`

	// Error is the exception code in a context raised (its name, value and traceback, which
	// Stderr also carries), for providers that report one; nil otherwise. ContextLost says the
	// code's context died during it (its variables are gone; Notice says so too).
	Error       *CodeError `json:"error,omitempty"`
	ContextLost bool       `json:"context_lost,omitempty"`

	// Results are the rich results of code (the last expression's value, displays, charts,
	// tables), in order, within max_output_bytes together: one that did not fit is kept as
	// dropped (RichResult.Dropped), never cut.
	Results []RichResult `json:"results,omitempty"`

	// StdoutHead and StderrHead split a truncated stream: how many bytes of Stdout (Stderr),
	// decoded when base64, are the start of the stream; the rest is its end, which ends at
	// StdoutBytes (StderrBytes). Nil for a whole stream, and in results stored before they
	// were recorded. Not in the API: a follower replaying a stored result (Follow) needs them
	// to place each byte at its offset.
	StdoutHead *int64 `json:"stdout_head,omitempty"`
	StderrHead *int64 `json:"stderr_head,omitempty"`
}

// CodeError is an exception raised by code in a context (see providers.CodeError).
type CodeError = providers.CodeError

// RichResult is one rich result of code, as a notebook shows it: the value of its last
// expression (Main) or a display, as a MIME bundle (see providers.RichResult).
type RichResult = providers.RichResult

// Outcome is either a Result (finished within the wait) or a promoted Task.
type Outcome struct {
	Result *Result
	Task   *Task
}

// Execute runs a command or code in a session (seed run_code / run_command). Machinery
// failures are fault errors; policy, identity and capability checks fail before any provider
// call.
func (s *Service) Execute(ctx context.Context, p principal.Principal, in ExecInput) (_ Outcome, err error) {
	ctx, span := s.obs.Span(ctx, "sandbox.Execute")
	defer func() { endSpan(span, err) }()
	// The session's identity comes from the cache when it can; BeginTask finds out in the same
	// round trip when the session is gone, and then it is resolved once more from the store
	// (a default session is made again, an explicit id is unknown).
	for cached := true; ; cached = false {
		sess, prof, ephemeral, err := s.sessions.ResolveVia(ctx, p, in.SessionID, in.Profile, cached)
		if err != nil {
			return Outcome{}, err
		}
		span.SetAttributes(attrProfile.String(prof.Name), attrProvider.String(prof.Provider.Type()), attrSession.String(sess.ID))
		out, err := s.submit(ctx, p, sess, prof, ephemeral, in)
		if errors.Is(err, errSessionGone) {
			s.sessions.Forget(sess.ID)
			if cached {
				continue
			}
			return Outcome{}, fault.New(fault.NotFound, "unknown sandbox session '%s'", in.SessionID)
		}
		return out, err
	}
}

// isDefault reports whether id addresses a default session.
func isDefault(id string) bool { return id == DefaultSessionID || id == "" }

// errSessionGone is submit's error for a session that no longer exists (or, addressed as the
// default, is no longer it).
var errSessionGone = errors.New("sandbox: the session is gone")

// Run executes on a per_call profile: a fresh sandbox, destroyed afterwards — also when the
// run was promoted to a task.
func (s *Service) Run(ctx context.Context, p principal.Principal, in ExecInput) (Outcome, error) {
	prof, err := s.profiles.Resolve(p, in.Profile)
	if err != nil {
		return Outcome{}, err
	}
	if prof.Scope != ScopePerCall && in.Profile == "" {
		var names []string
		for _, q := range s.Profiles(p) {
			if q.Scope == ScopePerCall {
				names = append(names, q.Name)
			}
		}
		if len(names) > 0 {
			return Outcome{}, fault.New(fault.Conflict, "runs need a per_call profile and the default profile '%s' is %s: name one with \"profile\" (%s)", prof.Name, prof.Scope, strings.Join(names, ", "))
		}
	}
	if prof.Scope != ScopePerCall {
		return Outcome{}, fault.New(fault.Conflict, "profile '%s' has scope %s; runs need a per_call profile", prof.Name, prof.Scope).
			WithHint(fmt.Sprintf("run in a session instead (POST /v1/sessions/default/commands?profile=%s)", prof.Name),
				fmt.Sprintf("call run_command or run_code with profile='%s'", prof.Name))
	}
	in.SessionID = DefaultSessionID
	return s.Execute(ctx, p, in)
}

func (s *Service) submit(ctx context.Context, p principal.Principal, sess store.Session, prof *Profile, ephemeral bool, in ExecInput) (Outcome, error) {
	op := OpExecuteCommand
	env := sessionEnv(sess.Env, in.Env)
	spec := providers.ExecSpec{Command: in.Command, Env: env, Dir: in.Cwd}
	if in.Code != "" || in.Command == "" {
		op = OpExecuteCode
		spec = providers.ExecSpec{Code: in.Code, Language: in.Language, Env: env, Dir: in.Cwd}
	}
	if in.Code != "" && in.Command != "" {
		return Outcome{}, fault.New(fault.Validation, "give exactly one of command or code")
	}
	if in.Background && ephemeral {
		return Outcome{}, fault.New(fault.Conflict, "profile '%s' has scope %s: its sandbox is destroyed after the call, so nothing can run in its background", prof.Name, prof.Scope).
			WithHint("start background processes in a session (POST /v1/sessions/{id}/commands)", "start background processes in a session")
	}
	if err := s.pickContext(prof, &spec, in.Context); err != nil {
		return Outcome{}, err
	}
	id := s.newID()
	spec.StdinOpen, spec.Background = in.StdinOpen, in.Background
	if in.PTY != nil {
		spec.PTY = &providers.TermSize{Rows: in.PTY.Rows, Cols: in.PTY.Cols}
	}
	if spec.StdinOpen || spec.PTY != nil || spec.Background {
		spec.ID = id // the checks below need it; the job sets it for every execution
	}
	if op == OpExecuteCode {
		spec.MaxResultBytes = s.maxOutput() // the results' own budget, as each stream has one
	}
	if op == OpExecuteCode && spec.Language == "" && spec.Context == "" {
		// Without a context the default is python; in one, the context's own language.
		spec.Language = "python"
	}
	if err := providers.CheckExecSpec(prof.Provider.Type(), prof.Caps, spec); err != nil {
		return Outcome{}, err
	}
	if spec.Dir != "" {
		if _, err := providers.CleanPath(spec.Dir); err != nil {
			return Outcome{}, err
		}
	}
	warnings, err := s.profiles.Checks(prof, p)
	if err != nil {
		return Outcome{}, err
	}
	timeout := prof.Policy.Timeout
	if in.Timeout > 0 && in.Timeout < timeout {
		timeout = in.Timeout
	}
	if in.Background {
		// A background process is bounded by its session, not by the execution timeout,
		// unless the caller gives one (which may then exceed the policy's: it is a lifetime).
		timeout = max(in.Timeout, 0)
	}
	spec.Timeout = timeout
	wait := s.waitTimeout()
	if in.Wait != nil {
		wait = *in.Wait
	}

	now := s.now()
	task := store.Task{
		ID: id, SessionID: sess.ID, OwnerID: p.ID, Profile: prof.Name, Operation: op,
		Status: TaskPending, RunnerID: s.runnerID, SubmittedAt: now, Program: spec.Command + spec.Code,
		Background: in.Background, Interactive: spec.StdinOpen || spec.PTY != nil, APIKeyID: p.APIKeyID,
	}
	trace.SpanFromContext(ctx).SetAttributes(attrTask.String(id), attrOp.String(op))
	j := &execJob{s: s, p: p, prof: prof, sess: sess, ephemeral: ephemeral, viaDefault: isDefault(in.SessionID), task: task, spec: spec, stdin: in.Stdin,
		base64: in.Base64, warnings: warnings, started: in.Started, parent: trace.SpanContextFromContext(ctx)}
	if s.queue != nil {
		return s.submitQueued(ctx, j, wait)
	}
	limit, overQuota := s.quota.Executions(p), s.quota.ExecutionsErr
	if in.Background {
		limit, overQuota = s.quota.Background(p), s.quota.BackgroundErr
	}
	// One round trip records the task and, for a session, takes its place in the session's
	// line: the order of submission is the order of execution (docs/semantics.md §9 step 5).
	// A session that takes no new work (paused by its owner, closed) records nothing.
	begun, err := s.store.BeginTask(ctx, task, store.Admission{Limit: limit, Lock: !ephemeral, WakesPaused: prof.AutoResume})
	if err != nil {
		switch {
		case errors.Is(err, store.ErrQuota):
			return Outcome{}, overQuota(p)
		case errors.Is(err, store.ErrNotFound):
			return Outcome{}, errSessionGone
		case errors.Is(err, store.ErrRefused) && begun.Session.Status == store.SessionClosed && isDefault(in.SessionID):
			// A closed default session (remembered by this replica) is no longer the default:
			// resolved again, the default is a new one.
			return Outcome{}, errSessionGone
		case errors.Is(err, store.ErrRefused):
			return Outcome{}, refusedBy(begun.Session)
		}
		// The insert may have committed with its answer lost: finish that task, if it exists.
		_, _ = s.store.FinishTask(context.WithoutCancel(ctx), task.ID, failedCompletion(err), s.now(), s.ttl())
		return Outcome{}, classifyAs(err, fault.Broker, "could not record the task")
	}
	j.place, j.turn = begun.Place, begun.First
	if begun.First && !ephemeral {
		j.sess = begun.Session // read holding the session lock
	}
	j.live = s.kept.start(task.ID)
	if j.started != nil {
		j.started(task.ID)
	}
	if in.Background {
		return s.submitProcess(ctx, j)
	}
	done, err := s.broker.Submit(ctx, task.ID, wait, j.run)
	if err != nil {
		j.live.finish(nil, err)
		c := failedCompletion(err)
		c.Unlock = j.place // the job never started
		s.recordCompletion(context.WithoutCancel(ctx), task.ID, c)
		return Outcome{}, err
	}
	if done {
		if j.err != nil {
			return Outcome{}, j.err
		}
		return Outcome{Result: j.result}, nil
	}
	if !j.promote() {
		return Outcome{}, j.err // refused, its task withdrawn, just as the wait ended
	}
	if err := s.store.PromoteTask(context.WithoutCancel(ctx), task.ID); err != nil {
		s.log.Error("recording task promotion failed", "task_id", task.ID, "err", err)
	}
	t, err := s.GetTask(context.WithoutCancel(ctx), p, task.ID)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Task: &t}, nil
}

// sessionEnv is the environment of an execution with its own env in a session with
// session's: both, the execution's winning.
func sessionEnv(session, own map[string]string) map[string]string {
	if len(session) == 0 {
		return own
	}
	env := maps.Clone(session)
	maps.Copy(env, own)
	return env
}

// refusal marks an error that turned an execution away before it started: its session is
// paused (and not resumed on use) or closed, or its caller is over the contexts quota. A
// refused execution is no execution: its task is withdrawn while its caller still waits for
// the answer (else it fails with the refusal), and no execution metric counts it.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

// refused marks err as a refusal.
func refused(err error) error { return refusal{err} }

func isRefusal(err error) bool { return errors.As(err, new(refusal)) }

// refusedBy is the refusal of new work by session sess as it stands (store.ErrRefused).
func refusedBy(sess store.Session) error {
	if sess.Status == store.SessionClosed {
		return closedErr(sess)
	}
	return pausedErr(sess.ID)
}

// failedCompletion is the completion of a task that failed with machinery error err.
func failedCompletion(err error) store.Completion {
	return store.Completion{Status: TaskFailed, Error: err.Error(), ErrorType: string(fault.KindOf(err))}
}

func (s *Service) waitTimeout() time.Duration { return s.cfg.WaitTimeout }

func (s *Service) ttl() time.Duration { return s.cfg.ResponseTTL }

func (s *Service) maxOutput() int64 { return s.cfg.MaxOutputBytes }

// resultLimit is the serialized size a queued result must fit: the transport's hard message
// limit, or 0 (none) when results go to the response store only.
func (s *Service) resultLimit() int { return s.queue.ResultLimit() }

// OutputLimit is how many bytes of each output stream an execution keeps (head and tail
// halves; sandbox.max_output_bytes). A transport with a hard message limit may keep less, and
// says so in the result's notice.
func (s *Service) OutputLimit() int64 { return s.maxOutput() }

// WaitTimeout is how long a call waits for its execution, by default, before promoting it to
// a task (sandbox.broker.wait_timeout; 0 always promotes).
func (s *Service) WaitTimeout() time.Duration { return s.waitTimeout() }

// execJob is one execution as the broker runs it (seed BrokerWorkerCore.run + process).
type execJob struct {
	s         *Service
	p         principal.Principal
	prof      *Profile
	sess      store.Session
	ephemeral bool
	// viaDefault: the caller addressed the session as its default (DefaultSessionID).
	viaDefault bool
	task       store.Task
	spec       providers.ExecSpec
	stdin      []byte
	base64     bool
	warnings   []string
	started    func(taskID string) // ExecInput.Started

	queued bool // came through a queue transport: a redelivery can finish it
	// place is the task's place in its session's lock line, taken with the task row at
	// submission (thread and embedded flavors; the zero Place otherwise); the completion
	// gives it up. turn reports that the place holds the lock (or, without a place, that the
	// task row was inserted running).
	place store.Place
	turn  bool
	touch bool        // the execution reached its session's sandbox: its completion counts as use
	live  *liveOutput // followable output (thread and embedded flavors); nil for queued jobs

	// parent is the span of the call that submitted the execution (its trace goes on in the
	// job, which runs in the broker's context).
	parent trace.SpanContext

	result    *Result // set when the program ran (whatever its exit)
	err       error   // set on a machinery failure
	abandoned bool    // interrupted by shutdown and left for redelivery or adoption
	refused   bool    // err turned the execution away before it started (refusal)

	mu        sync.Mutex // promoted and withdrawn: the submitter's and the job's last word
	promoted  bool       // the caller stopped waiting: the task is the answer
	withdrawn bool       // refused while the caller waited: the refusal is the answer
}

// promote records that the caller stopped waiting, unless the job withdrew its task first
// (false: the caller gets j.err).
func (j *execJob) promote() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.promoted = !j.withdrawn
	return j.promoted
}

// withdraw removes the task of a refused execution whose caller still waits for the answer,
// and gives its place in the session's line up; it reports whether it did. A task the
// caller already holds (promoted) or that came through a queue stays, and fails with the
// refusal.
func (j *execJob) withdraw(ctx context.Context) bool {
	if j.queued {
		return false
	}
	j.mu.Lock()
	j.withdrawn = !j.promoted
	withdrawn := j.withdrawn
	j.mu.Unlock()
	if !withdrawn {
		return false
	}
	if ok, err := j.s.store.WithdrawTask(ctx, j.task.ID); err != nil || !ok {
		return false // recorded as failed instead: the caller gets the refusal either way
	}
	j.s.store.ReleaseTurn(j.place)
	return true
}

func (j *execJob) run(ctx context.Context) {
	s := j.s
	began := s.now()
	ctx, span := s.obs.Tracer().Start(trace.ContextWithSpanContext(ctx, j.parent), "sandbox.execution", trace.WithAttributes(
		attrProfile.String(j.prof.Name), attrProvider.String(j.prof.Provider.Type()), attrSession.String(j.sess.ID),
		attrTask.String(j.task.ID), attrOp.String(j.task.Operation)))
	bg := context.WithoutCancel(ctx) // persistence must happen even after cancellation
	completion := store.Completion{SessionID: j.sess.ID}
	defer func() {
		span.SetAttributes(attrStatus.String(completion.Status))
		endSpan(span, j.err)
		if j.abandoned {
			s.forgetCancelled(j.task.ID)
			return
		}
		if rec := recover(); rec != nil {
			s.log.Error("execution panicked", "task_id", j.task.ID, "panic", rec)
			j.err = fault.New(fault.Internal, "execution panicked: %v", rec)
			j.refused = false
			completion = store.Completion{Status: TaskFailed, Error: j.err.Error(), ErrorType: string(fault.Internal)}
		}
		if !j.refused || !j.withdraw(bg) {
			completion.SessionID, completion.Touch = j.sess.ID, j.touch && !j.ephemeral
			completion.Unlock = j.place // the next execution of the session starts once this one is recorded
			j.live.noteDropped(&completion, j.result)
			s.recordCompletion(bg, j.task.ID, completion)
		}
		if !j.refused {
			s.obs.ExecutionFinished(j.prof.Name, j.prof.Provider.Type(), completion.Status, s.since(began))
		}
		s.upkeep.KeepWithin(j.p.ID, s.quota.RetainedOutputBytes(j.p), completion.OutputBytes)
		s.forgetCancelled(j.task.ID)
		if j.live != nil {
			j.live.finish(j.result, j.err)
		}
	}()
	res, err := j.execute(ctx)
	switch {
	case err != nil:
		j.err = err
		completion.Status, completion.Error, completion.ErrorType = TaskFailed, err.Error(), string(fault.KindOf(err))
		j.refused = isRefusal(err) && !s.wasCancelled(j.task.ID)
		if s.wasCancelled(j.task.ID) {
			completion.Status, completion.ErrorType = TaskCancelled, "cancelled"
			completion.Error = s.cancelReason(j.task.ID)
		} else if ctx.Err() != nil && j.queued {
			j.abandoned = true // another worker will run it again
		} else if ctx.Err() != nil && errors.Is(err, fault.ErrLeftRunning) {
			// This gateway stops; the sandbox holds the execution. The task stays running
			// and the gateway that adopts it (adopt.go) follows it to its end.
			j.abandoned = true
			s.log.Info("left a running execution in its sandbox for another gateway to adopt", "task_id", j.task.ID, "session_id", j.sess.ID)
		} else if ctx.Err() != nil {
			completion.Status, completion.ErrorType = TaskLost, "lost"
			completion.Error = "the gateway shut down before the task finished"
		}
	default:
		if j.queued {
			trimToRecord(res, s.resultLimit())
		}
		j.result = res
		completeWith(&completion, res, fmt.Sprintf("sandbox operation '%s' exceeded timeout %gs", j.task.Operation, j.spec.Timeout.Seconds()), s.cancelReason(j.task.ID))
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
	if !j.ephemeral {
		if err := s.quota.HoldContext(ctx, j.p, j.sess.ID, sb.ID(), j.spec.Context); err != nil {
			if fault.KindOf(err) == fault.Quota {
				err = refused(err) // the contexts quota: nothing ran
			}
			return nil, err
		}
	}

	spec := j.spec
	spec.ID = j.task.ID // a sandbox that can hold executions keeps this one for another gateway
	out := s.newOutputs(j.live)
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
		runCtx, cancel = context.WithTimeout(ctx, spec.Timeout+s.backstop())
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
	err = s.callWithin(runCtx, limit, prof, "exec", exec)
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
		err = s.callWithin(runCtx, limit, prof, "exec", exec)
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
	return s.resultOf(ended{
		st: final, err: err, elapsed: s.since(start), out: out, base64: j.base64,
		cancelled:  ctx.Err() != nil && s.wasCancelled(j.task.ID),
		backstop:   runCtx.Err() != nil && ctx.Err() == nil,
		unanswered: unanswered, timeout: spec.Timeout,
		sessionID: j.sess.ID, taskID: j.task.ID, notice: notice, warnings: j.warnings, context: spec.Context,
	})
}

// withStdin is spec reading the job's stdin from its start.
func (j *execJob) withStdin(spec providers.ExecSpec) providers.ExecSpec {
	if j.stdin != nil {
		spec.Stdin = bytes.NewReader(j.stdin)
	}
	return spec
}

// lease takes the job's session's sandbox (Service.lease): in the job's turn (holdSession),
// the session as it now stands must take the execution — not closed, not paused (a session
// the profile resumes on use is woken: the notice says so) — or it is refused (refusal);
// an idle one is reset; the sandbox is attached or created and the binding recorded when it
// changed. A per_call sandbox is made for the job and destroyed at Release. Lease.Healed
// says a vanished sandbox was recreated.
func (j *execJob) lease(ctx context.Context) (*Lease, error) {
	opts := leaseOpts{order: orderNone, reach: reachCreate, ephemeral: true}
	if !j.ephemeral {
		opts = leaseOpts{order: orderTurn, turn: j.holdSession, reach: reachCreate, bind: bindChanged, refuse: true, resetIdle: true}
	}
	l, err := j.s.lease(ctx, j.p, j.prof, j.sess, opts)
	if err != nil {
		return nil, err
	}
	j.sess = l.Session
	j.touch = !j.ephemeral
	return l, nil
}

// renew reaches the job's sandbox again in its turn (its handle could not be reached).
func (j *execJob) renew(ctx context.Context, l *Lease) error {
	err := l.renew(ctx)
	j.sess = l.Session
	return err
}

// holdSession waits for the job's turn on its session's lock and re-reads the session under
// it (an earlier operation may have changed the sandbox), marking the task running. A job
// placed at submission waits for its place (no round trip when it was first already) and
// keeps the lock until its completion is recorded; any other (a queued delivery) takes the
// lock now and gives it back with the returned unlock.
func (j *execJob) holdSession(ctx context.Context) (_ store.Session, unlock func(), err error) {
	s := j.s
	gone := func() error {
		return fault.New(fault.NotFound, "sandbox session '%s' was destroyed while this operation waited", j.task.SessionID)
	}
	if j.place.Token != "" {
		if !j.turn {
			sess, err := s.store.AwaitTurn(ctx, j.place, j.task.ID, s.now)
			switch {
			case errors.Is(err, store.ErrNotFound):
				return store.Session{}, nil, gone()
			case err != nil && ctx.Err() == nil:
				return store.Session{}, nil, classifyAs(err, fault.Broker, "could not take the session lock")
			case err != nil:
				return store.Session{}, nil, err
			}
			j.sess, j.turn = sess, true
		}
		return j.sess, func() {}, nil
	}
	unlock, err = s.sessions.Lock(ctx, j.sess.ID)
	if err != nil {
		return store.Session{}, nil, err
	}
	sess, err := s.store.StartTaskInSession(ctx, j.task.ID, j.sess.ID, s.now())
	if err != nil {
		unlock()
		if errors.Is(err, store.ErrNotFound) {
			return store.Session{}, nil, gone()
		}
		return store.Session{}, nil, err
	}
	j.sess = sess
	return sess, unlock, nil
}

// outputs capture an execution's two streams (bounded, docs/semantics.md §9 step 7) and feed
// its live output, when it has one, with them and its rich results.
type outputs struct {
	stdout, stderr *capture
	liveOut        *liveWriter
	liveErr        *liveWriter
	liveResults    *liveResults
	limit          int64 // of each stream, and of the results together
}

func (s *Service) newOutputs(live *liveOutput) *outputs {
	o := &outputs{stdout: newCapture(s.maxOutput()), stderr: newCapture(s.maxOutput()), limit: s.maxOutput()}
	if live != nil {
		o.liveOut = &liveWriter{l: live, stream: StreamStdout}
		o.liveErr = &liveWriter{l: live, stream: StreamStderr}
		o.liveResults = &liveResults{l: live, budget: resultBudget{limit: o.limit}}
	}
	return o
}

// output is the providers.Output that writes to o.
func (o *outputs) output() providers.Output {
	if o.liveOut == nil {
		return providers.Output{Stdout: o.stdout, Stderr: o.stderr}
	}
	return providers.Output{Stdout: teeWriter{o.stdout, o.liveOut}, Stderr: teeWriter{o.stderr, o.liveErr}, ResultFunc: o.liveResults.add}
}

func (o *outputs) flush() {
	if o.liveOut != nil {
		o.liveOut.flush()
		o.liveErr.flush()
	}
}

// ended is how a provider's execution ended, with what the Result needs around it.
type ended struct {
	st        providers.ExitStatus
	err       error
	elapsed   time.Duration
	out       *outputs
	base64    bool
	cancelled bool // the caller cancelled the task
	backstop  bool // the provider's context ended at the timeout + the backstop (guard.go)
	// unanswered: the provider had not returned at the timeout + the grace.
	unanswered bool
	timeout    time.Duration
	sessionID  string
	taskID     string
	notice     string
	warnings   []string
	context    string
}

// resultOf turns how an execution ended into its Result; a machinery failure is an error.
func (s *Service) resultOf(e ended) (*Result, error) {
	res := &Result{Status: ResultCompleted, SessionID: e.sessionID, TaskID: e.taskID, Notice: e.notice, Warnings: e.warnings, DurationMS: e.elapsed.Milliseconds()}
	if res.Warnings == nil {
		res.Warnings = []string{}
	}
	st, err := e.st, e.err
	switch {
	case err == nil && st.TimedOut:
		res.Status = ResultTimedOut
	case err == nil:
		code := st.ExitCode
		res.ExitCode = &code
		res.Signal = st.Signal
		res.OOMKilled = st.OOMKilled
	case e.cancelled:
		res.Status = ResultCancelled
		if e.unanswered {
			res.Notice = joinNotice(res.Notice, unansweredNotice(e.timeout, s.cfg.ExecGrace))
		}
	case e.backstop, e.unanswered:
		// The provider did not report the end at the timeout: the gateway ended it.
		res.Status = ResultTimedOut
		res.Notice = joinNotice(res.Notice, unansweredNotice(e.timeout, s.cfg.ExecGrace))
	default:
		return nil, classify(err, fault.Provision)
	}
	if err == nil && st.ContextReset {
		res.Notice = joinNotice(res.Notice, fmt.Sprintf("the code context '%s' was lost when the sandbox restarted: this execution ran in a fresh interpreter, without the variables of earlier executions", e.context))
	}
	if err == nil {
		res.Error = st.Error
	}
	if err == nil && st.ContextLost {
		res.ContextLost = true
		// Also after a timeout the program would not yield to: the kill took the context along.
		res.Notice = joinNotice(res.Notice, fmt.Sprintf("the code context '%s' ended during this execution: its variables are gone and the next execution starts a fresh interpreter", e.context))
	}
	res.Results = boundResults(st.Results, e.out.limit)
	out, outTrunc, outN, outHead := e.out.stdout.bytes()
	errb, errTrunc, errN, errHead := e.out.stderr.bytes()
	res.Stdout, res.Stderr, res.Encoding = encodeStreams(out, errb, e.base64)
	res.StdoutBytes, res.StderrBytes, res.StdoutTruncated, res.StderrTruncated = outN, errN, outTrunc, errTrunc
	if outTrunc {
		res.StdoutHead = &outHead
	}
	if errTrunc {
		res.StderrHead = &errHead
	}
	return res, nil
}

// classifyAs is classify with a message for the unclassified case.
func classifyAs(err error, kind fault.Kind, msg string) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	return fault.Wrap(kind, err, "%s", msg)
}

// classify keeps a fault's kind, or files an unclassified error under kind.
func classify(err error, kind fault.Kind) error {
	return classifyAs(err, kind, "sandbox operation failed")
}
