package telemetry_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/telemetry"
)

// series lists every series of families as "name{label=value,…}", sorted.
func series(families map[string]*dto.MetricFamily) []string {
	var out []string
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, name+"{"+strings.Join(labels, ",")+"}")
		}
	}
	slices.Sort(out)
	return out
}

// randomToken is a random HTTP token (RFC 9110 §5.6.2) of n characters: a method name the
// server takes.
func randomToken(rnd *rand.Rand, n int) string {
	const tchar = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	for i := range b {
		b[i] = tchar[rnd.IntN(len(tchar))]
	}
	return "X" + string(b) // never a standard method
}

func randomSegment(rnd *rand.Rand) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789-_."
	b := make([]byte, 1+rnd.IntN(40))
	for i := range b {
		b[i] = chars[rnd.IntN(len(chars))]
	}
	return string(b)
}

// The HTTP metrics take labels from fixed sets only (issue 33): requests with made-up
// methods, paths and status codes leave the set of series as it was after one request of
// each kind; each route keeps its own pattern as label, mounted routers and handlers
// included.
func TestHTTPLabelsAreFixedSets(t *testing.T) {
	t.Parallel()
	m := telemetry.New(telemetry.Options{Profiles: []string{"default"}})
	r := chi.NewRouter()
	r.Get("/v1/things/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	// A server behind a preview port answers with any code from 100 to 999.
	r.Handle("/ports/{code}/*", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(chi.URLParam(r, "code"))
		w.WriteHeader(code)
	}))
	sub := chi.NewRouter()
	sub.Post("/calls/{name}", func(w http.ResponseWriter, _ *http.Request) {})
	r.Mount("/sub", sub)
	r.Mount("/plain", http.StripPrefix("/plain", http.NotFoundHandler()))
	h := telemetry.ServerHandler(r, m, nil)

	serve := func(method, path string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Method, req.URL.Path, req.RequestURI = method, path, path
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	rnd := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	kinds := []func(){
		func() { serve(randomToken(rnd, 1+rnd.IntN(200)), "/"+randomSegment(rnd)) },
		func() { serve(randomToken(rnd, 1+rnd.IntN(200)), "/v1/things/"+randomSegment(rnd)) },
		func() { serve(http.MethodGet, "/r-"+randomSegment(rnd)+"/"+randomSegment(rnd)) },
		func() { serve(http.MethodGet, "/v1/things/"+randomSegment(rnd)) },
		func() { serve(http.MethodGet, fmt.Sprintf("/ports/%d/%s", 600+rnd.IntN(400), randomSegment(rnd))) },
		func() { serve(http.MethodPost, "/sub/calls/"+randomSegment(rnd)) },
		func() { serve(http.MethodGet, "/plain/"+randomSegment(rnd)) },
	}
	for _, kind := range kinds {
		kind()
	}
	before := scrape(t, m)
	for range 1000 {
		kinds[rnd.IntN(len(kinds))]()
	}
	after := scrape(t, m)
	require.Equal(t, series(before), series(after), "the same series, however many made-up values")

	routes := map[string]bool{}
	methods := map[string]bool{}
	codes := map[string]bool{}
	for _, mt := range after[telemetry.MetricHTTPDuration].GetMetric() {
		for _, l := range mt.GetLabel() {
			map[string]map[string]bool{"route": routes, "method": methods, "code": codes}[l.GetName()][l.GetValue()] = true
		}
	}
	assert.Equal(t, map[string]bool{"unmatched": true, "/v1/things/{id}": true, "/ports/{code}/*": true, "/sub/calls/{name}": true, "/plain/*": true}, routes)
	assert.Equal(t, map[string]bool{"other": true, "GET": true, "POST": true}, methods)
	assert.Equal(t, map[string]bool{"404": true, "405": true, "200": true, "other": true}, codes)
}

// Values from the domain outside their sets (a profile no longer configured, an unknown
// kind) are counted as "other", never as themselves.
func TestDomainLabelsAreFixedSets(t *testing.T) {
	t.Parallel()
	m := telemetry.New(telemetry.Options{Profiles: []string{"default"}, Providers: []string{"docker"}})
	m.ExecutionFinished("default", "docker", "succeeded", time.Second)
	m.ExecutionFinished("gone-profile", "made-up", "no-such-status", time.Second)
	m.ProviderError("default", "docker", "exec", "timeout")
	m.ProviderError("x", "y", "made-up-op", "made-up-kind")
	m.AuthFailed("expired")
	m.AuthFailed("made-up")
	m.Delivery("made-up", false)
	f := scrape(t, m)
	got := series(f)
	want := []string{
		telemetry.MetricAuthFailures + "{reason=expired}",
		telemetry.MetricAuthFailures + "{reason=other}",
		telemetry.MetricExecutionDuration + "{profile=default,provider=docker,status=succeeded}",
		telemetry.MetricExecutionDuration + "{profile=other,provider=other,status=other}",
		telemetry.MetricProviderErrors + "{kind=other,operation=other,profile=other,provider=other}",
		telemetry.MetricProviderErrors + "{kind=timeout,operation=exec,profile=default,provider=docker}",
		telemetry.MetricQueueDeliveries + "{outcome=other}",
	}
	for _, w := range want {
		assert.Contains(t, got, w)
	}
}
