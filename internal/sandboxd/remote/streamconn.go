package remote

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// StreamConn makes a net.Conn of a byte stream to `sandboxd proxy` (see NewDialClient): r
// reads what the proxy writes to its standard output, w writes to its standard input, and
// closeFn (called once, by Close) ends the stream. CloseWrite, when the client asks for it,
// closes w. Deadlines are not supported (the HTTP client does not need them; its requests end
// with their contexts, which close the connection).
func StreamConn(r io.Reader, w io.WriteCloser, closeFn func() error) net.Conn {
	return &streamConn{r: r, w: w, closeFn: closeFn}
}

type streamConn struct {
	r       io.Reader
	w       io.WriteCloser
	closeFn func() error
	once    sync.Once
	err     error
}

func (c *streamConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *streamConn) Write(b []byte) (int, error) { return c.w.Write(b) }

func (c *streamConn) Close() error {
	c.once.Do(func() {
		_ = c.w.Close()
		if c.closeFn != nil {
			c.err = c.closeFn()
		}
	})
	return c.err
}

func (c *streamConn) CloseWrite() error { return c.w.Close() }

func (c *streamConn) LocalAddr() net.Addr  { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return streamAddr{} }

func (c *streamConn) SetDeadline(time.Time) error      { return os.ErrNoDeadline }
func (c *streamConn) SetReadDeadline(time.Time) error  { return os.ErrNoDeadline }
func (c *streamConn) SetWriteDeadline(time.Time) error { return os.ErrNoDeadline }

type streamAddr struct{}

func (streamAddr) Network() string { return "stream" }
func (streamAddr) String() string  { return "sandboxd-proxy" }
