// Package tracehttp carries traces over outgoing HTTP calls without a global tracer
// provider: a request made under a recording span becomes a client span of that span's own
// provider and carries its W3C trace context (`traceparent`, `tracestate`); a request made
// under no span is sent as it is. Clients built deep inside providers (sandboxd's) need no
// tracer handed to them: the context of the call brings it (docs/semantics.md §14).
package tracehttp

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Transport wraps base (nil: http.DefaultTransport): each request is a client span named
// "<peer> <METHOD> <path>" of the provider of the span in its context, with the trace
// context injected into its header.
func Transport(peer string, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(FromContext()),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return peer + " " + r.Method + " " + r.URL.Path }),
	)
}

// FromContext is a tracer provider whose tracers start each span with the provider of the
// span already in the start's context (a no-op one when there is none): the trace goes on
// where it is, and nowhere else.
func FromContext() trace.TracerProvider { return ctxProvider{} }

type ctxProvider struct{ embedded.TracerProvider }

func (ctxProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return ctxTracer{name: name, opts: opts}
}

type ctxTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

func (t ctxTracer) Start(ctx context.Context, spanName string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(t.name, t.opts...).Start(ctx, spanName, opts...)
}
