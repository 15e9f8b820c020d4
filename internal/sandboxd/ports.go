package sandboxd

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// MaxPort is the highest TCP port DialPort accepts.
const MaxPort = 65535

// dialPortTimeout bounds how long DialPort waits for a listener to accept.
const dialPortTimeout = 10 * time.Second

// DialPort connects to TCP port on the loopback interface of the sandbox — 127.0.0.1, else
// ::1 when nothing listens there — from the runtime's own network namespace: a server a
// program of the sandbox started on localhost. It is how the gateway's preview ports reach
// into the sandbox (remote: GET /v1/ports/{port}), so nothing is published on a host and
// the sandbox's egress rules are untouched. The caller closes the connection.
//
// Errors: fault.Validation for a port outside 1–MaxPort; fault.Conflict when nothing listens
// on it or its listener does not accept within 10 s; ctx.Err().
func (r *Runtime) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > MaxPort {
		return nil, fault.New(fault.Validation, "port %d is not a TCP port (1-%d)", port, MaxPort)
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, fault.New(fault.Conflict, "sandboxd is shutting down")
	}
	d := net.Dialer{Timeout: dialPortTimeout}
	p := strconv.Itoa(port)
	conn, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err != nil && refused(err) {
		// A server bound to ::1 only ("localhost" on some systems).
		if c6, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p)); err6 == nil {
			return c6, nil
		}
	}
	switch {
	case err == nil:
		return conn, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case refused(err):
		return nil, fault.New(fault.Conflict, "nothing listens on port %d in the sandbox (127.0.0.1 and ::1); start a server there that listens on localhost or all interfaces", port)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return nil, fault.New(fault.Conflict, "the server on port %d in the sandbox did not accept a connection within %s", port, dialPortTimeout)
	}
	return nil, fault.Wrap(fault.Conflict, err, "connecting to port %d in the sandbox", port)
}

func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
