//go:build unix

package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	token = "s3cret-token"
	slow  = 15 * time.Second
)

type testBundle struct {
	client    *remote.Client
	socket    string
	workspace string
	newConns  *atomic.Int64 // connections the server accepted
}

// setup serves a fresh runtime on a Unix socket and returns a client of it; everything is
// closed at the end of the test.
func setup(t *testing.T) *testBundle {
	t.Helper()
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: 300 * time.Millisecond, DrainDelay: 200 * time.Millisecond})
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "sbd") // short: Unix socket paths are limited to ~107 bytes
	require.NoError(t, err)
	socket := filepath.Join(dir, "sandboxd.sock")
	ln, err := net.Listen("unix", socket)
	require.NoError(t, err)
	var conns atomic.Int64
	srv := &http.Server{
		Handler: remote.Handler(rt, token, nil),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		},
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	client := remote.NewClient(socket, token)
	t.Cleanup(func() {
		_ = client.Close()
		_ = rt.Close()
		_ = srv.Close()
		<-served
		_ = os.RemoveAll(dir)
	})
	real, err := filepath.EvalSymlinks(ws)
	require.NoError(t, err)
	return &testBundle{client: client, socket: socket, workspace: real, newConns: &conns}
}

// raw sends a request over the bundle's socket without the client.
func (b *testBundle) raw(t *testing.T, method, path, auth string) (*http.Response, []byte) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", b.socket)
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://sandboxd"+path, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func requireKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, fault.IsKind(err, k), "want %s, got %s: %v", k, fault.KindOf(err), err)
}

func TestHandlerRefusesAnEmptyToken(t *testing.T) {
	t.Parallel()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: t.TempDir()})
	require.NoError(t, err)
	defer rt.Close()
	assert.Panics(t, func() { remote.Handler(rt, "", nil) })
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, body := b.raw(t, http.MethodGet, path, "")
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.JSONEq(t, `{"status":"ok"}`, string(body))
	}
	require.NoError(t, b.client.Ready(t.Context()))

	for _, auth := range []string{"", "Bearer", "Bearer wrong", "bearer " + token, token, "Bearer " + token + "x", "Basic " + token} {
		for _, path := range []string{"/v1/contexts", "/v1/files/list?path=", "/v1/nothing-here"} {
			resp, body := b.raw(t, http.MethodGet, path, auth)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s with %q", path, auth)
			assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var p map[string]any
			require.NoError(t, json.Unmarshal(body, &p))
			assert.Equal(t, "unauthenticated", p["kind"])
			assert.EqualValues(t, 401, p["status"])
		}
	}
	resp, _ := b.raw(t, http.MethodGet, "/v1/contexts", "Bearer "+token)
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	wrong := remote.NewClient(b.socket, "wrong")
	defer wrong.Close()
	_, err := wrong.ListContexts(t.Context())
	requireKind(t, err, fault.Provision)
	_, err = wrong.Exec(t.Context(), sandboxd.ExecRequest{Command: "touch ran"}, sandboxd.Streams{})
	requireKind(t, err, fault.Provision)
	_, statErr := os.Stat(filepath.Join(b.workspace, "ran"))
	assert.True(t, os.IsNotExist(statErr), "nothing runs without the token")
}

func TestUnknownRoutesAreProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		method, path string
		status       int
		kind         string
	}{
		{http.MethodGet, "/nothing", http.StatusNotFound, "unknown-route"},
		{http.MethodGet, "/v1/nothing", http.StatusNotFound, "unknown-route"},
		{http.MethodGet, "/v1/exec", http.StatusMethodNotAllowed, "method-not-allowed"},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, "method-not-allowed"},
	} {
		resp, body := b.raw(t, tt.method, tt.path, "Bearer "+token)
		assert.Equal(t, tt.status, resp.StatusCode, tt.path)
		assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), tt.path)
		assert.Contains(t, string(body), `"kind":"`+tt.kind+`"`)
	}
}

// recorder records writes to two streams in order.
type recorder struct {
	mu     sync.Mutex
	events []string
	first  chan struct{}
	once   sync.Once
}

type streamWriter struct {
	r    *recorder
	name string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	// Consecutive writes to one stream are one event: print() may write "a" and "\n" apart.
	if n := len(w.r.events); n > 0 && strings.HasPrefix(w.r.events[n-1], w.name+":") {
		w.r.events[n-1] += string(p)
	} else {
		w.r.events = append(w.r.events, w.name+":"+string(p))
	}
	w.r.mu.Unlock()
	w.r.once.Do(func() { close(w.r.first) })
	return len(p), nil
}

func TestExecStreamsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, req := range map[string]sandboxd.ExecRequest{
		"plain":   {Command: "echo a; sleep 1; echo b >&2; sleep 1; echo c; exit 5"},
		"context": {Context: "s", Language: "python", Code: "import sys, time\nprint('a')\ntime.sleep(1)\nprint('b', file=sys.stderr)\ntime.sleep(1)\nprint('c')\nraise SystemExit(5)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{first: make(chan struct{})}
			done := make(chan struct{})
			var res sandboxd.Result
			var err error
			go func() {
				defer close(done)
				res, err = b.client.Exec(t.Context(), req, sandboxd.Streams{Stdout: streamWriter{rec, "out"}, Stderr: streamWriter{rec, "err"}})
			}()
			select {
			case <-rec.first:
			case <-done:
				t.Fatal("the execution ended before any output arrived")
			}
			select {
			case <-done:
				t.Fatal("the first output arrived only at the end")
			default:
			}
			<-done
			require.NoError(t, err)
			assert.Equal(t, 5, res.ExitCode)
			assert.Equal(t, []string{"out:a\n", "err:b\n", "out:c\n"}, rec.events)
		})
	}
}

func TestExecResultsTravel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out, errOut bytes.Buffer
	res, err := b.client.Exec(t.Context(), sandboxd.ExecRequest{
		Argv: []string{"sh", "-c", `cat; printf %s "$V"; head -c 5000 /dev/zero`}, Stdin: []byte("in\x00put "),
		Env: map[string]string{"V": "v"}, MaxOutput: 20,
	}, sandboxd.Streams{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	want := "in\x00put v"
	assert.Equal(t, want+strings.Repeat("\x00", 20-len(want)), out.String())
	assert.True(t, res.Truncated)

	res, err = b.client.Exec(t.Context(), sandboxd.ExecRequest{Command: "sleep 30", Timeout: 200 * time.Millisecond}, sandboxd.Streams{})
	require.NoError(t, err)
	assert.True(t, res.TimedOut)

	errOut.Reset()
	res, err = b.client.Exec(t.Context(), sandboxd.ExecRequest{Context: "e", Language: "python", Code: "1/0"}, sandboxd.Streams{Stderr: &errOut})
	require.NoError(t, err)
	assert.Equal(t, 1, res.ExitCode)
	require.NotNil(t, res.Error)
	assert.Equal(t, "ZeroDivisionError", res.Error.Name)
	assert.Equal(t, errOut.String(), res.Error.Traceback)

	res, err = b.client.Exec(t.Context(), sandboxd.ExecRequest{Context: "e", Language: "python", Code: "import os; os._exit(9)"}, sandboxd.Streams{})
	require.NoError(t, err)
	assert.True(t, res.ContextLost)
	assert.Equal(t, 9, res.ExitCode)

	// Big code and stdin travel in the JSON body.
	big := strings.Repeat("z", 3<<20)
	out.Reset()
	_, err = b.client.Exec(t.Context(), sandboxd.ExecRequest{Language: "python", Code: "import sys; d = sys.stdin.read(); s = '" + big + "'; print(len(d), len(s))", Stdin: []byte(big)}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d %d\n", len(big), len(big)), out.String())
}

func TestProblemKindsRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.WriteFile(filepath.Join(b.workspace, "file"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(b.workspace, "dir"), 0o755))
	ctx := t.Context()
	for name, tt := range map[string]struct {
		call func() error
		kind fault.Kind
	}{
		"exec validation": {func() error {
			_, err := b.client.Exec(ctx, sandboxd.ExecRequest{}, sandboxd.Streams{})
			return err
		}, fault.Validation},
		"exec negative timeout": {func() error {
			_, err := b.client.Exec(ctx, sandboxd.ExecRequest{Command: "true", Timeout: -time.Second}, sandboxd.Streams{})
			return err
		}, fault.Validation},
		"exec policy": {func() error {
			_, err := b.client.Exec(ctx, sandboxd.ExecRequest{Command: "true", Dir: "../x"}, sandboxd.Streams{})
			return err
		}, fault.Policy},
		"exec missing dir": {func() error {
			_, err := b.client.Exec(ctx, sandboxd.ExecRequest{Command: "true", Dir: "missing"}, sandboxd.Streams{})
			return err
		}, fault.NotFound},
		"read policy": {func() error {
			_, err := b.client.ReadFile(ctx, "../etc/passwd")
			return err
		}, fault.Policy},
		"read missing": {func() error {
			_, err := b.client.ReadFile(ctx, "missing")
			return err
		}, fault.NotFound},
		"read folder": {func() error {
			_, err := b.client.ReadFile(ctx, "dir")
			return err
		}, fault.Conflict},
		"write too large": {func() error {
			_, err := b.client.WriteFile(ctx, "big", strings.NewReader("12345"), 4)
			return err
		}, fault.TooLarge},
		"list a file": {func() error {
			_, err := b.client.ListFiles(ctx, "file")
			return err
		}, fault.Conflict},
		"remove policy":  {func() error { return b.client.RemoveFile(ctx, "/etc/passwd") }, fault.Policy},
		"delete missing": {func() error { return b.client.DeleteContext(ctx, "nope") }, fault.NotFound},
		"restart missing": {func() error {
			_, err := b.client.RestartContext(ctx, "nope")
			return err
		}, fault.NotFound},
		"create bad language": {func() error {
			_, err := b.client.CreateContext(ctx, "c", "cobol")
			return err
		}, fault.Validation},
	} {
		err := tt.call()
		requireKind(t, err, tt.kind)
		assert.NotEmpty(t, err.Error(), name)
	}
}

func TestCancellationKillsTheProgram(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, req := range []sandboxd.ExecRequest{
		{Command: "echo $$ > pid; exec sleep 60"},
		{Context: "c", Language: "python", Code: "import os, subprocess\np = subprocess.Popen(['sleep', '60'])\nopen('pid', 'w').write(str(p.pid))\np.wait()"},
	} {
		_ = os.Remove(filepath.Join(b.workspace, "pid"))
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := b.client.Exec(ctx, req, sandboxd.Streams{})
			errc <- err
		}()
		var pid int
		require.Eventually(t, func() bool {
			data, err := os.ReadFile(filepath.Join(b.workspace, "pid"))
			if err != nil {
				return false
			}
			_, err = fmt.Sscan(string(data), &pid)
			return err == nil
		}, slow, 20*time.Millisecond)
		require.True(t, alive(pid))
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		require.Eventually(t, func() bool { return !alive(pid) }, slow, 20*time.Millisecond, "process %d still runs after the client went away", pid)
	}
}

func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func TestContextsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	info, err := b.client.CreateContext(ctx, "py", "python")
	require.NoError(t, err)
	assert.Equal(t, "py", info.Name)
	assert.True(t, info.Alive)
	_, err = b.client.CreateContext(ctx, "py", "python")
	requireKind(t, err, fault.Conflict)
	_, err = b.client.CreateContext(ctx, "sh", "bash")
	require.NoError(t, err)

	var out bytes.Buffer
	_, err = b.client.Exec(ctx, sandboxd.ExecRequest{Context: "py", Language: "python", Code: "v = 'kept'"}, sandboxd.Streams{})
	require.NoError(t, err)
	_, err = b.client.Exec(ctx, sandboxd.ExecRequest{Context: "py", Language: "python", Code: "print(v)"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", out.String())

	list, err := b.client.ListContexts(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "py", list[0].Name)
	assert.Equal(t, 2, list[0].Executions)
	assert.Equal(t, "bash", list[1].Language)

	info, err = b.client.RestartContext(ctx, "py")
	require.NoError(t, err)
	assert.Equal(t, 0, info.Executions)
	res, err := b.client.Exec(ctx, sandboxd.ExecRequest{Context: "py", Language: "python", Code: "print(v)"}, sandboxd.Streams{})
	require.NoError(t, err)
	require.NotNil(t, res.Error)
	assert.Equal(t, "NameError", res.Error.Name)

	require.NoError(t, b.client.DeleteContext(ctx, "py"))
	list, err = b.client.ListContexts(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 1)
}

func TestFilesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	content := strings.Repeat("0123456789", 100_000)
	n, err := b.client.WriteFile(ctx, "d/f.txt", strings.NewReader(content), int64(len(content)))
	require.NoError(t, err)
	assert.Equal(t, int64(len(content)), n)

	rc, err := b.client.ReadFile(ctx, "d/f.txt")
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	assert.Equal(t, content, string(data))

	list, err := b.client.ListFiles(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, sandboxd.FileInfo{Name: "d", Path: "d", Type: sandboxd.FileDir, Size: list[0].Size, Mode: 0o755, ModTime: list[0].ModTime}, list[0])
	list, err = b.client.ListFiles(ctx, "d")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "d/f.txt", list[0].Path)
	assert.Equal(t, int64(len(content)), list[0].Size)

	// An upload over the limit, larger than any buffer on the way, leaves nothing behind.
	huge := io.LimitReader(zeroReader{}, 64<<20)
	_, err = b.client.WriteFile(ctx, "d/huge", huge, 1<<20)
	requireKind(t, err, fault.TooLarge)
	list, err = b.client.ListFiles(ctx, "d")
	require.NoError(t, err)
	assert.Len(t, list, 1)

	// Unlimited, and empty.
	_, err = b.client.WriteFile(ctx, "empty", nil, -1)
	require.NoError(t, err)
	rc, err = b.client.ReadFile(ctx, "empty")
	require.NoError(t, err)
	data, _ = io.ReadAll(rc)
	_ = rc.Close()
	assert.Empty(t, data)

	require.NoError(t, b.client.RemoveFile(ctx, "d/f.txt"))
	require.NoError(t, b.client.RemoveFile(ctx, "d/f.txt"))
	_, err = b.client.ReadFile(ctx, "d/f.txt")
	requireKind(t, err, fault.NotFound)
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestConnectionsAreReused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 20 {
		_, err := b.client.Exec(t.Context(), sandboxd.ExecRequest{Command: "echo x"}, sandboxd.Streams{Stdout: io.Discard})
		require.NoError(t, err)
		_, err = b.client.ListContexts(t.Context())
		require.NoError(t, err)
		_, err = b.client.ReadFile(t.Context(), "missing")
		requireKind(t, err, fault.NotFound)
	}
	assert.Equal(t, int64(1), b.newConns.Load(), "sequential calls share one keep-alive connection")
}

func TestUnreachableSandboxd(t *testing.T) {
	t.Parallel()
	c := remote.NewClient(filepath.Join(t.TempDir(), "none.sock"), token)
	defer c.Close()
	err := c.Ready(t.Context())
	requireKind(t, err, fault.Provision)
	assert.Contains(t, err.Error(), "sandboxd does not answer")
	require.ErrorIs(t, err, remote.ErrUnreachable, "nothing was served")
	_, err = c.Exec(t.Context(), sandboxd.ExecRequest{Command: "true"}, sandboxd.Streams{})
	require.ErrorIs(t, err, remote.ErrUnreachable)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	tc := remote.NewTCPClient("http://"+addr+"/", token)
	defer tc.Close()
	_, err = tc.ListContexts(t.Context())
	requireKind(t, err, fault.Provision)
	require.ErrorIs(t, err, remote.ErrUnreachable)
}

// A request sandboxd refused before running anything — a token not its own — is unreached
// too; one it served and failed is not.
func TestRefusedTokenIsUnreached(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wrong := remote.NewClient(b.socket, "not-the-token")
	defer wrong.Close()
	_, err := wrong.Exec(t.Context(), sandboxd.ExecRequest{Command: "true"}, sandboxd.Streams{})
	requireKind(t, err, fault.Provision)
	require.ErrorIs(t, err, remote.ErrUnreachable)

	_, err = b.client.ReadFile(t.Context(), "no-such-file")
	requireKind(t, err, fault.NotFound)
	require.NotErrorIs(t, err, remote.ErrUnreachable)
}

func TestTCPClient(t *testing.T) {
	t.Parallel()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: t.TempDir()})
	require.NoError(t, err)
	defer rt.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: remote.Handler(rt, token, nil)}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()

	c := remote.NewTCPClient("http://"+ln.Addr().String(), token)
	defer c.Close()
	require.NoError(t, c.Ready(t.Context()))
	var out bytes.Buffer
	res, err := c.Exec(t.Context(), sandboxd.ExecRequest{Command: "echo tcp"}, sandboxd.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "tcp\n", out.String())
}

// BenchmarkRoundTrip measures the API's own cost: a call that starts no process, and an
// execution of `true` directly and through the API (the difference is the API's overhead).
func BenchmarkRoundTrip(b *testing.B) {
	ws := b.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws})
	require.NoError(b, err)
	defer rt.Close()
	dir, err := os.MkdirTemp("", "sbd")
	require.NoError(b, err)
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	require.NoError(b, err)
	srv := &http.Server{Handler: remote.Handler(rt, token, nil)}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()
	c := remote.NewClient(filepath.Join(dir, "s"), token)
	defer c.Close()
	ctx := context.Background()
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.ListContexts(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	req := sandboxd.ExecRequest{Argv: []string{"true"}}
	b.Run("exec-direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := rt.Exec(ctx, req, sandboxd.Streams{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exec-remote", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Exec(ctx, req, sandboxd.Streams{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The handler refuses what its contract refuses: a file operation without a path, a negative
// X-Max-Bytes; listing without a path lists the workspace.
func TestFileRequestsNeedWhatTheContractSays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := "Bearer " + token
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		resp, body := b.raw(t, method, "/v1/files", auth)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s without path: %s", method, body)
		require.Contains(t, string(body), "path query parameter is required")
	}
	resp, body := b.raw(t, "GET", "/v1/files/list", auth)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	req, err := http.NewRequestWithContext(t.Context(), "PUT", "http://sandboxd/v1/files?path=x", strings.NewReader("data"))
	require.NoError(t, err)
	req.Header.Set("Authorization", auth)
	req.Header.Set("X-Max-Bytes", "-1")
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", b.socket)
	}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	_, err = os.Stat(filepath.Join(b.workspace, "x"))
	require.True(t, os.IsNotExist(err), "nothing written")
}

// The readiness probe needs no secret, and the client sends none with it.
func TestReadyCarriesNoSecret(t *testing.T) {
	t.Parallel()
	var sawAuth atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			sawAuth.Store(true)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	c := remote.NewTCPClient(srv.URL, token)
	defer c.Close()
	require.NoError(t, c.Ready(t.Context()))
	require.False(t, sawAuth.Load(), "the token went to /readyz")
}

// A socket that is missing, refuses, or has someone else listening is reported with the
// sandbox's name and the system's error, never with the socket's path (a path on the
// gateway's host; errors reach callers), and with ErrUnreachable (nothing ran).
func TestVerifiedClientErrorsNameNoHostPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := remote.NewVerifiedClient("sandbox s1", filepath.Join(dir, "gone.sock"), "tok-0123456789abcdef", func(int32) error { return nil })
	defer missing.Close()
	err := missing.Ready(t.Context())
	require.Error(t, err)
	assert.ErrorIs(t, err, remote.ErrUnreachable)
	assert.ErrorIs(t, err, syscall.ENOENT)
	assert.NotContains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "sandbox s1")

	sock := filepath.Join(dir, "other.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	foreign := remote.NewVerifiedClient("sandbox s2", sock, "tok-0123456789abcdef", func(pid int32) error {
		return fmt.Errorf("%w: pid %d", remote.ErrForeignListener, pid)
	})
	defer foreign.Close()
	err = foreign.Ready(t.Context())
	require.Error(t, err)
	assert.ErrorIs(t, err, remote.ErrForeignListener)
	assert.ErrorIs(t, err, remote.ErrUnreachable)
	assert.NotContains(t, err.Error(), dir)
}
