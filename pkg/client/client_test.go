package client_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/pkg/client"
)

// checked is an http.RoundTripper that validates every answer of the gateway against
// openapi.yaml (event streams by status and media type only, so they still stream).
type checked struct {
	t        *testing.T
	contract *gatewaytest.Contract
}

func (c checked) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/event-stream" {
		c.contract.Check(c.t, req, resp.StatusCode, resp.Header, nil)
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	c.contract.Check(c.t, req, resp.StatusCode, resp.Header, body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// newClient is a client of the shared gateway as subject sub, its answers checked against
// the contract.
func newClient(t *testing.T, sub string) *client.Client {
	t.Helper()
	hc := &http.Client{Transport: checked{t, gatewaytest.LoadContract(t)}}
	c, err := client.New(shared.URL, client.WithToken(shared.Token(sub)), client.WithHTTPClient(hc))
	require.NoError(t, err)
	return c
}

func newSession(t *testing.T, c *client.Client) string {
	t.Helper()
	s, err := c.CreateSession(t.Context(), client.CreateSessionRequest{Name: ptr(t.Name())})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.DeleteSession(context.Background(), s.Id) })
	return s.Id
}

// TestSessionsAndCommands: a session is created, listed, runs commands (a non-zero exit is a
// result) and is destroyed.
func TestSessionsAndCommands(t *testing.T) {
	c := newClient(t, "alice")
	ctx := t.Context()

	me, err := c.Me(ctx)
	require.NoError(t, err)
	assert.Equal(t, "alice", me.Username)

	profiles, err := c.Profiles(ctx)
	require.NoError(t, err)
	var names []string
	for _, p := range profiles {
		names = append(names, p.Name)
	}
	assert.ElementsMatch(t, []string{"default", "oneshot"}, names)

	s, err := c.CreateSession(ctx, client.CreateSessionRequest{Name: ptr("work"), Labels: &map[string]string{"conversation": "c-1"}})
	require.NoError(t, err)
	list, err := c.Sessions(ctx, &client.ListSessionsParams{Conversation: ptr("c-1")})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 1)
	assert.Equal(t, s.Id, list.Sessions[0].Id)

	x, err := c.RunCommand(ctx, s.Id, client.CommandRequest{Command: "echo out; echo err >&2; exit 3"})
	require.NoError(t, err)
	require.NotNil(t, x.Result, "a finished execution: %+v", x)
	assert.Equal(t, "out\n", x.Result.Stdout)
	assert.Equal(t, "err\n", x.Result.Stderr)
	assert.Equal(t, 3, *x.Result.ExitCode)

	got, err := c.Session(ctx, s.Id)
	require.NoError(t, err)
	assert.Equal(t, "work", *got.Name)

	gone, err := c.DeleteSession(ctx, s.Id)
	require.NoError(t, err)
	assert.True(t, gone.Destroyed)
	_, err = c.Session(ctx, s.Id)
	assert.True(t, client.IsKind(err, client.KindNotFound), "%v", err)

	// The default session of a profile, named with WithProfile.
	x, err = c.RunCommand(ctx, "default", client.CommandRequest{Command: "echo in default"}, client.WithProfile("default"))
	require.NoError(t, err)
	assert.Equal(t, "in default\n", x.Result.Stdout)

	// A one-off run in a fresh sandbox.
	run := client.RunRequest{Profile: ptr("oneshot"), Command: ptr("echo once")}
	x, err = c.Run(ctx, run)
	require.NoError(t, err)
	assert.Equal(t, "once\n", x.Result.Stdout)
}

// TestStatefulCode: Python code keeps its variables between calls of a session, and named
// contexts keep their own.
func TestStatefulCode(t *testing.T) {
	c := newClient(t, "bob")
	ctx := t.Context()
	sid := newSession(t, c)

	_, err := c.RunCode(ctx, sid, client.CodeRequest{Code: "answer = 6*7"})
	require.NoError(t, err)
	x, err := c.RunCode(ctx, sid, client.CodeRequest{Code: "print(f'still here: {answer}')"})
	require.NoError(t, err)
	assert.Equal(t, "still here: 42\n", x.Result.Stdout)

	_, err = c.CreateContext(ctx, sid, client.ContextCreate{Name: "shell", Language: ptr(client.ContextCreateLanguageBash)})
	require.NoError(t, err)
	_, err = c.RunCode(ctx, sid, client.CodeRequest{Code: "export COLOR=green", Context: ptr("shell")})
	require.NoError(t, err)
	x, err = c.RunCode(ctx, sid, client.CodeRequest{Code: "echo $COLOR", Context: ptr("shell")})
	require.NoError(t, err)
	assert.Equal(t, "green\n", x.Result.Stdout)

	contexts, err := c.Contexts(ctx, sid)
	require.NoError(t, err)
	assert.Len(t, contexts, 2)
	left, err := c.DeleteContext(ctx, sid, "shell")
	require.NoError(t, err)
	assert.Len(t, left, 1)
	_, err = c.RestartContext(ctx, sid, "default")
	require.NoError(t, err)
	x, err = c.RunCode(ctx, sid, client.CodeRequest{Code: "print('answer' in globals())"})
	require.NoError(t, err)
	assert.Equal(t, "False\n", x.Result.Stdout, "a restarted context forgets")
}

// TestRichResults: code's rich results come back in the result, and as rich_result events
// of its stream; their data decode.
func TestRichResults(t *testing.T) {
	c := newClient(t, "bob")
	ctx := t.Context()
	sid := newSession(t, c)

	x, err := c.RunCode(ctx, sid, client.CodeRequest{Code: "6 * 7"})
	require.NoError(t, err)
	require.NotNil(t, x.Result.Results)
	require.Len(t, *x.Result.Results, 1)
	main := (*x.Result.Results)[0]
	assert.True(t, main.IsMainResult)
	text, ok := main.Text("text/plain")
	assert.True(t, ok)
	assert.Equal(t, "42", text)

	st, err := c.StreamCode(ctx, sid, client.CodeRequest{Code: "display({'image/png': 'iVBORw0KGgo=', 'text/plain': 'a picture'}, raw=True)"})
	require.NoError(t, err)
	var live []client.RichResult
	for st.Next() {
		if ev := st.Event(); ev.Type == client.EventRichResult {
			r, err := ev.RichResult()
			require.NoError(t, err)
			live = append(live, *r)
			assert.NotEmpty(t, ev.ID)
		}
	}
	require.NoError(t, st.Err())
	require.Len(t, live, 1)
	assert.Equal(t, []string{"image/png", "text/plain"}, live[0].Types())
	png, ok, err := live[0].Bytes("image/png")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, []byte("\x89PNG\r\n\x1a\n"), png, "base64 decoded")
	_, ok, _ = live[0].Bytes("text/html")
	assert.False(t, ok)
}

// TestBinaryFiles: files go up and down as raw streams, byte-exact, whatever their bytes,
// with a known length or chunked.
func TestBinaryFiles(t *testing.T) {
	c := newClient(t, "carol")
	ctx := t.Context()
	sid := newSession(t, c)

	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	for i := range 256 {
		data[i] = byte(i) // every byte value, NUL and invalid UTF-8 included
	}
	require.False(t, utf8.Valid(data))
	sum := sha256.Sum256(data)

	w, err := c.Upload(ctx, sid, "in/data.bin", bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), w.Size)
	assert.Equal(t, hex.EncodeToString(sum[:]), w.Sha256)

	// Unknown length: sent chunked, from a reader that is no buffer.
	w, err = c.Upload(ctx, sid, "in/chunked.bin", io.MultiReader(bytes.NewReader(data[:1000]), bytes.NewReader(data[1000:])), -1)
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), w.Size)

	empty, err := c.Upload(ctx, sid, "in/empty", nil, 0)
	require.NoError(t, err)
	assert.Zero(t, empty.Size)

	for _, p := range []string{"in/data.bin", "in/chunked.bin"} {
		var back bytes.Buffer
		n, err := c.Download(ctx, sid, p, &back)
		require.NoError(t, err)
		assert.Equal(t, int64(len(data)), n)
		assert.True(t, bytes.Equal(data, back.Bytes()), "%s came back byte-exact", p)
	}

	f, err := c.OpenFile(ctx, sid, "in/data.bin")
	require.NoError(t, err)
	head := make([]byte, 4)
	_, err = io.ReadFull(f, head)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, []byte{0, 1, 2, 3}, head)
	assert.Equal(t, int64(len(data)), f.Size)
	assert.NotEmpty(t, f.ETag)
	assert.False(t, f.ModTime.IsZero())

	x, err := c.RunCommand(ctx, sid, client.CommandRequest{Command: "sha256sum in/data.bin | cut -d' ' -f1"})
	require.NoError(t, err)
	assert.Equal(t, hex.EncodeToString(sum[:])+"\n", x.Result.Stdout, "the sandbox sees the same bytes")

	list, err := c.Files(ctx, sid, "in")
	require.NoError(t, err)
	var names []string
	for _, e := range list.Entries {
		names = append(names, e.Name)
	}
	assert.Equal(t, []string{"chunked.bin", "data.bin", "empty"}, names)

	require.NoError(t, c.DeleteFile(ctx, sid, "in/empty"))
	_, err = c.Download(ctx, sid, "in/empty", io.Discard)
	assert.True(t, client.IsKind(err, client.KindNotFound), "%v", err)
	_, err = c.Upload(ctx, sid, "../escape", strings.NewReader("x"), 1)
	assert.True(t, client.IsKind(err, client.KindPolicy), "%v", err)
}

// TestTasks: a run that outlives wait_s is a task to poll; a running task is cancelled with
// its process tree; tasks are listed.
func TestTasks(t *testing.T) {
	c := newClient(t, "dave")
	ctx := t.Context()
	sid := newSession(t, c)

	x, err := c.RunCommand(ctx, sid, client.CommandRequest{Command: "sleep 1; echo finished", WaitS: ptr(0.0)})
	require.NoError(t, err)
	require.NotNil(t, x.Task, "promoted at once: %+v", x)
	task, err := c.WaitTask(ctx, x.Task.Id)
	require.NoError(t, err)
	assert.Equal(t, client.TaskStatusSucceeded, task.Status)
	assert.Equal(t, "finished\n", task.Result.Stdout)

	x, err = c.RunCommand(ctx, sid, client.CommandRequest{Command: "sleep 60", WaitS: ptr(0.0)})
	require.NoError(t, err)
	cancelled, err := c.CancelTask(ctx, x.Task.Id)
	require.NoError(t, err)
	if cancelled.FinishedAt == nil {
		cancelled, err = c.WaitTask(ctx, x.Task.Id)
		require.NoError(t, err)
	}
	assert.Equal(t, client.TaskStatusCancelled, cancelled.Status)

	list, err := c.Tasks(ctx, &client.ListTasksParams{SessionId: &sid})
	require.NoError(t, err)
	assert.Len(t, list.Tasks, 2)
	list, err = c.Tasks(ctx, &client.ListTasksParams{SessionId: &sid, Status: ptr(client.TaskStatusCancelled)})
	require.NoError(t, err)
	require.Len(t, list.Tasks, 1)
	assert.Equal(t, x.Task.Id, list.Tasks[0].Id)
}

// TestStreamedOutput: output arrives as events while the program runs (several stdout
// events before the result), stderr apart, non-UTF-8 bytes exact; a stream resumes after
// an event id with FollowTask.
func TestStreamedOutput(t *testing.T) {
	c := newClient(t, "erin")
	ctx := t.Context()
	sid := newSession(t, c)

	cmd := `for i in 1 2 3; do echo step $i; sleep 0.2; done; printf '\377\376' ; echo oops >&2`
	st, err := c.StreamCommand(ctx, sid, client.CommandRequest{Command: cmd})
	require.NoError(t, err)
	var types []string
	var stdout, stderr bytes.Buffer
	var firstID string
	var result *client.ExecutionResult
	for st.Next() {
		ev := st.Event()
		types = append(types, ev.Type)
		switch ev.Type {
		case client.EventTask:
			task, err := ev.Task()
			require.NoError(t, err)
			assert.Equal(t, sid, task.SessionId)
		case client.EventStdout, client.EventStderr:
			b, err := ev.Bytes()
			require.NoError(t, err)
			if ev.Type == client.EventStdout {
				stdout.Write(b)
			} else {
				stderr.Write(b)
			}
			if firstID == "" {
				firstID = ev.ID
			}
		case client.EventResult:
			result, err = ev.Result()
			require.NoError(t, err)
		}
	}
	require.NoError(t, st.Err())
	require.NotNil(t, result)
	assert.Equal(t, client.EventTask, types[0])
	assert.Equal(t, client.EventResult, types[len(types)-1])
	stdoutEvents := 0
	for _, ty := range types {
		if ty == client.EventStdout {
			stdoutEvents++
		}
	}
	assert.GreaterOrEqual(t, stdoutEvents, 3, "each step came as it was written: %v", types)
	want := "step 1\nstep 2\nstep 3\n\xff\xfe"
	assert.Equal(t, want, stdout.String())
	assert.Equal(t, "oops\n", stderr.String())
	assert.Equal(t, 0, *result.ExitCode)
	assert.Equal(t, "7-0", firstID, "event ids are byte positions")
	taskID := st.TaskID()
	require.NotEmpty(t, taskID)

	// Resume after the first event: the rest, and nothing twice.
	rest, err := c.FollowTask(ctx, taskID, firstID)
	require.NoError(t, err)
	var tail bytes.Buffer
	res, err := rest.Wait(&tail, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, want[len("step 1\n"):], tail.String())
	assert.Equal(t, 0, *res.ExitCode)

	// Code streams too.
	st, err = c.StreamCode(ctx, sid, client.CodeRequest{Code: "import sys\nprint('to out')\nprint('to err', file=sys.stderr)"})
	require.NoError(t, err)
	stdout.Reset()
	stderr.Reset()
	res, err = st.Wait(&stdout, &stderr)
	require.NoError(t, err)
	assert.Equal(t, "to out\n", stdout.String())
	assert.Equal(t, "to err\n", stderr.String())
	assert.Equal(t, 0, *res.ExitCode)

	// And one-off runs.
	st, err = c.StreamRun(ctx, client.RunRequest{Profile: ptr("oneshot"), Command: ptr("echo streamed once")})
	require.NoError(t, err)
	stdout.Reset()
	_, err = st.Wait(&stdout, nil)
	require.NoError(t, err)
	assert.Equal(t, "streamed once\n", stdout.String())
}

// TestStreamReconnects: a connection cut in the middle of a stream is reopened with
// Last-Event-ID, and the output comes out whole, nothing twice.
func TestStreamReconnects(t *testing.T) {
	target, err := url.Parse(shared.URL)
	require.NoError(t, err)
	var cuts atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodPost && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &cutAfterFirstOutput{ReadCloser: resp.Body, cuts: &cuts} // only the first stream
		}
		return nil
	}
	proxy.ErrorLog = nil
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)

	c, err := client.New(srv.URL, client.WithToken(shared.Token("frank")))
	require.NoError(t, err)
	ctx := t.Context()
	sid := newSession(t, c)

	st, err := c.StreamCommand(ctx, sid, client.CommandRequest{Command: "for i in 1 2 3 4; do echo line $i; sleep 0.3; done"})
	require.NoError(t, err)
	var out bytes.Buffer
	res, err := st.Wait(&out, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, int32(1), cuts.Load(), "the proxy cut the stream")
	assert.Equal(t, 1, st.Reconnects)
	assert.Equal(t, "line 1\nline 2\nline 3\nline 4\n", out.String())
	assert.Equal(t, 0, *res.ExitCode)
}

// cutAfterFirstOutput passes a stream on until its first output event, then fails, so the
// proxy drops the connection.
type cutAfterFirstOutput struct {
	io.ReadCloser
	cuts *atomic.Int32
	seen bytes.Buffer
	cut  bool
}

func (c *cutAfterFirstOutput) Read(p []byte) (int, error) {
	if c.cut {
		return 0, errors.New("cut by the test")
	}
	n, err := c.ReadCloser.Read(p)
	c.seen.Write(p[:n])
	if i := bytes.Index(c.seen.Bytes(), []byte("event: stdout")); i >= 0 && bytes.Contains(c.seen.Bytes()[i:], []byte("\n\n")) {
		c.cut = true
		c.cuts.Add(1)
	}
	return n, err
}

// TestStdin: standard input streams from a reader, or write by write, into a running
// program.
func TestStdin(t *testing.T) {
	c := newClient(t, "grace")
	ctx := t.Context()
	sid := newSession(t, c)

	x, err := c.RunCommand(ctx, sid, client.CommandRequest{Command: "tr a-z A-Z", StdinOpen: ptr(true), WaitS: ptr(0.0)})
	require.NoError(t, err)
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriter(pw)
		for _, s := range []string{"hello ", "from ", "a pipe\n"} {
			_, _ = bw.WriteString(s)
			_ = bw.Flush()
		}
		_ = pw.Close()
	}()
	written, err := c.WriteStdin(ctx, x.Task.Id, pr, true)
	require.NoError(t, err)
	assert.Equal(t, int64(len("hello from a pipe\n")), written.Bytes)
	assert.True(t, written.Closed)
	task, err := c.WaitTask(ctx, x.Task.Id)
	require.NoError(t, err)
	assert.Equal(t, "HELLO FROM A PIPE\n", task.Result.Stdout)

	x, err = c.RunCommand(ctx, sid, client.CommandRequest{Command: "wc -c", StdinOpen: ptr(true), WaitS: ptr(0.0)})
	require.NoError(t, err)
	w := c.StdinWriter(ctx, x.Task.Id)
	n, err := io.Copy(w, io.LimitReader(rand.Reader, 100_000))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	assert.Equal(t, int64(100_000), n)
	task, err = c.WaitTask(ctx, x.Task.Id)
	require.NoError(t, err)
	assert.Equal(t, "100000", strings.TrimSpace(task.Result.Stdout))

	_, err = c.WriteStdin(ctx, x.Task.Id, strings.NewReader("late"), false)
	assert.True(t, client.IsKind(err, client.KindConflict), "a finished task takes no input: %v", err)
}

// TestErrors: refused requests are *client.Error with the problem's kind, detail and
// request id; Retry-After is read on 429.
func TestErrors(t *testing.T) {
	ctx := t.Context()

	anon, err := client.New(shared.URL)
	require.NoError(t, err)
	_, err = anon.Me(ctx)
	var e *client.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusUnauthorized, e.Status)
	assert.Equal(t, client.ProblemTypeBase+client.KindUnauthenticated, e.Type, "the gateway's problem type")
	assert.Equal(t, client.KindUnauthenticated, e.Kind())
	assert.NotEmpty(t, e.Detail)
	assert.Contains(t, e.Error(), "sandgate: 401 unauthenticated: ")

	c := newClient(t, "heidi")
	_, err = c.Task(ctx, "0123456789abcdef0123456789abcdef", client.WithHeader("X-Request-Id", "req-42"))
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusNotFound, e.Status)
	assert.Equal(t, "req-42", e.RequestID)

	_, err = c.RunCommand(ctx, "default", client.CommandRequest{Command: "true"}, client.WithProfile("nope"))
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusBadRequest, e.Status, "%v", e)

	_, err = c.CreateSession(ctx, client.CreateSessionRequest{Profile: ptr("oneshot")})
	assert.True(t, client.IsKind(err, client.KindConflict), "a per_call profile has no sessions: %v", err)

	tok := shared.Token("tokenfunc")
	calls := 0
	fc, err := client.New(shared.URL, client.WithTokenFunc(func(context.Context) (string, error) {
		calls++
		return tok, nil
	}))
	require.NoError(t, err)
	_, err = fc.Me(ctx)
	require.NoError(t, err)
	_, err = fc.Me(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, calls, "the token is asked for on every request")
	bad, err := client.New(shared.URL, client.WithTokenFunc(func(context.Context) (string, error) { return "", errors.New("no login") }))
	require.NoError(t, err)
	_, err = bad.Me(ctx)
	assert.ErrorContains(t, err, "no login")
}

// TestRetryAfter: a quota refusal carries its Retry-After.
func TestRetryAfter(t *testing.T) {
	env := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) { c.Sandbox.Quotas.Sessions = 1 }})
	c, err := client.New(env.URL, client.WithToken(env.Token("ivan")))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.CreateSession(ctx, client.CreateSessionRequest{})
	require.NoError(t, err)
	_, err = c.CreateSession(ctx, client.CreateSessionRequest{})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, client.KindQuota, e.Kind())
	assert.Equal(t, 60*time.Second, e.RetryAfter)
	assert.True(t, e.Temporary())
}
