package store

import (
	"encoding/json"
	"time"
)

// Task is one recorded execution. Result is the JSON-encoded result once finished.
type Task struct {
	ID              string
	SessionID       string
	OwnerID         string
	Profile         string
	Operation       string
	Status          string
	Promoted        bool
	RunnerID        string
	SubmittedAt     time.Time
	StartedAt       *time.Time
	FinishedAt      *time.Time
	ExpiresAt       *time.Time
	Notice          string
	Error           string
	ErrorType       string
	Result          json.RawMessage
	CancelRequested bool
	Seq             int64 // submission order (per database)
	Queued          bool  // travels through a queue transport
	Attempts        int   // executions started
	// Program is what the task runs: its command or code (at most MaxProgram bytes).
	Program string
	// Background: a background process. It gives its session's lock up once started, and
	// counts against its own quota, not the executions'.
	Background bool
	// PID is a started background process's id in its sandbox (0: unknown).
	PID int
	// Interactive: the execution's standard input stays open (stdin_open, or a terminal).
	Interactive bool
	// APIKeyID is the API key the execution was submitted with ("" for a token): recorded in
	// its audit event by the statement that inserts the task, not kept with the task.
	APIKeyID string
}

// MaxProgram bounds Task.Program in bytes; ProgramOf cuts longer text.
const MaxProgram = 16 << 10

// ProgramOf is text cut to at most MaxProgram bytes on a UTF-8 boundary, "…" marking a cut.
func ProgramOf(text string) string {
	if len(text) <= MaxProgram {
		return text
	}
	cut := MaxProgram - len("…")
	for cut > 0 && text[cut]&0xC0 == 0x80 {
		cut--
	}
	return text[:cut] + "…"
}

// Completion is how a task ended.
type Completion struct {
	Status    string
	Notice    string
	Error     string
	ErrorType string
	Result    any // JSON-encodable; nil for machinery failures
	SessionID string
	// Touch also records a use of session SessionID at the completion time, in the same
	// round trip (an execution that reached its sandbox counts as use).
	Touch bool
	// Unlock gives up this lock place (BeginTask's) in the same round trip, whether or not
	// this completion is the one stored; the zero Place: none.
	Unlock Place
	// ExitCode and DurationMS complete the execution's audit event: the program's exit code
	// and run time when it ran (nil: unknown; the duration is then taken from the task's
	// start to t).
	ExitCode   *int
	DurationMS *int64
	// OutputBytes is how many bytes of output Result keeps (its stdout and stderr), counted
	// against its owner's retained_output_bytes (DropOldestOutputs).
	OutputBytes int64
	// ReplacesLost lets this completion replace a `lost` one already recorded, unless it is
	// `lost` itself: it comes from the runner that ran the execution, so it is what happened,
	// where `lost` (a sweeper's or an adopter's verdict about a runner that stopped answering)
	// only said the outcome was unknown (docs/semantics.md §9 Completion).
	ReplacesLost bool
	// Deferred: the caller already holds the execution's result (it waited for it), so the
	// completion need not be on disk before FinishTask returns — only visible to every
	// replica, as any stored completion is. A store may then return before its write is
	// durable, keeping it until it is and writing it again should it be lost meanwhile
	// (Postgres: committed without waiting for the WAL flush, kept until the WAL is seen
	// flushed past it, written again when the server restarted; the crash window is
	// docs/semantics.md §9 "Deferred commits").
	Deferred bool
}

// TaskFilter selects tasks for ListTasks.
type TaskFilter struct {
	OwnerID    string // "": every owner's
	Status     string
	SessionID  string
	Background bool // background processes only
	// SessionLabels selects the tasks of sessions carrying every one of these labels (key and
	// value, as SessionFilter.Labels); a task whose session is gone (or a one-off run's) never
	// matches.
	SessionLabels  map[string]string
	Limit          int
	AfterSubmitted time.Time
	AfterID        string
}
