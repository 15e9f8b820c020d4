package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/execute"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
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

// Result statuses (execute.Result).
const (
	ResultCompleted = execute.ResultCompleted
	ResultTimedOut  = execute.ResultTimedOut
	ResultCancelled = execute.ResultCancelled
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

// Result is a finished execution (execute.Result). A non-zero exit is a Result, never an
// error.
type Result = execute.Result

// CodeError is an exception raised by code in a context (see providers.CodeError).
type CodeError = execute.CodeError

// RichResult is one rich result of code, as a notebook shows it: the value of its last
// expression (Main) or a display, as a MIME bundle (see providers.RichResult).
type RichResult = execute.RichResult

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
		out, err := s.runs.submit(ctx, p, sess, prof, ephemeral, in)
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

// submit makes the execution's request and job and hands them to the route New chose.
func (xs *executions) submit(ctx context.Context, p principal.Principal, sess store.Session, prof *Profile, ephemeral bool, in ExecInput) (Outcome, error) {
	s := xs.s
	req, err := xs.request(p, sess, prof, ephemeral, in)
	if err != nil {
		return Outcome{}, err
	}
	trace.SpanFromContext(ctx).SetAttributes(attrTask.String(req.TaskID), attrOp.String(req.Operation))
	broker.InjectTrace(ctx, &req)
	j := xs.newJob(req, prof, sess)
	j.viaDefault, j.started = isDefault(in.SessionID), in.Started
	wait := s.cfg.WaitTimeout
	if in.Wait != nil {
		wait = *in.Wait
	}
	return xs.route.dispatch(ctx, j, wait)
}

// request is the execution in asks for, as every route carries it (broker.Request, with its
// task row): its program, input mode and bounds, checked against prof's capabilities and
// p's policy before anything is recorded.
func (xs *executions) request(p principal.Principal, sess store.Session, prof *Profile, ephemeral bool, in ExecInput) (broker.Request, error) {
	s := xs.s
	if in.Code != "" && in.Command != "" {
		return broker.Request{}, fault.New(fault.Validation, "give exactly one of command or code")
	}
	if in.Background && ephemeral {
		return broker.Request{}, fault.New(fault.Conflict, "profile '%s' has scope %s: its sandbox is destroyed after the call, so nothing can run in its background", prof.Name, prof.Scope).
			WithHint("start background processes in a session (POST /v1/sessions/{id}/commands)", "start background processes in a session")
	}
	req := broker.Request{
		TaskID: xs.newID(), SessionID: sess.ID, Ephemeral: ephemeral, Profile: prof.Name, Operation: OpExecuteCommand, Principal: p,
		Command: in.Command, Env: sessionEnv(sess, in.Env), Dir: in.Cwd, Stdin: in.Stdin, Base64: in.Base64,
		StdinOpen: in.StdinOpen, Background: in.Background,
	}
	if in.Code != "" || in.Command == "" {
		req.Operation, req.Code, req.Language = OpExecuteCode, in.Code, in.Language
	}
	if in.PTY != nil {
		req.PTYRows, req.PTYCols = in.PTY.Rows, in.PTY.Cols
	}
	if err := xs.checkProgram(prof, &req, in); err != nil {
		return broker.Request{}, err
	}
	warnings, err := s.profiles.Checks(prof, p)
	if err != nil {
		return broker.Request{}, err
	}
	req.Warnings = warnings
	req.TimeoutMS = execTimeout(prof, in).Milliseconds()
	req.Task = store.Task{
		ID: req.TaskID, SessionID: sess.ID, OwnerID: p.ID, Profile: prof.Name, Operation: req.Operation,
		Status: TaskPending, RunnerID: xs.runnerID, SubmittedAt: s.now(), Program: req.Command + req.Code,
		Background: in.Background, Interactive: in.StdinOpen || in.PTY != nil, APIKeyID: p.APIKeyID,
	}
	return req, nil
}

// checkProgram picks the code context of req (in.Context: the caller's, "" the profile's
// default) and checks its program against prof's capabilities, defaulting the language of
// code run outside a context to python.
func (xs *executions) checkProgram(prof *Profile, req *broker.Request, in ExecInput) error {
	spec := xs.specOf(*req)
	if in.PTY != nil {
		spec.PTY = &providers.TermSize{Rows: in.PTY.Rows, Cols: in.PTY.Cols} // checked as given
	}
	if err := pickContext(prof, &spec, in.Context); err != nil {
		return err
	}
	if req.Operation == OpExecuteCode && spec.Language == "" && spec.Context == "" {
		// Without a context the default is python; in one, the context's own language.
		spec.Language = "python"
	}
	req.Context, req.Language = spec.Context, spec.Language
	if err := providers.CheckExecSpec(prof.Provider.Type(), prof.Caps, spec); err != nil {
		return err
	}
	if spec.Dir != "" {
		if _, err := providers.CleanPath(spec.Dir); err != nil {
			return err
		}
	}
	return nil
}

// execTimeout is the timeout of execution in on prof: the policy's, lowered (never raised)
// by the caller's; a background process's is the caller's alone (0: none), which may exceed
// the policy's: it is a lifetime, bounded by its session otherwise.
func execTimeout(prof *Profile, in ExecInput) time.Duration {
	if in.Background {
		return max(in.Timeout, 0)
	}
	timeout := prof.Policy.Timeout
	if in.Timeout > 0 && in.Timeout < timeout {
		timeout = in.Timeout
	}
	return timeout
}

// sessionEnv is the environment of an execution with its own env in session sess: the
// session's env and the execution's, the execution's winning, and the variables of the
// session's secrets holding their placeholders (secret.Env), which nothing overrides.
func sessionEnv(sess store.Session, own map[string]string) map[string]string {
	if len(sess.Env) == 0 && len(sess.Secrets) == 0 {
		return own
	}
	env := maps.Clone(sess.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, own)
	maps.Copy(env, secret.Env(sess.Secrets))
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

// OutputLimit is how many bytes of each output stream an execution keeps (head and tail
// halves; sandbox.max_output_bytes). A transport with a hard message limit may keep less, and
// says so in the result's notice.
func (s *Service) OutputLimit() int64 { return s.cfg.MaxOutputBytes }

// WaitTimeout is how long a call waits for its execution, by default, before promoting it to
// a task (sandbox.broker.wait_timeout; 0 always promotes).
func (s *Service) WaitTimeout() time.Duration { return s.cfg.WaitTimeout }

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
