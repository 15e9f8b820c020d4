package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxd/remote"
	"golang.org/x/sys/unix"
)

// stdioCommand serves the runtime API on one connection made of standard input (requests)
// and standard output (answers), with a runtime of its own that ends with the connection:
//
//	sandboxd stdio [--workspace DIR] [--python NAME] [--bash NAME]
//
// It is how the gateway runs programs in a container it did not start (a Docker profile
// attached to an existing container): each connection is one engine exec of this command,
// kept alive for many requests. No daemon stays behind, and no context outlives the
// connection, so such sandboxes are not stateful. The secret is SANDBOXD_TOKEN in the exec's
// environment, fresh per connection; sandboxd removes it from its environment and is not
// dumpable, so programs cannot read it.
func stdioCommand(ctx context.Context, args, environ []string, in io.Reader, out io.WriteCloser, stderr io.Writer) error {
	env := envMap(environ)
	flags := flag.NewFlagSet("sandboxd stdio", flag.ContinueOnError)
	flags.SetOutput(stderr)
	workspace := flags.String("workspace", env["SANDBOXD_WORKSPACE"], "workspace folder (SANDBOXD_WORKSPACE; default: the working folder)")
	python := flags.String("python", env["SANDBOXD_PYTHON"], "python interpreter (SANDBOXD_PYTHON; default python3)")
	bash := flags.String("bash", env["SANDBOXD_BASH"], "bash (SANDBOXD_BASH; default bash)")
	if err := flags.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if flags.NArg() > 0 {
		return usageError{"sandboxd stdio takes no arguments"}
	}
	token := env[tokenEnv]
	if token == "" {
		return usageError{"no token: set " + tokenEnv + "; sandboxd does not serve its API without a secret"}
	}
	ws, err := filepath.Abs(cmp.Or(*workspace, "."))
	if err != nil {
		return fmt.Errorf("finding the workspace folder: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := newRuntime(ws, environ, *python, *bash, "", nil, log)
	if err != nil {
		return err
	}
	defer rt.Close()

	conn, err := socketConn(in, out)
	if err != nil {
		return err
	}
	ln := newOneConnListener(conn)
	srv := &http.Server{
		Handler:           remote.Handler(rt, token, log),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// The listener closes with its connection (see oneConnListener): also when a port
		// tunnel took the connection over, which ends only when the tunnel does.
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				ln.Close()
			}
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		_ = srv.Close()
		err = <-errc
	}
	_ = rt.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// oneConnListener hands out one connection, then blocks until it is closed.
type oneConnListener struct {
	conn net.Conn
	once sync.Once
	mu   sync.Mutex
	sent bool
	done chan struct{}
}

// newOneConnListener serves c once; closing c closes the listener (so a hijacked connection
// keeps the server up until whoever took it over closes it).
func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{done: make(chan struct{})}
	l.conn = &closeHook{Conn: c, hook: func() { _ = l.Close() }}
	return l
}

// closeHook is a connection that calls hook once it is closed.
type closeHook struct {
	net.Conn
	hook func()
	once sync.Once
}

func (c *closeHook) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.hook)
	return err
}

// CloseWrite half-closes the connection when it can.
func (c *closeHook) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.sent {
		l.sent = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// socketConn makes a connection of in and out for the HTTP server: one end of a Unix socket
// pair, whose other end is copied from in and to out. A real socket, unlike the pipes
// themselves, has deadlines, which the server needs to hand a connection over to a port
// tunnel (it interrupts its own pending read). The end of in half-closes the socket; the
// server closing its end closes out.
func socketConn(in io.Reader, out io.WriteCloser) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("making a socket pair: %w", err)
	}
	toConn := func(fd int, name string) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close() // FileConn dups it
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	served, err := toConn(fds[0], "stdio-served")
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, fmt.Errorf("making a socket pair: %w", err)
	}
	pumped, err := toConn(fds[1], "stdio-pumped")
	if err != nil {
		_ = served.Close()
		return nil, fmt.Errorf("making a socket pair: %w", err)
	}
	go func() {
		_, _ = io.Copy(pumped, in)
		_ = pumped.CloseWrite()
	}()
	go func() {
		_, _ = io.Copy(out, pumped)
		_ = out.Close()
		_ = pumped.Close()
	}()
	return served, nil
}
