//go:build unix

package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// binary is the sandboxd built once for the tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sandboxd")
	build := exec.Command(goTool(), "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sandboxd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command that builds the binaries under test: the one on PATH, else the
// toolchain's usual place on the machines .ci/run prepares.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

const (
	token = "cmd-test-token"
	slow  = 20 * time.Second
)

// daemon is a running sandboxd.
type daemon struct {
	cmd       *exec.Cmd
	socket    string
	workspace string
	stderr    *syncBuffer
	exited    chan error
}

// start runs `sandboxd serve` with args and env (added to a minimal environment) and stops
// it at the end of the test.
func start(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	return startIn(t, t.TempDir(), append([]string{"PATH=" + os.Getenv("PATH")}, env...), args...)
}

// startIn is start with workspace ws and exactly the environment env.
func startIn(t *testing.T, ws string, env []string, args ...string) *daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd") // short: socket paths are limited to ~107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := &daemon{socket: filepath.Join(dir, "s.sock"), workspace: ws, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	d.cmd = exec.Command(binary, append([]string{"serve", "--socket", d.socket, "--workspace", d.workspace}, args...)...)
	d.cmd.Env = env
	d.cmd.Stderr = d.stderr
	require.NoError(t, d.cmd.Start())
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.exited
	})
	return d
}

// client waits until the daemon answers and returns a client of it.
func (d *daemon) client(t *testing.T, tok string) *remote.Client {
	t.Helper()
	c := remote.NewClient(d.socket, tok)
	t.Cleanup(func() { _ = c.Close() })
	require.Eventually(t, func() bool { return c.Ready(t.Context()) == nil }, slow, 20*time.Millisecond, "sandboxd did not get ready: %s", d.stderr)
	return c
}

// syncBuffer is a bytes.Buffer that a running process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

func TestServeRunsProgramsWithoutTheToken(t *testing.T) {
	t.Parallel()
	d := start(t, []string{"SANDBOXD_TOKEN=" + token, "INHERITED=yes", "SANDBOXD_OTHER=x"})
	c := d.client(t, token)

	st, err := os.Stat(d.socket)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSocket, st.Mode().Type())
	assert.Equal(t, os.FileMode(0o666), st.Mode().Perm())

	var out bytes.Buffer
	res, err := c.Exec(t.Context(), sandboxd.ExecRequest{Command: "env; pwd -P"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	assert.NotContains(t, out.String(), token)
	assert.NotContains(t, out.String(), "SANDBOXD_")
	assert.Contains(t, out.String(), "INHERITED=yes\n", "programs get sandboxd's environment")
	real, _ := filepath.EvalSymlinks(d.workspace)
	assert.True(t, strings.HasSuffix(out.String(), real+"\n"), "programs run in the workspace")

	out.Reset()
	_, err = c.Exec(t.Context(), sandboxd.ExecRequest{
		Context: "p", Language: "python",
		Code: "import os\nprint(os.environ.get('SANDBOXD_TOKEN'))",
	}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "None\n", out.String(), "python contexts do not see the token either")

	// A wrong token is refused.
	wrong := remote.NewClient(d.socket, "wrong")
	_, err = wrong.ListContexts(t.Context())
	require.Error(t, err)
	_ = wrong.Close()

	// SIGTERM stops it gracefully and removes the socket.
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.exited:
		d.exited <- err
		assert.Equal(t, 0, exitStatus(err), d.stderr.String())
	case <-time.After(slow):
		t.Fatal("sandboxd did not stop on SIGTERM")
	}
	assert.False(t, fileExists(d.socket), "the socket is removed")
}

func TestServeWithTokenFileAndStaleSocket(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	first := start(t, nil, "--token-file", tokenFile)
	first.client(t, token)
	require.NoError(t, first.cmd.Process.Kill()) // leaves its socket behind
	<-first.exited
	first.exited <- nil
	require.True(t, fileExists(first.socket))

	// A second sandboxd on the same socket path replaces the stale socket.
	cmd := exec.Command(binary, "serve", "--socket", first.socket, "--workspace", t.TempDir(), "--token-file", tokenFile)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	c := remote.NewClient(first.socket, token)
	defer c.Close()
	require.Eventually(t, func() bool { return c.Ready(t.Context()) == nil }, slow, 20*time.Millisecond, stderr.String())
	var out bytes.Buffer
	_, err := c.Exec(t.Context(), sandboxd.ExecRequest{Code: "echo ok", Language: "bash"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "ok\n", out.String())
}

func TestServeRefusesToStartWrongly(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "not-a-socket")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for name, tt := range map[string]struct {
		args   []string
		env    []string
		status int
		says   string
	}{
		"no token":           {args: []string{"serve", "--socket", filepath.Join(t.TempDir(), "s")}, status: 2, says: "no token"},
		"empty token":        {args: []string{"serve", "--socket", filepath.Join(t.TempDir(), "s")}, env: []string{"SANDBOXD_TOKEN="}, status: 2, says: "no token"},
		"no listener":        {args: []string{"serve"}, env: []string{"SANDBOXD_TOKEN=x"}, status: 2, says: "--socket or --listen"},
		"unknown flag":       {args: []string{"serve", "--nope"}, env: []string{"SANDBOXD_TOKEN=x"}, status: 2, says: "nope"},
		"unknown command":    {args: []string{"dance"}, status: 2, says: "unknown command"},
		"file in the way":    {args: []string{"serve", "--socket", file, "--workspace", t.TempDir()}, env: []string{"SANDBOXD_TOKEN=x"}, status: 1, says: "not a socket"},
		"workspace is /":     {args: []string{"serve", "--socket", filepath.Join(t.TempDir(), "s"), "--workspace", "/"}, env: []string{"SANDBOXD_TOKEN=x"}, status: 1, says: "refusing to use /"},
		"missing token file": {args: []string{"serve", "--socket", filepath.Join(t.TempDir(), "s"), "--token-file", "/nonexistent"}, status: 2, says: "token file"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), slow)
		cmd := exec.CommandContext(ctx, binary, tt.args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tt.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		assert.Equal(t, tt.status, exitStatus(err), "%s: %s", name, out)
		assert.Contains(t, string(out), tt.says, name)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "version").Output()
	require.NoError(t, err)
	assert.Equal(t, "sandgate sandboxd dev\n", string(out))
}

// TestBinaryStaysSmall guards the dependency diet: sandboxd must not link the gateway.
func TestBinaryStaysSmall(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(goTool(), "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"internal/config", "internal/providers", "internal/api", "docker", "k8s.io", "aws", "pgx", "go-chi"} {
			assert.NotContains(t, dep, banned, "sandboxd depends on %s", dep)
		}
	}
}

// TestProxyCarriesTheAPI reaches a serving sandboxd only through `sandboxd proxy`'s standard
// input and output, as the gateway does through an engine's exec stream: several requests
// on kept-alive connections, and a proxy per connection.
func TestProxyCarriesTheAPI(t *testing.T) {
	t.Parallel()
	d := start(t, []string{"SANDBOXD_TOKEN=" + token})
	d.client(t, token) // waits until it serves
	var mu sync.Mutex
	dials := 0
	dial := func(ctx context.Context) (net.Conn, error) {
		cmd := exec.Command(binary, "proxy", "--socket", d.socket)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		mu.Lock()
		dials++
		mu.Unlock()
		return remote.StreamConn(stdout, stdin, func() error {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil
		}), nil
	}
	c := remote.NewDialClient("proxy", dial, token)
	defer c.Close()
	for i := range 3 {
		var out bytes.Buffer
		res, err := c.Exec(t.Context(), sandboxd.ExecRequest{Code: fmt.Sprintf("echo call %d; exit 3", i), Language: "bash"}, sandboxd.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("call %d\n", i), out.String())
		assert.Equal(t, 3, res.ExitCode)
	}
	_, err := c.WriteFile(t.Context(), "f.txt", strings.NewReader("through the proxy"), -1)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(d.workspace, "f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "through the proxy", string(got))
	mu.Lock()
	assert.Equal(t, 1, dials, "one kept-alive connection carries the calls")
	mu.Unlock()
	echoTunnel(t, c)

	bad := remote.NewDialClient("proxy", dial, "wrong")
	defer bad.Close()
	_, err = bad.ListFiles(t.Context(), ".")
	require.Error(t, err, "the proxy adds no secret: a wrong one is refused")

	// A proxy without a socket to reach fails with a message and status 1.
	var stderr bytes.Buffer
	cmd := exec.Command(binary, "proxy", "--socket", filepath.Join(t.TempDir(), "none.sock"))
	cmd.Stderr = &stderr
	assert.Equal(t, 1, exitStatus(cmd.Run()))
	assert.Contains(t, stderr.String(), "connecting to")
}

// TestStdioServesOneConnection: `sandboxd stdio` serves the API on its standard input and
// output, with its own runtime, for as long as that one connection lasts, and only with
// the secret of its environment.
func TestStdioServesOneConnection(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	var stderr syncBuffer
	var running sync.WaitGroup
	dial := func(ctx context.Context) (net.Conn, error) {
		cmd := exec.Command(binary, "stdio", "--workspace", ws)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SANDBOXD_TOKEN=" + token}
		cmd.Stderr = &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		running.Add(1)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait(); running.Done() }()
		return remote.StreamConn(stdout, stdin, func() error {
			select { // the end of its input ends it
			case <-exited:
			case <-time.After(slow):
				_ = cmd.Process.Kill()
				<-exited
				return errors.New("sandboxd stdio did not end with its input")
			}
			return nil
		}), nil
	}
	c := remote.NewDialClient("stdio", dial, token)
	var out bytes.Buffer
	res, err := c.Exec(t.Context(), sandboxd.ExecRequest{Code: "echo $HOME; env | grep -c SANDBOXD_ || true; exit 4", Language: "bash"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err, stderr.String())
	assert.Equal(t, 4, res.ExitCode)
	assert.Equal(t, ws+"\n0\n", out.String(), "programs see no SANDBOXD_* variable")
	_, err = c.WriteFile(t.Context(), "a.txt", strings.NewReader("stdio"), -1)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(ws, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "stdio", string(got))
	// A port tunnel takes the connection over: that sandboxd lives until the tunnel ends.
	echoTunnel(t, c)
	require.NoError(t, c.Close())
	running.Wait() // each connection's sandboxd ended with it

	bad := remote.NewDialClient("stdio", dial, "wrong")
	_, err = bad.ListFiles(t.Context(), ".")
	require.Error(t, err)
	require.NoError(t, bad.Close())
	running.Wait()

	cmd := exec.Command(binary, "stdio")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	assert.Equal(t, 2, exitStatus(cmd.Run()), "no secret, no service")
}

// TestAwaitToken starts sandboxd without a secret: nothing runs and the TCP listener stays
// closed until the first PUT /v1/token, which wins; then both listeners serve that token.
func TestAwaitToken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	d := start(t, nil, "--await-token", "--listen", addr)
	const secret = "await-token-test-0123456789abcdef0123"
	c := d.client(t, secret)

	_, err = c.Exec(t.Context(), sandboxd.ExecRequest{Command: "touch ran"}, sandboxd.Streams{})
	require.ErrorIs(t, err, remote.ErrAwaitingToken)
	_, statErr := os.Stat(filepath.Join(d.workspace, "ran"))
	assert.True(t, os.IsNotExist(statErr), "nothing runs before the token")
	var dialer net.Dialer
	_, err = dialer.DialContext(t.Context(), "tcp", addr)
	require.Error(t, err, "the TCP listener opens only with the token")

	require.NoError(t, c.SetToken(t.Context(), secret))
	require.NoError(t, c.SetToken(t.Context(), secret), "idempotent")
	err = c.SetToken(t.Context(), strings.Repeat("x", 40))
	require.Error(t, err, "another token is refused")
	var out bytes.Buffer
	_, err = c.Exec(t.Context(), sandboxd.ExecRequest{Command: "echo ok"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "ok\n", out.String())

	tcp := remote.NewTCPClient("http://"+addr, secret)
	defer tcp.Close()
	_, err = tcp.ListContexts(t.Context())
	require.NoError(t, err, "the TCP listener serves once the token is set")

	// A token and --await-token exclude each other.
	cmd := exec.Command(binary, "serve", "--socket", filepath.Join(t.TempDir(), "x.sock"), "--await-token")
	cmd.Env = []string{"SANDBOXD_TOKEN=" + token}
	assert.Equal(t, 2, exitStatus(cmd.Run()))
}

// TestInstall copies the executable into a folder, runnable from there.
func TestInstall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, exec.Command(binary, "install", dir).Run())
	st, err := os.Stat(filepath.Join(dir, "sandboxd"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), st.Mode().Perm())
	out, err := exec.Command(filepath.Join(dir, "sandboxd"), "version").Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "sandgate sandboxd")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left")
	assert.Equal(t, 2, exitStatus(exec.Command(binary, "install").Run()))
	assert.Equal(t, 1, exitStatus(exec.Command(binary, "install", filepath.Join(dir, "missing")).Run()))
}

// echoTunnel opens a port tunnel through c to an echo server on this host's loopback (the
// sandboxd under test runs here) and checks that bytes go both ways, also after a pause
// longer than any keep-alive of the HTTP layer below it.
func echoTunnel(t *testing.T, c *remote.Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.Copy(conn, conn)
	}()
	conn, err := c.DialPort(t.Context(), ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, err)
	defer conn.Close()
	for _, msg := range []string{"one\n", "two\n"} {
		_, err = io.WriteString(conn, msg)
		require.NoError(t, err)
		buf := make([]byte, len(msg))
		_, err = io.ReadFull(conn, buf)
		require.NoError(t, err)
		assert.Equal(t, msg, string(buf))
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeKeepsSpareThreads: a serving sandboxd holds idle OS threads in reserve, so that a
// program using up the sandbox's pids limit cannot leave the Go runtime without one.
func TestServeKeepsSpareThreads(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("threads are counted through /proc")
	}
	d := start(t, []string{"SANDBOXD_TOKEN=" + token})
	d.client(t, token)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^Threads:\s+(\d+)$`).FindSubmatch(status)
	require.NotNil(t, m, "%s", status)
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 16, "spare threads")
}
