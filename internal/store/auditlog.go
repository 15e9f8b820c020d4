package store

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
	"unicode/utf8"
)

// Audit event kinds (docs/semantics.md §14).
const (
	AuditExecution      = "execution"
	AuditFileWrite      = "file_write"
	AuditFileDelete     = "file_delete"
	AuditSessionCreate  = "session_create"
	AuditSessionDestroy = "session_destroy"
	AuditAPIKeyCreate   = "api_key_create" // Target: the new key's id
	AuditAPIKeyRevoke   = "api_key_revoke" // Target: the revoked key's id
	AuditSecretSet      = "secret_set"     // Target: the secret's name (never its value)
	AuditSecretDelete   = "secret_delete"  // Target: the secret's name
	// AuditEgressRefused: the egress proxy refused a sandbox's connection or DNS question
	// (issue 39). Target: host:port (port 0 for a DNS question); Excerpt: "connect: why",
	// "http: why" or "dns: why"; Status "refused".
	AuditEgressRefused = "egress_refused"
)

// AuditSubmitted is the status of an execution's audit event until its task finishes (then
// the task's final status).
const AuditSubmitted = "submitted"

// AuditExcerptBytes is how many leading bytes of a command or code an audit event keeps
// (ExcerptOf).
const AuditExcerptBytes = 256

// AuditEvent is one audit log row. An execution's event is written by the statement that
// records its task (BeginTask, CreateTaskWithin, CreateQueuedTask) and completed by the one
// that finishes it (FinishTask, MarkLostTasks); AppendAudit writes every other kind.
type AuditEvent struct {
	ID   int64     // assigned by the store; ascending in insertion order
	At   time.Time // when it happened (an execution: its submission)
	Kind string    // one of the Audit* kinds
	// PrincipalID is the acting principal's id (a recorded principal); Principal is its
	// "issuer#subject", filled in by the store when the event is written.
	PrincipalID string
	Principal   string
	SessionID   string
	Profile     string
	TaskID      string // executions
	Operation   string // executions: execute_command | execute_code
	Target      string // file events: the workspace path; API key events: the key's id
	// APIKeyID is the API key the request that made the event authenticated with ("" for a
	// token).
	APIKeyID string
	// Digest is the SHA-256 (hex) of the command or code, or of a written file's bytes;
	// Excerpt the command's or code's first AuditExcerptBytes bytes; Size the full length in
	// bytes of either.
	Digest  string
	Excerpt string
	Size    int64
	// Status is AuditSubmitted, then the task's final status, for executions; "succeeded"
	// or "failed" (with ErrorType, a fault kind) for the other kinds.
	Status     string
	ErrorType  string
	ExitCode   *int       // executions whose program ran
	DurationMS *int64     // executions: the program's run time, else start to finish
	FinishedAt *time.Time // executions, once finished
}

// AuditFilter selects audit events for ListAudit. Empty fields select everything.
type AuditFilter struct {
	// Principal matches the principal's "issuer#subject" or its id.
	Principal string
	SessionID string
	Kind      string
	APIKeyID  string    // events made with this API key
	Since     time.Time // At ≥ Since (zero: no bound)
	Until     time.Time // At < Until (zero: no bound)
	BeforeID  int64     // ID < BeforeID (0: from the newest); the page cursor
	Limit     int
}

// DigestOf is the SHA-256 of text, in lower-case hex.
func DigestOf(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:])
}

// ExcerptOf is text's first AuditExcerptBytes bytes at most, cut on a UTF-8 boundary.
func ExcerptOf(text string) string {
	if len(text) <= AuditExcerptBytes {
		return text
	}
	cut := AuditExcerptBytes
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut]
}
