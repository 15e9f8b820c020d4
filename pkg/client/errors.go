package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ProblemTypeBase prefixes every problem `type` the gateway sends; the rest is the kind
// (ProblemTypeBase + KindNotFound is "https://sandgate.dev/problems/not-found").
const ProblemTypeBase = "https://sandgate.dev/problems/"

// Problem kinds: the stable suffixes of problem types (openapi.yaml, info.description).
const (
	KindValidation          = "validation"             // 400: the request does not match the contract
	KindConfig              = "config"                 // 400: a profile or combination the configuration does not allow
	KindUnauthenticated     = "unauthenticated"        // 401: missing, malformed or refused token
	KindForbidden           = "forbidden"              // 403: not this principal's to use
	KindPolicy              = "policy"                 // 403: a policy cannot be enforced, or a path escapes the workspace
	KindNotFound            = "not-found"              // 404: unknown (or someone else's) session, task or file
	KindMethodNotAllowed    = "method-not-allowed"     // 405
	KindConflict            = "conflict"               // 409: does not fit the profile's scope or the resource's state
	KindTooLarge            = "too-large"              // 413: body over a limit
	KindUnsupportedMedia    = "unsupported-media-type" // 415: a body of another Content-Type than the operation takes
	KindRangeNotSatisfiable = "range-not-satisfiable"  // 416
	KindCapability          = "capability"             // 422: the provider does not support it
	KindQuota               = "quota"                  // 429: over a quota or the request rate; see RetryAfter
	KindProvision           = "provision"              // 502: the sandbox could not be created or attached
	KindGone                = "gone"                   // 502: an attached environment is unreachable
	KindBroker              = "broker"                 // 503: the broker could not deliver the operation
	KindUnavailable         = "unavailable"            // 503: Postgres does not answer; see RetryAfter
	KindTimeout             = "timeout"                // 504: a non-execution operation timed out
	KindInternal            = "internal"               // 500: a gateway bug; report RequestID
)

// Error is a refused request: the gateway's RFC 9457 problem document, or, for an answer
// that carries none (a proxy's HTML error page), its status with the first bytes of the body
// as Detail and an empty Type. Every method of Client returns it (wrapped in nothing), so
// errors.As(err, &e) with e *Error finds it.
type Error struct {
	// Status is the HTTP status (or the problem's own status, for an `error` stream event).
	Status int `json:"status"`
	// Type is the problem type URI, ProblemTypeBase + a Kind; empty when the answer was no
	// problem document.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	// Instance names the occurrence, when the gateway sets it.
	Instance string `json:"instance,omitempty"`
	// RequestID is the gateway's request id (also in the X-Request-Id answer header).
	RequestID string `json:"request_id,omitempty"`
	// Errors are field-level validation failures, when known.
	Errors []FieldError `json:"errors,omitempty"`
	// RetryAfter is the answer's Retry-After (429, 503): how long to wait before trying
	// again; zero when absent.
	RetryAfter time.Duration `json:"-"`
}

// FieldError is one failed field of a validation problem.
type FieldError struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Kind is the problem's stable class: the Type after ProblemTypeBase ("not-found"), or ""
// for another or no type.
func (e *Error) Kind() string {
	k, ok := strings.CutPrefix(e.Type, ProblemTypeBase)
	if !ok {
		return ""
	}
	return k
}

// Error reads "sandgate: 404 not-found: unknown sandbox session '…'".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandgate: %d", e.Status)
	if k := e.Kind(); k != "" {
		b.WriteString(" " + k)
	} else if e.Title != "" {
		b.WriteString(" " + e.Title)
	} else if t := http.StatusText(e.Status); t != "" {
		b.WriteString(" " + strings.ToLower(t))
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// Temporary reports whether the same request may succeed later unchanged: 429 (a quota or
// the request rate) and 503 (the store or broker), after RetryAfter.
func (e *Error) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable
}

// IsKind reports whether err is (or wraps) an *Error of that kind (KindNotFound, …).
func IsKind(err error, kind string) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind() == kind
}

// errorFrom builds the Error of an answer outside 2xx from its header and whole body.
func errorFrom(resp *http.Response, body []byte) *Error {
	e := &Error{}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "application/problem+json" || ct == "application/json" {
		if json.Unmarshal(body, e) != nil {
			*e = Error{}
		}
	}
	if e.Type == "" && e.Detail == "" {
		e.Title = http.StatusText(resp.StatusCode)
		e.Detail = strings.TrimSpace(firstBytes(body, 500))
	}
	e.Status = resp.StatusCode
	if e.RequestID == "" {
		e.RequestID = resp.Header.Get("X-Request-Id")
	}
	e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	return e
}

// retryAfter reads a Retry-After field: delay seconds or an HTTP date (RFC 9110 §10.2.3).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// firstBytes is b cut to at most n bytes on a character boundary, with "…" when cut.
func firstBytes(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}
