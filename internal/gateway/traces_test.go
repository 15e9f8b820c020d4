package gateway_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
)

// receiver is an in-process OTLP/HTTP trace receiver: it decodes the protobuf export
// requests the gateway's exporter sends to /v1/traces, as a collector would.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					rc.services = append(rc.services, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				rc.spans = append(rc.spans, ss.GetSpans()...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// trace returns the spans of trace id (hex), by name (the last one of each name).
func (rc *receiver) trace(id string) map[string]*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]*tracepb.Span{}
	for _, s := range rc.spans {
		if hex.EncodeToString(s.GetTraceId()) == id {
			out[s.GetName()] = s
		}
	}
	return out
}

func spanID(s *tracepb.Span) string   { return hex.EncodeToString(s.GetSpanId()) }
func parentID(s *tracepb.Span) string { return hex.EncodeToString(s.GetParentSpanId()) }

// requireChild fails unless span name exists in spans as a child of parent.
func requireChild(t *testing.T, spans map[string]*tracepb.Span, name string, parent *tracepb.Span) *tracepb.Span {
	t.Helper()
	s, ok := spans[name]
	require.True(t, ok, "no span %q in the trace; have %v", name, names(spans))
	require.Equal(t, spanID(parent), parentID(s), "%s is a child of %s", name, parent.GetName())
	return s
}

func names(spans map[string]*tracepb.Span) []string {
	var out []string
	for n := range spans {
		out = append(out, n)
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

const (
	incomingTrace = "0af7651916cd43dd8448eb211c80319c"
	incomingSpan  = "b7ad6b7169203331"
)

// One execution's span tree, continuing the caller's W3C trace: the server span (named after
// the route) under the caller's span, authentication and the domain operation under it, the
// execution under the operation, the provider's calls under the execution.
func TestTracesContinueTheCallersTrace(t *testing.T) {
	t.Parallel()
	for _, flavor := range []string{"thread", "queue"} {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t)
			e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) {
				c.Telemetry.OTLPEndpoint = rc.URL
				if flavor == "queue" {
					c.Sandbox.Broker.Flavor = config.FlavorQueue
					c.Sandbox.Broker.Queue = &config.Queue{Type: config.InMemory}
					c.Sandbox.Broker.ResponseStore = &config.ResponseStore{Type: config.InMemory}
				}
			}})
			tok := e.Token("alice")
			status, _, body := e.Do("POST", "/v1/sessions/default/commands", tok, strings.NewReader(`{"command":"echo traced"}`),
				map[string]string{"Content-Type": "application/json", "traceparent": "00-" + incomingTrace + "-" + incomingSpan + "-01"})
			require.Equal(t, http.StatusOK, status, "%s", body)
			require.Equal(t, http.StatusOK, get(e, "/healthz", ""))
			require.NoError(t, e.Gateway.FlushTraces(context.Background()))

			spans := rc.trace(incomingTrace)
			server, ok := spans["POST /v1/sessions/{session_id}/commands"]
			require.True(t, ok, "the server span is named after the route; have %v", names(spans))
			assert.Equal(t, incomingSpan, parentID(server), "the incoming traceparent is continued")
			assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, server.GetKind())
			requireChild(t, spans, "auth.authenticate", server)
			op := requireChild(t, spans, "sandbox.Execute", server)
			assert.Equal(t, "default", attr(op, "sandgate.profile"))
			run := requireChild(t, spans, "sandbox.execution", op)
			assert.Equal(t, "succeeded", attr(run, "sandgate.status"))
			create := requireChild(t, spans, "provider.create", run)
			assert.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, create.GetKind())
			assert.Equal(t, "local_subprocess", attr(create, "sandgate.provider"))
			requireChild(t, spans, "provider.exec", run)

			rc.mu.Lock()
			for _, s := range rc.spans {
				assert.NotContains(t, s.GetName(), "healthz", "probes are not traced")
			}
			assert.Contains(t, rc.services, "sandgate")
			rc.mu.Unlock()
		})
	}
}

// A request without traceparent starts a trace of its own; with tracing off, nothing is sent.
func TestTracesStartAndStayOff(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) { c.Telemetry.OTLPEndpoint = rc.URL }})
	require.Equal(t, http.StatusOK, get(e, "/v1/me", e.Token("alice")))
	require.NoError(t, e.Gateway.FlushTraces(context.Background()))
	rc.mu.Lock()
	var root *tracepb.Span
	for _, s := range rc.spans {
		if s.GetName() == "GET /v1/me" {
			root = s
		}
	}
	rc.mu.Unlock()
	require.NotNil(t, root)
	assert.Empty(t, root.GetParentSpanId(), "a new trace")

	off := newReceiver(t)
	e2 := gatewaytest.Start(t, gatewaytest.Options{Getenv: func(k string) string {
		if k == "OTEL_SDK_DISABLED" {
			return "true"
		}
		return ""
	}, Config: func(c *config.Config) { c.Telemetry.OTLPEndpoint = off.URL }})
	require.Equal(t, http.StatusOK, get(e2, "/v1/me", e2.Token("alice")))
	require.NoError(t, e2.Gateway.FlushTraces(context.Background()))
	off.mu.Lock()
	assert.Empty(t, off.spans, "OTEL_SDK_DISABLED=true turns tracing off")
	off.mu.Unlock()
}
