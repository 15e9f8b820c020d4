package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingOptions configure Tracing.
type TracingOptions struct {
	// Endpoint is the OTLP/HTTP collector's base URL (telemetry.otlp_endpoint), e.g.
	// "http://otel-collector:4318"; spans go to <Endpoint>/v1/traces. Empty: the standard
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT decide, and without
	// either tracing is off.
	Endpoint string
	// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME is set; default
	// "sandgate".
	ServiceName string
	// Version is service.version; Role (gateway or worker) and Instance (the runner id) are
	// sandgate.role and service.instance.id.
	Version, Role, Instance string
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
}

// Tracing is the process's tracer provider: an OTLP/HTTP exporter behind a batch span
// processor when an endpoint is configured, else a no-op provider. The exporter also honours
// the standard OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression, certificates),
// the SDK OTEL_TRACES_SAMPLER (default parentbased_always_on) and OTEL_RESOURCE_ATTRIBUTES;
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn tracing off.
type Tracing struct {
	sdk *sdktrace.TracerProvider // nil when off
}

// NewTracing builds the tracer provider. Errors: an endpoint that is not an http(s) URL, or
// an exporter that cannot be built.
func NewTracing(ctx context.Context, o TracingOptions) (*Tracing, error) {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	t := &Tracing{}
	if strings.EqualFold(o.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(o.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return t, nil
	}
	var opts []otlptracehttp.Option
	switch {
	case o.Endpoint != "":
		u, err := url.Parse(o.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("telemetry.otlp_endpoint %q: want the collector's http(s) base URL, e.g. http://otel-collector:4318", o.Endpoint)
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(o.Endpoint, "/")+"/v1/traces"))
	case o.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || o.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		// The exporter reads them itself.
	default:
		return t, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	if o.ServiceName == "" {
		o.ServiceName = "sandgate"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", o.ServiceName)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	if o.Role != "" {
		attrs = append(attrs, attribute.String("sandgate.role", o.Role))
	}
	if o.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.Instance))
	}
	// The environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) wins over these defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry: trace resource: %w", err)
	}
	t.sdk = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return t, nil
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t != nil && t.sdk != nil }

// Provider is the tracer provider (a no-op one when tracing is off).
func (t *Tracing) Provider() trace.TracerProvider {
	if !t.Enabled() {
		return noop.NewTracerProvider()
	}
	return t.sdk
}

// Propagator reads and writes W3C trace context and baggage.
func (t *Tracing) Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// ForceFlush exports the spans ended so far.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// Shutdown exports what is left and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}
