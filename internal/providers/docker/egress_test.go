package docker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// echoServer is an HTTPS server on the host's loopback for one name, with a leaf of ca, that
// records each request's Authorization header and echoes it.
type echoServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func (e *echoServer) seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.auth...)
}

func startEcho(t *testing.T, ca *egress.CA, host string) *echoServer {
	t.Helper()
	e := &echoServer{}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		e.mu.Lock()
		e.auth = append(e.auth, a)
		e.mu.Unlock()
		w.Header().Set("X-Echo", a)
		fmt.Fprintf(w, "hello from %s; you sent %s", host, a)
	}))
	leaf, err := ca.Leaf(host)
	require.NoError(t, err)
	e.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

// egressRig is an egress proxy mapping allowed.test and other.test to echo servers on the
// host's loopback (their leaves signed by the proxy's own CA, which sandboxes trust), and
// recording its refusals.
type egressRig struct {
	proxy          *egress.Proxy
	allowed, other *echoServer
	mu             sync.Mutex
	refusals       []egress.Refusal
}

func (r *egressRig) refused() []egress.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]egress.Refusal(nil), r.refusals...)
}

func newEgressRig(t *testing.T) *egressRig {
	t.Helper()
	requireEngine(t)
	ca, err := egress.LoadOrCreateCA(t.TempDir(), testInstallation, nil)
	require.NoError(t, err)
	r := &egressRig{allowed: startEcho(t, ca, "allowed.test"), other: startEcho(t, ca, "other.test")}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	r.proxy, err = egress.New(egress.Config{
		Hosts: map[string]string{
			"allowed.test": r.allowed.srv.Listener.Addr().String(),
			"other.test":   r.other.srv.Listener.Addr().String(),
		},
		RootCAs: roots, CA: ca, Logger: quietLogs,
		RefusedFunc: func(f egress.Refusal) { r.mu.Lock(); r.refusals = append(r.refusals, f); r.mu.Unlock() },
	})
	require.NoError(t, err)
	t.Cleanup(r.proxy.Close)
	return r
}

const (
	egressSecretValue = "sk-live-9f8e7d6c5b4a-THE-VALUE"
	egressPlaceholder = "sandgate-secret-placeholder-0f1e2d3c4b5a"
)

var egressPol = func() providers.Policy {
	p := allowPol
	p.NetworkEgress, p.NetworkAllow = providers.EgressAllowlist, []string{"allowed.test", "other.test:443"}
	p.Secrets = []providers.SecretBinding{{Name: "api", EnvName: "SANDGATE_SECRET_API", Placeholder: egressPlaceholder,
		Value: []byte(egressSecretValue), Hosts: []string{"allowed.test"}}}
	return p
}()

// egressProbe asks, from inside the sandbox, everything the tests check; it prints one JSON
// object.
const egressProbe = `
import json, os, socket, urllib.request, urllib.error
def get(url, hdr=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=hdr or {}), timeout=30) as r:
            return [r.status, r.read().decode(), r.headers.get('X-Echo', '')]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(), '']
    except Exception as e:
        return ['error', repr(e), '']
ph = os.environ['SANDGATE_SECRET_API']
out = {'placeholder': ph}
out['allowed'] = get('https://allowed.test/v1', {'Authorization': 'Bearer ' + ph})
out['other'] = get('https://other.test/v1', {'Authorization': 'Bearer ' + ph})
out['denied'] = get('https://denied.test/')
out['denied_http'] = get('http://denied.test/')
out['ip'] = get('https://192.0.2.10/')
def resolve(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP)})
    except socket.gaierror as e:
        return 'gaierror'
out['dns_allowed'] = resolve('allowed.test')
out['dns_denied'] = resolve('denied.test')
def direct(addr):
    try:
        socket.create_connection(addr, timeout=3).close()
        return 'connected'
    except OSError as e:
        return 'failed'
out['direct'] = direct(('192.0.2.10', 443))
print(json.dumps(out))
`

type probeResult struct {
	Placeholder string `json:"placeholder"`
	Allowed     []any  `json:"allowed"`
	Other       []any  `json:"other"`
	Denied      []any  `json:"denied"`
	DeniedHTTP  []any  `json:"denied_http"`
	IP          []any  `json:"ip"`
	DNSAllowed  any    `json:"dns_allowed"`
	DNSDenied   any    `json:"dns_denied"`
	Direct      string `json:"direct"`
}

func probe(t *testing.T, sb providers.Sandbox) (probeResult, string) {
	t.Helper()
	r := run(t, sb, providers.ExecSpec{Code: egressProbe, Language: "python", Timeout: 2 * time.Minute})
	require.NoError(t, r.err)
	require.Equal(t, 0, r.st.ExitCode, r.stderr)
	var out probeResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	return out, r.stdout + r.stderr
}

func TestEgressProxyAllowsNamesAndSubstitutesSecrets(t *testing.T) {
	t.Parallel()
	rig := newEgressRig(t)
	p := newProvider(t, func(o *docker.Options) { o.Egress = rig.proxy; o.Config.Sandboxd.Transport = docker.TransportSocket })
	sb := create(t, p, egressPol)

	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, "none", string(ins.HostConfig.NetworkMode), "no route but the proxy")
	assert.Equal(t, "proxy", ins.Config.Labels[docker.LabelEgress])

	out, raw := probe(t, sb)
	assert.NotContains(t, raw, egressSecretValue, "the value reached the sandbox's output")
	assert.Equal(t, egressPlaceholder, out.Placeholder)

	// allowed.test: reached, the value substituted on the way out, scrubbed on the way back.
	require.Len(t, out.Allowed, 3)
	assert.EqualValues(t, 200, out.Allowed[0], "allowed.test: %v", out.Allowed)
	assert.Equal(t, "hello from allowed.test; you sent Bearer "+egressPlaceholder, out.Allowed[1])
	assert.Equal(t, "Bearer "+egressPlaceholder, out.Allowed[2])
	assert.Equal(t, []string{"Bearer " + egressSecretValue}, rig.allowed.seen(), "the bound host receives the value")

	// other.test: allowed, not bound: the placeholder goes out unchanged.
	assert.EqualValues(t, 200, out.Other[0], "other.test: %v", out.Other)
	assert.Equal(t, []string{"Bearer " + egressPlaceholder}, rig.other.seen(), "a host the secret is not bound to receives the placeholder")

	// Refused: another name, a raw IP, plain HTTP, DNS of another name, and a direct dial.
	assert.Equal(t, "error", out.Denied[0])
	assert.Contains(t, out.Denied[1], "403", "https://denied.test: %v", out.Denied)
	assert.EqualValues(t, 403, out.DeniedHTTP[0])
	assert.Contains(t, out.DeniedHTTP[1], "denied.test:80")
	assert.Contains(t, out.DeniedHTTP[1], "network_allow")
	assert.Contains(t, out.IP[1], "403", "a raw IP: %v", out.IP)
	assert.Equal(t, []any{"127.0.0.1"}, out.DNSAllowed)
	assert.Equal(t, "gaierror", out.DNSDenied)
	assert.Equal(t, "failed", out.Direct, "a connection ignoring the proxy has no route")

	seen := map[string]bool{}
	for _, f := range rig.refused() {
		assert.Equal(t, sb.ID(), f.Sandbox)
		assert.Equal(t, agent.Subject, f.Owner)
		seen[fmt.Sprintf("%s %s:%d", f.Kind, f.Host, f.Port)] = true
	}
	for _, want := range []string{"connect denied.test:443", "http denied.test:80", "connect 192.0.2.10:443", "dns denied.test:0"} {
		assert.True(t, seen[want], "refusal %q not reported; got %v", want, seen)
	}

	// Only the placeholder is in the environment and in every /proc/*/environ readable there.
	envs := sh(t, sb, `env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'`)
	assert.Contains(t, envs, "SANDGATE_SECRET_API="+egressPlaceholder)
	assert.Contains(t, envs, "HTTPS_PROXY=http://127.0.0.1:3128")
	assert.NotContains(t, envs, egressSecretValue)
}

func TestEgressGrantIsServedAgainOnAttach(t *testing.T) {
	t.Parallel()
	rig := newEgressRig(t)
	opts := func(o *docker.Options) { o.Egress = rig.proxy; o.Config.Sandboxd.Transport = docker.TransportSocket }
	p := newProvider(t, opts)
	pol := egressPol
	pol.Secrets = nil
	sb, err := p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	id := sb.ID()
	_ = sb.Close()
	// A gateway restart: the first provider is gone with its sockets; the next attaches.
	require.NoError(t, p.Close())
	again, err := docker.New(docker.Options{Profile: profileOf(t, id), Installation: testInstallation,
		Config: docker.Config{Image: testImage, NeverPull: true, Sandboxd: docker.SandboxdConfig{Transport: docker.TransportSocket}},
		Policy: allowPol, Logger: quietLogs, Egress: rig.proxy})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, again.Destroy(ctx, id))
		_ = again.Close()
	})
	sb2, err := again.Attach(t.Context(), id, agent, pol)
	require.NoError(t, err)
	defer sb2.Close()
	r := run(t, sb2, providers.ExecSpec{Language: "python", Code: `
import urllib.request
print(urllib.request.urlopen('https://other.test/', timeout=30).read().decode())`})
	require.NoError(t, r.err)
	assert.Equal(t, 0, r.st.ExitCode, r.stderr)
	assert.Contains(t, r.stdout, "hello from other.test")
}

// An Attach with a policy whose secrets changed since the grant was served (a secret
// replaced or deleted; docs/semantics.md §15) serves the new grant, also when the provider
// already talks to the sandbox and asks the engine nothing; the sandbox keeps its proxy.
func TestEgressGrantFollowsThePolicyOnAttach(t *testing.T) {
	t.Parallel()
	rig := newEgressRig(t)
	p := newProvider(t, func(o *docker.Options) { o.Egress = rig.proxy; o.Config.Sandboxd.Transport = docker.TransportSocket })
	sb := create(t, p, egressPol)
	id := sb.ID()
	call := func(pol providers.Policy) string {
		t.Helper()
		again, err := p.Attach(t.Context(), id, agent, pol)
		require.NoError(t, err)
		defer again.Close()
		r := run(t, again, providers.ExecSpec{Language: "python", Code: `
import os, urllib.request
req = urllib.request.Request('https://allowed.test/', headers={'Authorization': 'Bearer ' + os.environ['SANDGATE_SECRET_API']})
print(urllib.request.urlopen(req, timeout=30).read().decode())`})
		require.NoError(t, r.err)
		require.Equal(t, 0, r.st.ExitCode, r.stderr)
		seen := rig.allowed.seen()
		return seen[len(seen)-1]
	}
	assert.Equal(t, "Bearer "+egressSecretValue, call(egressPol))

	replaced := egressPol
	replaced.Secrets = []providers.SecretBinding{egressPol.Secrets[0]}
	replaced.Secrets[0].Value = []byte("sk-live-the-new-value")
	assert.Equal(t, "Bearer sk-live-the-new-value", call(replaced), "the replaced value")
	assert.Equal(t, "Bearer sk-live-the-new-value", call(replaced), "the same grant, served on")

	deleted := egressPol
	deleted.Secrets = nil
	assert.Equal(t, "Bearer "+egressPlaceholder, call(deleted), "a deleted secret's placeholder goes out as sent")
}

func TestEgressNeedsTheSocketTransportAndAProxy(t *testing.T) {
	t.Parallel()
	rig := newEgressRig(t)
	exec := newProvider(t, func(o *docker.Options) { o.Egress = rig.proxy; o.Config.Sandboxd.Transport = docker.TransportExec })
	pol := egressPol
	pol.Secrets = nil
	_, err := exec.Create(t.Context(), agent, pol)
	require.True(t, fault.IsKind(err, fault.Policy), "got %v", err)
	assert.Contains(t, err.Error(), "transport socket")

	none := newProvider(t)
	_, err = none.Create(t.Context(), agent, egressPol)
	require.True(t, fault.IsKind(err, fault.Policy), "secrets without a proxy: got %v", err)
	assert.Contains(t, err.Error(), "secrets")
}
