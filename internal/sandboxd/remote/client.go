package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/telemetry/tracehttp"
	"golang.org/x/sys/unix"
)

// Limits of what the client reads.
const (
	maxProblemBody = 1 << 20   // bytes of an error answer
	maxResultFrame = 256 << 20 // bytes of a result or error frame (a traceback can be long)
)

// Client calls one sandboxd. It keeps connections alive between calls and is safe for
// concurrent use; Close releases its idle connections.
type Client struct {
	base      string // URL without a trailing slash
	where     string // the socket path or URL, for messages
	authValue string
	transport *http.Transport
	http      *http.Client
}

// NewClient returns a client of the sandboxd listening on Unix socket socketPath, sending
// token as its bearer secret.
func NewClient(socketPath, token string) *Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	t := newTransport()
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, "unix", socketPath)
	}
	return newClient("http://sandboxd", socketPath, token, t)
}

// NewVerifiedClient is NewClient, but every new connection is checked before a byte is sent
// on it: verify gets the process id of the socket's listener (SO_PEERCRED, in this
// process's pid namespace; 0 when that process is not visible from here) and refuses a
// listener that is not the expected sandboxd — the socket's folder may be writable by the
// programs sandboxd runs, which could otherwise put a listener of their own in its place and
// receive the bearer secret; verify's error should wrap ErrForeignListener when the listener
// is known not to be sandboxd. A refused connection's error wraps ErrUnreachable. where names the sandboxd in messages (e.g. "sandbox <id>"): the socket's
// path, a path on the gateway's host, appears in no error, since errors reach callers.
func NewVerifiedClient(where, socketPath, token string, verify func(pid int32) error) *Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	t := newTransport()
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, "unix", socketPath)
		if err != nil {
			return nil, &socketDialError{err}
		}
		pid, err := peerPID(conn)
		if err == nil {
			err = verify(pid)
		}
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("refusing the listener on its socket: %w", err)
		}
		return conn, nil
	}
	return newClient("http://sandboxd", where, token, t)
}

// ErrForeignListener is wrapped by the error of a request whose connection NewVerifiedClient's
// check refused because something other than the sandbox's sandboxd listens on its socket.
// That does not pass by waiting; the sandbox must be restarted.
var ErrForeignListener = errors.New("the socket's listener is not the sandbox's sandboxd")

// socketDialError is a failed dial of a Unix socket, told without the socket's path: its
// message names the system error only; errors.Is still finds that error (ENOENT,
// ECONNREFUSED, …).
type socketDialError struct{ err error }

func (e *socketDialError) Error() string {
	var errno syscall.Errno
	if errors.As(e.err, &errno) {
		return "its socket does not accept connections (" + errno.Error() + ")"
	}
	if errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, os.ErrDeadlineExceeded) {
		return "its socket does not accept connections (timed out)"
	}
	return "its socket does not accept connections"
}

func (e *socketDialError) Unwrap() error { return e.err }

// peerPID returns the pid of the process that listens on the other end of conn.
func peerPID(conn net.Conn) (int32, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return cred.Pid, nil
}

// NewDialClient returns a client of a sandboxd reached through dial, which opens one new
// connection to it per call (the client keeps connections alive, so dial runs once per
// connection, not per request): for example a stream through a container engine or a
// Kubernetes API server to `sandboxd proxy` in the sandbox. where names the sandboxd in
// messages; token is the bearer secret.
func NewDialClient(where string, dial func(ctx context.Context) (net.Conn, error), token string) *Client {
	t := newTransport()
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
	return newClient("http://sandboxd", where, token, t)
}

// NewTCPClient returns a client of the sandboxd at baseURL (e.g. "http://10.1.2.3:8888"),
// sending token as its bearer secret. Proxy settings of the environment are ignored.
func NewTCPClient(baseURL, token string) *Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	t := newTransport()
	t.DialContext = dialer.DialContext
	base := strings.TrimRight(baseURL, "/")
	return newClient(base, base, token, t)
}

func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
	}
}

func newClient(base, where, token string, t *http.Transport) *Client {
	if dial := t.DialContext; dial != nil {
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, &unreachable{err}
			}
			return conn, nil
		}
	}
	// A call made under a span (the gateway's provider call) is traced: docs/semantics.md §14.
	return &Client{base: base, where: where, authValue: "Bearer " + token, transport: t, http: &http.Client{Transport: tracehttp.Transport("sandboxd", t)}}
}

// Close closes the client's idle connections. The client stays usable.
func (c *Client) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}

// Ready returns nil when sandboxd answers GET /readyz with 200.
// Errors: see the package doc.
func (c *Client) Ready(ctx context.Context) error {
	// The probe needs no secret: none is sent.
	resp, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, func(h http.Header) { h.Del("Authorization") })
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return c.failure(resp)
	}
	discard(resp)
	return nil
}

// Exec runs req in the sandbox, writing its output to out as it arrives (from the calling
// goroutine), and returns its Result.
//
// With req.ID set the execution is held by sandboxd: a broken connection (a gateway that
// dies) does not stop it, and Reattach follows it again. The end of ctx still stops it: Exec
// then asks sandboxd to (DELETE /v1/executions/{id}) and returns, with ctx.Err(), once the
// stream ended — unless ctx ended with cause fault.ErrShutdown (the gateway stops): then the
// execution runs on and Exec returns at once with fault.LeftRunning(ctx.Err()). The request is sent again when a kept-alive connection turns out closed;
// when sandboxd already holds req.ID (the first attempt started it), Exec follows that
// execution instead of running anything twice. A writer of out that has a method Skip(n int64) is told of bytes sandboxd
// dropped (the middle of a long output kept for a later follower).
//
// Errors: the sandboxd.Runtime.Exec errors as fault errors of the same kind; ctx.Err() when
// ctx ends (the execution is then killed in the sandbox); the errors of the package doc.
func (c *Client) Exec(ctx context.Context, req sandboxd.ExecRequest, out sandboxd.Streams) (sandboxd.Result, error) {
	data, err := json.Marshal(execBody{ExecRequest: req, TimeoutMS: timeoutMS(req.Timeout)})
	if err != nil {
		return sandboxd.Result{}, fault.Wrap(fault.Validation, err, "encoding the exec request")
	}
	if req.ID == "" {
		return c.stream(ctx, http.MethodPost, "/v1/exec", data, jsonHeader, out)
	}
	// The request must outlive ctx (a cancelled request would only break the connection, and
	// a held execution runs on): ctx's end stops the execution instead, and its stream ends.
	reqCtx, cancelReq := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReq()
	ended := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), fault.ErrShutdown) {
				// The gateway stops: the execution runs on, held for the one that adopts it.
				cancelReq()
				return
			}
			sctx, cancel := context.WithTimeout(reqCtx, 10*time.Second)
			if err := c.StopExecution(sctx, req.ID); err != nil {
				cancelReq()
			}
			cancel()
			bound := time.NewTimer(stopWait)
			defer bound.Stop()
			select {
			case <-ended:
			case <-bound.C:
				cancelReq()
			}
		case <-ended:
		}
	}()
	res, err := c.stream(reqCtx, http.MethodPost, "/v1/exec", data, func(h http.Header) {
		jsonHeader(h)
		h.Set(headerExecutionID, req.ID)
		// A held execution cannot start twice (its id is taken), so the request may be sent
		// again on a fresh connection when a kept-alive one turns out closed (net/http retries
		// requests with an Idempotency-Key).
		h.Set("Idempotency-Key", req.ID)
	}, out)
	if fault.KindOf(err) == fault.Conflict && ctx.Err() == nil {
		// The first attempt started it (its answer was lost with its connection): follow it.
		res, err = c.Reattach(reqCtx, req.ID, out)
	}
	close(ended)
	<-stopped
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), fault.ErrShutdown) {
			return res, fault.LeftRunning(ctx.Err())
		}
		return res, ctx.Err()
	}
	return res, err
}

// stopWait bounds how long Exec reads the stream of an execution it stopped.
const stopWait = 30 * time.Second

// ErrStopped is Reattach's error for an execution stopped with StopExecution (its caller
// cancelled it).
var ErrStopped = errors.New("sandboxd: the execution was stopped")

// Reattach follows held execution id (see Exec) from its start: its kept output to out (the
// start and the end of each stream; a Skip where the middle was dropped), and its Result once
// it ended. The end of ctx only stops following.
//
// Errors: fault.NotFound when sandboxd holds no such execution (it never ran there, it ended
// too long ago, or sandboxd restarted); ErrStopped; the execution's own errors, as Exec's;
// ctx.Err(); the errors of the package doc.
func (c *Client) Reattach(ctx context.Context, id string, out sandboxd.Streams) (sandboxd.Result, error) {
	res, err := c.stream(ctx, http.MethodGet, "/v1/executions/"+url.PathEscape(id), nil, nil, out)
	if fault.KindOf(err) == fault.Kind(kindStopped) {
		return res, ErrStopped
	}
	return res, err
}

// StopExecution stops held execution id (DELETE /v1/executions/{id}); one that ended is left
// as it is. Errors: fault.NotFound when none is held; the errors of the package doc.
func (c *Client) StopExecution(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/executions/"+url.PathEscape(id), nil, nil, http.StatusNoContent, nil)
}

// Start starts req as a kept execution named req.ID and returns once its program runs (POST
// /v1/executions): a background process, or an execution whose input is fed with WriteStdin.
// Follow it with Reattach, stop it with StopExecution.
//
// Errors: sandboxd.Runtime.Start's as fault errors of the same kind (fault.Conflict when the
// id is kept already); the errors of the package doc.
func (c *Client) Start(ctx context.Context, req sandboxd.ExecRequest) (sandboxd.ExecutionInfo, error) {
	data, err := json.Marshal(execBody{ExecRequest: req, TimeoutMS: timeoutMS(req.Timeout)})
	if err != nil {
		return sandboxd.ExecutionInfo{}, fault.Wrap(fault.Validation, err, "encoding the start request")
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/executions", nil, bytes.NewReader(data), func(h http.Header) {
		jsonHeader(h)
		h.Set(headerExecutionID, req.ID)
	})
	if err != nil {
		return sandboxd.ExecutionInfo{}, err
	}
	if resp.StatusCode != http.StatusCreated {
		return sandboxd.ExecutionInfo{}, c.failure(resp)
	}
	var info sandboxd.ExecutionInfo
	if err := decodeJSON(resp, &info); err != nil {
		return info, fmt.Errorf("sandboxd at %s: %w", c.where, err)
	}
	return info, nil
}

// Executions lists the kept executions (GET /v1/executions), oldest first.
func (c *Client) Executions(ctx context.Context) ([]sandboxd.ExecutionInfo, error) {
	var list []sandboxd.ExecutionInfo
	err := c.call(ctx, http.MethodGet, "/v1/executions", nil, nil, http.StatusOK, &list)
	return list, err
}

// WriteStdin sends in to the standard input of kept execution id as it reads it (POST
// /v1/executions/{id}/stdin, a streamed body); with eof the input is closed afterwards. It
// returns how many bytes the program's input took.
//
// Errors: fault.NotFound when no such execution is kept; fault.Conflict when it takes no
// input (see sandboxd.Runtime.WriteStdin); the errors of the package doc.
func (c *Client) WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error) {
	q := url.Values{}
	if eof {
		q.Set("eof", "true")
	}
	return c.sendBytes(ctx, http.MethodPost, "/v1/executions/"+url.PathEscape(id)+"/stdin", q, in, nil)
}

// Resize sets the terminal size of kept execution id (POST /v1/executions/{id}/resize).
// Errors: fault.NotFound, fault.Conflict without a terminal, fault.Validation for a bad size.
func (c *Client) Resize(ctx context.Context, id string, size sandboxd.TermSize) error {
	data, _ := json.Marshal(size)
	return c.call(ctx, http.MethodPost, "/v1/executions/"+url.PathEscape(id)+"/resize", nil, bytes.NewReader(data), http.StatusNoContent, nil)
}

// timeoutMS is a timeout on the wire: whole milliseconds rounded up, -1 for a negative one
// (refused by sandboxd), 0 for none.
func timeoutMS(d time.Duration) int64 {
	switch {
	case d > 0:
		return int64((d + time.Millisecond - 1) / time.Millisecond)
	case d < 0:
		return -1
	}
	return 0
}

// stream sends a request whose answer is an exec stream and reads the stream to its end.
func (c *Client) stream(ctx context.Context, method, path string, body []byte, header func(http.Header), out sandboxd.Streams) (sandboxd.Result, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	resp, err := c.do(ctx, method, path, nil, rd, header)
	if err != nil {
		return sandboxd.Result{}, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != StreamContentType {
		return sandboxd.Result{}, c.failure(resp)
	}
	defer resp.Body.Close()

	stdout, stderr := &sink{w: out.Stdout}, &sink{w: out.Stderr}
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() {
		br.Reset(nil)
		streamReaders.Put(br)
	}()
	var head [frameHeader]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return sandboxd.Result{}, c.streamErr(ctx, err)
		}
		n := int64(binary.BigEndian.Uint32(head[1:]))
		switch typ := head[0]; typ {
		case FrameStdout, FrameStderr:
			s := stdout
			if typ == FrameStderr {
				s = stderr
			}
			if _, err := io.CopyN(s, br, n); err != nil {
				return sandboxd.Result{}, c.streamErr(ctx, err)
			}
		case FrameSkip:
			var p [9]byte
			if n != int64(len(p)) {
				return sandboxd.Result{}, fmt.Errorf("sandboxd at %s: a skip frame of %d bytes", c.where, n)
			}
			if _, err := io.ReadFull(br, p[:]); err != nil {
				return sandboxd.Result{}, c.streamErr(ctx, err)
			}
			s := stdout
			if p[0] == FrameStderr {
				s = stderr
			}
			s.skip(int64(binary.BigEndian.Uint64(p[1:])))
		case FrameRichResult:
			if n > maxResultFrame {
				return sandboxd.Result{}, fmt.Errorf("sandboxd at %s: a frame of %d bytes is over the limit", c.where, n)
			}
			payload := make([]byte, n)
			if _, err := io.ReadFull(br, payload); err != nil {
				return sandboxd.Result{}, c.streamErr(ctx, err)
			}
			var r sandboxd.RichResult
			if err := json.Unmarshal(payload, &r); err != nil {
				return sandboxd.Result{}, fmt.Errorf("sandboxd at %s: malformed rich result: %w", c.where, err)
			}
			if out.ResultFunc != nil {
				out.ResultFunc(r)
			}
		case FrameResult, FrameError:
			if n > maxResultFrame {
				return sandboxd.Result{}, fmt.Errorf("sandboxd at %s: a frame of %d bytes is over the limit", c.where, n)
			}
			payload := make([]byte, n)
			if _, err := io.ReadFull(br, payload); err != nil {
				return sandboxd.Result{}, c.streamErr(ctx, err)
			}
			_, _ = io.Copy(io.Discard, br) // the end of the body, so the connection is reused
			if typ == FrameError {
				return sandboxd.Result{}, c.problemErr(http.StatusOK, payload)
			}
			var res sandboxd.Result
			if err := json.Unmarshal(payload, &res); err != nil {
				return sandboxd.Result{}, fmt.Errorf("sandboxd at %s: malformed result: %w", c.where, err)
			}
			return res, nil
		default:
			return sandboxd.Result{}, fmt.Errorf("sandboxd at %s: unknown frame type %d", c.where, typ)
		}
	}
}

// sink writes to w until w fails once, then drops what follows (so the stream is still read
// to its end).
type sink struct {
	w      io.Writer
	failed bool
}

// skip tells w (when it has a Skip(n int64) method) that n bytes were dropped here.
func (s *sink) skip(n int64) {
	if sk, ok := s.w.(interface{ Skip(n int64) }); ok && !s.failed {
		sk.Skip(n)
	}
}

func (s *sink) Write(p []byte) (int, error) {
	if s.w != nil && !s.failed {
		if _, err := s.w.Write(p); err != nil {
			s.failed = true
		}
	}
	return len(p), nil
}

// streamErr classifies a failure to read the exec stream.
func (c *Client) streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("sandboxd at %s ended the execution stream early: %w", c.where, err)
}

// CreateContext creates context name for language in the sandbox.
// Errors: sandboxd.Runtime.CreateContext's kinds; the errors of the package doc.
func (c *Client) CreateContext(ctx context.Context, name, language string) (sandboxd.ContextInfo, error) {
	data, _ := json.Marshal(createContextBody{Name: name, Language: language})
	var info sandboxd.ContextInfo
	err := c.call(ctx, http.MethodPost, "/v1/contexts", nil, bytes.NewReader(data), http.StatusCreated, &info)
	return info, err
}

// ListContexts returns the sandbox's contexts, sorted by name.
// Errors: the errors of the package doc.
func (c *Client) ListContexts(ctx context.Context) ([]sandboxd.ContextInfo, error) {
	var list []sandboxd.ContextInfo
	err := c.call(ctx, http.MethodGet, "/v1/contexts", nil, nil, http.StatusOK, &list)
	return list, err
}

// RestartContext restarts context name. Errors: fault.NotFound; the errors of the package doc.
func (c *Client) RestartContext(ctx context.Context, name string) (sandboxd.ContextInfo, error) {
	var info sandboxd.ContextInfo
	err := c.call(ctx, http.MethodPost, "/v1/contexts/"+url.PathEscape(name)+"/restart", nil, nil, http.StatusOK, &info)
	return info, err
}

// DeleteContext deletes context name. Errors: fault.NotFound; the errors of the package doc.
func (c *Client) DeleteContext(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/contexts/"+url.PathEscape(name), nil, nil, http.StatusNoContent, nil)
}

// streamReaders are the 64 KiB read buffers of exec streams, reused: most executions print
// little, and a fresh buffer each was over half of what a gateway allocates per execution.
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// ErrUnreachable is in the chain of the error of every request that sandboxd never served:
// the connection could not be made, or sandboxd refused the request before running anything
// (it awaits its token, or the token sent is not its own). Nothing the request asked for
// started, so a caller may repeat it elsewhere.
var ErrUnreachable = errors.New("sandboxd: the request was not served")

// unreachable wraps a dial failure: errors.Is finds both ErrUnreachable and the cause.
type unreachable struct{ err error }

func (e *unreachable) Error() string   { return "connect to sandboxd: " + e.err.Error() }
func (e *unreachable) Unwrap() []error { return []error{ErrUnreachable, e.err} }

// ErrAwaitingToken is wrapped by the fault.Provision error of a request that a sandboxd
// started with --await-token refused because it has no token yet (see SetToken).
var ErrAwaitingToken = errors.New("sandboxd awaits its token")

// SetToken gives a sandboxd started with --await-token its bearer secret (PUT /v1/token).
// The first token set wins; setting the same one again is no error, so callers may set it
// on every connection. The client's own token is still what its requests carry.
//
// Errors: fault.Conflict when sandboxd already has another token; fault.Validation for a
// token sandboxd refuses (fewer than 32 characters, spaces or control characters); the
// errors of the package doc.
func (c *Client) SetToken(ctx context.Context, token string) error {
	data, err := json.Marshal(tokenBody{Token: token})
	if err != nil {
		return fault.Wrap(fault.Validation, err, "encoding the token")
	}
	return c.call(ctx, http.MethodPut, "/v1/token", nil, bytes.NewReader(data), http.StatusNoContent, nil)
}

// SetTokenOn sends PUT /v1/token (see SetToken) as the first request on conn, a fresh
// connection to a sandboxd, and returns conn ready to carry the client's requests: a dial
// function of NewDialClient can call it on every connection it opens, so that a sandboxd
// restarted with --await-token gets its token again before anything else. where names the
// sandboxd in messages. When ctx ends first, conn is closed and ctx.Err() returned.
//
// Errors: as SetToken's; a connection that ends before the answer is an error wrapping
// io.ErrUnexpectedEOF. On any error conn is closed.
func SetTokenOn(ctx context.Context, conn net.Conn, where, token string) (net.Conn, error) {
	data, err := json.Marshal(tokenBody{Token: token})
	if err != nil {
		_ = conn.Close()
		return nil, fault.Wrap(fault.Validation, err, "encoding the token")
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	fail := func(err error) (net.Conn, error) {
		_ = conn.Close()
		if !stop() && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPut, "http://sandboxd/v1/token", bytes.NewReader(data))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(conn); err != nil {
		return fail(fmt.Errorf("sandboxd at %s: sending the token: %w", where, err))
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fail(fmt.Errorf("sandboxd at %s: no answer to the token: %w", where, err))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	_ = resp.Body.Close()
	if err != nil {
		return fail(fmt.Errorf("sandboxd at %s: reading the answer to the token: %w", where, err))
	}
	if resp.StatusCode != http.StatusNoContent {
		c := &Client{where: where}
		return fail(c.problemErr(resp.StatusCode, body))
	}
	if !stop() {
		_ = conn.Close()
		return nil, ctx.Err()
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn reads through the reader that read the token's answer (it may hold bytes
// that followed).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// WriteFile streams r into workspace path p (see sandboxd.Runtime.WriteFile); maxBytes < 0
// means no limit. It returns the bytes written.
// Errors: sandboxd.Runtime.WriteFile's kinds; the errors of the package doc.
func (c *Client) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	return c.sendBytes(ctx, http.MethodPut, "/v1/files", pathQuery(p), r, func(h http.Header) {
		if maxBytes >= 0 {
			h.Set(headerMaxBytes, strconv.FormatInt(maxBytes, 10))
		}
	})
}

// sendBytes streams body (nil: empty) as an application/octet-stream request whose answer is
// a writeResult, and returns its byte count; header adds headers (nil: none).
func (c *Client) sendBytes(ctx context.Context, method, path string, query url.Values, body io.Reader, header func(http.Header)) (int64, error) {
	if body == nil {
		body = http.NoBody
	}
	resp, err := c.do(ctx, method, path, query, body, func(h http.Header) {
		h.Set("Content-Type", "application/octet-stream")
		if header != nil {
			header(h)
		}
	})
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, c.failure(resp)
	}
	var res writeResult
	if err := decodeJSON(resp, &res); err != nil {
		return 0, fmt.Errorf("sandboxd at %s: %w", c.where, err)
	}
	return res.Bytes, nil
}

// ReadFile opens workspace path p for reading; the caller closes the reader.
// Errors: sandboxd.Runtime.ReadFile's kinds; the errors of the package doc.
func (c *Client) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/files", pathQuery(p), nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c.failure(resp)
	}
	return resp.Body, nil
}

// ListFiles lists workspace folder dir, sorted by name.
// Errors: sandboxd.Runtime.ListFiles's kinds; the errors of the package doc.
func (c *Client) ListFiles(ctx context.Context, dir string) ([]sandboxd.FileInfo, error) {
	var list []sandboxd.FileInfo
	err := c.call(ctx, http.MethodGet, "/v1/files/list", pathQuery(dir), nil, http.StatusOK, &list)
	return list, err
}

// RemoveFile removes a file or an empty folder; a missing path is not an error.
// Errors: sandboxd.Runtime.RemoveFile's kinds; the errors of the package doc.
func (c *Client) RemoveFile(ctx context.Context, p string) error {
	return c.call(ctx, http.MethodDelete, "/v1/files", pathQuery(p), nil, http.StatusNoContent, nil)
}

// RemoveAll removes a file, or a folder with what it holds; a missing path is not an error.
// Errors: sandboxd.Runtime.RemoveAll's kinds; the errors of the package doc.
func (c *Client) RemoveAll(ctx context.Context, p string) error {
	return c.call(ctx, http.MethodDelete, "/v1/files", url.Values{"path": {p}, "recursive": {"true"}}, nil, http.StatusNoContent, nil)
}

// MakeDir makes a folder and its missing parents; one already there is not an error.
// Errors: sandboxd.Runtime.MakeDir's kinds; the errors of the package doc.
func (c *Client) MakeDir(ctx context.Context, p string) error {
	return c.call(ctx, http.MethodPost, "/v1/files/folders", pathQuery(p), nil, http.StatusNoContent, nil)
}

// Move renames from to to as rename(2) does, making to's missing parents.
// Errors: sandboxd.Runtime.Move's kinds; the errors of the package doc.
func (c *Client) Move(ctx context.Context, from, to string) error {
	body, err := json.Marshal(moveBody{From: from, To: to})
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/files/move", nil, bytes.NewReader(body), http.StatusNoContent, nil)
}

func pathQuery(p string) url.Values { return url.Values{"path": {p}} }

func jsonHeader(h http.Header) { h.Set("Content-Type", "application/json") }

// call does a JSON request and decodes the answer into v (nil: none expected).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, body io.Reader, want int, v any) error {
	var header func(http.Header)
	if body != nil {
		header = jsonHeader
	}
	resp, err := c.do(ctx, method, path, query, body, header)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return c.failure(resp)
	}
	if v == nil {
		discard(resp)
		return nil
	}
	if err := decodeJSON(resp, v); err != nil {
		return fmt.Errorf("sandboxd at %s: %w", c.where, err)
	}
	return nil
}

// do sends one authenticated request.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body io.Reader, header func(http.Header)) (*http.Response, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("sandboxd at %s: %w", c.where, err)
	}
	req.Header.Set("Authorization", c.authValue)
	if header != nil {
		header(req.Header)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrUnreachable) {
			return nil, fault.Wrap(fault.Provision, err, "sandboxd does not answer at %s", c.where)
		}
		return nil, fmt.Errorf("sandboxd at %s: %w", c.where, err)
	}
	return resp, nil
}

// failure turns an error answer into an error and closes its body.
func (c *Client) failure(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	discard(resp)
	return c.problemErr(resp.StatusCode, data)
}

// problemErr turns a problem document into a fault error of its kind.
func (c *Client) problemErr(status int, data []byte) error {
	var p problem
	if err := json.Unmarshal(data, &p); err != nil || p.Kind == "" {
		text := strings.TrimSpace(string(data))
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		return fault.New(fault.Internal, "sandboxd at %s answered %d: %s", c.where, status, text)
	}
	switch p.Kind {
	case kindUnauthenticated:
		return fault.Wrap(fault.Provision, ErrUnreachable, "sandboxd at %s refused the sandbox token: %s", c.where, p.Detail)
	case kindAwaitingToken:
		return fault.Wrap(fault.Provision, errors.Join(ErrAwaitingToken, ErrUnreachable), "sandboxd at %s: %s", c.where, p.Detail)
	case kindUnknownRoute, kindMethodNotAllowed:
		return fault.New(fault.Internal, "sandboxd at %s does not serve this API (%s): %s", c.where, p.Kind, p.Detail)
	}
	return fault.New(fault.Kind(p.Kind), "%s", p.Detail)
}

func decodeJSON(resp *http.Response, v any) error {
	defer discard(resp)
	return json.NewDecoder(resp.Body).Decode(v)
}

// discard reads what is left of the body (a little) and closes it, so the connection can be
// reused.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
