//go:build unix

package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// TunnelProtocol is the Upgrade token of GET /v1/ports/{port}: after 101 Switching
// Protocols the connection carries the bytes of one TCP connection to the port.
const TunnelProtocol = "tcp"

// tunnelPort is GET /v1/ports/{port} with "Connection: Upgrade" and "Upgrade: tcp": it
// connects to the port on the sandbox's loopback (sandboxd.Runtime.DialPort) and, once that
// succeeded, answers 101 and copies bytes both ways until either side closes. Whatever
// speaks over it — HTTP, WebSocket, anything — is the caller's business; the request's own
// headers (the bearer secret among them) never reach the port.
func (s *server) tunnelPort(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		port = -1
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), TunnelProtocol) {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "a port tunnel needs \"Connection: Upgrade\" and \"Upgrade: "+TunnelProtocol+"\""))
		return
	}
	target, err := s.rt.DialPort(r.Context(), port)
	if err != nil {
		s.fail(w, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = target.Close()
		writeProblem(w, newProblem(http.StatusInternalServerError, string(fault.Internal), "the connection cannot be taken over: "+err.Error()))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	_, err = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + TunnelProtocol + "\r\n\r\n")
	if err == nil {
		err = brw.Flush()
	}
	if err != nil {
		_ = conn.Close()
		_ = target.Close()
		return
	}
	// Bytes the client sent right after its request are in brw's reader.
	splice(&bufferedConn{Conn: conn, r: brw.Reader}, target)
}

// headerHasToken reports whether one of header name's comma-separated values is token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// splice copies between a and b both ways; when one direction ends its write side is
// closed (half-close, where the connection can), and once both ended both are closed.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	copyHalf := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go copyHalf(a, b)
	go copyHalf(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}

// CloseWrite closes the write side of the connection under the buffered reader.
func (b *bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}

// DialPort opens a connection to TCP port inside the sandbox (GET /v1/ports/{port}, upgraded
// to a tunnel): the returned connection carries one TCP connection to the sandbox's loopback
// port (see sandboxd.Runtime.DialPort). It is independent of ctx once returned, and of the
// client's other connections; the caller closes it.
//
// Errors: fault.Validation for a port outside 1–65535; fault.Conflict when nothing listens
// there; the errors of the package doc.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	// The request outlives ctx once it was answered: ctx only bounds the handshake.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	resp, err := c.do(hctx, http.MethodGet, "/v1/ports/"+strconv.Itoa(port), nil, nil, func(h http.Header) {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", TunnelProtocol)
	})
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		cancel()
		if resp.StatusCode == http.StatusNotFound && resp.Header.Get("Content-Type") == problemType {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
			discard(resp)
			if p := decodeProblem(data); p.Kind == kindUnknownRoute {
				// A sandboxd older than port tunnels (an image built before them).
				return nil, fault.New(fault.Capability, "sandboxd at %s cannot open port tunnels: its sandbox image predates them; rebuild the image with a current sandboxd (images/sandbox/build.sh)", c.where)
			}
			return nil, c.problemErr(resp.StatusCode, data)
		}
		return nil, c.failure(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		_ = resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("sandboxd at %s: the port tunnel's answer is not a connection", c.where)
	}
	if !stop() { // ctx ended during the handshake
		_ = rwc.Close()
		cancel()
		return nil, ctx.Err()
	}
	return &tunnelConn{rwc: rwc, cancel: cancel, where: c.where}, nil
}

// tunnelConn is an upgraded connection as a net.Conn. Deadlines are not supported: the
// connection under it is the HTTP transport's.
type tunnelConn struct {
	rwc    io.ReadWriteCloser
	cancel context.CancelFunc
	where  string
	once   sync.Once
}

func (t *tunnelConn) Read(p []byte) (int, error)  { return t.rwc.Read(p) }
func (t *tunnelConn) Write(p []byte) (int, error) { return t.rwc.Write(p) }

func (t *tunnelConn) Close() error {
	err := t.rwc.Close()
	t.once.Do(t.cancel)
	return err
}

// CloseWrite half-closes the tunnel when the connection under it can.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.rwc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (t *tunnelConn) LocalAddr() net.Addr              { return tunnelAddr(t.where) }
func (t *tunnelConn) RemoteAddr() net.Addr             { return tunnelAddr(t.where) }
func (t *tunnelConn) SetDeadline(time.Time) error      { return errors.ErrUnsupported }
func (t *tunnelConn) SetReadDeadline(time.Time) error  { return errors.ErrUnsupported }
func (t *tunnelConn) SetWriteDeadline(time.Time) error { return errors.ErrUnsupported }

type tunnelAddr string

func (a tunnelAddr) Network() string { return "sandboxd-tunnel" }
func (a tunnelAddr) String() string  { return string(a) }

// decodeProblem decodes a problem document, or returns the zero problem.
func decodeProblem(data []byte) problem {
	var p problem
	_ = json.Unmarshal(data, &p)
	return p
}
