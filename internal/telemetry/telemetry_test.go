package telemetry_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/telemetry"
)

func scrape(t *testing.T, m *telemetry.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	f, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return f
}

// A database that does not answer leaves the counts out and says so, instead of reporting
// zeros; counters of the queue flavor count deliveries and redeliveries.
func TestCountsDownAndDeliveries(t *testing.T) {
	m := telemetry.New(telemetry.Options{Profiles: []string{"default"}, Counts: func(context.Context) (store.Counts, error) {
		return store.Counts{}, errors.New("connection refused")
	}})
	m.Delivery("run", false)
	m.Delivery("run", true)
	m.Delivery("duplicate", false)
	f := scrape(t, m)
	require.Contains(t, f, telemetry.MetricStoreCountsUp)
	assert.EqualValues(t, 0, f[telemetry.MetricStoreCountsUp].GetMetric()[0].GetGauge().GetValue())
	assert.NotContains(t, f, telemetry.MetricSessions)
	assert.NotContains(t, f, telemetry.MetricTasks)
	assert.EqualValues(t, 1, f[telemetry.MetricQueueRedeliveries].GetMetric()[0].GetCounter().GetValue())
	byOutcome := map[string]float64{}
	for _, mt := range f[telemetry.MetricQueueDeliveries].GetMetric() {
		byOutcome[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{"run": 2, "duplicate": 1}, byOutcome)
}

func TestTracingIsOffUnlessAnEndpointIsGiven(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	ctx := context.Background()
	for name, tc := range map[string]struct {
		endpoint string
		vars     map[string]string
		on       bool
	}{
		"nothing":             {},
		"config":              {endpoint: "http://127.0.0.1:4318", on: true},
		"standard variable":   {vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		"traces variable":     {vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		"sdk disabled":        {endpoint: "http://127.0.0.1:4318", vars: map[string]string{"OTEL_SDK_DISABLED": "true"}},
		"exporter none":       {endpoint: "http://127.0.0.1:4318", vars: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		"service name in env": {endpoint: "http://127.0.0.1:4318", vars: map[string]string{"OTEL_SERVICE_NAME": "edge"}, on: true},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := telemetry.NewTracing(ctx, telemetry.TracingOptions{Endpoint: tc.endpoint, Getenv: env(tc.vars)})
			require.NoError(t, err)
			assert.Equal(t, tc.on, tr.Enabled())
			require.NoError(t, tr.Shutdown(ctx))
		})
	}
	_, err := telemetry.NewTracing(ctx, telemetry.TracingOptions{Endpoint: "collector:4318", Getenv: env(nil)})
	require.ErrorContains(t, err, "telemetry.otlp_endpoint")
}
