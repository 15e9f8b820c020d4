package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// toolSpec is one agent tool: its guidance line, its short description, its input and
// output schemas (JSON, property order kept), its annotations and its implementation.
type toolSpec struct {
	name      string
	title     string
	signature string // guidance: "- <signature>: <purpose>"
	purpose   string
	short     string // the description of every tool but run_code; "{max}" = tool_output_max_chars
	args      []string
	schema    json.RawMessage
	output    json.RawMessage // outputs.go
	hints     *sdk.ToolAnnotations
	run       func(h *Handler, ctx context.Context, p principal.Principal, raw json.RawMessage) result
}

// describe returns the tool's description for p, at most MaxDescriptionChars characters:
// run_code's names the profiles p may use and points to the server's instructions, which
// hold the whole guidance (docs/semantics.md §7).
func (t toolSpec) describe(h *Handler, p principal.Principal) string {
	if t.name == "run_code" {
		return h.runCodeDescription(p)
	}
	return capDescription(strings.ReplaceAll(t.short, "{max}", fmt.Sprint(h.maxChars)))
}

// annotations are the tool's MCP annotations, titled.
func (t toolSpec) annotations() *sdk.ToolAnnotations {
	a := *t.hints
	a.Title = t.title
	return &a
}

const (
	sessionArg = `"sandbox_session_id": {"type": "string", "description": "Session to use: an id from an earlier result, new_sandbox_session or list_sandbox_sessions. Omit it for your default session."}`
	profileArg = `"profile": {"type": "string", "description": "Workload profile (see the profile list); omit for the default profile, or to keep the profile of the session given."}`
	waitArg    = `"wait_s": {"type": "number", "minimum": 0, "maximum": 3600, "description": "Seconds to wait for the result before answering with a task_id to poll (default 45, under the common 60 s client timeout). Wait longer only if your client resets its timeout on progress notifications (sent every 5 s)."}`
)

func schema(s string) json.RawMessage {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		panic("mcp: bad tool schema: " + err.Error())
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// Argument names, in the seed's order.
var (
	runCodeArgs        = []string{"code", "language", "sandbox_session_id", "profile", "wait_s"}
	runCommandArgs     = []string{"command", "sandbox_session_id", "profile", "wait_s"}
	writeFileArgs      = []string{"path", "content", "sandbox_session_id", "profile"}
	readFileArgs       = []string{"path", "sandbox_session_id", "profile"}
	checkTaskArgs      = []string{"task_id"}
	newSessionArgs     = []string{"name", "profile", "env", "timeout_s", "secrets"}
	destroySessionArgs = []string{"sandbox_session_id"}
	listFilesArgs      = []string{"path", "sandbox_session_id", "profile"}
)

// toolTable is the seed's registration order (docs/semantics.md §7 "Tool registration").
var toolTable = []toolSpec{
	{
		name:      "run_code",
		title:     "Run code",
		output:    runOutput,
		hints:     runHints,
		signature: `run_code(code, language="python", sandbox_session_id=None, profile=None)`,
		purpose:   "run source code in a sandbox and get its stdout, stderr and exit_code",
		args:      runCodeArgs,
		schema: schema(`{"type": "object", "properties": {
			"code": {"type": "string", "description": "Source code to run."},
			"language": {"type": "string", "default": "python", "description": "Language of the code; default python (see the profile list for what each profile runs)."},
			` + sessionArg + `, ` + profileArg + `, ` + waitArg + `},
			"required": ["code"], "additionalProperties": false}`),
		run: (*Handler).runCode,
	},
	{
		name:      "run_command",
		title:     "Run a shell command",
		output:    runOutput,
		hints:     runHints,
		signature: `run_command(command, sandbox_session_id=None, profile=None)`,
		purpose:   "run a shell command in a sandbox and get its stdout, stderr and exit_code",
		short:     "Run a shell command in a sandbox session and return its stdout, stderr and exit_code (each cut to {max} characters). Omit sandbox_session_id for your default session.",
		args:      runCommandArgs,
		schema: schema(`{"type": "object", "properties": {
			"command": {"type": "string", "description": "Shell command line to run in the session's workspace."},
			` + sessionArg + `, ` + profileArg + `, ` + waitArg + `},
			"required": ["command"], "additionalProperties": false}`),
		run: (*Handler).runCommand,
	},
	{
		name:      "write_sandbox_file",
		title:     "Write a file",
		output:    writeOutput,
		hints:     writeHints,
		signature: `write_sandbox_file(path, content, sandbox_session_id=None, profile=None)`,
		purpose:   "write text to a file in the session's workspace",
		short:     "Write UTF-8 text to a file in a sandbox session's workspace (path relative to the workspace), creating or replacing it.",
		args:      writeFileArgs,
		schema: schema(`{"type": "object", "properties": {
			"path": {"type": "string", "description": "File path relative to the workspace, e.g. src/main.py."},
			"content": {"type": "string", "description": "The file's full text."},
			` + sessionArg + `, ` + profileArg + `},
			"required": ["path", "content"], "additionalProperties": false}`),
		run: (*Handler).writeFile,
	},
	{
		name:      "read_sandbox_file",
		title:     "Read a file",
		output:    readOutput,
		hints:     readHints,
		signature: `read_sandbox_file(path, sandbox_session_id=None, profile=None)`,
		purpose:   "read a text file from the session's workspace",
		short:     "Read a text file from a sandbox session's workspace; the content is cut to {max} characters.",
		args:      readFileArgs,
		schema: schema(`{"type": "object", "properties": {
			"path": {"type": "string", "description": "File path relative to the workspace."},
			` + sessionArg + `, ` + profileArg + `},
			"required": ["path"], "additionalProperties": false}`),
		run: (*Handler).readFile,
	},
	{
		name:      "check_sandbox_task",
		title:     "Check a background run",
		output:    checkOutput,
		hints:     readHints,
		signature: `check_sandbox_task(task_id)`,
		purpose:   "check a run that continued in the background and collect its result once finished",
		short:     "Check a run that continued in the background (a result with task_id and status pending); once finished, \"result\" holds its stdout, stderr, exit_code, error and notice.",
		args:      checkTaskArgs,
		schema: schema(`{"type": "object", "properties": {
			"task_id": {"type": "string", "description": "The task_id of a pending result."}},
			"required": ["task_id"], "additionalProperties": false}`),
		run: (*Handler).checkTask,
	},
	{
		name:      "list_sandbox_sessions",
		title:     "List sandbox sessions",
		output:    listSessionsOutput,
		hints:     readHints,
		signature: `list_sandbox_sessions()`,
		purpose:   "list your sandbox sessions with their ids, names, profiles, status and last use",
		short:     "List your sandbox sessions: sandbox_session_id, name, profile, status and last_used_at.",
		args:      []string{},
		schema:    schema(`{"type": "object", "properties": {}, "additionalProperties": false}`),
		run:       (*Handler).listSessions,
	},
	{
		name:      "new_sandbox_session",
		title:     "New sandbox session",
		output:    newSessionOutput,
		hints:     createHints,
		signature: `new_sandbox_session(name=None, profile=None, env=None, timeout_s=None, secrets=None)`,
		purpose:   "create a new, empty sandbox session and get its id",
		short:     "Create a new, empty sandbox session (per_session profiles only) and return its sandbox_session_id. Give it a name you will recognise in list_sandbox_sessions.",
		args:      newSessionArgs,
		schema: schema(`{"type": "object", "properties": {
			"name": {"type": "string", "description": "A short name for the session."},
			"profile": {"type": "string", "description": "Workload profile (see the profile list); omit for the default profile."},
			"env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Environment variables every command and code run of the session gets (a run's own win)."},
			"timeout_s": {"type": "integer", "minimum": 1, "maximum": 2592000, "description": "The session's lifetime in seconds: it is destroyed this long after it was made. Omit to keep it until destroyed."},
			"secrets": {"type": "array", "items": {"type": "string"}, "maxItems": 32, "description": "Names of the user's stored secrets to bind: programs see SANDGATE_SECRET_<NAME> holding a placeholder, which the network proxy replaces with the real value only in requests to the secret's hosts. Use the variable in API calls; never print it."}},
			"additionalProperties": false}`),
		run: (*Handler).newSession,
	},
	{
		name:      "destroy_sandbox_session",
		title:     "Destroy a sandbox session",
		output:    destroyOutput,
		hints:     destroyHints,
		signature: `destroy_sandbox_session(sandbox_session_id)`,
		purpose:   "destroy a session and discard its workspace",
		short:     "Destroy a sandbox session and discard its workspace. Destroying an unknown or already destroyed id succeeds. When the sandbox cannot be removed yet, destroyed is false and notice says so: the session takes no new work and the gateway keeps retrying.",
		args:      destroySessionArgs,
		schema: schema(`{"type": "object", "properties": {
			"sandbox_session_id": {"type": "string", "description": "The session to destroy."}},
			"required": ["sandbox_session_id"], "additionalProperties": false}`),
		run: (*Handler).destroySession,
	},
	// Beyond the seed's eight (issue 17): stopping a run, and seeing what a session holds.
	{
		name:      "cancel_sandbox_task",
		title:     "Cancel a background run",
		output:    cancelOutput,
		hints:     destroyHints,
		signature: `cancel_sandbox_task(task_id)`,
		purpose:   "stop a run that continued in the background, with every process it started",
		short:     "Cancel a run that continued in the background (a pending task_id): the run and every process it started are stopped. Returns the task's status; a finished task stays as it was.",
		args:      checkTaskArgs,
		schema: schema(`{"type": "object", "properties": {
			"task_id": {"type": "string", "description": "The task_id of a pending result."}},
			"required": ["task_id"], "additionalProperties": false}`),
		run: (*Handler).cancelTask,
	},
	{
		name:      "list_sandbox_files",
		title:     "List workspace files",
		output:    listFilesOutput,
		hints:     readHints,
		signature: `list_sandbox_files(path=".", sandbox_session_id=None, profile=None)`,
		purpose:   "list a folder of the session's workspace",
		short:     "List a folder of a sandbox session's workspace (path relative to the workspace; default the workspace itself): each entry's name, type (file, dir, symlink, other) and size in bytes.",
		args:      listFilesArgs,
		schema: schema(`{"type": "object", "properties": {
			"path": {"type": "string", "default": ".", "description": "Folder relative to the workspace."},
			` + sessionArg + `, ` + profileArg + `},
			"additionalProperties": false}`),
		run: (*Handler).listFiles,
	},
}

func (h *Handler) tools() []toolSpec { return toolTable }

// disabledMessage is the seed's exact result while the capability is disabled.
const disabledMessage = "sandbox capability is disabled"

func (h *Handler) toolHandler(t toolSpec) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var res result
		switch p, ok := callerOf(req); {
		case !h.enabled:
			res = result{body: map[string]string{"error": disabledMessage}, isError: true}
		case !ok:
			res = failed("this tool call carries no authenticated principal", "")
		default:
			var raw json.RawMessage
			if req.Params != nil {
				raw = req.Params.Arguments
				if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
					ctx = withProgress(ctx, req.Session, token)
				}
			}
			res = t.run(h, ctx, p, raw)
		}
		return res.toMCP()
	}
}

// result is a tool's JSON result; isError marks the seed's {"error": …} results.
type result struct {
	body    any
	isError bool
	images  []sdk.Content // image content items after the JSON text (rich results)
}

func ok(body any) result { return result{body: body} }

// errorBody is the seed's _error_json shape, plus partial output for a run that timed out.
type errorBody struct {
	Error            string  `json:"error"`
	SandboxSessionID string  `json:"sandbox_session_id"`
	TaskID           string  `json:"task_id,omitempty"`
	Stdout           *string `json:"stdout,omitempty"`
	Stderr           *string `json:"stderr,omitempty"`
	Notice           string  `json:"notice,omitempty"`
	Truncated        bool    `json:"truncated,omitempty"`
}

func failed(msg, sessionID string) result {
	return result{body: errorBody{Error: msg, SandboxSessionID: sessionID}, isError: true}
}

// fail turns a domain error into the seed's error result. Unclassified errors are bugs: their
// text goes to the log, not to the agent (as REST does).
func (h *Handler) fail(err error, sessionID string) result {
	msg := fault.ForTool(err)
	switch fault.KindOf(err) {
	case fault.Internal:
		h.log.Error("mcp tool failed", "err", err)
		msg = "an internal error occurred in the gateway; the operator can find the cause in its log"
	case fault.Unavailable:
		h.log.Warn("mcp tool failed: the response store does not answer", "err", err)
		msg = "the gateway's response store (Postgres) does not answer; nothing was done — call the tool again in a few seconds"
	}
	return failed(msg, sessionID)
}

func (r result) toMCP() (*sdk.CallToolResult, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep `&&`, `<` and `>` in program output readable
	if err := enc.Encode(r.body); err != nil {
		return nil, err
	}
	text := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return &sdk.CallToolResult{
		Content:           append([]sdk.Content{&sdk.TextContent{Text: string(text)}}, r.images...),
		StructuredContent: json.RawMessage(text),
		IsError:           r.isError,
	}, nil
}

// decodeArgs reads a tool's arguments strictly: unknown names are refused, so a misspelt
// sandbox_session_id never silently falls back to the default session.
func decodeArgs(t string, names []string, raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	takes := "no arguments"
	if len(names) > 0 {
		takes = "arguments " + strings.Join(names, ", ")
	}
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		return fmt.Errorf("invalid arguments for %s: %s must be a %s, not a JSON %s", t, te.Field, te.Type.Kind(), te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("invalid arguments for %s: unknown argument %s; %s takes %s", t, strings.TrimPrefix(err.Error(), "json: unknown field "), t, takes)
	default:
		return fmt.Errorf("invalid arguments for %s: %v; %s takes %s as a JSON object", t, err, t, takes)
	}
}

func missing(t, arg string) string {
	return fmt.Sprintf("%s needs the argument %s", t, arg)
}

// sessionRef maps an agent's session id to the service's: omitted → the default session;
// the seed's "default:<profile>" form is accepted as the default session of that profile.
func sessionRef(id, profile string) (string, string, error) {
	id = strings.TrimSpace(id)
	if rest, ok := strings.CutPrefix(id, sandbox.DefaultSessionID+":"); ok {
		if rest != "" && profile != "" && profile != rest {
			return "", "", fault.New(fault.Config, "sandbox session '%s' belongs to profile '%s', but profile '%s' was requested; omit profile to reuse a session", id, rest, profile)
		}
		if rest != "" {
			profile = rest
		}
		return sandbox.DefaultSessionID, profile, nil
	}
	if id == "" {
		return sandbox.DefaultSessionID, profile, nil
	}
	return id, profile, nil
}

// ---- run_code / run_command ----

type execBody struct {
	Stdout           string `json:"stdout"`
	Stderr           string `json:"stderr"`
	ExitCode         *int   `json:"exit_code"`
	SandboxSessionID string `json:"sandbox_session_id"`
	Notice           string `json:"notice,omitempty"`
	// Truncated: stdout or stderr lost its middle, here (tool_output_max_chars) or in the
	// sandbox (sandbox.max_output_bytes); head and tail are kept. Also set when the text of a
	// rich result was cut.
	Truncated bool `json:"truncated,omitempty"`
	// Results are the rich results of code (results.go).
	Results []resultItem `json:"results,omitempty"`
}

type promotedBody struct {
	TaskID           string `json:"task_id"`
	Status           string `json:"status"`
	SandboxSessionID string `json:"sandbox_session_id"`
	Notice           string `json:"notice,omitempty"`
}

func (h *Handler) runCode(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		Code             *string  `json:"code"`
		Language         *string  `json:"language"`
		SandboxSessionID *string  `json:"sandbox_session_id"`
		Profile          *string  `json:"profile"`
		WaitS            *float64 `json:"wait_s"`
	}
	if err := decodeArgs("run_code", runCodeArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	given := deref(a.SandboxSessionID)
	if a.Code == nil {
		return failed(missing("run_code", "code"), given)
	}
	lang := strings.TrimSpace(deref(a.Language))
	if lang == "" {
		lang = "python"
	}
	wait, err := waitArgOf("run_code", a.WaitS)
	if err != nil {
		return failed(err.Error(), given)
	}
	return h.execute(ctx, p, sandbox.ExecInput{Code: *a.Code, Language: lang, Wait: wait}, given, deref(a.Profile))
}

func (h *Handler) runCommand(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		Command          *string  `json:"command"`
		SandboxSessionID *string  `json:"sandbox_session_id"`
		Profile          *string  `json:"profile"`
		WaitS            *float64 `json:"wait_s"`
	}
	if err := decodeArgs("run_command", runCommandArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	given := deref(a.SandboxSessionID)
	if a.Command == nil || strings.TrimSpace(*a.Command) == "" {
		return failed(missing("run_command", "command"), given)
	}
	wait, err := waitArgOf("run_command", a.WaitS)
	if err != nil {
		return failed(err.Error(), given)
	}
	return h.execute(ctx, p, sandbox.ExecInput{Command: *a.Command, Wait: wait}, given, deref(a.Profile))
}

// waitArgOf is a tool's wait_s argument: nil when absent; 0 to 3600 seconds, else an error.
func waitArgOf(tool string, s *float64) (*time.Duration, error) {
	if s == nil {
		return nil, nil
	}
	if !(*s >= 0 && *s <= 3600) {
		return nil, fmt.Errorf("%s: wait_s must be between 0 and 3600 seconds", tool)
	}
	d := time.Duration(*s * float64(time.Second))
	return &d, nil
}

// execute runs through the same service call as REST, waiting the call's wait_s, or else
// sandbox.broker.wait_timeout — at most MaxToolWait — before promoting the run to a task, and sending progress
// notifications meanwhile when the call asked for them. A call the client cancels
// (notifications/cancelled, or a client that went away) cancels its execution: nobody would
// collect the task it would otherwise become.
func (h *Handler) execute(ctx context.Context, p principal.Principal, in sandbox.ExecInput, given, profile string) result {
	id, profile, err := sessionRef(given, profile)
	if err != nil {
		return h.fail(err, given)
	}
	in.SessionID, in.Profile = id, profile
	wait := min(h.svc.WaitTimeout(), h.maxWait)
	if in.Wait != nil {
		wait = *in.Wait // the caller's wait_s: a client that resets its timeout on progress
	}
	in.Wait = &wait
	started := make(chan string, 1)
	in.Started = func(taskID string) { started <- taskID }
	stop := h.reportProgress(ctx, p, wait, started)
	out, err := h.svc.Execute(ctx, p, in)
	taskID := stop()
	if ctx.Err() != nil && taskID != "" && (out.Task != nil || err != nil) {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if _, cerr := h.svc.CancelTask(bg, p, taskID); cerr != nil {
			h.log.Warn("cancelling the execution of a cancelled tool call failed", "task_id", taskID, "err", cerr)
		}
		cancel()
		return failed("the call was cancelled; its execution was cancelled too", given)
	}
	if err != nil {
		return h.fail(err, given)
	}
	if t := out.Task; t != nil {
		return ok(promotedBody{TaskID: t.ID, Status: sandbox.TaskPending, SandboxSessionID: t.SessionID, Notice: t.Notice})
	}
	r := out.Result
	stdout, stderr, truncated := h.outputs(r)
	switch r.Status {
	case sandbox.ResultTimedOut:
		return result{isError: true, body: errorBody{
			Error:            "the program exceeded the profile's execution timeout and was stopped; stdout and stderr hold its output up to then",
			SandboxSessionID: r.SessionID, TaskID: r.TaskID, Stdout: &stdout, Stderr: &stderr, Notice: r.Notice, Truncated: truncated,
		}}
	case sandbox.ResultCancelled:
		return result{isError: true, body: errorBody{
			Error:            "the run was cancelled before it finished",
			SandboxSessionID: r.SessionID, TaskID: r.TaskID, Stdout: &stdout, Stderr: &stderr, Notice: r.Notice, Truncated: truncated,
		}}
	}
	items, images, cut := h.results(r.Results, h.maxChars)
	res := ok(execBody{Stdout: stdout, Stderr: stderr, ExitCode: r.ExitCode, SandboxSessionID: r.SessionID, Notice: r.Notice, Truncated: truncated || cut, Results: items})
	res.images = images
	return res
}

// outputs are r's streams as tool text, each bounded by cut; truncated says whether either
// lost its middle, here or already in the sandbox.
func (h *Handler) outputs(r *sandbox.Result) (stdout, stderr string, truncated bool) {
	stdout, cutOut := h.cut(decodeText(r.Stdout, r.Encoding))
	stderr, cutErr := h.cut(decodeText(r.Stderr, r.Encoding))
	return stdout, stderr, cutOut || cutErr || r.StdoutTruncated || r.StderrTruncated
}

// ---- files ----

type writtenBody struct {
	Path             string `json:"path"`
	Written          bool   `json:"written"`
	SandboxSessionID string `json:"sandbox_session_id"`
}

type readBody struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	// Encoding is "base64" for a file that is no UTF-8 text (its first bytes, base64); absent
	// for text.
	Encoding string `json:"encoding,omitempty"`
	// Size is the file's size in bytes.
	Size             int64  `json:"size"`
	Truncated        bool   `json:"truncated,omitempty"`
	SandboxSessionID string `json:"sandbox_session_id"`
}

func (h *Handler) writeFile(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		Path             *string `json:"path"`
		Content          *string `json:"content"`
		SandboxSessionID *string `json:"sandbox_session_id"`
		Profile          *string `json:"profile"`
	}
	if err := decodeArgs("write_sandbox_file", writeFileArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	given := deref(a.SandboxSessionID)
	switch {
	case a.Path == nil:
		return failed(missing("write_sandbox_file", "path"), given)
	case a.Content == nil:
		return failed(missing("write_sandbox_file", "content"), given)
	}
	id, profile, err := sessionRef(given, deref(a.Profile))
	if err != nil {
		return h.fail(err, given)
	}
	w, err := h.svc.WriteFile(ctx, p, id, profile, *a.Path, strings.NewReader(*a.Content), int64(len(*a.Content)))
	if err != nil {
		return h.fail(err, given)
	}
	return ok(writtenBody{Path: *a.Path, Written: true, SandboxSessionID: w.SessionID})
}

func (h *Handler) readFile(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		Path             *string `json:"path"`
		SandboxSessionID *string `json:"sandbox_session_id"`
		Profile          *string `json:"profile"`
	}
	if err := decodeArgs("read_sandbox_file", readFileArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	given := deref(a.SandboxSessionID)
	if a.Path == nil {
		return failed(missing("read_sandbox_file", "path"), given)
	}
	id, profile, err := sessionRef(given, deref(a.Profile))
	if err != nil {
		return h.fail(err, given)
	}
	rc, _, err := h.svc.ReadFile(ctx, p, id, profile, *a.Path)
	if err != nil {
		return h.fail(err, given)
	}
	defer func() { _ = rc.Close() }()
	body, err := h.readContent(rc)
	if err != nil {
		return h.fail(err, given)
	}
	body.Path, body.SandboxSessionID = *a.Path, h.realSessionID(ctx, p, id, profile)
	return ok(body)
}

// readContent reads a file for read_sandbox_file in constant memory. Text comes back whole
// when it has at most tool_output_max_chars characters, else as its first and last halves
// of them with a marker line between (truncated); a file that is no UTF-8 text (isBinary on
// its first bytes) comes back as base64 of its first bytes — at most tool_output_max_chars
// characters of base64 — with encoding "base64".
func (h *Handler) readContent(r io.Reader) (readBody, error) {
	n := h.maxChars
	// n characters take at most 4n bytes of UTF-8 (an invalid byte is one U+FFFD).
	w := &headTailReader{headMax: 4*n + 4, tailMax: 2*n + 4}
	if _, err := io.Copy(w, r); err != nil {
		return readBody{}, err
	}
	if isBinary(w.head) {
		k := min(len(w.head), n/4*3)
		return readBody{Content: base64.StdEncoding.EncodeToString(w.head[:k]), Encoding: "base64", Size: w.n, Truncated: int64(k) < w.n}, nil
	}
	if w.n == int64(len(w.head)) { // all of it is in head
		s, cut := h.cut(replaceInvalid(w.head))
		return readBody{Content: s, Size: w.n, Truncated: cut}, nil
	}
	head := []rune(replaceInvalid(trimPartialRune(w.head)))[:n/2]
	tail := w.tail
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:] // the end of a rune whose start was dropped
	}
	tr := []rune(replaceInvalid(tail))
	tr = tr[max(0, len(tr)-(n-n/2)):]
	dropped := w.n - int64(len(string(head))) - int64(len(string(tr)))
	return readBody{Content: string(head) + fmt.Sprintf(fileCutMarker, dropped) + string(tr), Size: w.n, Truncated: true}, nil
}

// fileCutMarker stands for the middle of a file read_sandbox_file left out.
const fileCutMarker = "\n…[%d bytes cut]…\n"

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// realSessionID is the id of session id (the default session's real id, which results echo).
func (h *Handler) realSessionID(ctx context.Context, p principal.Principal, id, profile string) string {
	if id == sandbox.DefaultSessionID {
		if sess, err := h.svc.GetSession(ctx, p, id, profile); err == nil {
			return sess.ID
		}
	}
	return id
}

// ---- tasks ----

type taskBody struct {
	TaskID           string       `json:"task_id"`
	Status           string       `json:"status"`
	SandboxSessionID string       `json:"sandbox_session_id"`
	Result           *taskSummary `json:"result,omitempty"`
}

// taskSummary is the #503 result summary of a finished task.
type taskSummary struct {
	Stdout    string  `json:"stdout"`
	Stderr    string  `json:"stderr"`
	ExitCode  *int    `json:"exit_code"`
	Error     *string `json:"error"`
	Notice    *string `json:"notice"`
	Truncated bool    `json:"truncated,omitempty"`
	// Results are the rich results of code (results.go).
	Results []resultItem `json:"results,omitempty"`
}

func (h *Handler) checkTask(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	id, bad := taskIDArg("check_sandbox_task", raw)
	if bad != nil {
		return *bad
	}
	t, err := h.svc.GetTask(ctx, p, id)
	if fault.IsKind(err, fault.NotFound) {
		return ok(map[string]string{"task_id": id, "status": "unknown"})
	}
	if err != nil {
		return h.fail(err, "")
	}
	body := taskBody{TaskID: t.ID, Status: t.Status, SandboxSessionID: t.SessionID}
	var images []sdk.Content
	if t.FinishedAt != nil {
		s := &taskSummary{Error: nonEmpty(t.Error), Notice: nonEmpty(t.Notice)}
		if r := t.Result; r != nil {
			s.Stdout, s.Stderr, s.Truncated = h.outputs(r)
			s.ExitCode = r.ExitCode
			if s.Notice == nil {
				s.Notice = nonEmpty(r.Notice)
			}
			var cut bool
			s.Results, images, cut = h.results(r.Results, h.maxChars)
			s.Truncated = s.Truncated || cut
		}
		body.Result = s
	}
	res := ok(body)
	res.images = images
	return res
}

// taskIDArg decodes the one argument, task_id, of tool name; bad is the failure to answer.
func taskIDArg(name string, raw json.RawMessage) (id string, bad *result) {
	var a struct {
		TaskID *string `json:"task_id"`
	}
	if err := decodeArgs(name, checkTaskArgs, raw, &a); err != nil {
		r := failed(err.Error(), "")
		return "", &r
	}
	if a.TaskID == nil || strings.TrimSpace(*a.TaskID) == "" {
		r := failed(missing(name, "task_id"), "")
		return "", &r
	}
	return strings.TrimSpace(*a.TaskID), nil
}

func (h *Handler) cancelTask(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	id, bad := taskIDArg("cancel_sandbox_task", raw)
	if bad != nil {
		return *bad
	}
	t, err := h.svc.CancelTask(ctx, p, id)
	if fault.IsKind(err, fault.NotFound) {
		return ok(map[string]string{"task_id": id, "status": "unknown"})
	}
	if err != nil {
		return h.fail(err, "")
	}
	return ok(taskBody{TaskID: t.ID, Status: t.Status, SandboxSessionID: t.SessionID})
}

// ---- files (listing) ----

type fileItem struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type filesBody struct {
	Path             string     `json:"path"`
	Entries          []fileItem `json:"entries"`
	Truncated        bool       `json:"truncated,omitempty"`
	SandboxSessionID string     `json:"sandbox_session_id"`
}

// maxListedFiles bounds list_sandbox_files; more entries set truncated.
const maxListedFiles = 500

func (h *Handler) listFiles(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		Path             *string `json:"path"`
		SandboxSessionID *string `json:"sandbox_session_id"`
		Profile          *string `json:"profile"`
	}
	if err := decodeArgs("list_sandbox_files", listFilesArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	given := deref(a.SandboxSessionID)
	id, profile, err := sessionRef(given, deref(a.Profile))
	if err != nil {
		return h.fail(err, given)
	}
	dir, entries, err := h.svc.ListFiles(ctx, p, id, profile, deref(a.Path))
	if err != nil {
		return h.fail(err, given)
	}
	body := filesBody{Path: dir, Entries: []fileItem{}, SandboxSessionID: h.realSessionID(ctx, p, id, profile)}
	for i, e := range entries {
		if i == maxListedFiles {
			body.Truncated = true
			break
		}
		body.Entries = append(body.Entries, fileItem{Name: e.Name, Type: string(e.Type), Size: e.Size})
	}
	return ok(body)
}

// ---- sessions ----

type sessionItem struct {
	SandboxSessionID string  `json:"sandbox_session_id"`
	Name             *string `json:"name"`
	Profile          string  `json:"profile"`
	Status           string  `json:"status"`
	LastUsedAt       string  `json:"last_used_at"`
}

// maxListed bounds list_sandbox_sessions (newest first).
const maxListed = 1000

func (h *Handler) listSessions(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct{}
	if err := decodeArgs("list_sandbox_sessions", nil, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	items := []sessionItem{}
	cursor := ""
	for {
		rows, next, err := h.svc.ListSessions(ctx, p, sandbox.ListFilter{Limit: 200, Cursor: cursor})
		if err != nil {
			return h.fail(err, "")
		}
		for _, s := range rows {
			items = append(items, sessionItem{
				SandboxSessionID: s.ID, Name: nonEmpty(s.Name), Profile: s.Profile, Status: s.Status,
				LastUsedAt: s.LastUsedAt.UTC().Format(time.RFC3339),
			})
		}
		if next == "" || len(items) >= maxListed {
			break
		}
		cursor = next
	}
	return ok(map[string]any{"sessions": items})
}

type newSessionBody struct {
	SandboxSessionID string  `json:"sandbox_session_id"`
	Name             *string `json:"name"`
	Profile          string  `json:"profile"`
}

func (h *Handler) newSession(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		Name     *string           `json:"name"`
		Profile  *string           `json:"profile"`
		Env      map[string]string `json:"env"`
		TimeoutS *int              `json:"timeout_s"`
		Secrets  []string          `json:"secrets"`
	}
	if err := decodeArgs("new_sandbox_session", newSessionArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	in := sandbox.CreateSessionInput{Profile: deref(a.Profile), Name: deref(a.Name), Env: a.Env, Secrets: a.Secrets}
	if a.TimeoutS != nil {
		in.Lifetime = time.Duration(*a.TimeoutS) * time.Second
		if in.Lifetime <= 0 {
			return failed("timeout_s must be a whole number of seconds from 1 to 2592000 (30 days)", "")
		}
	}
	sess, err := h.svc.CreateSession(ctx, p, in)
	if err != nil {
		return h.fail(err, "")
	}
	return ok(newSessionBody{SandboxSessionID: sess.ID, Name: nonEmpty(sess.Name), Profile: sess.Profile})
}

type destroyedBody struct {
	SandboxSessionID string `json:"sandbox_session_id"`
	Destroyed        bool   `json:"destroyed"`
	// Notice: the sandbox could not be removed yet (Destroyed false); the gateway retries.
	Notice string `json:"notice,omitempty"`
}

func (h *Handler) destroySession(ctx context.Context, p principal.Principal, raw json.RawMessage) result {
	var a struct {
		SandboxSessionID *string `json:"sandbox_session_id"`
	}
	if err := decodeArgs("destroy_sandbox_session", destroySessionArgs, raw, &a); err != nil {
		return failed(err.Error(), "")
	}
	if a.SandboxSessionID == nil || strings.TrimSpace(*a.SandboxSessionID) == "" {
		return failed(missing("destroy_sandbox_session", "sandbox_session_id"), "")
	}
	given := *a.SandboxSessionID
	id, profile, err := sessionRef(given, "")
	if err != nil {
		return h.fail(err, given)
	}
	d, err := h.svc.DestroySession(ctx, p, id, profile)
	if err != nil {
		return h.fail(err, given)
	}
	return ok(destroyedBody{SandboxSessionID: given, Destroyed: !d.Pending, Notice: d.Notice})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// progressKey holds a call's progress reporter in its context.
type progressKey struct{}

type progress struct {
	session *sdk.ServerSession
	token   any
}

func withProgress(ctx context.Context, ss *sdk.ServerSession, token any) context.Context {
	return context.WithValue(ctx, progressKey{}, progress{session: ss, token: token})
}

// progressTail is how much of the latest output a progress notification shows, in
// characters.
const progressTail = 400

// reportProgress sends a progress notification every progressEvery while an execution runs,
// if the call carried a progressToken (MCP "progress" utility): the time it has run, and the
// end of its output so far (Service.Follow, once started names the task). Total is the wait
// in seconds, after which the call answers with a task. stop ends it and returns the task's
// id ("" when the execution never became a task).
func (h *Handler) reportProgress(ctx context.Context, p principal.Principal, wait time.Duration, started <-chan string) (stop func() string) {
	pr, reporting := ctx.Value(progressKey{}).(progress)
	done := make(chan struct{})
	finished := make(chan string, 1)
	go func() {
		taskID := ""
		defer func() { finished <- taskID }()
		var f *sandbox.Follower
		defer func() {
			if f != nil {
				f.Close()
			}
		}()
		var tail []rune
		start := time.Now()
		tick := time.NewTicker(h.progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				if taskID == "" {
					select {
					case taskID = <-started:
					default:
					}
				}
				return
			case <-ctx.Done():
				if taskID == "" {
					select {
					case taskID = <-started:
					case <-done:
					}
				}
				<-done
				return
			case taskID = <-started:
				if reporting {
					f, _ = h.svc.Follow(ctx, p, taskID, sandbox.Position{})
				}
				started = nil
			case <-tick.C:
				if !reporting {
					continue
				}
				tail = drainTail(ctx, f, tail)
				elapsed := time.Since(start).Seconds()
				msg := fmt.Sprintf("running for %.0f s; after %.0f s the call answers with a task_id to poll with check_sandbox_task", elapsed, wait.Seconds())
				if len(tail) > 0 {
					msg += "; latest output: " + string(tail)
				}
				_ = pr.session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
					ProgressToken: pr.token, Progress: elapsed, Total: wait.Seconds(), Message: msg,
				})
			}
		}
	}()
	return func() string { close(done); return <-finished }
}

// drainTail adds the output f has for now to tail, keeping its last progressTail characters.
func drainTail(ctx context.Context, f *sandbox.Follower, tail []rune) []rune {
	if f == nil {
		return tail
	}
	for {
		b, err := f.Next(ctx, time.Millisecond)
		if err != nil || len(b.Events) == 0 {
			return tail
		}
		for _, ev := range b.Events {
			tail = append(tail, []rune(strings.ToValidUTF8(string(ev.Data), "\uFFFD"))...)
		}
		if len(tail) > progressTail {
			tail = tail[len(tail)-progressTail:]
		}
	}
}
