package gateway_test

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// upstream is an HTTPS server on the host's loopback standing for one name, its leaf signed
// by the test's upstream CA, that records each request's Authorization header.
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

func startUpstream(t *testing.T, ca *egress.CA, host string) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		fmt.Fprintf(w, "hello from %s", host)
	}))
	leaf, err := ca.Leaf(host)
	require.NoError(t, err)
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

// lockedBuffer collects the gateway's logs; the gateway writes from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// secretsRig is what a gateway of the secrets tests runs against: HTTPS upstreams for
// allowed.test, other.test and denied.test on the host's loopback (leaves of upCA, the
// gateway's egress.upstream_ca_file), the egress state folder and secrets key every gateway
// of the test shares, and the gateway's captured logs.
type secretsRig struct {
	upCA                   *egress.CA
	caFile, stateDir, key  string
	allowed, other, denied *upstream
	logs                   *lockedBuffer
}

func newSecretsRig(t *testing.T) *secretsRig {
	t.Helper()
	upCA, err := egress.LoadOrCreateCA(t.TempDir(), "e2e39upstreamca0", nil)
	require.NoError(t, err)
	r := &secretsRig{upCA: upCA, caFile: filepath.Join(t.TempDir(), "upstream-ca.pem"), stateDir: filepath.Join(t.TempDir(), "egress"),
		key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), logs: &lockedBuffer{}}
	require.NoError(t, os.WriteFile(r.caFile, upCA.CertPEM(), 0o600))
	r.allowed, r.other, r.denied = startUpstream(t, upCA, "allowed.test"), startUpstream(t, upCA, "other.test"), startUpstream(t, upCA, "denied.test")
	return r
}

// start starts a gateway with profile box (docker, allowlist of allowed.test and other.test,
// strict) on database dbURL ("" for a fresh one).
func (r *secretsRig) start(t *testing.T, dbURL string) *gatewaytest.Env {
	t.Helper()
	return gatewaytest.Start(t, gatewaytest.Options{
		DBURL:  dbURL,
		Logger: slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config: func(c *config.Config) {
			c.Secrets.Keys = []string{"k1:" + r.key}
			c.Egress = config.Egress{
				StateDir:       r.stateDir,
				UpstreamCAFile: r.caFile,
				Hosts: map[string]string{
					"allowed.test": r.allowed.srv.Listener.Addr().String(),
					"other.test":   r.other.srv.Listener.Addr().String(),
					"denied.test":  r.denied.srv.Listener.Addr().String(),
				},
			}
			c.Sandbox.DefaultProfile = "box"
			c.Sandbox.Profiles = map[string]config.Profile{
				"box": {Type: docker.TypeName, Stateful: true,
					Policy: config.Policy{NetworkEgress: "allowlist", NetworkAllow: []string{"allowed.test", "other.test"}, Strict: new(true)},
					Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: dockerTestImage, Pull: docker.PullNever,
						Sandboxd: &docker.SandboxdBlock{Transport: string(docker.TransportSocket)}}}},
			}
		},
	})
}

// secretProbe runs in the sandbox: it calls the two allowed names with the placeholder as a
// bearer token, tries a name, an IP and a DNS lookup the profile does not allow, writes its
// environment to env.txt and prints one JSON object. UPSTREAM_CA is the test's upstream CA,
// which stands for the public roots: the proxy tunnels HTTPS to a host no secret is bound to
// without terminating it, so the program verifies that upstream itself.
const secretProbe = `
import json, os, socket, ssl, urllib.request, urllib.error
tls = ssl.create_default_context()
tls.load_verify_locations(cadata=UPSTREAM_CA)
def get(url, hdr=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=hdr or {}), timeout=30, context=tls) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except Exception as e:
        return ['error', repr(e)]
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP)})
    except socket.gaierror:
        return 'gaierror'
ph = os.environ['SANDGATE_SECRET_OPENAI']
with open('env.txt', 'w') as f:
    f.write(''.join('%s=%s\n' % kv for kv in sorted(os.environ.items())))
out = {'placeholder': ph}
out['allowed'] = get('https://allowed.test/v1/chat', {'Authorization': 'Bearer ' + ph})
out['other'] = get('https://other.test/v1/chat', {'Authorization': 'Bearer ' + ph})
out['denied'] = get('https://denied.test/', {'Authorization': 'Bearer ' + ph})
out['ip'] = get('https://192.0.2.10/')
out['dns'] = resolve('elsewhere.test')
print(json.dumps(out))
`

// The whole of issue 39 through the REST API, as a user meets it: a docker profile with an
// allowlist of names under strict, a secret put over /v1/secrets and bound to a session, and
// a program in that session calling HTTPS upstreams on the host's loopback (egress.hosts,
// egress.upstream_ca_file). The bound host receives the value; another allowed host the
// placeholder; another name, a raw IP and a DNS lookup are refused and audited; and the
// value is nowhere the sandbox, the API or the logs can show it.
func TestSecretsReachOnlyTheirHostsThroughTheGateway(t *testing.T) {
	requireDockerImage(t)
	t.Parallel()
	const value = "sk-live-e2e39-0123456789abcdef-THE-VALUE"

	rig := newSecretsRig(t)
	e := rig.start(t, "")
	allowed, other, denied, upCA := rig.allowed, rig.other, rig.denied, rig.upCA
	tok, admin := e.Token("alice"), e.Token("auditor", "admins")
	call := func(method, path, tok, body string, want ...int) map[string]any {
		t.Helper()
		st, _, out := e.Do(method, path, tok, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
		require.Contains(t, want, st, "%s %s: %s", method, path, out)
		var m map[string]any
		require.NoError(t, json.Unmarshal(out, &m), "%s", out)
		return m
	}
	rawGet := func(path, tok string) string {
		t.Helper()
		st, _, out := e.Do(http.MethodGet, path, tok, nil, nil)
		require.Equal(t, http.StatusOK, st, "GET %s: %s", path, out)
		return string(out)
	}

	// The secret, written once and never answered.
	put := call(http.MethodPut, "/v1/secrets/openai", tok, `{"value":"`+value+`","hosts":["allowed.test"]}`, http.StatusCreated)
	assert.Equal(t, "openai", put["name"])
	assert.NotContains(t, rawGet("/v1/secrets", tok), value)

	sid := call(http.MethodPost, "/v1/sessions", tok, `{"profile":"box","secrets":["openai"]}`, http.StatusCreated)["id"].(string)
	code, err := json.Marshal(map[string]string{"code": "UPSTREAM_CA = '''" + string(upCA.CertPEM()) + "'''\n" + secretProbe})
	require.NoError(t, err)
	res := call(http.MethodPost, "/v1/sessions/"+sid+"/code", tok, string(code), http.StatusOK)
	require.EqualValues(t, 0, res["exit_code"], "stderr: %v", res["stderr"])
	var out struct {
		Placeholder string `json:"placeholder"`
		Allowed     []any  `json:"allowed"`
		Other       []any  `json:"other"`
		Denied      []any  `json:"denied"`
		IP          []any  `json:"ip"`
		DNS         any    `json:"dns"`
	}
	require.NoError(t, json.Unmarshal([]byte(res["stdout"].(string)), &out), "stdout: %v", res["stdout"])
	ph := out.Placeholder
	require.NotEmpty(t, ph)
	require.NotContains(t, ph, value)

	// allowed.test receives the value; other.test (allowed, not bound) the placeholder;
	// denied.test nothing.
	require.Len(t, out.Allowed, 2)
	assert.EqualValues(t, 200, out.Allowed[0], "https://allowed.test: %v", out.Allowed)
	assert.Equal(t, "hello from allowed.test", out.Allowed[1])
	assert.Equal(t, []string{"Bearer " + value}, allowed.seen(), "the bound host receives the value")
	require.Len(t, out.Other, 2)
	assert.EqualValues(t, 200, out.Other[0], "https://other.test: %v", out.Other)
	assert.Equal(t, []string{"Bearer " + ph}, other.seen(), "a host the secret is not bound to receives the placeholder")
	assert.Empty(t, denied.seen(), "a name the profile does not allow is never reached")
	require.Len(t, out.Denied, 2)
	assert.Contains(t, out.Denied[1], "403", "https://denied.test: %v", out.Denied)
	require.Len(t, out.IP, 2)
	assert.Contains(t, out.IP[1], "403", "a raw IP: %v", out.IP)
	assert.Equal(t, "gaierror", out.DNS, "a DNS lookup of a name not allowed")

	// The refusals are in the audit log, as the session's.
	var audit string
	wantTargets := []string{`"denied.test:443"`, `"192.0.2.10:443"`, `"elsewhere.test:`}
	require.Eventually(t, func() bool {
		_, _, b := e.Do(http.MethodGet, "/v1/audit?kind=egress_refused&session_id="+sid, admin, nil, nil)
		audit = string(b)
		for _, w := range wantTargets {
			if !strings.Contains(audit, w) {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond, "refusals audited as %v", wantTargets)
	assert.Contains(t, audit, `"egress_refused"`)

	// The environment, every process's /proc/<pid>/environ, the file the program wrote, and
	// the task's output hold the placeholder, never the value.
	shell := call(http.MethodPost, "/v1/sessions/"+sid+"/commands", tok,
		`{"command":"env; echo ---; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; echo ---; cat env.txt"}`, http.StatusOK)
	seen := shell["stdout"].(string)
	parts := strings.Split(seen, "---\n")
	require.Len(t, parts, 3, "%s", seen)
	for i, where := range []string{"env", "/proc/*/environ", "env.txt"} {
		assert.Contains(t, parts[i], "SANDGATE_SECRET_OPENAI="+ph, "%s holds the placeholder", where)
		assert.NotContains(t, parts[i], value, "%s holds the value", where)
	}
	taskID, _ := res["task_id"].(string)
	require.NotEmpty(t, taskID, "the execution's task: %v", res)
	task := rawGet("/v1/tasks/"+taskID, tok)
	assert.Contains(t, task, ph)
	assert.NotContains(t, task, value, "the task")
	assert.NotContains(t, rawGet("/v1/tasks/"+taskID+"/output", tok), value, "the task's output")

	// A snapshot of the session, restored into a new one: env.txt comes back with the
	// placeholder, and no file of it holds the value (the value is split in the command, so
	// the command's own audit row does not hold it either).
	snap := call(http.MethodPost, "/v1/sessions/"+sid+"/snapshots", tok, `{"name":"with a secret"}`, http.StatusCreated)["id"].(string)
	restored := call(http.MethodPost, "/v1/sessions", tok, `{"profile":"box","from_snapshot":"`+snap+`"}`, http.StatusCreated)["id"].(string)
	back := call(http.MethodPost, "/v1/sessions/"+restored+"/commands", tok,
		`{"command":"cat env.txt; echo ---; grep -rlF -e '`+value[:10]+`''`+value[10:]+`' . || echo no-file-holds-it"}`, http.StatusOK)
	backOut := back["stdout"].(string)
	assert.Contains(t, backOut, "SANDGATE_SECRET_OPENAI="+ph, "the snapshot keeps the file with the placeholder: %s", backOut)
	assert.Contains(t, backOut, "no-file-holds-it")
	assert.NotContains(t, backOut, value)

	// Nor the session as the API shows it, nor the audit rows of anything the session did, nor
	// the gateway's logs.
	assert.NotContains(t, rawGet("/v1/sessions/"+sid, tok), value, "the session")
	assert.NotContains(t, rawGet("/v1/audit?session_id="+sid+"&limit=500", admin), value, "the audit log")
	assert.NotContains(t, rawGet("/v1/audit?limit=500", admin), value, "the audit log")
	assert.NotContains(t, rig.logs.String(), value, "the gateway's logs")
}

// A secret replaced or deleted takes effect from its session's next call (docs/semantics.md
// §15: from the sandbox's next attach), on the gateway that made the sandbox and on another
// replica (as after a restart) alike: the host receives the value as it is now, or the bare
// placeholder once the secret is gone; the sandbox and its placeholder stay. (A stopped
// gatewaytest gateway removes its sandboxes, so the first one stays up.)
func TestSecretChangesReachTheSessionsNextCall(t *testing.T) {
	requireDockerImage(t)
	t.Parallel()
	rig := newSecretsRig(t)
	e := rig.start(t, "")
	// An API key, so the other gateway (with an issuer of its own) knows the same principal.
	st, _, out := e.Do(http.MethodPost, "/v1/api-keys", e.Token("alice"), strings.NewReader(`{"name":"across a restart"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusCreated, st, "%s", out)
	var apiKey struct {
		Secret string `json:"secret"`
	}
	require.NoError(t, json.Unmarshal(out, &apiKey))
	tok := apiKey.Secret
	call := func(e *gatewaytest.Env, method, path, body string, want ...int) map[string]any {
		t.Helper()
		st, _, out := e.Do(method, path, tok, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
		require.Contains(t, want, st, "%s %s: %s", method, path, out)
		var m map[string]any
		require.NoError(t, json.Unmarshal(out, &m), "%s", out)
		return m
	}
	code, err := json.Marshal(map[string]string{"code": "UPSTREAM_CA = '''" + string(rig.upCA.CertPEM()) + "'''\n" + `
import os, ssl, urllib.request
tls = ssl.create_default_context()
tls.load_verify_locations(cadata=UPSTREAM_CA)
ph = os.environ['SANDGATE_SECRET_OPENAI']
req = urllib.request.Request('https://allowed.test/', headers={'Authorization': 'Bearer ' + ph})
print(ph, urllib.request.urlopen(req, timeout=30, context=tls).read().decode())`})
	require.NoError(t, err)

	call(e, http.MethodPut, "/v1/secrets/openai", `{"value":"first-value-e2e39","hosts":["allowed.test"]}`, http.StatusCreated)
	sid := call(e, http.MethodPost, "/v1/sessions", `{"profile":"box","secrets":["openai"]}`, http.StatusCreated)["id"].(string)
	res := call(e, http.MethodPost, "/v1/sessions/"+sid+"/code", string(code), http.StatusOK)
	require.EqualValues(t, 0, res["exit_code"], "stderr: %v", res["stderr"])
	first := strings.Fields(res["stdout"].(string))
	require.Len(t, first, 4, "stdout: %v", res["stdout"])
	assert.Equal(t, []string{"Bearer first-value-e2e39"}, rig.allowed.seen())
	box := call(e, http.MethodGet, "/v1/sessions/"+sid, "", http.StatusOK)["sandbox_id"]

	run := func(e *gatewaytest.Env) string {
		t.Helper()
		res := call(e, http.MethodPost, "/v1/sessions/"+sid+"/code", string(code), http.StatusOK)
		require.EqualValues(t, 0, res["exit_code"], "stderr: %v", res["stderr"])
		assert.Empty(t, res["notice"], "the session's sandbox was attached, not recreated")
		assert.Equal(t, box, call(e, http.MethodGet, "/v1/sessions/"+sid, "", http.StatusOK)["sandbox_id"], "the same sandbox")
		out := strings.Fields(res["stdout"].(string))
		require.NotEmpty(t, out, "stdout: %v", res["stdout"])
		assert.Equal(t, first[0], out[0], "the same placeholder")
		seen := rig.allowed.seen()
		return seen[len(seen)-1]
	}
	call(e, http.MethodPut, "/v1/secrets/openai", `{"value":"second-value-e2e39","hosts":["allowed.test"]}`, http.StatusOK)
	assert.Equal(t, "Bearer second-value-e2e39", run(e), "replaced: the same gateway sends the new value")
	st, _, out = e.Do(http.MethodDelete, "/v1/secrets/openai", tok, nil, nil)
	require.Equal(t, http.StatusNoContent, st, "%s", out)
	assert.Equal(t, "Bearer "+first[0], run(e), "deleted: the placeholder goes out with nothing behind it")

	call(e, http.MethodPut, "/v1/secrets/openai", `{"value":"third-value-e2e39","hosts":["allowed.test"]}`, http.StatusCreated)
	again := rig.start(t, e.DBURL)
	assert.Equal(t, "Bearer third-value-e2e39", run(again), "another replica attaches the sandbox with the value as it is now")
	assert.Len(t, rig.allowed.seen(), 4)
	assert.NotContains(t, rig.logs.String(), "value-e2e39", "the gateways' logs")
}
