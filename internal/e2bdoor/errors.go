package e2bdoor

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/internal/fault"
)

// Errors answer in E2B's shapes and statuses, so that E2B's SDKs raise their own exceptions
// (docs/e2b-door.md, "Errors"): the control plane and envd's HTTP routes with E2B's Error
// body {code, message} — which is also an RFC 9457 problem (type, title, status, detail) —
// envd's Connect-RPC services with Connect errors of envd's codes.

// errorBody is E2B's Error ({code, message}) with the problem members.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail"`
}

// apiError writes status with message; kind is the problem type's last segment.
func (h *Handler) apiError(w http.ResponseWriter, r *http.Request, status int, kind, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Code: status, Message: message, Type: h.typeBase + kind,
		Title: http.StatusText(status), Status: status, Detail: message})
}

// statusOf is the HTTP status E2B answers for a failure of kind k: 404 not found, 401, 403,
// 429 (RateLimitError), 503 when nothing was decided (ServiceBusyError), 400 for requests it
// cannot serve.
func statusOf(k fault.Kind) int {
	switch k {
	case fault.NotFound:
		return http.StatusNotFound
	case fault.Validation, fault.Config, fault.Capability:
		return http.StatusBadRequest
	case fault.Forbidden, fault.Policy:
		return http.StatusForbidden
	case fault.Conflict, fault.Paused:
		return http.StatusConflict
	case fault.Quota:
		return http.StatusTooManyRequests
	case fault.TooLarge:
		return http.StatusRequestEntityTooLarge
	case fault.Full:
		return http.StatusInsufficientStorage
	case fault.Timeout:
		return http.StatusGatewayTimeout
	case fault.Unavailable, fault.Broker:
		return http.StatusServiceUnavailable
	case fault.Provision, fault.Gone:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// messageOf is err's message for a client: a domain fault's own (without the REST route it
// hints at), an internal error's never (it is logged).
func messageOf(err error) string {
	var fe *fault.Error
	if errors.As(err, &fe) {
		switch fe.Kind {
		case fault.Internal:
			return "an internal error occurred; the gateway's log has it"
		case fault.Unavailable:
			return "the gateway's response store does not answer; nothing was done — retry"
		}
		if fe.Msg != "" {
			return fe.Msg
		}
	}
	if fault.KindOf(err) == fault.Internal {
		return "an internal error occurred; the gateway's log has it"
	}
	return err.Error()
}

// fail writes err, a domain error, as E2B's Error body with its status (and Retry-After for
// a quota); a client that went away gets nothing.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		return
	}
	k := fault.KindOf(err)
	status := statusOf(k)
	if status >= 500 {
		h.log.Error("E2B door request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	var fe *fault.Error
	if errors.As(err, &fe) && fe.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(fe.RetryAfter.Seconds()))))
	}
	if k == fault.Unavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "5")
	}
	h.apiError(w, r, status, string(k), messageOf(err))
}

// rpcError is err, a domain error, as envd's Connect error: the codes E2B's SDKs map to
// their exceptions (InvalidArgument, Unauthenticated, NotFound, ResourceExhausted →
// RateLimitError, Unavailable and DeadlineExceeded → TimeoutError).
func (h *Handler) rpcError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return connect.NewError(connect.CodeCanceled, err)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	k := fault.KindOf(err)
	code := connect.CodeInternal
	switch k {
	case fault.NotFound:
		code = connect.CodeNotFound
	case fault.Validation, fault.Config, fault.Capability:
		code = connect.CodeInvalidArgument
	case fault.Forbidden, fault.Policy:
		code = connect.CodePermissionDenied
	case fault.Conflict:
		code = connect.CodeFailedPrecondition
	case fault.Paused, fault.Gone:
		code = connect.CodeUnavailable
	case fault.Quota:
		code = connect.CodeResourceExhausted
	case fault.TooLarge, fault.Full:
		code = connect.CodeResourceExhausted
	case fault.Timeout:
		code = connect.CodeDeadlineExceeded
	case fault.Unavailable, fault.Broker, fault.Provision:
		code = connect.CodeUnavailable
	default:
		h.log.Error("E2B door envd call failed", "err", err)
	}
	return connect.NewError(code, errors.New(messageOf(err)))
}
