package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// upstream is a TLS test server for one host name, signed by its own CA, that records the
// Authorization header of each request and echoes it in a header and the body.
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

func startUpstream(t *testing.T, ca *CA, host string) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		u.mu.Lock()
		u.auth = append(u.auth, a)
		u.mu.Unlock()
		w.Header().Set("X-Echo", a)
		fmt.Fprintf(w, "host=%s auth=%s", r.Host, a)
	}))
	leaf, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

type bundle struct {
	proxy    *Proxy
	proxyURL *url.URL
	reg      *prometheus.Registry
	upCA     *CA // signs the upstreams
	mitmCA   *CA
	allowed  *upstream
	other    *upstream
	mu       sync.Mutex
	refusals []Refusal
	dnsAddr  string
}

func (b *bundle) refused() []Refusal {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Refusal(nil), b.refusals...)
}

const (
	secretValue = "sk-live-THE-REAL-VALUE"
	placeholder = "SANDGATE_PLACEHOLDER_0123456789abcdef"
)

// setup starts two upstreams (allowed.test, other.test), a proxy mapping them by its hosts
// configuration, and serves the proxy and its DNS for g on loopback listeners.
func setup(t *testing.T, g *Grant) *bundle {
	t.Helper()
	upCA, err := LoadOrCreateCA(t.TempDir(), "upstream", nil)
	if err != nil {
		t.Fatal(err)
	}
	mitmCA, err := LoadOrCreateCA(t.TempDir(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{upCA: upCA, mitmCA: mitmCA, reg: prometheus.NewRegistry()}
	b.allowed = startUpstream(t, upCA, "allowed.test")
	b.other = startUpstream(t, upCA, "other.test")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(upCA.CertPEM())
	b.proxy, err = New(Config{
		Hosts: map[string]string{
			"allowed.test": b.allowed.srv.Listener.Addr().String(),
			"other.test":   b.other.srv.Listener.Addr().String(),
			"denied.test":  "127.0.0.1",
		},
		RootCAs: roots, CA: mitmCA, Registerer: b.reg,
		RefusedFunc: func(r Refusal) { b.mu.Lock(); b.refusals = append(b.refusals, r); b.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.proxy.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = b.proxy.Serve(l, g) }()
	go func() { defer wg.Done(); _ = b.proxy.ServeDNS(dl, g) }()
	t.Cleanup(func() { l.Close(); dl.Close(); wg.Wait() })
	b.proxyURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	b.dnsAddr = dl.Addr().String()
	return b
}

// client is an HTTP client using the proxy that trusts the upstreams' CA and the proxy's.
func (b *bundle) client() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b.upCA.CertPEM())
	roots.AppendCertsFromPEM(b.mitmCA.CertPEM())
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
}

func get(t *testing.T, c *http.Client, u string, hdr http.Header) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

func grant(t *testing.T, allow ...string) *Grant {
	t.Helper()
	rs, err := ParseRules(allow)
	if err != nil {
		t.Fatal(err)
	}
	return &Grant{Sandbox: "sb-1", Owner: "alice", Rules: rs}
}

func TestProxyAllowsByNameAndRefusesTheRest(t *testing.T) {
	b := setup(t, grant(t, "allowed.test"))
	c := b.client()

	resp, body, err := get(t, c, "https://allowed.test/x", nil)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(body, "host=allowed.test") {
		t.Fatalf("allowed.test: %v %v %q", resp, err, body)
	}
	// A tunnel is not intercepted: the client saw the upstream's own certificate.
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "Sandgate egress CA upstream" {
		t.Errorf("allowed.test was not tunnelled untouched: issuer %v", resp.TLS.PeerCertificates[0].Issuer)
	}

	if _, _, err := get(t, c, "https://denied.test/", nil); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("https://denied.test: want a 403 on CONNECT, got %v", err)
	}
	resp, body, err = get(t, c, "http://denied.test/", nil)
	if err != nil || resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "denied.test:80") || !strings.Contains(body, `"denied.test:80"`) || !strings.Contains(body, "network_allow") {
		t.Errorf("http://denied.test: want 403 naming the host and the entry, got %v %v %q", resp, err, body)
	}
	ip := b.allowed.srv.Listener.Addr().String()
	if _, _, err := get(t, c, "https://"+ip+"/", nil); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("a raw IP: want a 403 without a CIDR, got %v", err)
	}
	got := b.refused()
	if len(got) != 3 || got[0] != (Refusal{Sandbox: "sb-1", Owner: "alice", Kind: "connect", Host: "denied.test", Port: 443, Reason: "no network_allow entry allows it"}) ||
		got[1].Kind != "http" || got[1].Port != 80 || got[2].Host != "127.0.0.1" {
		t.Errorf("refusals = %+v", got)
	}
	if n := testutil.ToFloat64(b.proxy.requests.WithLabelValues("connect", "refused")); n != 2 {
		t.Errorf("refused connects counted %v, want 2", n)
	}
	if n := testutil.ToFloat64(b.proxy.requests.WithLabelValues("connect", "allowed")); n != 1 {
		t.Errorf("allowed connects counted %v, want 1", n)
	}
}

func TestProxyAllowsIPLiteralsByCIDR(t *testing.T) {
	b := setup(t, grant(t, "127.0.0.0/8"))
	ip := b.allowed.srv.Listener.Addr().String()
	conn, err := net.Dial("tcp", b.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", ip, ip)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT to an IP a CIDR allows: %v %v", resp, err)
	}
	if _, _, err := get(t, b.client(), "https://allowed.test/", nil); err == nil {
		t.Error("a CIDR rule allowed a name")
	}
}

func TestProxyRefusesAServerNameOtherThanTheConnectHost(t *testing.T) {
	b := setup(t, grant(t, "allowed.test"))
	conn, err := net.Dial("tcp", b.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&bufConn{Conn: conn, r: br}, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS handshake naming other.test through a tunnel to allowed.test succeeded")
	}
	got := b.refused()
	if len(got) != 1 || !strings.Contains(got[0].Reason, `"other.test"`) || got[0].Host != "allowed.test" {
		t.Errorf("refusals = %+v", got)
	}
}

func TestProxySubstitutesSecretsForBoundHostsOnly(t *testing.T) {
	g := grant(t, "allowed.test", "other.test")
	hosts, _ := ParseRules([]string{"allowed.test"})
	g.Secrets = []Secret{{Name: "api", Placeholder: placeholder, Value: []byte(secretValue), Hosts: hosts}}
	b := setup(t, g)
	c := b.client()
	hdr := http.Header{"Authorization": {"Bearer " + placeholder}}

	resp, body, err := get(t, c, "https://allowed.test/v1", hdr)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("allowed.test: %v %v", resp, err)
	}
	if seen := b.allowed.seen(); len(seen) != 1 || seen[0] != "Bearer "+secretValue {
		t.Errorf("the bound host received %q, want the value", seen)
	}
	if strings.Contains(body, secretValue) || resp.Header.Get("X-Echo") != "Bearer "+placeholder || !strings.Contains(body, "auth=Bearer "+placeholder) {
		t.Errorf("the echoed value reached the client: header %q body %q", resp.Header.Get("X-Echo"), body)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != "Sandgate egress CA test" {
		t.Errorf("allowed.test was not intercepted: issuer %v", resp.TLS.PeerCertificates[0].Issuer)
	}

	// A kept-alive connection carries the next request too (the scrubbed body is chunked).
	keep := b.client()
	keep.Transport.(*http.Transport).DisableKeepAlives = false
	for range 3 {
		resp, body, err := get(t, keep, "https://allowed.test/again", hdr)
		if err != nil || resp.StatusCode != 200 || strings.Contains(body, secretValue) {
			t.Fatalf("kept-alive request: %v %v %q", resp, err, body)
		}
	}
	if seen := b.allowed.seen(); len(seen) != 4 {
		t.Errorf("the bound host saw %d requests, want 4", len(seen))
	}

	if _, _, err := get(t, c, "https://other.test/v1", hdr); err != nil {
		t.Fatal(err)
	}
	if seen := b.other.seen(); len(seen) != 1 || seen[0] != "Bearer "+placeholder {
		t.Errorf("a host the secret is not bound to received %q, want the placeholder", seen)
	}
}

func TestProxyNeverSendsASecretInPlainHTTP(t *testing.T) {
	var got []string
	var mu sync.Mutex
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "echo %s and %s", r.Header.Get("Authorization"), secretValue)
	}))
	defer plain.Close()
	g := grant(t, "plain.test")
	hosts, _ := ParseRules([]string{"plain.test"})
	g.Secrets = []Secret{{Name: "api", Placeholder: placeholder, Value: []byte(secretValue), Hosts: hosts}}
	b := setup(t, g)
	b.proxy.hosts["plain.test"] = plain.Listener.Addr().String()
	resp, body, err := get(t, b.client(), "http://plain.test/", http.Header{"Authorization": {"Bearer " + placeholder}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "Bearer "+placeholder {
		t.Errorf("plain HTTP carried %q, want the placeholder", got)
	}
	if strings.Contains(body, secretValue) || !strings.Contains(body, "and "+placeholder) {
		t.Errorf("the response was not scrubbed: %q", body)
	}
}

func TestScrubberAcrossReads(t *testing.T) {
	h := &handler{g: &Grant{Secrets: []Secret{{Placeholder: "<P>", Value: []byte("SECRET")}, {Placeholder: "<Q>", Value: []byte("xy")}}}}
	in := strings.Repeat("a", 40000) + "SECRET-SECRETSECRxySECRET" + strings.Repeat("b", 5) + "SECRET"
	want := strings.Repeat("a", 40000) + "<P>-<P>SECR<Q><P>" + strings.Repeat("b", 5) + "<P>"
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in)), iotest.HalfReader(strings.NewReader(in))} {
		out, err := io.ReadAll(h.scrubReader(r))
		if err != nil || string(out) != want {
			t.Errorf("scrubbed %d bytes (%v), want %d; equal %v", len(out), err, len(want), string(out) == want)
		}
	}
}

func TestDNSAnswersAllowedNamesOnly(t *testing.T) {
	b := setup(t, grant(t, "allowed.test", "*.wild.test", "10.0.0.0/8"))
	c := &dns.Client{Net: "tcp"}
	ask := func(name string, qt uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qt)
		r, _, err := c.Exchange(m, b.dnsAddr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	r := ask("allowed.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "127.0.0.1" {
		t.Errorf("allowed.test A: %v", r)
	}
	if r := ask("allowed.test", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("allowed.test AAAA: %v", r)
	}
	for _, name := range []string{"denied.test", "wild.test", "exfil.data.attacker.example"} {
		if r := ask(name, dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Errorf("%s: want NXDOMAIN, got %v", name, r)
		}
	}
	if r := ask("allowed.test", dns.TypeTXT); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("TXT of an allowed name: %v", r)
	}
	got := b.refused()
	if len(got) != 3 || got[0] != (Refusal{Sandbox: "sb-1", Owner: "alice", Kind: "dns", Host: "denied.test", Reason: "no network_allow entry allows the name"}) {
		t.Errorf("refusals = %+v", got)
	}
}

func TestCAIsKeptAndReused(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadOrCreateCA(dir, "inst", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateCA(dir, "inst", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.CertPEM()) != string(b.CertPEM()) {
		t.Error("a second load made a new CA")
	}
	leaf, err := b.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots}); err != nil {
		t.Errorf("leaf does not verify: %v", err)
	}
}

func TestCAMadeOnceByConcurrentProcesses(t *testing.T) {
	dir := t.TempDir()
	pems := make([]string, 8)
	var wg sync.WaitGroup
	for i := range pems {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca, err := LoadOrCreateCA(dir, "inst", nil)
			if err != nil {
				t.Error(err)
				return
			}
			pems[i] = string(ca.CertPEM())
		}()
	}
	wg.Wait()
	for _, p := range pems[1:] {
		if p != pems[0] {
			t.Fatal("concurrent starts made different CAs")
		}
	}
}

// BenchmarkDownload1MB measures a 1 MB HTTPS download on a kept-alive connection, directly
// and through the proxy: tunnelled (no secret bound) and intercepted (a secret bound, so TLS
// is terminated, headers rewritten and the body scrubbed).
func BenchmarkDownload1MB(b *testing.B) {
	ca, err := LoadOrCreateCA(b.TempDir(), "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	payload := strings.Repeat("x", 1<<20)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, payload) }))
	leaf, _ := ca.Leaf("bench.test")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	p, err := New(Config{Hosts: map[string]string{"bench.test": srv.Listener.Addr().String()}, RootCAs: roots, CA: ca})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	rules, _ := ParseRules([]string{"bench.test"})
	serve := func(g *Grant) *url.URL {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = p.Serve(l, g) }()
		b.Cleanup(func() { l.Close() })
		return &url.URL{Scheme: "http", Host: l.Addr().String()}
	}
	run := func(b *testing.B, proxy *url.URL) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
		if proxy != nil {
			tr.Proxy = http.ProxyURL(proxy)
		} else {
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
			}
		}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		b.SetBytes(1 << 20)
		b.ResetTimer()
		for range b.N {
			resp, err := c.Get("https://bench.test/")
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := io.Copy(io.Discard, resp.Body); n != 1<<20 {
				b.Fatalf("read %d bytes", n)
			}
			resp.Body.Close()
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, nil) })
	b.Run("tunnelled", func(b *testing.B) { run(b, serve(&Grant{Rules: rules})) })
	bound := &Grant{Rules: rules, Secrets: []Secret{{Placeholder: placeholder, Value: []byte(secretValue), Hosts: rules}}}
	b.Run("intercepted", func(b *testing.B) { run(b, serve(bound)) })
}
