package broker

import (
	"context"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/store"
)

// Request is one execution as data: what every flavor hands its Executor — in process for
// the thread and embedded flavors, and for the queue flavor on the wire to a worker, as JSON
// on every transport. It holds everything a worker needs, so a message is self-sufficient
// (docs/semantics.md §10 queue). The domain fills it once, at submission, and runs it from it.
type Request struct {
	TaskID    string              `json:"task_id"`
	SessionID string              `json:"session_id"`
	Ephemeral bool                `json:"ephemeral,omitempty"` // a per_call sandbox: no per-session order
	Profile   string              `json:"profile"`
	Operation string              `json:"operation"`
	Principal principal.Principal `json:"principal"`
	Command   string              `json:"command,omitempty"`
	Code      string              `json:"code,omitempty"`
	Language  string              `json:"language,omitempty"`
	Env       map[string]string   `json:"env,omitempty"`
	Dir       string              `json:"dir,omitempty"`
	Context   string              `json:"context,omitempty"`
	Stdin     []byte              `json:"stdin,omitempty"`
	TimeoutMS int64               `json:"timeout_ms"`
	Base64    bool                `json:"base64,omitempty"`
	Warnings  []string            `json:"warnings,omitempty"`
	// StdinOpen, PTYRows/PTYCols (a terminal when both > 0) and Background carry the
	// execution's input mode and kind (sandbox.ExecInput).
	StdinOpen  bool `json:"stdin_open,omitempty"`
	PTYRows    int  `json:"pty_rows,omitempty"`
	PTYCols    int  `json:"pty_cols,omitempty"`
	Background bool `json:"background,omitempty"`
	// Trace carries the submitting call's W3C trace context (`traceparent`, `tracestate`),
	// so the worker's spans continue its trace (docs/semantics.md §14); see InjectTrace.
	Trace map[string]string `json:"trace,omitempty"`

	// Task is the execution's task row, not on the wire: the submitter's in process; on a
	// worker the row as the queue flavor admitted the delivery (its attempt recorded).
	Task store.Task `json:"-"`
	// Delivered says the request came through a queue transport (set on the worker): a
	// redelivery can finish it, so an interrupted run is left for one.
	Delivered bool `json:"-"`
}

// traceFormat is the wire format of Request.Trace: W3C trace context.
var traceFormat = propagation.TraceContext{}

// InjectTrace puts ctx's span context on req (nothing when ctx carries none).
func InjectTrace(ctx context.Context, req *Request) {
	c := propagation.MapCarrier{}
	traceFormat.Inject(ctx, c)
	if len(c) > 0 {
		req.Trace = c
	}
}

// ExtractTrace returns ctx with req's span context as its remote parent.
func ExtractTrace(ctx context.Context, req Request) context.Context {
	if len(req.Trace) == 0 {
		return ctx
	}
	return traceFormat.Extract(ctx, propagation.MapCarrier(req.Trace))
}
