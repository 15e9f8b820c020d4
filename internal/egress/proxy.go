package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricRequests is the counter of the proxy's decisions, by kind (http, connect, dns) and
// outcome (allowed, refused).
const MetricRequests = "sandgate_egress_requests_total"

// Config builds a Proxy. Every field is optional.
type Config struct {
	// Hosts maps host names to the address the proxy reaches them at instead of resolving
	// them: "127.0.0.1" (the requested port kept) or "127.0.0.1:8443" (egress.hosts; tests and
	// split-horizon set-ups). Keys are matched case-insensitively.
	Hosts map[string]string
	// Resolver resolves the other names (nil: net.DefaultResolver, the gateway host's).
	Resolver *net.Resolver
	// RootCAs verify upstream servers when the proxy terminates TLS (nil: the system roots).
	RootCAs *x509.CertPool
	// CA issues the certificates of intercepted hosts; nil: grants with secrets are refused.
	CA *CA
	// RefusedFunc, when set, is called with every refusal (the gateway audits them).
	RefusedFunc func(Refusal)
	// Registerer registers the proxy's metrics (nil: none registered).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// DialTimeout bounds the dial of an upstream (default 30s).
	DialTimeout time.Duration
}

// Grant is what one sandbox may reach: the listener a sandbox reaches is served with its
// grant, so the connection identifies it.
type Grant struct {
	// Sandbox is the sandbox's id; Owner the subject of the principal it acts for.
	Sandbox string
	Owner   string
	// Rules are its network_allow; AllowAll (network_egress allow with secrets) allows every
	// host instead.
	Rules    Rules
	AllowAll bool
	Secrets  []Secret
}

// Secret is one secret a grant substitutes: Placeholder becomes Value in the headers of
// requests to Hosts.
type Secret struct {
	Name        string
	Placeholder string
	Value       []byte
	Hosts       Rules
}

// Refusal is one refused connection or DNS question.
type Refusal struct {
	Sandbox, Owner string
	Kind           string // http, connect, dns
	Host           string
	Port           int // 0 for a DNS question
	Reason         string
}

// Proxy is the egress proxy: an HTTP proxy (forwarding by Host, tunnelling CONNECT after
// checking the TLS server name) and a DNS server, both answering per grant. See doc.go.
type Proxy struct {
	hosts       map[string]string
	resolver    *net.Resolver
	ca          *CA
	refused     func(Refusal)
	log         *slog.Logger
	dialTimeout time.Duration
	requests    *prometheus.CounterVec
	upstream    *http.Transport
}

// New builds a Proxy; errors are a Hosts entry that is not an address.
func New(cfg Config) (*Proxy, error) {
	p := &Proxy{
		hosts: map[string]string{}, resolver: cfg.Resolver, ca: cfg.CA, refused: cfg.RefusedFunc,
		log: cfg.Logger, dialTimeout: cfg.DialTimeout,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRequests,
			Help: "Connections and DNS questions of sandboxes the egress proxy decided on, by kind (http, connect, dns) and outcome (allowed, refused)."},
			[]string{"kind", "outcome"}),
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = 30 * time.Second
	}
	for name, addr := range cfg.Hosts {
		if _, err := netip.ParseAddrPort(addr); err != nil {
			if _, err := netip.ParseAddr(addr); err != nil {
				return nil, fmt.Errorf("egress.hosts[%s]: %q is not an IP address or IP:port", name, addr)
			}
		}
		p.hosts[NormalizeHost(name)] = addr
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(p.requests); err != nil {
			return nil, fmt.Errorf("egress metrics: %w", err)
		}
	}
	p.upstream = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			n, _ := strconv.Atoi(port)
			return p.dial(ctx, host, n)
		},
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   false,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 30 * time.Second,
	}
	return p, nil
}

// CanIntercept reports whether the proxy has a CA, which grants with secrets need.
func (p *Proxy) CanIntercept() bool { return p.ca != nil }

// CA is the proxy's CA (nil when it has none).
func (p *Proxy) CA() *CA { return p.ca }

// Close closes the idle upstream connections.
func (p *Proxy) Close() { p.upstream.CloseIdleConnections() }

// Serve answers the HTTP proxy protocol on l for grant g until l is closed; it returns nil
// then.
func (p *Proxy) Serve(l net.Listener, g *Grant) error {
	srv := &http.Server{Handler: &handler{p: p, g: g}, ReadHeaderTimeout: time.Minute, ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)}
	err := srv.Serve(l)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// dial connects to host:port: an egress.hosts address, an IP literal, else the resolver's.
func (p *Proxy) dial(ctx context.Context, host string, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: p.dialTimeout}
	h := NormalizeHost(host)
	if addr, ok := p.hosts[h]; ok {
		if _, err := netip.ParseAddrPort(addr); err == nil {
			return d.DialContext(ctx, "tcp", addr)
		}
		return d.DialContext(ctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	}
	if _, ok := parseIP(h); ok {
		return d.DialContext(ctx, "tcp", net.JoinHostPort(h, strconv.Itoa(port)))
	}
	d.Resolver = p.resolver
	return d.DialContext(ctx, "tcp", net.JoinHostPort(h, strconv.Itoa(port)))
}

// lookup resolves name to its addresses (egress.hosts first) for the DNS answers.
func (p *Proxy) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	if addr, ok := p.hosts[NormalizeHost(name)]; ok {
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			return []netip.Addr{ap.Addr()}, nil
		}
		a, _ := netip.ParseAddr(addr)
		return []netip.Addr{a}, nil
	}
	return p.resolver.LookupNetIP(ctx, "ip", name)
}

// allowed reports whether g may reach host:port.
func (g *Grant) allowed(host string, port int) bool {
	return g.AllowAll || g.Rules.Allows(host, port)
}

// bound returns the secrets of g bound to host:port.
func (g *Grant) bound(host string, port int) []Secret {
	var out []Secret
	for _, s := range g.Secrets {
		if s.Hosts.Allows(host, port) {
			out = append(out, s)
		}
	}
	return out
}

func (p *Proxy) refuse(g *Grant, kind, host string, port int, reason string) {
	p.requests.WithLabelValues(kind, "refused").Inc()
	p.log.Info("egress refused", "sandbox", g.Sandbox, "owner", g.Owner, "kind", kind, "host", host, "port", port, "reason", reason)
	if p.refused != nil {
		p.refused(Refusal{Sandbox: g.Sandbox, Owner: g.Owner, Kind: kind, Host: host, Port: port, Reason: reason})
	}
}

// refusalBody is the text a refused request answers with: the host:port and the entry that
// would allow it.
func refusalBody(host string, port int, reason string) string {
	return fmt.Sprintf("sandgate egress proxy: the connection to %s is refused: %s; a network_allow entry %q (or one covering it) in the profile's policy would allow it\n",
		net.JoinHostPort(NormalizeHost(host), strconv.Itoa(port)), reason, Suggest(host, port))
}

type handler struct {
	p *Proxy
	g *Grant
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		h.connect(w, r)
		return
	}
	h.forward(w, r)
}

// target splits a request's host[:port], def the port when it has none.
func target(hostport string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return NormalizeHost(hostport), def, nil
		}
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return NormalizeHost(host), port, nil
}

// forward serves a plain HTTP proxy request (an absolute URL), allowed by its host. Secrets
// are not substituted here (only inside TLS), but responses are scrubbed all the same.
func (h *handler) forward(w http.ResponseWriter, r *http.Request) {
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "sandgate egress proxy: only proxy requests (an absolute http:// URL, or CONNECT) are served here\n", http.StatusBadRequest)
		return
	}
	host, port, err := target(r.URL.Host, 80)
	if err != nil || host == "" {
		http.Error(w, "sandgate egress proxy: bad host "+strconv.Quote(r.URL.Host)+"\n", http.StatusBadRequest)
		return
	}
	if !h.g.allowed(host, port) {
		h.p.refuse(h.g, "http", host, port, "no network_allow entry allows it")
		http.Error(w, refusalBody(host, port, "no network_allow entry allows it"), http.StatusForbidden)
		return
	}
	h.p.requests.WithLabelValues("http", "allowed").Inc()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	// No substitution in plain HTTP: a secret's value never crosses a network unencrypted.
	if len(h.g.Secrets) > 0 {
		out.Header.Del("Accept-Encoding") // the transport's own gzip is decoded, so the body can be scrubbed
	}
	resp, err := h.p.upstream.RoundTrip(out)
	if err != nil {
		http.Error(w, "sandgate egress proxy: "+h.scrubString(err.Error())+"\n", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	h.scrubHeader(resp.Header)
	body := io.Reader(resp.Body)
	if len(h.g.Secrets) > 0 {
		resp.Header.Del("Content-Length")
		body = h.scrubReader(resp.Body)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, body)
}

// connect serves CONNECT host:port: refused unless allowed; then a tunnel, in which a TLS
// client must name the same host, or, for a host a secret is bound to, an interception.
func (h *handler) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := target(r.Host, 443)
	if err != nil || host == "" {
		http.Error(w, "sandgate egress proxy: bad CONNECT target "+strconv.Quote(r.Host)+"\n", http.StatusBadRequest)
		return
	}
	if !h.g.allowed(host, port) {
		h.p.refuse(h.g, "connect", host, port, "no network_allow entry allows it")
		http.Error(w, refusalBody(host, port, "no network_allow entry allows it"), http.StatusForbidden)
		return
	}
	secrets := h.g.bound(host, port)
	var up net.Conn
	if len(secrets) == 0 {
		// Dial before answering 200, so an unreachable host is an HTTP error the client shows.
		up, err = h.p.dial(r.Context(), host, port)
		if err != nil {
			http.Error(w, "sandgate egress proxy: "+err.Error()+"\n", http.StatusBadGateway)
			return
		}
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "sandgate egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		if up != nil {
			up.Close()
		}
		return
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		if up != nil {
			up.Close()
		}
		return
	}
	client := &bufConn{Conn: conn, r: brw.Reader}
	sni, isTLS, err := peekSNI(client)
	if err != nil {
		if up != nil {
			up.Close()
		}
		return
	}
	if isTLS && sni != "" && NormalizeHost(sni) != host {
		if up != nil {
			up.Close()
		}
		h.p.refuse(h.g, "connect", host, port, fmt.Sprintf("the TLS server name %q is not the CONNECT host", sni))
		return
	}
	h.p.requests.WithLabelValues("connect", "allowed").Inc()
	if len(secrets) > 0 {
		if !isTLS {
			return // a secret is only ever sent inside TLS (or plain HTTP proxy requests)
		}
		h.intercept(client, host, port, secrets)
		return
	}
	defer up.Close()
	splice(client, up)
}

// splice copies both ways until either side ends.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if c, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

// bufConn is a connection whose reads go through r (what the HTTP server had buffered) and
// which can replay peeked bytes.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// peekSNI peeks the client's first TLS record, without consuming it, and returns the server
// name of its ClientHello; isTLS is false for a client that does not start with a TLS
// handshake.
func peekSNI(c *bufConn) (sni string, isTLS bool, err error) {
	first, err := c.r.Peek(1)
	if err != nil {
		return "", false, err
	}
	if first[0] != 0x16 { // not a TLS handshake record
		return "", false, nil
	}
	hdr, err := c.r.Peek(5)
	if err != nil {
		return "", true, err
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if c.r.Size() < 5+n {
		c.r = bufio.NewReaderSize(c.r, 5+n)
	}
	rec, err := c.r.Peek(5 + n)
	if err != nil {
		return "", true, err
	}
	var hello *tls.ClientHelloInfo
	errDone := errors.New("hello read")
	_ = tls.Server(readOnly{bytes.NewReader(rec)}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errDone
	}}).Handshake()
	if hello == nil {
		return "", true, nil // a ClientHello split over records: no name to check
	}
	return hello.ServerName, true, nil
}

// readOnly is a connection that only reads from r, for parsing a ClientHello.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (readOnly) Write(b []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return nil }
func (readOnly) RemoteAddr() net.Addr             { return nil }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }

// hopHeaders are the hop-by-hop headers a proxy does not forward (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
