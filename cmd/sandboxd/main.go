// Command sandboxd is the runtime agent inside a Sandgate sandbox: the container's entrypoint
// (under an init such as docker's --init), serving the runtime API of package
// internal/sandboxd/remote on a Unix socket and/or TCP, authenticated by the sandbox's bearer
// secret.
//
//	sandboxd serve [flags]          serve the runtime API
//	sandboxd proxy [--socket PATH]  join standard input and output to the API's Unix socket
//	sandboxd install DIR            copy this executable to DIR/sandboxd (mode 0755)
//	sandboxd version                print the version
//
// Flags of serve (each falls back to an environment variable):
//
//	--socket PATH       Unix socket to serve on (SANDBOXD_SOCKET); made with mode 0666, a stale
//	                    socket of that name is removed first
//	--listen ADDR       TCP address to serve on, e.g. :8888 (SANDBOXD_LISTEN)
//	--workspace DIR     the workspace folder (SANDBOXD_WORKSPACE; default: the working folder)
//	--python NAME       python interpreter (SANDBOXD_PYTHON; default python3)
//	--bash NAME         bash (SANDBOXD_BASH; default bash)
//	--token-file FILE   file holding the bearer secret (SANDBOXD_TOKEN_FILE)
//	--await-token       start without a secret and take it from the first PUT /v1/token
//	                    (SANDBOXD_AWAIT_TOKEN=1)
//	--state-file FILE   file recording the contexts, outside the workspace (SANDBOXD_STATE_FILE)
//	--log-level LEVEL   debug, info, warn or error (SANDBOXD_LOG_LEVEL; default info)
//	--run-as USER       run programs and contexts as USER: uid, uid:gid, name or name:group
//	                    (SANDBOXD_RUN_AS; default: sandboxd's own user)
//	--egress-dir DIR    forward 127.0.0.1:3128 (HTTP proxy) and 127.0.0.1:53 (DNS, UDP and
//	                    TCP) to the egress proxy's Unix sockets px.sock and ns.sock in DIR,
//	                    after writing DIR/ca-bundle.pem (the image's roots and
//	                    DIR/egress-ca.pem) (SANDBOXD_EGRESS_DIR; cmd/sandboxd/egress.go)
//
// At least one of --socket and --listen is required. The secret comes from --token-file, or
// else from SANDBOXD_TOKEN; without one sandboxd refuses to start (exit status 2), unless
// --await-token says the gateway gives it at run time: sandboxd then serves the Unix socket
// at once, but answers every /v1 request but PUT /v1/token with 503 until a token is set
// (the first one wins; see internal/sandboxd/remote), and opens the --listen TCP listener
// only then. Nothing runs before the token, so no program sees it (the Kubernetes provider
// sets it through an exec tunnel to `sandboxd proxy` before anything else). The
// Docker provider uses the file (which it removes once sandboxd answers): an environment
// variable of the container would show in /proc/1/environ of its init. sandboxd makes itself
// non-dumpable, so programs of the same user cannot read its memory either.
//
// With --run-as, programs and contexts run as another user than sandboxd (setuid and setgid
// as they start), so no program can signal, stop (SIGSTOP), trace or read sandboxd, whatever
// it does: the docker provider runs sandboxd as root in the container with only the
// capabilities this needs — CAP_SETUID and CAP_SETGID to start programs so, CAP_KILL to
// signal them, CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER to keep the workspace theirs
// (sandboxd gives the workspace folder, the files it writes there and the folders of bash
// context state to that user) while it reads and writes all of it. Programs keep none of
// them. sandboxd refuses to start (exit status 2) when the user cannot be resolved or it
// lacks one of these capabilities, rather than run programs as itself; a USER that is
// sandboxd's own is accepted with a warning.
// SANDBOXD_TOKEN is removed from sandboxd's own environment before anything starts, and
// programs get sandboxd's environment without any SANDBOXD_* variable (plus LANG=C.UTF-8,
// PYTHONUNBUFFERED=1, HOME and PATH when it has none). SIGTERM or SIGINT stop it gracefully:
// listeners close, running executions and contexts are killed.
//
// install copies sandboxd's own executable to DIR/sandboxd with mode 0755 (written to a
// temporary name and renamed, so a half-copied binary never has the name): an init container
// made from an image that ships sandboxd puts it into a volume the sandbox container runs it
// from, with no shell or cp needed in that image.
//
// proxy connects to the Unix socket of a sandboxd serving in the same sandbox (--socket, else
// SANDBOXD_SOCKET) and copies its standard input to the socket and the socket's answers to
// its standard output, until either side ends: one connection of the runtime API carried by
// a stream the gateway opens through the container engine's or the API server's exec (when
// the gateway cannot reach the socket itself). It reads no secret and adds nothing to the
// bytes; the gateway's requests carry their bearer secret as on any connection.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/procgroup"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// tokenEnv names the environment variable of the bearer secret.
const tokenEnv = "SANDBOXD_TOKEN"

// shutdownGrace bounds how long a stopping sandboxd waits for requests in flight.
const shutdownGrace = 10 * time.Second

func main() {
	environ := os.Environ()
	_ = os.Unsetenv(tokenEnv) // nothing started from here on inherits it
	// Not dumpable: /proc/<sandboxd>/{environ,mem,…} belong to root and ptrace is refused, so
	// the programs it runs, although they run as the same user, cannot read its memory (the
	// secret among it). Programs themselves are dumpable again after their execve.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], environ, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a mistake in how sandboxd was started (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usage = `Usage: sandboxd <command> [flags]

Commands:
  serve     serve the runtime API (needs a token: SANDBOXD_TOKEN, --token-file or --await-token)
  proxy     join standard input and output to the API's Unix socket (--socket)
  install   copy this executable to DIR/sandboxd (sandboxd install DIR)
  version   print the version

Run "sandboxd serve --help" for the flags.
`

func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"a command is required"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], environ, stderr)
	case "proxy":
		return proxy(ctx, args[1:], environ, os.Stdin, stdout, stderr)
	case "install":
		return install(args[1:])
	case "stdio":
		return stdioCommand(ctx, args[1:], environ, os.Stdin, os.Stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "sandgate sandboxd", version)
		return nil
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}

// serveConfig is what serve's flags and environment say.
type serveConfig struct {
	socket, listen, workspace, python, bash, tokenFile, stateFile, logLevel, runAs string
	egressDir                                                                      string
	token                                                                          string
	awaitToken                                                                     bool
}

func parseServe(args, environ []string, stderr io.Writer) (serveConfig, error) {
	env := envMap(environ)
	var c serveConfig
	flags := flag.NewFlagSet("sandboxd serve", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&c.socket, "socket", env["SANDBOXD_SOCKET"], "Unix socket to serve on (SANDBOXD_SOCKET)")
	flags.StringVar(&c.listen, "listen", env["SANDBOXD_LISTEN"], "TCP address to serve on, e.g. :8888 (SANDBOXD_LISTEN)")
	flags.StringVar(&c.workspace, "workspace", env["SANDBOXD_WORKSPACE"], "workspace folder (SANDBOXD_WORKSPACE; default: the working folder)")
	flags.StringVar(&c.python, "python", env["SANDBOXD_PYTHON"], "python interpreter (SANDBOXD_PYTHON; default python3)")
	flags.StringVar(&c.bash, "bash", env["SANDBOXD_BASH"], "bash (SANDBOXD_BASH; default bash)")
	flags.StringVar(&c.stateFile, "state-file", env["SANDBOXD_STATE_FILE"], "file recording the contexts, outside the workspace, so a restarted sandboxd reports the ones it lost (SANDBOXD_STATE_FILE; default none)")
	flags.StringVar(&c.tokenFile, "token-file", env["SANDBOXD_TOKEN_FILE"], "file holding the bearer secret (SANDBOXD_TOKEN_FILE; else SANDBOXD_TOKEN)")
	flags.BoolVar(&c.awaitToken, "await-token", env["SANDBOXD_AWAIT_TOKEN"] == "1", "start without a secret and take it from the first PUT /v1/token (SANDBOXD_AWAIT_TOKEN=1)")
	flags.StringVar(&c.logLevel, "log-level", cmp.Or(env["SANDBOXD_LOG_LEVEL"], "info"), "debug, info, warn or error (SANDBOXD_LOG_LEVEL)")
	flags.StringVar(&c.runAs, "run-as", env["SANDBOXD_RUN_AS"], "run programs and contexts as this user (uid, uid:gid, name or name:group), so that they cannot signal, stop or trace sandboxd (SANDBOXD_RUN_AS; needs root with CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL, CAP_SETGID and CAP_SETUID)")
	flags.StringVar(&c.egressDir, "egress-dir", env["SANDBOXD_EGRESS_DIR"], "forward 127.0.0.1:3128 (HTTP proxy) and 127.0.0.1:53 (DNS) to the egress proxy's sockets in this folder, and write its trust bundle there (SANDBOXD_EGRESS_DIR; the docker provider sets it for sandboxes behind the egress proxy)")
	if err := flags.Parse(args); err != nil {
		return c, usageError{err.Error()}
	}
	if flags.NArg() > 0 {
		return c, usageError{fmt.Sprintf("unexpected arguments: %s", strings.Join(flags.Args(), " "))}
	}
	if c.socket == "" && c.listen == "" {
		return c, usageError{"give --socket or --listen (or SANDBOXD_SOCKET / SANDBOXD_LISTEN)"}
	}
	c.token = env[tokenEnv]
	if c.tokenFile != "" {
		data, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return c, usageError{fmt.Sprintf("reading the token file: %v", err)}
		}
		c.token = strings.TrimSpace(string(data))
	}
	if c.awaitToken {
		if c.token != "" {
			return c, usageError{"--await-token and a token (" + tokenEnv + " or --token-file) exclude each other"}
		}
	} else if c.token == "" {
		return c, usageError{"no token: set " + tokenEnv + " or --token-file; sandboxd does not serve its API without a secret"}
	}
	ws, err := filepath.Abs(cmp.Or(c.workspace, "."))
	if err != nil {
		return c, fmt.Errorf("finding the workspace folder: %w", err)
	}
	c.workspace = ws
	return c, nil
}

func serve(ctx context.Context, args, environ []string, stderr io.Writer) error {
	c, err := parseServe(args, environ, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return usageError{fmt.Sprintf("--log-level: %v", err)}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if os.Getpid() == 1 {
		log.Warn("sandboxd runs as PID 1: run it under an init (docker --init) so orphaned processes are reaped")
	}
	reserveThreads(spareThreads)

	if c.egressDir != "" {
		fw, err := startForwarder(c.egressDir, log)
		if err != nil {
			return err
		}
		defer fw.stop()
	}
	programs, err := programUser(c.runAs, c.workspace, log)
	if err != nil {
		return err
	}
	rt, err := newRuntime(c.workspace, environ, c.python, c.bash, c.stateFile, programs, log)
	if err != nil {
		return err
	}
	defer rt.Close()

	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			_ = ln.Close()
		}
	}()
	if c.socket != "" {
		ln, err := listenUnix(c.socket)
		if err != nil {
			return err
		}
		listeners = append(listeners, ln)
		defer os.Remove(c.socket)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, len(listeners)+1)
	serveOn := func(ln net.Listener) {
		go func() { errc <- srv.Serve(ln) }()
	}
	var (
		tcpMu     sync.Mutex
		tcpClosed bool
	)
	openTCP := func() {
		ln, err := net.Listen("tcp", c.listen)
		if err != nil {
			errc <- fmt.Errorf("listening on %s: %w", c.listen, err)
			return
		}
		tcpMu.Lock()
		defer tcpMu.Unlock()
		if tcpClosed {
			_ = ln.Close()
			return
		}
		listeners = append(listeners, ln)
		serveOn(ln)
	}
	switch {
	case c.awaitToken:
		var onToken func()
		if c.listen != "" {
			onToken = openTCP
		}
		srv.Handler = remote.HandlerAwaitingToken(rt, log, onToken)
	default:
		srv.Handler = remote.Handler(rt, c.token, log)
		if c.listen != "" {
			ln, err := net.Listen("tcp", c.listen)
			if err != nil {
				return fmt.Errorf("listening on %s: %w", c.listen, err)
			}
			listeners = append(listeners, ln)
		}
	}
	tcpMu.Lock()
	for _, ln := range listeners {
		serveOn(ln)
	}
	tcpMu.Unlock()
	log.Info("sandboxd serving", "version", version, "socket", c.socket, "listen", c.listen, "workspace", rt.Workspace(), "await_token", c.awaitToken)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("sandboxd stopping")
	case serveErr = <-errc:
	}
	tcpMu.Lock()
	tcpClosed = true // a token set from now on opens no listener
	tcpMu.Unlock()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(shutdownCtx) }()
	_ = rt.Close() // ends running executions, so their requests finish
	if err := <-shut; err != nil {
		_ = srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", serveErr)
	}
	return nil
}

// proxy copies in to the Unix socket of the sandboxd serving in this sandbox and the
// socket's bytes to out, until the socket's side ends (or in ends and the socket closes).
func proxy(ctx context.Context, args, environ []string, in io.Reader, out, stderr io.Writer) error {
	flags := flag.NewFlagSet("sandboxd proxy", flag.ContinueOnError)
	flags.SetOutput(stderr)
	socket := flags.String("socket", envMap(environ)["SANDBOXD_SOCKET"], "Unix socket of the sandboxd to reach (SANDBOXD_SOCKET)")
	if err := flags.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if *socket == "" || flags.NArg() > 0 {
		return usageError{"give --socket (or SANDBOXD_SOCKET), and nothing else"}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", *socket)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *socket, err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	go func() {
		_, _ = io.Copy(uc, in)
		_ = uc.CloseWrite() // the request side is done: sandboxd answers what it has
	}()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, uc)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("copying from %s: %w", *socket, err)
	}
	return nil
}

// install copies the running executable to dir/sandboxd (see the package doc).
func install(args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usageError{"usage: sandboxd install DIR"}
	}
	dir := args[0]
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("reading this executable: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".sandboxd-*")
	if err != nil {
		return fmt.Errorf("installing into %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing of that name is left
	if _, err := io.Copy(tmp, src); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("copying to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("making %s executable: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, "sandboxd")); err != nil {
		return fmt.Errorf("installing into %s: %w", dir, err)
	}
	return nil
}

// newRuntime is the runtime of serve and stdio on workspace ws (stateFile "" records no
// contexts). Where sandboxd may make cgroups (a writable cgroup v2 hierarchy), executions
// that leave their session are contained by them; without, through the subreaper.
func newRuntime(ws string, environ []string, python, bash, stateFile string, programs *sandboxd.User, log *slog.Logger) (*sandboxd.Runtime, error) {
	cgroups, err := procgroup.DetectCgroups("sandboxd")
	if err != nil {
		log.Debug("no cgroup per execution", "reason", err)
		cgroups = nil
	}
	return sandboxd.New(sandboxd.Options{
		Workspace: ws, Env: programEnv(environ, ws), Python: python, Bash: bash, StateFile: stateFile,
		Cgroups: cgroups, Subreaper: cgroups == nil, User: programs, Logger: log,
	})
}

// listenUnix listens on socket path p (mode 0666), removing a stale socket of that name
// first; any other kind of file there is an error.
func listenUnix(p string) (net.Listener, error) {
	if st, err := os.Lstat(p); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", p)
		}
		if err := os.Remove(p); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", p, err)
		}
	}
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", p, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // removed at exit, not by Shutdown
	if err := os.Chmod(p, 0o666); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("making %s accessible: %w", p, err)
	}
	return ln, nil
}

// programEnv is the base environment of programs: sandboxd's own without SANDBOXD_*
// variables, plus defaults for what it lacks.
func programEnv(environ []string, workspace string) []string {
	out := make([]string, 0, len(environ)+4)
	have := map[string]bool{}
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || strings.HasPrefix(name, "SANDBOXD_") {
			continue
		}
		have[name] = true
		out = append(out, kv)
	}
	for _, d := range [][2]string{
		{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		{"HOME", workspace},
		{"LANG", "C.UTF-8"},
		{"PYTHONUNBUFFERED", "1"},
	} {
		if !have[d[0]] {
			out = append(out, d[0]+"="+d[1])
		}
	}
	return out
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// spareThreads is how many idle OS threads sandboxd keeps ready (reserveThreads).
const spareThreads = 16

// reserveThreads makes the Go runtime start n OS threads now and keep them idle for later:
// each of n goroutines holds a thread of its own until all n do, then lets it go back to the
// runtime's pool of idle threads (a goroutine that unlocks its thread before it ends leaves the
// thread to the runtime). A sandbox's processes share its pids limit with sandboxd; a program
// that uses it all up (a fork bomb) would otherwise leave the runtime unable to start a thread
// when it needs one — a fatal error — instead of letting sandboxd end the program.
func reserveThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}
