package tracehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandgate/sandgate/internal/telemetry/tracehttp"
)

// A request made under a recording span is a client span of that span's provider and
// carries its W3C trace context; one made under no span goes out as it was.
func TestTransportCarriesTheCallersTrace(t *testing.T) {
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: tracehttp.Transport("peer", nil)}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/exec", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	parent.End()

	header := <-got
	require.Len(t, rec.Ended(), 2, "the caller's span and the client span")
	call := rec.Ended()[0]
	assert.Equal(t, "peer POST /v1/exec", call.Name())
	assert.Equal(t, parent.SpanContext().SpanID(), call.Parent().SpanID())
	assert.Equal(t, "00-"+call.SpanContext().TraceID().String()+"-"+call.SpanContext().SpanID().String()+"-01", header,
		"the callee sees the client span as its parent")

	req, err = http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err = client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Empty(t, <-got, "no span, no trace context")
	assert.Len(t, rec.Ended(), 2, "and no span")
}
