package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Timing of the exec tunnel.
const (
	// defaultReadyTimeout bounds how long a dial waits for sandboxd to listen on its socket (a pod
	// is Ready as soon as its container started, a moment before sandboxd serves).
	defaultReadyTimeout = 20 * time.Second
	// tunnelLinger is how long a closed tunnel's exec may take to end by itself (its
	// standard input closed, `sandboxd proxy` ends once sandboxd has answered) before the
	// stream is cut.
	tunnelLinger = 2 * time.Second
)

// sdClient returns the runtime client of sandbox s's sandboxd, as s's identity: one per
// (pod, identity), cached by the provider and closed by Destroy and Close.
func (p *Provider) sdClient(s *Sandbox) *remote.Client {
	key := clientKey{pod: s.ns + "/" + s.pod, c: s.c}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.sd[key]; ok && e.token == s.token && e.podIP == s.podIP {
		return e.client
	} else if ok {
		_ = e.client.Close() // the pod's token or IP changed: a pod of the same name, made anew
	}
	where := "pod " + key.pod
	dial := p.tunnelDial(s.c, s.ns, s.pod, s.container, s.token)
	if p.cfg.Sandboxd.Transport == TransportPodIP {
		where = "pod " + key.pod + " at " + net.JoinHostPort(s.podIP, strconv.Itoa(SandboxdPort))
		dial = p.podIPDial(s, dial)
	}
	e := &sdEntry{token: s.token, podIP: s.podIP, container: s.container, client: remote.NewDialClient(where, dial, s.token)}
	p.sd[key] = e
	return e.client
}

// attachLive returns a handle on pod ns/name without reading the pod from the API server when
// this provider already talks to its sandboxd (through identity c) and sandboxd answers; nil
// otherwise (the caller reads the pod). It saves a pod read per operation: the gateway
// attaches for every execution. Only for the gateway's own identity: an impersonated user's
// pod read is where the API server checks, every time, that the user may still use the pod.
func (p *Provider) attachLive(ctx context.Context, c *clients, ns, name string) *Sandbox {
	if c != p.gateway {
		return nil
	}
	p.mu.Lock()
	e, ok := p.sd[clientKey{pod: ns + "/" + name, c: c}]
	p.mu.Unlock()
	if !ok || e.container == "" {
		return nil
	}
	// A client that served a request a moment ago is trusted without asking again; should its
	// pod have gone meanwhile, the request finds out (sdadapter.Sandbox.Fault: providers.ErrUnreached).
	if time.Since(time.Unix(0, e.servedAt.Load())) > liveTrust {
		rctx, cancel := context.WithTimeout(ctx, liveReadyTimeout)
		defer cancel()
		if e.client.Ready(rctx) != nil {
			return nil
		}
		e.served()
	}
	return p.handle(&Sandbox{ns: ns, pod: name, container: e.container, token: e.token, podIP: e.podIP, c: c}, ns+"/"+name)
}

// liveReadyTimeout bounds attachLive's check; past it the pod is read as usual. liveTrust is
// how long after a served request attachLive trusts a client without that check.
const (
	liveReadyTimeout = 2 * time.Second
	liveTrust        = 5 * time.Second
)

// clientKey identifies a cached runtime client.
type clientKey struct {
	pod string // "<namespace>/<pod>"
	c   *clients
}

type sdEntry struct {
	token, podIP, container string
	client                  *remote.Client
	servedAt                atomic.Int64 // unix nanoseconds of the last request sandboxd served; 0: none
}

func (e *sdEntry) served() { e.servedAt.Store(time.Now().UnixNano()) }

// servedBy records that s's sandboxd served a request (ok) or could not be reached (!ok: the
// next attach checks again).
func (p *Provider) servedBy(s *Sandbox, ok bool) {
	p.mu.Lock()
	e := p.sd[clientKey{pod: s.ns + "/" + s.pod, c: s.c}]
	p.mu.Unlock()
	switch {
	case e == nil:
	case ok:
		e.served()
	default:
		e.servedAt.Store(0)
	}
}

// podIPDial returns the dial function of transport pod_ip: TCP to the pod IP's sandboxd
// port. sandboxd listens there only once it has its token, so every connection starts with
// PUT /v1/token (remote.SetTokenOn; the same token again is accepted), which also tells a
// listening sandboxd from a port that is not served yet; when that fails, the token is given
// through an exec tunnel (tunnel, see tunnelDial) and the dial tried again, at most
// defaultReadyTimeout.
func (p *Provider) podIPDial(s *Sandbox, tunnel func(context.Context) (net.Conn, error)) func(context.Context) (net.Conn, error) {
	addr := net.JoinHostPort(s.podIP, strconv.Itoa(SandboxdPort))
	where := "pod " + s.ns + "/" + s.pod + " at " + addr
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dialTCP := func(ctx context.Context) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return remote.SetTokenOn(ctx, conn, where, s.token)
	}
	return func(ctx context.Context) (net.Conn, error) {
		if s.podIP == "" {
			return nil, fault.New(fault.Provision, "%s: pod %s/%s has no IP (transport pod_ip)", TypeName, s.ns, s.pod)
		}
		conn, err := dialTCP(ctx)
		if err == nil || ctx.Err() != nil || fault.IsKind(err, fault.Conflict) {
			return conn, err
		}
		tc, err := tunnel(ctx) // gives sandboxd its token, which opens its TCP listener
		if err != nil {
			return nil, err
		}
		_ = tc.Close()
		deadline := time.Now().Add(p.sandboxdReadyTimeout())
		for {
			conn, err = dialTCP(ctx)
			if err == nil || ctx.Err() != nil {
				return conn, err
			}
			if time.Now().After(deadline) {
				return nil, fault.Wrap(fault.Provision, err, "%s: sandboxd in pod %s/%s has its token but does not answer on %s (it must run with --listen :%d)", TypeName, s.ns, s.pod, addr, SandboxdPort)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// forgetClients closes and drops the runtime clients of pod ("<namespace>/<pod>"), or all of
// them when pod is "".
func (p *Provider) forgetClients(pod string) {
	p.mu.Lock()
	var drop []*remote.Client
	for k, e := range p.sd {
		if pod == "" || k.pod == pod {
			drop = append(drop, e.client)
			delete(p.sd, k)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		_ = c.Close()
	}
}

// tunnelDial returns the dial function of a runtime client (remote.NewDialClient): each call
// opens pods/exec of `sandboxd proxy` in the pod's sandbox container, as identity c (so the
// API server authorizes pods/exec for it), and gives sandboxd its token as the first request
// on it (remote.SetTokenOn; the same token again is no error). While sandboxd does not listen
// yet, it tries again, at most defaultReadyTimeout.
func (p *Provider) tunnelDial(c *clients, ns, pod, container, token string) func(context.Context) (net.Conn, error) {
	argv := []string{p.sandboxdPath(), "proxy", "--socket", SandboxdSocket}
	where := "pod " + ns + "/" + pod
	return func(ctx context.Context) (net.Conn, error) {
		deadline := time.Now().Add(p.sandboxdReadyTimeout())
		for {
			t, err := p.openTunnel(c, ns, pod, container, argv)
			if err != nil {
				return nil, fault.Wrap(fault.Provision, err, "%s: opening an exec stream to %s", TypeName, where)
			}
			conn, err := remote.SetTokenOn(ctx, t.conn, where, token)
			if err == nil {
				return conn, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var fe *fault.Error
			if errors.As(err, &fe) {
				if fe.Kind == fault.Conflict {
					return nil, fault.New(fault.Provision, "%s: sandboxd in %s has another token than the one in the pod's %s annotation: something else gave it one first", TypeName, where, AnnotationSandboxdToken)
				}
				return nil, err
			}
			// The stream ended before sandboxd answered: the exec says why.
			stderr, streamErr := t.result()
			retry, failure := p.tunnelFailure(c, ns, pod, streamErr, stderr, err)
			if !retry || time.Now().After(deadline) {
				return nil, failure
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

func (p *Provider) sandboxdReadyTimeout() time.Duration {
	if p.readyTimeout > 0 {
		return p.readyTimeout
	}
	return defaultReadyTimeout
}

// tunnelFailure classifies a tunnel that ended before sandboxd answered: whether to try
// again (sandboxd does not listen yet) and the error to report otherwise.
func (p *Provider) tunnelFailure(c *clients, ns, pod string, streamErr error, stderr string, cause error) (retry bool, err error) {
	where := ns + "/" + pod
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gone := p.podGone(ctx, c, ns, pod); gone != nil {
		return false, gone
	}
	if streamErr == nil {
		streamErr = cause
	}
	detail := strings.TrimSpace(stderr)
	if detail == "" {
		detail = streamErr.Error()
	}
	must := fmt.Sprintf("the pod's container must run `%s serve --await-token --socket %s --workspace %s` (kubernetes.sandboxd.path)", p.sandboxdPath(), SandboxdSocket, p.cfg.Workspace)
	msg := strings.ToLower(streamErr.Error() + " " + detail)
	if apierrors.IsForbidden(streamErr) || strings.Contains(msg, "forbidden") {
		return false, fault.Wrap(fault.Forbidden, streamErr, "%s: %s may not exec in pod %s (pods/exec needs both the create and the get verbs)", TypeName, c.who, where)
	}
	var exitErr utilexec.CodeExitError
	switch {
	case errors.As(streamErr, &exitErr) && (exitErr.Code == 126 || exitErr.Code == 127),
		strings.Contains(msg, "executable file not found"), strings.Contains(msg, "no such file or directory") && !strings.Contains(msg, "connecting to"):
		return false, fault.New(fault.Provision, "%s: pod %s has no sandboxd at %s (%s); %s", TypeName, where, p.sandboxdPath(), detail, must)
	case errors.As(streamErr, &exitErr) && strings.Contains(msg, "connecting to"):
		return true, fault.New(fault.Provision, "%s: sandboxd in pod %s does not listen on %s within %s (%s); %s", TypeName, where, SandboxdSocket, p.sandboxdReadyTimeout(), detail, must)
	}
	return true, fault.Wrap(fault.Provision, streamErr, "%s: cannot reach sandboxd in pod %s (%s)", TypeName, where, detail)
}

// tunnel is one pods/exec stream to `sandboxd proxy`.
type tunnel struct {
	conn   net.Conn
	ended  chan struct{} // closed when the exec has ended; then err and stderr are set
	err    error
	stderr *capped
}

// result waits, at most tunnelLinger, for the exec to end and returns how it ended: the
// exec's standard error and its error.
func (t *tunnel) result() (stderr string, err error) {
	select {
	case <-t.ended:
		return t.stderr.String(), t.err
	case <-time.After(tunnelLinger):
		return t.stderr.String(), errors.New("the exec stream did not end")
	}
}

// openTunnel starts pods/exec of argv (stdin and stdout, no tty) in the container and
// returns it as a connection. The stream runs until the connection is closed (then it has
// tunnelLinger to end by itself) or the exec ends.
func (p *Provider) openTunnel(c *clients, ns, pod, container string, argv []string) (*tunnel, error) {
	ex, err := p.executor(c, ns, pod, container, argv)
	if err != nil {
		return nil, err
	}
	p.tunnels.Add(1)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t := &tunnel{ended: make(chan struct{}), stderr: &capped{max: 16 << 10}}
	go func() {
		defer close(t.ended)
		defer cancel()
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: t.stderr})
		t.err = err
		if err == nil {
			err = io.EOF
		}
		_ = stdoutW.CloseWithError(err)
		// Writes fail from now on, and the stream's copier of standard input, should it
		// still read, gets its end.
		_ = stdinW.Close()
	}()
	var once sync.Once
	t.conn = remote.StreamConn(stdoutR, stdinW, func() error {
		once.Do(func() {
			_ = stdoutR.CloseWithError(net.ErrClosed) // what the proxy still writes is dropped
			// Standard input is closed (StreamConn closed it): the proxy ends once sandboxd
			// has answered what it got. A stream that lingers is cut.
			go func() {
				select {
				case <-t.ended:
				case <-time.After(tunnelLinger):
					cancel()
				}
			}()
		})
		return nil
	})
	return t, nil
}

// executor returns the remotecommand executor of one exec of argv in the sandbox's container
// (standard input and output, no tty): WebSocket, falling back to SPDY when the upgrade fails
// (as kubectl does).
func (p *Provider) executor(c *clients, ns, pod, container string, argv []string) (remotecommand.Executor, error) {
	req := c.core.CoreV1().RESTClient().Post().
		Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: argv, Stdin: true, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	u := req.URL()
	spdyExec, err := remotecommand.NewSPDYExecutor(c.cfg, "POST", u)
	if err != nil {
		return nil, err
	}
	if p.spdyOnly {
		return spdyExec, nil
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(c.cfg, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(wsExec, spdyExec, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
