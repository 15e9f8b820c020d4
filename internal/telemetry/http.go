package telemetry

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// ServerHandler wraps the gateway's chi router h: each request continues the trace of its
// incoming W3C `traceparent` (or starts one) in a server span named after its route pattern
// ("POST /v1/sessions/{session_id}/commands"), and is counted in the HTTP duration histogram
// by that pattern. m and t may be nil (no metrics, no traces).
//
// Labels and span names take fixed sets only (labels.go): the route is one of h's patterns
// as it stands now (RouteUnmatched when none matched), the method a standard one (else
// LabelOther; "HTTP" in a span's name, as OpenTelemetry's conventions name an unknown
// method), the status code one Go knows.
func ServerHandler(h http.Handler, m *Metrics, t *Tracing) http.Handler {
	known := routeSet(h)
	routed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// chi fills a route context found in the request's context instead of making its own,
		// so the pattern it matched is known here once it returns.
		ctx := r.Context()
		rctx := chi.RouteContext(ctx)
		if rctx == nil {
			rctx = chi.NewRouteContext()
			if routes, ok := h.(chi.Routes); ok {
				rctx.Routes = routes
			}
			ctx = context.WithValue(ctx, chi.RouteCtxKey, rctx)
		}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		h.ServeHTTP(ww, r.WithContext(ctx))
		route := rctx.RoutePattern()
		switch {
		case route == "":
			route = RouteUnmatched
		case !known[route]:
			route = LabelOther
		}
		method := methodLabel(r.Method)
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			name := method
			if name == LabelOther {
				name = "HTTP"
			}
			span.SetName(name + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		if m != nil {
			code := ww.Status()
			if code == 0 {
				code = http.StatusOK
			}
			m.observeHTTP(route, method, code, time.Since(start))
		}
	})
	if t == nil || !t.Enabled() {
		return routed
	}
	return otelhttp.NewHandler(routed, "http",
		otelhttp.WithTracerProvider(t.Provider()),
		otelhttp.WithPropagators(t.Propagator()),
		// Health and readiness probes would drown the traces that matter.
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/healthz" && r.URL.Path != "/ready" }),
	)
}
