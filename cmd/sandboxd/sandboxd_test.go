//go:build unix

package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
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
	stderr    *bytes.Buffer
	exited    chan error
}

// start runs `sandboxd serve` with args and env (added to a minimal environment) and stops
// it at the end of the test.
func start(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbd") // short: socket paths are limited to ~107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := &daemon{socket: filepath.Join(dir, "s.sock"), workspace: t.TempDir(), stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	d.cmd = exec.Command(binary, append([]string{"serve", "--socket", d.socket, "--workspace", d.workspace}, args...)...)
	d.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
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
	var stderr bytes.Buffer
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
		for _, banned := range []string{"internal/config", "internal/providers", "internal/api", "docker", "k8s.io", "aws", "pgx", "chi"} {
			assert.NotContains(t, dep, banned, "sandboxd depends on %s", dep)
		}
	}
}
