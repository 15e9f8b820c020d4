package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// docs/semantics.md §14 end to end: Prometheus metrics on their own listener after real
// executions, and the audit log through the REST API.

// scrape reads e's /metrics with the Prometheus text parser.
func scrape(t *testing.T, e *gatewaytest.Env) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(e.MetricsURL())
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// sample is the value of family's metric with exactly labels (a histogram: its count), or
// -1 when there is none.
func sample(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f, ok := families[name]
	if !ok {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

func do(t *testing.T, e *gatewaytest.Env, method, path, tok, body string) gatewaytest.Reply {
	t.Helper()
	var r io.Reader
	h := map[string]string{}
	if body != "" {
		r = strings.NewReader(body)
		h["Content-Type"] = "application/json"
	}
	status, header, b := e.Do(method, path, tok, r, h)
	return gatewaytest.Reply{Status: status, Header: header, Body: b}
}

func TestMetricsAfterRealExecutions(t *testing.T) {
	t.Parallel()
	broken := filepath.Join(t.TempDir(), "broken")
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) {
		c.Server.MetricsAddr = "127.0.0.1:0"
		wd := t.TempDir()
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: wd}}},
			"oneshot": {Type: local.TypeName, Scope: sandbox.ScopePerCall, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: wd}}},
			"broken":  {Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: broken}}},
			// Held on pause (local sandboxes cannot freeze): its executions are refused.
			"lax": {Type: local.TypeName, Policy: config.Policy{Strict: new(bool)}, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: wd}}},
		}
	}})
	// The broken profile's folder becomes a file: its provider can create no sandbox.
	require.NoError(t, os.RemoveAll(broken))
	require.NoError(t, os.WriteFile(broken, []byte("not a folder"), 0o600))

	tok := e.Token("alice")
	sess := do(t, e, "POST", "/v1/sessions", tok, `{"name":"m"}`)
	require.Equal(t, http.StatusCreated, sess.Status, "%s", sess.Body)
	sid := sess.JSON(t)["id"].(string)
	for _, cmd := range []string{`echo one`, `exit 3`} {
		r := do(t, e, "POST", "/v1/sessions/"+sid+"/commands", tok, fmt.Sprintf(`{"command":%q}`, cmd))
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	run := do(t, e, "POST", "/v1/runs", tok, `{"profile":"oneshot","command":"true"}`)
	require.Equal(t, http.StatusOK, run.Status, "%s", run.Body)
	// Caller mistakes the provider refuses are no provider errors: a file under a file, a
	// file over a folder.
	for _, w := range []struct {
		path string
		ok   bool
	}{{"one.txt", true}, {"one.txt/under.txt", false}, {"dir/x.txt", true}, {"dir", false}} {
		path := w.path
		st, _, b := e.Do("PUT", "/v1/sessions/"+sid+"/files/"+path, tok, strings.NewReader("x"), map[string]string{"Content-Type": "application/octet-stream"})
		if w.ok {
			require.Equal(t, http.StatusOK, st, "%s", b)
		} else {
			require.Less(t, st, 500, "%s: %s", path, b)
			require.GreaterOrEqual(t, st, 400, "%s: %s", path, b)
		}
	}
	failed := do(t, e, "POST", "/v1/sessions/default/commands?profile=broken", tok, `{"command":"true"}`)
	failed.RequireProblem(t, http.StatusBadGateway, "provision")
	// An execution refused before it starts (a paused session) is no execution: no task, and
	// no execution metric.
	lax := do(t, e, "POST", "/v1/sessions", tok, `{"profile":"lax"}`).JSON(t)["id"].(string)
	require.Equal(t, http.StatusOK, do(t, e, "POST", "/v1/sessions/"+lax+"/commands", tok, `{"command":"true"}`).Status)
	require.Equal(t, http.StatusOK, do(t, e, "POST", "/v1/sessions/"+lax+"/pause", tok, "").Status)
	do(t, e, "POST", "/v1/sessions/"+lax+"/commands", tok, `{"command":"true"}`).RequireProblem(t, http.StatusConflict, "paused")
	assert.Len(t, do(t, e, "GET", "/v1/tasks?session_id="+lax, tok, "").JSON(t)["tasks"], 1, "the refused execution left no task")
	// Two refused requests: no token, and one that is no bearer token.
	require.Equal(t, http.StatusUnauthorized, get(e, "/v1/me", ""))
	status, _, _ := e.Do("GET", "/v1/me", "", nil, map[string]string{"Authorization": "Basic YWxpY2U6c2VjcmV0"})
	require.Equal(t, http.StatusUnauthorized, status)

	f := scrape(t, e)
	exec := func(profile, status string) float64 {
		return sample(f, "sandgate_execution_duration_seconds", map[string]string{"profile": profile, "provider": "local_subprocess", "status": status})
	}
	assert.EqualValues(t, 2, exec("default", "succeeded"), "a non-zero exit is a succeeded task")
	assert.EqualValues(t, 1, exec("oneshot", "succeeded"))
	assert.EqualValues(t, 1, exec("broken", "failed"))
	assert.EqualValues(t, 1, exec("lax", "succeeded"))
	assert.EqualValues(t, -1, exec("lax", "failed"), "a refusal is no failed execution")
	assert.EqualValues(t, 1, sample(f, "sandgate_provider_errors_total",
		map[string]string{"profile": "broken", "provider": "local_subprocess", "operation": "create", "kind": "provision"}))
	for _, m := range f["sandgate_provider_errors_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "operation" {
				assert.NotEqual(t, "write_file", l.GetValue(), "a caller's mistake: %v", m.GetLabel())
			}
		}
	}
	assert.EqualValues(t, 1, sample(f, "sandgate_auth_failures_total", map[string]string{"reason": "missing"}))
	assert.EqualValues(t, 1, sample(f, "sandgate_auth_failures_total", map[string]string{"reason": "malformed"}))

	// Database-wide counts: alice's session (its sandbox made by the first command) and the
	// broken profile's default session, which never got one.
	assert.EqualValues(t, 1, sample(f, "sandgate_sessions", map[string]string{"profile": "default", "state": "provisioned"}))
	assert.EqualValues(t, 0, sample(f, "sandgate_sessions", map[string]string{"profile": "default", "state": "unprovisioned"}))
	assert.EqualValues(t, 1, sample(f, "sandgate_sessions", map[string]string{"profile": "broken", "state": "unprovisioned"}))
	assert.EqualValues(t, 2, sample(f, "sandgate_tasks", map[string]string{"profile": "default", "status": "succeeded"}))
	assert.EqualValues(t, 1, sample(f, "sandgate_tasks", map[string]string{"profile": "broken", "status": "failed"}))
	assert.EqualValues(t, 0, sample(f, "sandgate_tasks", map[string]string{"profile": "default", "status": "running"}), "known statuses are reported as 0")
	assert.EqualValues(t, 0, sample(f, "sandgate_queue_depth", map[string]string{}))
	assert.EqualValues(t, 1, sample(f, "sandgate_store_counts_up", map[string]string{}))
	assert.EqualValues(t, 3, sample(f, "sandgate_http_request_duration_seconds",
		map[string]string{"route": "/v1/sessions/{session_id}/commands", "method": "POST", "code": "200"}), "by route pattern (two sessions)")
	assert.EqualValues(t, 1, sample(f, "sandgate_build_info", map[string]string{"version": "", "role": "gateway"}))
	require.Contains(t, f, "go_goroutines")

	// Low cardinality: no id or subject is a label value.
	task := run.JSON(t)["task_id"].(string)
	for name, fam := range f {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, secret := range []string{sid, task, "alice"} {
					require.NotContains(t, l.GetValue(), secret, "%s{%s}", name, l.GetName())
				}
			}
		}
	}

	// Not on the listener tenants reach.
	require.Equal(t, http.StatusNotFound, get(e, "/metrics", tok))
}

// The database-wide counts are read at most once per TTL whatever the number of scrapes.
func TestMetricsCountsAreCached(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) { c.Server.MetricsAddr = "127.0.0.1:0" }})
	tok := e.Token("alice")
	f := scrape(t, e)
	require.EqualValues(t, 0, sample(f, "sandgate_sessions", map[string]string{"profile": "default", "state": "unprovisioned"}))
	r := do(t, e, "POST", "/v1/sessions", tok, `{}`)
	require.Equal(t, http.StatusCreated, r.Status)
	f = scrape(t, e)
	assert.EqualValues(t, 0, sample(f, "sandgate_sessions", map[string]string{"profile": "default", "state": "unprovisioned"}),
		"the count read moments ago is reused")
}

func TestAuditEndpoint(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{})
	alice, bob, admin := e.Token("alice"), e.Token("bob"), e.Token("root", "admins")

	r := do(t, e, "POST", "/v1/sessions", alice, `{"name":"audited"}`)
	require.Equal(t, http.StatusCreated, r.Status)
	sid := r.JSON(t)["id"].(string)
	r = do(t, e, "POST", "/v1/sessions/"+sid+"/commands", alice, `{"command":"echo secret-free; exit 7"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	status, _, body := e.Do("PUT", "/v1/sessions/"+sid+"/files/in/data.bin", alice, strings.NewReader("0123456789"), nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	r = do(t, e, "POST", "/v1/sessions/default/code", bob, `{"code":"print(6*7)"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = do(t, e, "DELETE", "/v1/sessions/"+sid, alice, "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// Admins only.
	do(t, e, "GET", "/v1/audit", alice, "").RequireProblem(t, http.StatusForbidden, "forbidden")
	require.Equal(t, http.StatusUnauthorized, get(e, "/v1/audit", ""))

	list := func(query string) (events []map[string]any, next string) {
		t.Helper()
		r := do(t, e, "GET", "/v1/audit"+query, admin, "")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var page struct {
			Events     []map[string]any `json:"events"`
			NextCursor string           `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &page))
		return page.Events, page.NextCursor
	}
	all, next := list("")
	require.Empty(t, next)
	var kinds []string
	for _, ev := range all {
		kinds = append(kinds, ev["kind"].(string))
	}
	require.Equal(t, []string{"session_destroy", "execution", "session_create", "file_write", "execution", "session_create"}, kinds)

	exec := all[4]
	iss := e.Issuer.URL()
	assert.Equal(t, iss+"#alice", exec["principal"])
	assert.Equal(t, sid, exec["session_id"])
	assert.Equal(t, "default", exec["profile"])
	assert.Equal(t, "execute_command", exec["operation"])
	assert.Equal(t, "echo secret-free; exit 7", exec["excerpt"])
	assert.Equal(t, "succeeded", exec["status"])
	assert.EqualValues(t, 7, exec["exit_code"])
	assert.NotNil(t, exec["duration_ms"])
	assert.NotEmpty(t, exec["task_id"])
	assert.Len(t, exec["digest"], 64)

	write := all[3]
	assert.Equal(t, "in/data.bin", write["target"])
	assert.EqualValues(t, 10, write["size"])
	assert.Equal(t, "84d89877f0d4041efb6bf91a16f0248f2fd573e6af05c19f96bedb9f882f7882", write["digest"], "SHA-256 of the bytes written")

	// Filters and the cursor.
	bobs, _ := list("?principal=" + url.QueryEscape(iss+"#bob"))
	require.Len(t, bobs, 2)
	byID, _ := list("?principal=" + bobs[0]["principal_id"].(string))
	require.Len(t, byID, 2)
	inSession, _ := list("?session_id=" + sid + "&kind=execution")
	require.Len(t, inSession, 1)
	since := all[2]["at"].(string)
	recent, _ := list("?since=" + url.QueryEscape(since))
	require.GreaterOrEqual(t, len(recent), 3)
	none, _ := list("?until=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)))
	require.Empty(t, none)
	page, next := list("?limit=4")
	require.Len(t, page, 4)
	require.NotEmpty(t, next)
	rest, last := list("?limit=4&cursor=" + next)
	require.Len(t, rest, 2)
	require.Empty(t, last)
	require.Equal(t, all[4]["id"], rest[0]["id"])
	do(t, e, "GET", "/v1/audit?kind=nonsense", admin, "").RequireProblem(t, http.StatusBadRequest, "validation")
	do(t, e, "GET", "/v1/audit?cursor=bogus", admin, "").RequireProblem(t, http.StatusBadRequest, "validation")
}

// The sweeper deletes audit events past audit.retention, on the domain's clock.
func TestAuditRetentionOnTheGateway(t *testing.T) {
	t.Parallel()
	clock := sandboxtest.NewClock(time.Now())
	e := gatewaytest.Start(t, gatewaytest.Options{Now: clock.Now, Config: func(c *config.Config) {
		c.Audit.Retention = config.Duration(24 * time.Hour)
	}})
	alice, admin := e.Token("alice"), e.Token("root", "admins")
	require.Equal(t, http.StatusCreated, do(t, e, "POST", "/v1/sessions", alice, `{}`).Status)
	clock.Advance(25 * time.Hour)
	require.Equal(t, http.StatusCreated, do(t, e, "POST", "/v1/sessions", alice, `{}`).Status)
	e.Service().SweepNow(context.Background())
	r := do(t, e, "GET", "/v1/audit", admin, "")
	require.Equal(t, http.StatusOK, r.Status)
	events := r.JSON(t)["events"].([]any)
	require.Len(t, events, 1, "the event of 25 h ago is gone: %s", r.Body)
}
