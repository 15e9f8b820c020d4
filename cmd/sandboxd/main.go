// Command sandboxd is the runtime agent inside a Sandgate sandbox: the container's entrypoint
// (under an init such as docker's --init), serving the runtime API of package
// internal/sandboxd/remote on a Unix socket and/or TCP, authenticated by the sandbox's bearer
// secret.
//
//	sandboxd serve [flags]   serve the runtime API
//	sandboxd version         print the version
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
//	--log-level LEVEL   debug, info, warn or error (SANDBOXD_LOG_LEVEL; default info)
//
// At least one of --socket and --listen is required. The secret comes from --token-file, or
// else from SANDBOXD_TOKEN; without one sandboxd refuses to start (exit status 2). The
// Docker provider uses the file (which it removes once sandboxd answers): an environment
// variable of the container would show in /proc/1/environ of its init. sandboxd makes itself
// non-dumpable, so programs of the same user cannot read its memory either.
// SANDBOXD_TOKEN is removed from sandboxd's own environment before anything starts, and
// programs get sandboxd's environment without any SANDBOXD_* variable (plus LANG=C.UTF-8,
// PYTHONUNBUFFERED=1, HOME and PATH when it has none). SIGTERM or SIGINT stop it gracefully:
// listeners close, running executions and contexts are killed.
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
	"strings"
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
  serve     serve the runtime API (needs a token: SANDBOXD_TOKEN or --token-file)
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
	socket, listen, workspace, python, bash, tokenFile, stateFile, logLevel string
	token                                                                   string
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
	flags.StringVar(&c.logLevel, "log-level", cmp.Or(env["SANDBOXD_LOG_LEVEL"], "info"), "debug, info, warn or error (SANDBOXD_LOG_LEVEL)")
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
	if c.token == "" {
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

	// Where sandboxd may make cgroups (a writable cgroup v2 hierarchy), executions that leave
	// their session are contained too.
	cgroups, err := procgroup.DetectCgroups("sandboxd")
	if err != nil {
		log.Debug("no cgroup per execution", "reason", err)
		cgroups = nil
	}
	rt, err := sandboxd.New(sandboxd.Options{
		Workspace: c.workspace,
		Env:       programEnv(environ, c.workspace),
		Python:    c.python,
		Bash:      c.bash,
		StateFile: c.stateFile,
		Cgroups:   cgroups,
		Logger:    log,
	})
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
	if c.listen != "" {
		ln, err := net.Listen("tcp", c.listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", c.listen, err)
		}
		listeners = append(listeners, ln)
	}

	srv := &http.Server{
		Handler:           remote.Handler(rt, c.token, log),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, len(listeners))
	for _, ln := range listeners {
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Info("sandboxd serving", "version", version, "socket", c.socket, "listen", c.listen, "workspace", rt.Workspace())

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("sandboxd stopping")
	case serveErr = <-errc:
	}
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
