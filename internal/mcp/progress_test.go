package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/mcp"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// A long run_code answers within MaxToolWait — before the SDKs' 60 s request timeout, even
// when the broker would wait longer — with a task to poll, and sends progress notifications
// while it waits when the call asked for them. The edge alone, on the in-memory domain.
func TestLongRunAnswersInTimeWithProgress(t *testing.T) {
	t.Parallel()
	env := sandboxtest.New(t, sandboxtest.Options{Settings: sandbox.Settings{WaitTimeout: 10 * time.Minute}})
	alice := env.Principal(t, "alice")
	gate := sandboxtest.NewGate()
	env.Provider(t, "default").Handle("hold", gate.Program)

	h := mcp.New(mcp.Options{Sandbox: env.Service, MaxToolWait: 600 * time.Millisecond, ProgressInterval: 100 * time.Millisecond})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(principal.NewContext(r.Context(), alice)))
	}))
	t.Cleanup(srv.Close)

	var mu sync.Mutex
	var notes []*sdk.ProgressNotificationParams
	client := sdk.NewClient(&sdk.Implementation{Name: "sandgate-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, req.Params)
		},
	})
	// The edge in front verified the token; here any bearer stands in for it.
	cs, err := client.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint: srv.URL + mcp.Path, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{tok: "verified-upstream", base: http.DefaultTransport}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })

	params := &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "hold"}}
	params.SetProgressToken("tok-1")
	start := time.Now()
	res, err := cs.CallTool(t.Context(), params)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "answered at MaxToolWait, not the broker's 10 minutes")
	require.False(t, res.IsError)
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &body))
	require.NotEmpty(t, body["task_id"], "promoted to a task: %v", body)

	mu.Lock()
	got := len(notes)
	first := notes[0]
	mu.Unlock()
	assert.GreaterOrEqual(t, got, 2, "progress while waiting")
	assert.Equal(t, "tok-1", first.ProgressToken)
	assert.Contains(t, first.Message, "check_sandbox_task")

	gate.Release(0, "done\n", "")
	waitCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = env.Store.WaitTask(waitCtx, body["task_id"].(string))
	require.NoError(t, err)
}

// Progress notifications carry the end of the output so far; a call the client cancels
// cancels its execution (nobody would collect the task otherwise); cancel_sandbox_task stops
// a promoted one.
func TestProgressShowsOutputAndCancelStops(t *testing.T) {
	t.Parallel()
	env := sandboxtest.New(t, sandboxtest.Options{Settings: sandbox.Settings{WaitTimeout: 10 * time.Minute}})
	alice := env.Principal(t, "alice")
	talkThenWait := func(ctx context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		_, _ = io.WriteString(r.Stdout, "compiling step 1\n")
		<-ctx.Done()
		return providers.ExitStatus{}, ctx.Err()
	}
	env.Provider(t, "default").Handle("talk", talkThenWait)

	h := mcp.New(mcp.Options{Sandbox: env.Service, MaxToolWait: time.Minute, ProgressInterval: 50 * time.Millisecond})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(principal.NewContext(r.Context(), alice)))
	}))
	t.Cleanup(srv.Close)
	noted := make(chan string, 100)
	client := sdk.NewClient(&sdk.Implementation{Name: "sandgate-test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			select {
			case noted <- req.Params.Message:
			default:
			}
		},
	})
	cs, err := client.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint: srv.URL + mcp.Path, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{tok: "verified-upstream", base: http.DefaultTransport}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })

	callCtx, cancelCall := context.WithCancel(t.Context())
	params := &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "talk"}}
	params.SetProgressToken("tok-2")
	called := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, params)
		called <- err
	}()
	deadline := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case msg := <-noted:
			seen = strings.Contains(msg, "latest output: compiling step 1")
		case <-deadline:
			t.Fatal("no progress notification showed the output")
		}
	}
	tasks, _, err := env.Service.ListTasks(t.Context(), alice, sandbox.TaskFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	id := tasks[0].ID

	cancelCall() // notifications/cancelled
	require.Error(t, <-called)
	waitCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = env.Store.WaitTask(waitCtx, id)
	require.NoError(t, err, "the cancelled call's execution ended")
	task, err := env.Service.GetTask(t.Context(), alice, id)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskCancelled, task.Status)

	// A promoted run is stopped with cancel_sandbox_task.
	env.Provider(t, "default").Handle("talk", talkThenWait)
	out, err := env.Service.Execute(t.Context(), alice, sandbox.ExecInput{Code: "talk", Wait: ptrDuration(0)})
	require.NoError(t, err)
	require.NotNil(t, out.Task)
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "cancel_sandbox_task", Arguments: map[string]any{"task_id": out.Task.ID}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	_, err = env.Store.WaitTask(waitCtx, out.Task.ID)
	require.NoError(t, err)
	task, err = env.Service.GetTask(t.Context(), alice, out.Task.ID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskCancelled, task.Status)
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "cancel_sandbox_task", Arguments: map[string]any{"task_id": "nope"}})
	require.NoError(t, err)
	assert.Contains(t, res.Content[0].(*sdk.TextContent).Text, `"status":"unknown"`)
}

func ptrDuration(d time.Duration) *time.Duration { return &d }
