package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/sandgate/sandgate/internal/fault"
)

// ProblemTypeBase prefixes every problem `type` (RFC 9457 §3.1.1); the suffix is the stable
// error class (fault.Kind, or one of the edge's own: unauthenticated, method-not-allowed,
// unsupported-media-type, range-not-satisfiable, unavailable).
const ProblemTypeBase = "https://sandgate.dev/problems/"

// Problem is an RFC 9457 problem details document.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Errors    []FieldProblem `json:"errors,omitempty"`
	// Code and Message repeat Status and Detail for the clients of a mount with
	// ProblemMembers (RFC 9457 extension members).
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`

	retryAfter time.Duration     // sent as the Retry-After header (quota problems)
	header     map[string]string // further header fields (Accept-Post of a 415)
}

// FieldProblem is one field-level validation failure.
type FieldProblem struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

var kindStatus = map[fault.Kind]struct {
	status int
	title  string
}{
	fault.Validation:  {http.StatusBadRequest, "Invalid request"},
	fault.Config:      {http.StatusBadRequest, "Configuration does not allow this request"},
	fault.Forbidden:   {http.StatusForbidden, "Forbidden"},
	fault.Policy:      {http.StatusForbidden, "Policy violation"},
	fault.NotFound:    {http.StatusNotFound, "Not found"},
	fault.Conflict:    {http.StatusConflict, "Conflict"},
	fault.Paused:      {http.StatusConflict, "Session paused"},
	fault.TooLarge:    {http.StatusRequestEntityTooLarge, "Too large"},
	fault.Full:        {http.StatusInsufficientStorage, "Workspace full"},
	fault.Quota:       {http.StatusTooManyRequests, "Quota exceeded"},
	fault.Capability:  {http.StatusUnprocessableEntity, "Unsupported capability"},
	fault.Provision:   {http.StatusBadGateway, "Provisioning failed"},
	fault.Gone:        {http.StatusBadGateway, "Environment gone"},
	fault.Broker:      {http.StatusServiceUnavailable, "Broker unavailable"},
	fault.Unavailable: {http.StatusServiceUnavailable, "Service unavailable"},
	fault.Timeout:     {http.StatusGatewayTimeout, "Timed out"},
	fault.Internal:    {http.StatusInternalServerError, "Internal error"},
}

// WriteProblem writes a problem+json response. kind is the type suffix.
func WriteProblem(w http.ResponseWriter, r *http.Request, status int, kind, title, detail string) {
	writeProblem(w, r, Problem{Type: ProblemTypeBase + kind, Title: title, Status: status, Detail: detail})
}

// writeProblem writes p, or the 408 of idleProblem when r's body was cut for idleness (what
// failed then failed for that: a handler reading the body sees only a read error).
func writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	if idle, ok := bodyIdled(r); ok {
		p = idleProblem(idle)
	}
	if r != nil {
		p.Instance = r.URL.Path
		p.RequestID = middleware.GetReqID(r.Context())
		if r.Context().Value(problemMembersKey{}) != nil {
			p.Code, p.Message = p.Status, p.Detail
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	for k, v := range p.header {
		w.Header().Set(k, v)
	}
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(p.retryAfter.Seconds()))))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// UnavailableRetryAfter is the Retry-After of a 503 "unavailable" problem (the response store
// does not answer) that names no wait of its own.
const UnavailableRetryAfter = 5 * time.Second

// ProblemFor maps a domain error to its problem. Unclassified errors are internal: their
// text is logged, not shown.
func ProblemFor(err error) Problem {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return Problem{Type: ProblemTypeBase + string(fault.TooLarge), Title: "Too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the body is over %d bytes (server.max_body_bytes); send less, or upload large data as a file (PUT /v1/sessions/{session_id}/files/{path})", mbe.Limit)}
	}
	k := fault.KindOf(err)
	st, ok := kindStatus[k]
	if !ok {
		st = kindStatus[fault.Internal]
	}
	p := Problem{Type: ProblemTypeBase + string(k), Title: st.title, Status: st.status, Detail: err.Error()}
	var fe *fault.Error
	if errors.As(err, &fe) {
		p.retryAfter = fe.RetryAfter
	}
	if k == fault.Unavailable {
		if p.retryAfter == 0 {
			p.retryAfter = UnavailableRetryAfter
		}
		// The cause (addresses, user names) is logged, not shown.
		p.Detail = "the gateway's response store (Postgres) does not answer; nothing was done — retry after Retry-After seconds"
	}
	if k == fault.Internal {
		p.Detail = "an internal error occurred; report the request_id to the operator"
	}
	return p
}

// problemMembersKey marks the context of a request to a mount with ProblemMembers.
type problemMembersKey struct{}

// withProblemMembers makes the problems answered to h's requests carry code and message.
func withProblemMembers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), problemMembersKey{}, true)))
	})
}
