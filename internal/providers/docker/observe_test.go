package docker_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// docs/semantics.md §14 on a real engine: the warm pool's depth and claims reach the
// Prometheus metrics, and a call to a container's sandboxd made under a span is a client span
// of that trace (its request carries the trace context).
func TestWarmPoolMetricsAndSandboxdSpans(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Config.WarmPoolSize = 1 })
	waitQueued(t, p, 1)
	m := telemetry.New(telemetry.Options{})
	m.WatchWarmPools([]telemetry.WarmPool{{Profile: "pooled", Pooler: p}})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		f, err := parser.TextToMetricFamilies(resp.Body)
		require.NoError(t, err)
		return f
	}
	value := func(f map[string]*dto.MetricFamily, name, result string) float64 {
		t.Helper()
		fam, ok := f[name]
		require.True(t, ok, "no %s", name)
		for _, mt := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["profile"] != "pooled" || labels["result"] != result {
				continue
			}
			if mt.Counter != nil {
				return mt.GetCounter().GetValue()
			}
			return mt.GetGauge().GetValue()
		}
		t.Fatalf("no %s{profile=pooled,result=%q}", name, result)
		return 0
	}
	f := scrape()
	assert.EqualValues(t, 1, value(f, telemetry.MetricWarmPoolSize, ""))
	assert.EqualValues(t, 1, value(f, telemetry.MetricWarmPoolReady, ""))
	assert.EqualValues(t, 0, value(f, telemetry.MetricWarmPoolClaims, "hit"))

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, parent := tp.Tracer("test").Start(t.Context(), "provider.exec")

	sb, err := p.Create(ctx, agent, allowPol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	var out bytes.Buffer
	st, err := sb.Exec(ctx, providers.ExecSpec{Command: "echo traced", Timeout: time.Minute, Output: providers.Output{Stdout: &out, Stderr: &out}})
	require.NoError(t, err)
	require.Equal(t, 0, st.ExitCode, out.String())
	parent.End()

	var calls []string
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			calls = append(calls, s.Name())
		}
	}
	assert.Contains(t, calls, "sandboxd POST /v1/exec", "the exec went to sandboxd over HTTP under the caller's span")

	// The pool had one ready container: this Create took it. The next one finds none ready
	// (the refill starts half a second after a claim and a container takes longer to start).
	sb2, err := p.Create(t.Context(), agent, allowPol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb2.ID()) })
	f = scrape()
	assert.EqualValues(t, 1, value(f, telemetry.MetricWarmPoolClaims, "hit"))
	assert.EqualValues(t, 1, value(f, telemetry.MetricWarmPoolClaims, "miss"))
}
