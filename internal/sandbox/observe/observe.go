// Package observe is the domain's observation room: the Observer its metrics are told
// through (internal/telemetry implements it), the domain's spans, and the wrapper every
// provider call goes through (a client span, a provider-side failure counted).
package observe

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
)

// Observer is told what the domain did, for metrics (docs/semantics.md §14; internal/telemetry
// implements it). Every argument is one of a small fixed set — profile names, provider types,
// task statuses, fault kinds — never an id or a principal. Calls must be cheap and must not
// block.
type Observer interface {
	// ExecutionFinished: an execution of profile (provider type provider) ended with task
	// status status, d after this process started running it (its wait for the session's
	// turn, the sandbox's acquisition and the program).
	ExecutionFinished(profile, provider, status string, d time.Duration)
	// ProviderError: provider call op (create, attach, exec, write_file, destroy) of profile
	// failed on the provider's side, with fault kind kind (one of providerSide); a caller's
	// mistake the provider refused (a conflict, a missing file, an escaping path) is no
	// provider error.
	ProviderError(profile, provider, op, kind string)
}

// Room observes the domain: its Observer and its tracer. Build it with New.
type Room struct {
	observer Observer
	tracer   trace.Tracer
}

// New returns the room telling o (nil: nobody) and tracing with tp (nil: a no-op provider).
func New(o Observer, tp trace.TracerProvider) *Room {
	if o == nil {
		o = nopObserver{}
	}
	return &Room{observer: o, tracer: newTracer(tp)}
}

// Tracer is the domain's tracer.
func (r *Room) Tracer() trace.Tracer { return r.tracer }

// ExecutionFinished tells the Observer an execution ended (Observer.ExecutionFinished).
func (r *Room) ExecutionFinished(profile, provider, status string, d time.Duration) {
	r.observer.ExecutionFinished(profile, provider, status, d)
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) ExecutionFinished(string, string, string, time.Duration) {}
func (nopObserver) ProviderError(string, string, string, string)            {}

// tracerName names the domain's spans' instrumentation scope.
const tracerName = "github.com/sandgate/sandgate/internal/sandbox"

// Span attributes the domain sets (low-cardinality ones, and the ids a trace is about).
var (
	AttrProfile  = attribute.Key("sandgate.profile")
	AttrProvider = attribute.Key("sandgate.provider")
	AttrSession  = attribute.Key("sandgate.session_id")
	AttrTask     = attribute.Key("sandgate.task_id")
	AttrOp       = attribute.Key("sandgate.operation")
	AttrStatus   = attribute.Key("sandgate.status")
)

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// Span starts one of the domain's spans (a domain operation: sandbox.<Operation>) as a
// child of ctx's span.
func (r *Room) Span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return r.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// EndSpan ends span, marking it failed with err (a machinery failure, not a program's exit).
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, string(fault.KindOf(err)))
	}
	span.End()
}

// providerSide are the fault kinds of a provider call that failed on the provider's side
// (its backend could not do what was asked), as opposed to a caller's mistake it refused
// (validation, conflict, not-found, policy, too-large, capability …).
var providerSide = map[fault.Kind]bool{
	fault.Provision: true, fault.Gone: true, fault.Broker: true, fault.Unavailable: true,
	fault.Timeout: true, fault.Internal: true,
}

// Call runs provider call op of prof (f) in a client span provider.<op>, and counts its
// failure of a providerSide kind, except the end of the caller's context, as a provider
// error of that kind.
func (r *Room) Call(ctx context.Context, prof *profile.Profile, op string, f func(ctx context.Context) error) error {
	ctx, span := r.tracer.Start(ctx, "provider."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrProfile.String(prof.Name), AttrProvider.String(prof.Provider.Type())))
	err := f(ctx)
	if err != nil && ctx.Err() == nil && providerSide[fault.KindOf(err)] {
		r.observer.ProviderError(prof.Name, prof.Provider.Type(), op, string(fault.KindOf(err)))
	}
	EndSpan(span, err)
	return err
}
