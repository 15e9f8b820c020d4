package api_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// TestStoppedSandboxdEndsExecutionsOnTime: the sandboxd of a docker session is stopped from
// outside (SIGSTOP as root in the container, as an operator or a frozen node would: programs
// cannot). The execution it was running ends timed_out within its timeout and the gateway's
// 10 s grace, with a notice; the session's next execution ends too — it fails at once, its
// sandbox does not answer — and neither holds the concurrency quota afterwards.
func TestStoppedSandboxdEndsExecutionsOnTime(t *testing.T) {
	t.Parallel()
	img := dockerImage(t)
	const timeout = 25 * time.Second
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		seconds := timeout.Seconds()
		c.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Stateful: true,
			Policy: config.Policy{Timeout: &seconds},
			Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: img, Pull: "never"}}}
		c.Sandbox.Quotas.ConcurrentExecutions = 2
	}})
	tok := e.token("alice")
	var sessions []string
	t.Cleanup(func() {
		for _, sid := range sessions {
			e.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
		}
	})
	newSession := func() string {
		sid := e.newSession(tok, "docker")
		sessions = append(sessions, sid)
		return sid
	}
	sid := newSession()
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "kept = 1"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	sandboxID := e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["sandbox_id"].(string)
	require.NotEmpty(t, sandboxID)

	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo started; exec sleep 600", "wait_s": 0})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	running := r.JSON(t)["id"].(string)
	s := e.stream(tok, "GET", "/v1/tasks/"+running+"/output", nil, nil)
	require.Equal(t, "stdout", s.event(t).event, "the program runs in the sandbox")
	_ = s.resp.Body.Close()

	rootExec(t, sandboxID, "pkill", "-STOP", "-o", "-x", "sandboxd")
	t.Cleanup(func() { rootExec(t, sandboxID, "pkill", "-CONT", "-o", "-x", "sandboxd") })
	r = e.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "print(kept)", "wait_s": 0})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	next := r.JSON(t)["id"].(string)

	// The bound is the timeout plus 10 s from when the gateway asked the sandbox to run the
	// program; the margin covers the sandbox's attach and the recording on a loaded machine.
	// What it rules out is a task left running for minutes.
	const bound = timeout + 10*time.Second + 10*time.Second
	first := e.waitTaskWithin(tok, running, 2*bound)
	assert.Equal(t, "timed_out", first["status"], "task: %v", first)
	assert.Contains(t, first["notice"], "did not report the end of this execution")
	assert.LessOrEqual(t, ranFor(t, first), bound)

	second := e.waitTaskWithin(tok, next, 2*bound)
	assert.Equal(t, "failed", second["status"], "task: %v", second)
	assert.Contains(t, second["error"], "does not answer")
	assert.LessOrEqual(t, ranFor(t, second), bound)

	me := e.do(tok, "GET", "/v1/me", nil).JSON(t)
	quotas := me["quotas"].(map[string]any)["concurrent_executions"].(map[string]any)
	assert.Equal(t, float64(0), quotas["used"], "the quota is free: %v", quotas)
	other := newSession()
	r = e.do(tok, "POST", "/v1/sessions/"+other+"/commands", map[string]any{"command": "echo fine"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "fine\n", r.JSON(t)["stdout"])
}

// waitTaskWithin polls task id until it finishes, for at most d.
func (e *testEnv) waitTaskWithin(tok, id string, d time.Duration) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		task := e.do(tok, "GET", "/v1/tasks/"+id, nil).JSON(e.t)
		if task["finished_at"] != nil {
			return task
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("task %s still %v after %s", id, task["status"], d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ranFor is how long a finished task ran: from its start to its end.
func ranFor(t *testing.T, task map[string]any) time.Duration {
	t.Helper()
	started, err := time.Parse(time.RFC3339Nano, task["started_at"].(string))
	require.NoError(t, err, "task: %v", task)
	finished, err := time.Parse(time.RFC3339Nano, task["finished_at"].(string))
	require.NoError(t, err)
	return finished.Sub(started)
}

// rootExec runs cmd as root in container id through the engine, and requires it to succeed.
func rootExec(t *testing.T, id string, cmd ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{User: "0", Cmd: cmd, AttachStdout: true, AttachStderr: true})
	require.NoError(t, err)
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	require.NoError(t, err)
	out, _ := io.ReadAll(att.Reader)
	att.Close()
	ins, err := cli.ContainerExecInspect(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, 0, ins.ExitCode, "%v: %s", cmd, out)
}
