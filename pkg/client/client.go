package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// Client calls one Sandgate gateway. Its methods send one request each and return the
// decoded answer, or an *Error for a refused one; the generated operations are there too, as
// API (typed answers) and Raw (*http.Response). A Client is safe for concurrent use.
type Client struct {
	// API is the generated client with typed answers, for operations Client has no method
	// for (GET /v1/audit, the agent tools, …). It shares Raw's transport and options.
	API *ClientWithResponses
	// Raw is the generated client answering *http.Response.
	Raw *RawClient
}

// New returns a client of the gateway at server (its base URL, e.g.
// "http://localhost:8080"). Options are the generated ones (WithHTTPClient,
// WithRequestEditorFn) and WithToken, WithTokenFunc, WithUserAgent.
func New(server string, opts ...ClientOption) (*Client, error) {
	raw, err := NewClient(server, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{API: &ClientWithResponses{ClientInterface: raw}, Raw: raw}, nil
}

// WithToken sends token as the bearer token of every request (RFC 6750): an OIDC ID or
// access token of an issuer the gateway trusts.
func WithToken(token string) ClientOption {
	return WithTokenFunc(func(context.Context) (string, error) { return token, nil })
}

// WithTokenFunc asks fn for the bearer token before every request, so a token that expires
// can be refreshed; an error from fn fails the request with it.
func WithTokenFunc(fn func(context.Context) (string, error)) ClientOption {
	return WithRequestEditorFn(func(ctx context.Context, req *http.Request) error {
		tok, err := fn(ctx)
		if err != nil {
			return fmt.Errorf("sandgate: bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return nil
	})
}

// WithUserAgent sets the User-Agent of every request.
func WithUserAgent(ua string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("User-Agent", ua)
		return nil
	})
}

// WithProfile adds ?profile=name to one request: with session id "default" it names the
// caller's default session of that profile; with a session id, the session's profile must
// be that one.
func WithProfile(name string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		q := req.URL.Query()
		q.Set("profile", name)
		req.URL.RawQuery = q.Encode()
		return nil
	}
}

// WithHeader sets a header field of one request (X-Request-Id, traceparent, …).
func WithHeader(key, value string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set(key, value)
		return nil
	}
}

// decode reads an answer: a status in ok decodes the JSON body into a T; any other status
// (or a transport error) is the error.
func decode[T any](resp *http.Response, err error, ok ...int) (*T, error) {
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ok, resp.StatusCode) {
		return nil, errorFrom(resp, body)
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("sandgate: decoding the %d answer of %s %s: %w", resp.StatusCode, resp.Request.Method, resp.Request.URL.Path, err)
	}
	return &v, nil
}

// want is decode for one call's results: want[T](http.StatusOK)(c.Raw.GetMe(ctx)).
func want[T any](ok ...int) func(*http.Response, error) (*T, error) {
	return func(resp *http.Response, err error) (*T, error) { return decode[T](resp, err, ok...) }
}

// Me is the caller's principal, as the gateway maps its token (GET /v1/me).
func (c *Client) Me(ctx context.Context, editors ...RequestEditorFn) (*Principal, error) {
	return want[Principal](http.StatusOK)(c.Raw.GetMe(ctx, editors...))
}

// Profiles lists the workload profiles the caller may use (GET /v1/profiles).
func (c *Client) Profiles(ctx context.Context, editors ...RequestEditorFn) ([]Profile, error) {
	l, err := want[ProfileList](http.StatusOK)(c.Raw.ListProfiles(ctx, editors...))
	if err != nil {
		return nil, err
	}
	return l.Profiles, nil
}

// Sessions lists one page of the caller's sessions, newest first (GET /v1/sessions); pass
// the page's NextCursor as params.Cursor for the next. params may be nil.
func (c *Client) Sessions(ctx context.Context, params *ListSessionsParams, editors ...RequestEditorFn) (*SessionList, error) {
	return want[SessionList](http.StatusOK)(c.Raw.ListSessions(ctx, params, editors...))
}

// CreateSession mints a session on a per_session profile (POST /v1/sessions); the sandbox
// is made on first use.
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest, editors ...RequestEditorFn) (*Session, error) {
	return want[Session](http.StatusCreated)(c.Raw.CreateSession(ctx, req, editors...))
}

// Session is one session (GET /v1/sessions/{id}); "default" with WithProfile names the
// caller's default session of that profile, created on first use.
func (c *Client) Session(ctx context.Context, sessionID string, editors ...RequestEditorFn) (*Session, error) {
	return want[Session](http.StatusOK)(c.Raw.GetSession(ctx, sessionID, nil, editors...))
}

// DeleteSession destroys a session and its sandbox (DELETE /v1/sessions/{id}); an unknown
// id succeeds too. When the provider failed to remove the sandbox (202) the answer has
// Destroyed false and a Notice: the session is kept, closed for new work (state
// destroy_failed), and the gateway retries the removal; calling DeleteSession again retries
// at once.
func (c *Client) DeleteSession(ctx context.Context, sessionID string, editors ...RequestEditorFn) (*SessionDestroyed, error) {
	return want[SessionDestroyed](http.StatusOK, http.StatusAccepted)(c.Raw.DeleteSession(ctx, sessionID, nil, editors...))
}

// Execution is the answer to an execution request: exactly one of its fields is set.
type Execution struct {
	// Result: the execution ended (200), whatever its exit code.
	Result *ExecutionResult
	// Task: still running after wait_s (202); follow it with WaitTask or FollowTask.
	Task *Task
	// Process: a background process started (201, commands with Background).
	Process *Process
}

// execution reads the answer to POST …/commands, …/code or /v1/runs.
func execution(resp *http.Response, err error) (*Execution, error) {
	if err != nil {
		return nil, err
	}
	var x Execution
	switch resp.StatusCode {
	case http.StatusOK:
		x.Result, err = decode[ExecutionResult](resp, nil, http.StatusOK)
	case http.StatusAccepted:
		x.Task, err = decode[Task](resp, nil, http.StatusAccepted)
	case http.StatusCreated:
		x.Process, err = decode[Process](resp, nil, http.StatusCreated)
	default:
		_, err = decode[struct{}](resp, nil)
	}
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// RunCommand runs a shell command in a session (POST /v1/sessions/{id}/commands) and
// answers when it ended, became a task (after req.WaitS) or, with req.Background, started.
// A non-zero exit is a Result, not an error.
func (c *Client) RunCommand(ctx context.Context, sessionID string, req CommandRequest, editors ...RequestEditorFn) (*Execution, error) {
	return execution(c.Raw.RunCommand(ctx, sessionID, nil, req, editors...))
}

// RunCode runs code in a session (POST /v1/sessions/{id}/code); on a stateful profile
// Python code keeps its variables between calls.
func (c *Client) RunCode(ctx context.Context, sessionID string, req CodeRequest, editors ...RequestEditorFn) (*Execution, error) {
	return execution(c.Raw.RunCode(ctx, sessionID, nil, req, editors...))
}

// Run is a one-off run in a fresh sandbox of a per_call profile (POST /v1/runs); set
// exactly one of req.Command and req.Code.
func (c *Client) Run(ctx context.Context, req RunRequest, editors ...RequestEditorFn) (*Execution, error) {
	return execution(c.Raw.CreateRun(ctx, req, editors...))
}

// Task is one task with its result once it has finished (GET /v1/tasks/{id}).
func (c *Client) Task(ctx context.Context, taskID string, editors ...RequestEditorFn) (*Task, error) {
	return want[Task](http.StatusOK)(c.Raw.GetTask(ctx, taskID, editors...))
}

// Tasks lists one page of the caller's tasks, newest first, without results
// (GET /v1/tasks). params may be nil.
func (c *Client) Tasks(ctx context.Context, params *ListTasksParams, editors ...RequestEditorFn) (*TaskList, error) {
	return want[TaskList](http.StatusOK)(c.Raw.ListTasks(ctx, params, editors...))
}

// CancelTask stops a task's execution and its process tree (POST /v1/tasks/{id}/cancel);
// a finished task is answered unchanged.
func (c *Client) CancelTask(ctx context.Context, taskID string, editors ...RequestEditorFn) (*Task, error) {
	return want[Task](http.StatusOK)(c.Raw.CancelTask(ctx, taskID, editors...))
}

// WaitTask polls a task until it has finished (FinishedAt set) and returns it: every 200 ms
// at first, then at most every 2 s, until ctx ends.
func (c *Client) WaitTask(ctx context.Context, taskID string, editors ...RequestEditorFn) (*Task, error) {
	wait := 200 * time.Millisecond
	for {
		t, err := c.Task(ctx, taskID, editors...)
		if err != nil {
			return nil, err
		}
		if t.FinishedAt != nil {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*3/2, 2*time.Second)
	}
}

// Processes lists a session's background processes, running and recently ended
// (GET /v1/sessions/{id}/processes).
func (c *Client) Processes(ctx context.Context, sessionID string, editors ...RequestEditorFn) ([]Process, error) {
	l, err := want[ProcessList](http.StatusOK)(c.Raw.ListProcesses(ctx, sessionID, nil, editors...))
	if err != nil {
		return nil, err
	}
	return l.Processes, nil
}

// StopProcess stops a background process and its process tree and answers once it ended
// (DELETE /v1/sessions/{id}/processes/{process_id}).
func (c *Client) StopProcess(ctx context.Context, sessionID, processID string, editors ...RequestEditorFn) (*Process, error) {
	return want[Process](http.StatusOK)(c.Raw.StopProcess(ctx, sessionID, processID, nil, editors...))
}

// Contexts lists a session's stateful code contexts (GET /v1/sessions/{id}/contexts).
func (c *Client) Contexts(ctx context.Context, sessionID string, editors ...RequestEditorFn) ([]Context, error) {
	l, err := want[ContextList](http.StatusOK)(c.Raw.ListContexts(ctx, sessionID, nil, editors...))
	if err != nil {
		return nil, err
	}
	return l.Contexts, nil
}

// CreateContext starts a named context (POST /v1/sessions/{id}/contexts).
func (c *Client) CreateContext(ctx context.Context, sessionID string, req ContextCreate, editors ...RequestEditorFn) (*Context, error) {
	return want[Context](http.StatusCreated)(c.Raw.CreateContext(ctx, sessionID, nil, req, editors...))
}

// RestartContext gives a context a fresh interpreter
// (POST /v1/sessions/{id}/contexts/{name}/restart).
func (c *Client) RestartContext(ctx context.Context, sessionID, name string, editors ...RequestEditorFn) (*Context, error) {
	return want[Context](http.StatusOK)(c.Raw.RestartContext(ctx, sessionID, name, nil, editors...))
}

// DeleteContext stops a context and forgets its state
// (DELETE /v1/sessions/{id}/contexts/{name}); it answers the remaining contexts.
func (c *Client) DeleteContext(ctx context.Context, sessionID, name string, editors ...RequestEditorFn) ([]Context, error) {
	l, err := want[ContextList](http.StatusOK)(c.Raw.DeleteContext(ctx, sessionID, name, nil, editors...))
	if err != nil {
		return nil, err
	}
	return l.Contexts, nil
}

// ResizeTerminal sets the terminal size of an execution started with Pty
// (POST /v1/tasks/{id}/resize).
func (c *Client) ResizeTerminal(ctx context.Context, taskID string, size TerminalSize, editors ...RequestEditorFn) error {
	resp, err := c.Raw.ResizeTaskTerminal(ctx, taskID, size, editors...)
	return noContent(resp, err)
}

// noContent reads an answer that succeeds with 204 and no body.
func noContent(resp *http.Response, err error) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return errorFrom(resp, body)
	}
	return nil
}

// errUnexpected is the error of an answer that is neither success nor a problem the gateway
// could send (a wrong media type on a success status).
var errUnexpected = errors.New("sandgate: unexpected answer")
