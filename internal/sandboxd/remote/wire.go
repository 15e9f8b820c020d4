package remote

import (
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// StreamContentType is the media type of an exec stream.
const StreamContentType = "application/vnd.sandgate.sandboxd-stream"

// Frame types of an exec stream.
const (
	FrameStdout byte = 1
	FrameStderr byte = 2
	FrameResult byte = 3
	FrameError  byte = 4
	// FrameSkip (held executions followed again) says bytes of a stream were dropped here:
	// payload [stream: FrameStdout or FrameStderr][8-byte big-endian count].
	FrameSkip byte = 5
	// FrameRichResult carries one rich result of code in a python context (a
	// sandboxd.RichResult as JSON) as the code produced it; the result frame has them all.
	FrameRichResult byte = 6
)

// frameHeader is the size of a frame's type and length.
const frameHeader = 5

// Header names.
const (
	headerMaxBytes = "X-Max-Bytes"
	problemType    = "application/problem+json"
)

// problemTypeBase prefixes every problem type; the suffix is the kind.
const problemTypeBase = "https://sandgate.dev/problems/sandboxd/"

// Problem kinds that are not fault kinds.
const (
	kindUnauthenticated  = "unauthenticated"
	kindUnknownRoute     = "unknown-route"
	kindMethodNotAllowed = "method-not-allowed"
	kindAwaitingToken    = "awaiting-token"
	kindStopped          = "stopped" // a held execution stopped with DELETE /v1/executions/{id}
)

// execBody is the JSON body of POST /v1/exec.
type execBody struct {
	sandboxd.ExecRequest
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// request is the body's ExecRequest with its timeout; a timeout_ms too large for a
// time.Duration is answered 400 (ok false).
func (b execBody) request(w http.ResponseWriter) (req sandboxd.ExecRequest, ok bool) {
	if b.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "timeout_ms is too large"))
		return req, false
	}
	req = b.ExecRequest
	req.Timeout = time.Duration(b.TimeoutMS) * time.Millisecond
	return req, true
}

// createContextBody is the JSON body of POST /v1/contexts.
type createContextBody struct {
	Name     string `json:"name"`
	Language string `json:"language"`
}

// tokenBody is the JSON body of PUT /v1/token.
type tokenBody struct {
	Token string `json:"token"`
}

// writeResult is the answer of PUT /v1/files.
type writeResult struct {
	Bytes int64 `json:"bytes"`
}

// problem is an RFC 9457 problem document with the fault kind.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Kind   string `json:"kind"`
}

// kindStatus maps fault kinds to HTTP statuses; other kinds are 500.
var kindStatus = map[fault.Kind]int{
	fault.Validation: http.StatusBadRequest,
	fault.Policy:     http.StatusForbidden,
	fault.NotFound:   http.StatusNotFound,
	fault.Conflict:   http.StatusConflict,
	fault.TooLarge:   http.StatusRequestEntityTooLarge,
	fault.Full:       http.StatusInsufficientStorage,
}

// problemFor returns the problem of err.
func problemFor(err error) problem {
	kind := fault.KindOf(err)
	status, ok := kindStatus[kind]
	if !ok {
		status = http.StatusInternalServerError
	}
	return newProblem(status, string(kind), err.Error())
}

func newProblem(status int, kind, detail string) problem {
	return problem{Type: problemTypeBase + kind, Title: http.StatusText(status), Status: status, Detail: detail, Kind: kind}
}

func (p problem) json() []byte {
	data, _ := json.Marshal(p)
	return data
}
