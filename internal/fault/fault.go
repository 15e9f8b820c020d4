// Package fault is Sandgate's one error vocabulary for the domain: every failure of the
// machinery (never a failing program) carries a Kind, and internal/api maps each Kind to an
// RFC 9457 problem type in one place.
//
// The kinds mirror the seed's error hierarchy (docs/semantics.md §2): config, capability,
// policy, timeout, provision, gone (a provision failure whose target vanished), session not
// found, broker. Sandgate adds validation, forbidden, conflict and too-large for REST input.
package fault

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies a failure. Its string is the suffix of the problem type URI.
type Kind string

const (
	Config     Kind = "config"     // a profile, provider or combination the configuration does not allow
	Capability Kind = "capability" // the provider does not support the operation
	Policy     Kind = "policy"     // a policy or identity requirement cannot be enforced; a path escapes
	Timeout    Kind = "timeout"    // an operation exceeded its effective timeout
	Provision  Kind = "provision"  // a sandbox could not be created or attached
	Gone       Kind = "gone"       // the attach target no longer exists (a Provision failure; self-heal signal)
	NotFound   Kind = "not-found"  // unknown session, task or file (also: someone else's)
	Broker     Kind = "broker"     // the execution broker could not deliver or finish an operation
	Validation Kind = "validation" // malformed input
	Forbidden  Kind = "forbidden"  // the principal may not use the profile or resource
	Conflict   Kind = "conflict"   // the operation does not fit the scope or the resource's state
	// Paused: the session is paused (POST /v1/sessions/{id}/pause) and its profile does not
	// resume it on use; a kind of Conflict, as Gone is a kind of Provision.
	Paused   Kind = "paused"
	TooLarge Kind = "too-large" // input over a configured limit
	// Full: the sandbox's workspace (or the disk under it) has no space left for a write the
	// gateway was asked to make (ENOSPC, EDQUOT); a program that fills it gets its own error.
	Full  Kind = "workspace-full"
	Quota Kind = "quota" // the principal is at one of its quotas (sandbox.quotas)
	// Unavailable: a service the gateway depends on (its Postgres response store) does not
	// answer; nothing was decided, retry later.
	Unavailable Kind = "unavailable"
	Internal    Kind = "internal" // a bug
)

// Error is a classified failure. Subject and Capability are set for Capability errors.
type Error struct {
	Kind       Kind
	Msg        string
	Subject    string
	Capability string
	Err        error // optional cause
	// RetryAfter, for Quota, is when trying again may succeed (HTTP Retry-After).
	RetryAfter time.Duration
	// Hint says what the caller can do, worded for each edge: a REST route, an MCP tool.
	Hint Hint
}

// Hint is the next step a caller can take after an error, in the terms of the edge it uses;
// the domain gives both, the edge renders its own (Error gives REST's, ForTool the tool's).
type Hint struct {
	REST string // e.g. "use POST /v1/runs"
	Tool string // e.g. "call run_command with profile='oneshot'"
}

// WithHint sets e's hints and returns e.
func (e *Error) WithHint(rest, tool string) *Error {
	e.Hint = Hint{REST: rest, Tool: tool}
	return e
}

// ForTool renders err for an agent's tool call: its message with the tool hint when it has
// one (otherwise Error()).
func ForTool(err error) string {
	var fe *Error
	if errors.As(err, &fe) && fe.Hint.Tool != "" {
		return fe.message() + "; " + fe.Hint.Tool
	}
	return err.Error()
}

func (e *Error) message() string {
	if e.Err != nil && e.Msg == "" {
		return e.Err.Error()
	}
	return e.Msg
}

// OverQuota is a Quota error naming the limit; retryAfter becomes the Retry-After header.
func OverQuota(retryAfter time.Duration, format string, args ...any) *Error {
	return &Error{Kind: Quota, Msg: fmt.Sprintf(format, args...), RetryAfter: retryAfter}
}

// Error is the message with the REST hint, when it has one.
func (e *Error) Error() string {
	if e.Hint.REST != "" {
		return e.message() + "; " + e.Hint.REST
	}
	return e.message()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, fault.Gone) style checks work against a Kind value wrapped as error.
func (e *Error) Is(target error) bool {
	var k kindErr
	if errors.As(target, &k) {
		if e.Kind == Kind(k) {
			return true
		}
		// Gone is a kind of Provision failure (seed: SandboxGoneError < SandboxProvisionError),
		// Paused a kind of Conflict.
		return (e.Kind == Gone && Kind(k) == Provision) || (e.Kind == Paused && Kind(k) == Conflict)
	}
	return false
}

type kindErr Kind

func (k kindErr) Error() string { return string(k) }

// Err returns an error value usable as errors.Is target for the kind.
func (k Kind) Err() error { return kindErr(k) }

// New returns a classified error with a formatted message.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Wrap classifies cause with a message; the cause stays reachable with errors.Unwrap.
func Wrap(kind Kind, cause error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &Error{Kind: kind, Msg: msg, Err: cause}
}

// Unsupported reports a missing capability, as "<subject> does not support capability: <cap>".
// Capability names follow the seed: shell, files, package_install, attach, language:<lang>,
// principal_user.
func Unsupported(subject, capability string) *Error {
	msg := "unsupported capability: " + capability
	if subject != "" {
		msg = subject + " does not support capability: " + capability
	}
	return &Error{Kind: Capability, Msg: msg, Subject: subject, Capability: capability}
}

// KindOf returns the Kind of err, or Internal when err carries none.
func KindOf(err error) Kind {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Kind
	}
	return Internal
}

// IsKind reports whether err is (or wraps) a fault of kind k. Gone counts as Provision,
// Paused as Conflict.
func IsKind(err error, k Kind) bool { return errors.Is(err, k.Err()) }

// ErrShutdown is the cause (context.Cause) of the contexts a gateway ends when it shuts down
// past its drain period. An execution that its sandbox holds (sandboxd keeps it when its
// client goes away) is then left running for the next gateway to adopt, instead of being
// stopped as a caller's cancellation stops it (issue "durable executions": rolling restarts
// lose no execution).
var ErrShutdown = errors.New("the gateway is shutting down")

// ErrLeftRunning is joined to the context error of an execution its client stopped following
// because of ErrShutdown: it runs on in its sandbox, which holds its output and exit status
// for the gateway that adopts it.
var ErrLeftRunning = errors.New("the execution runs on in its sandbox")

// LeftRunning is the error of an execution left running at shutdown: ctxErr (the context's
// own error) joined with ErrLeftRunning.
func LeftRunning(ctxErr error) error { return errors.Join(ctxErr, ErrLeftRunning) }
