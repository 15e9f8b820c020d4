package execute

import "github.com/sandgate/sandgate/internal/providers"

// Result statuses.
const (
	ResultCompleted = "completed"
	ResultTimedOut  = "timed_out"
	ResultCancelled = "cancelled"
)

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
	// finished tasks within sandbox.quotas.retained_output_bytes (the domain's retained.go).
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
	// were recorded. Not in the API: a follower replaying a stored result (sandbox.Follow) needs them
	// to place each byte at its offset.
	StdoutHead *int64 `json:"stdout_head,omitempty"`
	StderrHead *int64 `json:"stderr_head,omitempty"`
}

// CodeError is an exception raised by code in a context (see providers.CodeError).
type CodeError = providers.CodeError

// RichResult is one rich result of code, as a notebook shows it: the value of its last
// expression (Main) or a display, as a MIME bundle (see providers.RichResult).
type RichResult = providers.RichResult

// JoinNotice appends notice b to a (either may be empty).
func JoinNotice(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
