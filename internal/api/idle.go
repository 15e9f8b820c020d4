package api

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// Idle streams (server.stream_idle_timeout): a stream that moves no bytes for the idle time is
// cut, whatever the server's read and write timeouts still allow (issue 33: slow chunked
// bodies held connections for the whole 15-minute read timeout).
//
//   - A request body: a read of it that waits that long for a byte fails, and the request is
//     answered 408 problem "timeout" (writeProblem), the connection then closed. Only the
//     time spent waiting for the client counts: a handler that reads slowly (a program that
//     does not read its standard input) is not the client's idleness.
//   - An answer: a write (or flush) the client does not take within that long is cut; the
//     client that stopped reading gets nothing more.
//   - An upgraded connection (a preview port's WebSocket): when no byte has passed either way
//     for that long, the client gets a WebSocket close frame (1001, naming the limit) and both
//     ends are closed.
//
// Event streams are untouched while they wait for output: they send a keepalive comment every
// StreamKeepalive, which the client must take.

// DefaultStreamIdle is Options.StreamIdle's default.
const DefaultStreamIdle = 2 * time.Minute

// idleKey finds a request's idleStreams state in its context.
type idleKey struct{}

// streamState is one request's idle watch: its body's and its answer's.
type streamState struct {
	idle time.Duration
	body *idleWatch
}

// idleStreams installs the idle watches on every request (first in the chain, so that w is
// the server's own writer). idle ≤ 0: DefaultStreamIdle.
func idleStreams(idle time.Duration) func(http.Handler) http.Handler {
	if idle <= 0 {
		idle = DefaultStreamIdle
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			st := &streamState{idle: idle}
			if r.Body != nil && r.Body != http.NoBody {
				st.body = newIdleWatch(idle, func() { _ = rc.SetReadDeadline(time.Now()) })
				r.Body = &idleBody{ReadCloser: r.Body, watch: st.body, idle: idle}
			}
			iw := &idleWriter{ResponseWriter: w, watch: newIdleWatch(idle, func() { _ = rc.SetWriteDeadline(time.Now()) }),
				idle: idle, websocket: strings.EqualFold(r.Header.Get("Upgrade"), "websocket")}
			defer iw.watch.close()
			if st.body != nil {
				defer st.body.close()
			}
			next.ServeHTTP(iw, r.WithContext(context.WithValue(r.Context(), idleKey{}, st)))
		})
	}
}

// bodyIdled reports whether r's body was cut for idleness, and for how long it had waited.
func bodyIdled(r *http.Request) (time.Duration, bool) {
	if r == nil {
		return 0, false
	}
	st, ok := r.Context().Value(idleKey{}).(*streamState)
	if !ok || st.body == nil || !st.body.cut() {
		return 0, false
	}
	return st.idle, true
}

// idleProblem is the answer to a request whose body was cut after idle without a byte.
func idleProblem(idle time.Duration) Problem {
	return Problem{Type: ProblemTypeBase + string(fault.Timeout), Title: "Request timeout", Status: http.StatusRequestTimeout,
		Detail: fmt.Sprintf("no byte of the request body arrived for %s (server.stream_idle_timeout), so the request was cut; "+
			"send the body without such pauses, or send each part as a request of its own as it comes (e.g. POST …/stdin per chunk)", idle)}
}

// errStreamIdle is the error of a read from a request body cut for idleness.
var errStreamIdle = errors.New("the request body sent no byte for server.stream_idle_timeout")

// idleWatch cuts an operation (a read or a write on the connection) that has waited idle:
// cutFunc sets the connection's deadline to now, which fails the operation at once.
type idleWatch struct {
	idle    time.Duration
	cutFunc func()

	mu     sync.Mutex
	busy   bool      // an operation is under way
	since  time.Time // when it began
	timer  *time.Timer
	wasCut bool
	closed bool
}

func newIdleWatch(idle time.Duration, cut func()) *idleWatch {
	return &idleWatch{idle: idle, cutFunc: cut}
}

// begin marks an operation under way; end marks it over.
func (w *idleWatch) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.busy, w.since = true, time.Now()
	if w.timer == nil {
		w.timer = time.AfterFunc(w.idle, w.fire)
	} else {
		w.timer.Reset(w.idle)
	}
}

func (w *idleWatch) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy = false
	if w.timer != nil {
		w.timer.Stop()
	}
}

// fire cuts the operation under way if it began idle ago (a timer of an earlier one that
// fired late does nothing).
func (w *idleWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.busy || w.wasCut || w.closed || time.Since(w.since) < w.idle {
		return
	}
	w.wasCut = true
	w.cutFunc()
}

func (w *idleWatch) cut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wasCut
}

// close stops the watch for good (the request has been answered).
func (w *idleWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// idleBody is a request body whose reads are watched.
type idleBody struct {
	io.ReadCloser
	watch *idleWatch
	idle  time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.watch.begin()
	n, err := b.ReadCloser.Read(p)
	b.watch.end()
	if err != nil && b.watch.cut() {
		return n, fmt.Errorf("%w (%s): %w", errStreamIdle, b.idle, err)
	}
	return n, err
}

// idleWriter is an answer whose writes and flushes are watched. It keeps what
// http.ResponseController and chi's writer wrappers look for (Flush, Hijack, ReadFrom,
// Unwrap).
type idleWriter struct {
	http.ResponseWriter
	watch     *idleWatch
	idle      time.Duration
	websocket bool // the request asked to upgrade to WebSocket
}

func (w *idleWriter) Write(p []byte) (int, error) {
	w.watch.begin()
	defer w.watch.end()
	return w.ResponseWriter.Write(p)
}

// ReadFrom copies through Write, so that each part is watched (not the whole copy at once).
func (w *idleWriter) ReadFrom(src io.Reader) (int64, error) {
	return io.CopyBuffer(writerOnly{w}, src, make([]byte, 32<<10))
}

type writerOnly struct{ io.Writer }

func (w *idleWriter) FlushError() error {
	w.watch.begin()
	defer w.watch.end()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *idleWriter) Flush() { _ = w.FlushError() }

func (w *idleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands over the connection (an upgrade: the preview proxy's WebSockets) watched for
// idleness both ways.
func (w *idleWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.watch.close() // the connection is the idleConn's now
	return newIdleConn(conn, w.idle, w.websocket), brw, nil
}

// idleConn is an upgraded connection closed when no byte has passed either way for idle; a
// WebSocket first gets a close frame that says why (unless a write is stuck on the
// connection, which the close ends).
type idleConn struct {
	net.Conn
	idle      time.Duration
	websocket bool

	wmu sync.Mutex // one write at a time: the proxy's, or the close frame

	mu     sync.Mutex // guards last, timer and closed
	last   time.Time  // when a byte last passed
	timer  *time.Timer
	closed bool
}

func newIdleConn(conn net.Conn, idle time.Duration, websocket bool) *idleConn {
	c := &idleConn{Conn: conn, idle: idle, websocket: websocket, last: time.Now()}
	c.mu.Lock()
	c.timer = time.AfterFunc(idle, c.check)
	c.mu.Unlock()
	return c
}

func (c *idleConn) moved() {
	c.mu.Lock()
	c.last = time.Now()
	c.mu.Unlock()
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.moved()
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	n, err := c.Conn.Write(p)
	c.wmu.Unlock()
	if n > 0 {
		c.moved()
	}
	return n, err
}

func (c *idleConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.timer.Stop()
	c.mu.Unlock()
	return c.Conn.Close()
}

// check closes the connection when it has been idle long enough, else looks again when it
// could be.
func (c *idleConn) check() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if wait := c.idle - time.Since(c.last); wait > 0 {
		c.timer.Reset(wait)
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	if c.websocket && c.wmu.TryLock() {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Conn.Write(wsCloseFrame(wsGoingAway, fmt.Sprintf("idle for %s (server.stream_idle_timeout)", c.idle)))
		c.wmu.Unlock()
	}
	_ = c.Conn.Close()
}

// wsGoingAway is the WebSocket close code 1001 (RFC 6455 §7.4.1): the endpoint is going away.
const wsGoingAway = 1001

// wsCloseFrame is an unmasked (server-to-client) WebSocket close frame with code and reason
// (RFC 6455 §5.5.1; at most 123 bytes of reason).
func wsCloseFrame(code uint16, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	f := make([]byte, 0, 4+len(reason))
	f = append(f, 0x88, byte(2+len(reason))) // FIN + close; payload length
	f = binary.BigEndian.AppendUint16(f, code)
	return append(f, reason...)
}
