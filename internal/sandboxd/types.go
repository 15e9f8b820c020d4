package sandboxd

import (
	"encoding/json"
	"io"
	"io/fs"
	"time"
)

// ExecRequest is one execution: exactly one of Command (run by /bin/sh -c), Argv, or Code
// (with Language python or bash).
type ExecRequest struct {
	Command  string            `json:"command,omitempty"`
	Argv     []string          `json:"argv,omitempty"`
	Code     string            `json:"code,omitempty"`
	Language string            `json:"language,omitempty"` // python | bash, with Code
	Env      map[string]string `json:"env,omitempty"`      // added to the base environment
	// Dir is the working folder relative to the workspace ("" = the workspace); confined.
	// In a context, "" keeps the folder the context's earlier code left it in.
	Dir string `json:"dir,omitempty"`
	// Stdin is the program's standard input; nil means empty (immediate EOF). Over the wire
	// it travels base64-encoded in the JSON body.
	Stdin []byte `json:"stdin,omitempty"`
	// StdinReader, for in-process callers, streams standard input instead of Stdin (which it
	// takes precedence over). A Read that blocks does not hold the execution up: once the
	// program has ended the copy is abandoned (see the package doc). Never on the wire.
	StdinReader io.Reader `json:"-"`
	// Timeout is the wall-clock limit from start; 0 means none. Over the wire: timeout_ms.
	Timeout time.Duration `json:"-"`
	// Context names the stateful context that runs Code ("" = a fresh process). A context
	// that does not exist yet is created with Language.
	Context string `json:"context,omitempty"`
	// MaxOutput caps each of stdout and stderr in bytes (0 = DefaultMaxOutput); output past it
	// is read and dropped, and Result.Truncated says so.
	MaxOutput int64 `json:"max_output_bytes,omitempty"`
	// MaxResults caps the size of the rich results of code in a python context, together
	// (see RichResult.Size; 0 = MaxOutput's cap; at most DefaultMaxOutput): a result that
	// does not fit is dropped whole (RichResult.Dropped).
	MaxResults int64 `json:"max_result_bytes,omitempty"`
	// ID, for a remote sandboxd, makes the execution held (remote.Client.Exec): it runs on
	// when the connection breaks, and a client can follow it again by this id. Never in the
	// JSON body (it travels as the X-Execution-Id header); ignored by Runtime.Exec. Runtime.Start
	// requires it (see ExecutionID for its form).
	ID string `json:"-"`
	// StdinOpen keeps standard input open after Stdin: the program then also reads what
	// Runtime.WriteStdin sends, until Runtime.CloseStdin or its end. Only with Runtime.Start.
	StdinOpen bool `json:"stdin_open,omitempty"`
	// PTY runs the program on a pseudo-terminal of this size, as its controlling terminal:
	// standard input, output and error are the terminal, so all output arrives on the Stdout
	// stream (with the terminal's CR LF line ends) and standard input stays open as with
	// StdinOpen. TERM defaults to xterm-256color. Only with Runtime.Start, not in a Context.
	PTY *TermSize `json:"pty,omitempty"`
	// Background marks a long-lived process (a server a caller keeps a handle on): it does not
	// shelter processes that escape other executions (see orphans), and its Timeout is usually
	// 0. Only with Runtime.Start, not in a Context.
	Background bool `json:"background,omitempty"`

	// hooks connect an execution started by Runtime.Start to its entry; nil for Exec.
	hooks *execHooks
}

// TermSize is the size of a pseudo-terminal in character cells (1 to MaxTermCells each).
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// MaxTermCells bounds TermSize.Rows and TermSize.Cols.
const MaxTermCells = 1000

func (t TermSize) valid() bool {
	return t.Rows >= 1 && t.Cols >= 1 && t.Rows <= MaxTermCells && t.Cols <= MaxTermCells
}

// DefaultMaxOutput is the per-stream output cap when ExecRequest.MaxOutput is 0 (64 MiB).
const DefaultMaxOutput = 64 << 20

// Result is how an execution ended. A non-zero exit is a Result, never an error.
type Result struct {
	// ExitCode is the exit status; 128+n when killed by signal n; 1 for a Python context
	// execution that raised. Meaningless when TimedOut.
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"` // "SIGKILL" when a signal ended the program
	TimedOut bool   `json:"timed_out,omitempty"`
	// OOMKilled: the kernel's OOM killer killed a process of this execution (the cgroup's
	// memory.events oom_kill counter moved).
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Truncated: some output went past MaxOutput and was dropped.
	Truncated bool `json:"truncated,omitempty"`
	// Error is the exception a context execution raised (also printed to stderr as a
	// traceback); nil otherwise.
	Error *ExecError `json:"error,omitempty"`
	// ContextLost: the context's interpreter died during the execution; its state is gone and
	// the next execution starts a fresh one.
	ContextLost bool `json:"context_lost,omitempty"`
	// ContextReset: the context was lost when the sandbox restarted (Options.StateFile), so
	// this execution ran in a fresh one without the state of earlier executions; reported once.
	ContextReset bool `json:"context_reset,omitempty"`
	// Results are the rich results of code in a python context, in the order it produced
	// them (see the package doc, "Rich results"); nil for other executions.
	Results []RichResult `json:"results,omitempty"`
}

// RichResult is one rich result of code in a python context, as a notebook shows it: the
// value of the code's last expression (Main; Jupyter's execute_result) or a display —
// display(...), a matplotlib figure shown or left open (Jupyter's display_data).
type RichResult struct {
	// Data is the MIME bundle: each MIME type (text/plain, text/html, image/png, image/svg+xml,
	// image/jpeg, application/json, text/markdown, text/latex, ...) to its representation: a
	// JSON string — base64 for the binary types image/png, image/jpeg and application/pdf —
	// or, for application/json and types ending in "+json", any JSON value. Nil when Dropped.
	Data map[string]json.RawMessage `json:"data,omitempty"`
	// Main: the value of the code's last expression; false for a display.
	Main bool `json:"is_main_result,omitempty"`
	// Dropped: the result did not fit within the execution's limit (ExecRequest.MaxResults)
	// and was dropped whole; it names what it was.
	Dropped *DroppedResult `json:"dropped,omitempty"`
}

// DroppedResult names a rich result that was dropped whole.
type DroppedResult struct {
	Types []string `json:"types"` // its MIME types, sorted
	Bytes int64    `json:"bytes"` // its size (RichResult.Size)
}

// Size is the size of r's data in bytes: the lengths of its values as JSON, in UTF-8 (a
// base64 string counted with its quotes). A dropped result's is the size it had.
func (r RichResult) Size() int64 {
	if r.Dropped != nil {
		return r.Dropped.Bytes
	}
	var n int64
	for _, v := range r.Data {
		n += int64(len(v))
	}
	return n
}

// ExecError is an exception raised by code in a context (Jupyter's ename/evalue/traceback).
type ExecError struct {
	Name      string `json:"name"`      // e.g. "NameError"
	Value     string `json:"value"`     // str(exception)
	Traceback string `json:"traceback"` // formatted, as printed to stderr
}

// ContextInfo describes a stateful context.
type ContextInfo struct {
	Name       string    `json:"name"`
	Language   string    `json:"language"`
	CreatedAt  time.Time `json:"created_at"` // creation or last restart
	Executions int       `json:"executions"` // since CreatedAt
	Alive      bool      `json:"alive"`
}

// FileType classifies a workspace entry.
type FileType string

const (
	FileRegular FileType = "file"
	FileDir     FileType = "dir"
	FileSymlink FileType = "symlink"
	FileOther   FileType = "other"
)

// FileInfo is one entry of a workspace listing (lstat, symlinks not followed).
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"` // relative to the workspace, slash-separated
	Type    FileType    `json:"type"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"` // permission bits
	ModTime time.Time   `json:"mod_time"`
}

// Streams receives an execution's output as it is produced. Writes to Stdout and Stderr may
// come from different goroutines but never concurrently to the same writer.
type Streams struct {
	Stdout io.Writer
	Stderr io.Writer
	// ResultFunc, when set, is called with each rich result of code in a python context as
	// the code produces it, never concurrently (Result.Results then has them all, in the
	// same order; r is shared with it: read-only).
	ResultFunc func(r RichResult)
}

// ExecutionInfo describes an execution started with Runtime.Start.
type ExecutionInfo struct {
	ID string `json:"id"`
	// Program says what runs: the command, the argv joined by spaces, or "<language> code"
	// (at most 1 KiB, cut with "…").
	Program    string `json:"program"`
	Background bool   `json:"background,omitempty"`
	PTY        bool   `json:"pty,omitempty"`
	StdinOpen  bool   `json:"stdin_open,omitempty"`
	// PID is the process id of the program in the sandbox (0 for code in a context, and
	// for a program that could not be started).
	PID       int        `json:"pid,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// Result is how it ended (set once EndedAt is, unless it failed: Error).
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// ArchiveStats count what ArchiveWorkspace wrote or ExtractWorkspace extracted.
type ArchiveStats struct {
	// Entries is the number of folders, files and symlinks (the workspace itself not counted).
	Entries int64 `json:"entries"`
	// Bytes is the total size of the regular files' content, in bytes, holes included (what
	// reading every file would give).
	Bytes int64 `json:"bytes"`
	// DataBytes is the part of Bytes that was stored: ArchiveWorkspace's data regions (holes
	// left out), ExtractWorkspace's blocks written (runs of zero blocks left as holes). A
	// sandboxd that predates it sends none (0).
	DataBytes int64 `json:"data_bytes"`
}
