package gateway_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// While Postgres does not answer, the API says so: 503 problem "unavailable" with
// Retry-After, never a 500; once it is back, the same gateway serves again without a restart
// (issue: durable executions — "503 with Retry-After while Postgres is unreachable").
func TestPostgresOutageAnswersUnavailable(t *testing.T) {
	if _, err := devdb.FindBin(); err != nil {
		t.Skip(err)
	}
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "pg")
	inst, err := devdb.Start(ctx, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = devdb.StopDir(dir) })
	url := inst.URL("sandgate")
	st, err := postgres.Open(ctx, url, 2)
	require.NoError(t, err)
	_, err = st.Migrate(ctx)
	st.Close()
	require.NoError(t, err)

	e := gatewaytest.Start(t, gatewaytest.Options{DBURL: url})
	tok := e.Token("outage")
	code, _, body := e.Do("POST", "/v1/sessions", tok, strings.NewReader(`{"profile":"default"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusCreated, code, "%s", body)
	id := between(string(body), `"id":"`, `"`)

	require.NoError(t, inst.Stop())
	// Long enough for the session-lock presence connection to have noticed: an execution must
	// not wait for it to come back.
	time.Sleep(2 * time.Second)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + id, ""},
		{"GET", "/v1/sessions", ""},
		{"POST", "/v1/sessions/" + id + "/commands", `{"command":"true"}`},
		{"GET", "/v1/tasks", ""},
	} {
		var rd *strings.Reader
		if r.body != "" {
			rd = strings.NewReader(r.body)
		}
		h := map[string]string{"Content-Type": "application/json"}
		var code int
		var header http.Header
		var body []byte
		if rd != nil {
			code, header, body = e.Do(r.method, r.path, tok, rd, h)
		} else {
			code, header, body = e.Do(r.method, r.path, tok, nil, nil)
		}
		require.Equal(t, http.StatusServiceUnavailable, code, "%s %s: %s", r.method, r.path, body)
		require.Equal(t, "application/problem+json", header.Get("Content-Type"))
		require.Contains(t, string(body), `"type":"https://sandgate.dev/problems/unavailable"`, "%s %s", r.method, r.path)
		require.Equal(t, "5", header.Get("Retry-After"), "%s %s", r.method, r.path)
		require.NotContains(t, string(body), "127.0.0.1", "no addresses in the answer")
	}

	inst, err = devdb.Start(ctx, dir)
	require.NoError(t, err)
	require.Equal(t, url, inst.URL("sandgate"), "the server came back on its port")
	require.Eventually(t, func() bool {
		code, _, _ := e.Do("GET", "/v1/sessions/"+id, tok, nil, nil)
		return code == http.StatusOK
	}, 30*time.Second, 200*time.Millisecond, "the gateway serves again once Postgres is back")
	code, _, body = e.Do("POST", "/v1/sessions/"+id+"/commands", tok, strings.NewReader(`{"command":"echo back"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Contains(t, string(body), "back")
}
