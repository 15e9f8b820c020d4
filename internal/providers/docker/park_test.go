package docker_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// cpuUsage is the container's total CPU time so far (the engine's cgroup statistics), in ns.
func cpuUsage(t *testing.T, id string) uint64 {
	t.Helper()
	cli := engineClient(t)
	defer cli.Close()
	resp, err := cli.ContainerStatsOneShot(t.Context(), id)
	require.NoError(t, err)
	defer resp.Body.Close()
	var st container.StatsResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st.CPUStats.CPUUsage.TotalUsage
}

// TestPauseKeepsProcessesVariablesAndFiles freezes a sandbox with a busy background process
// and a context variable: while paused the container gets no CPU (its cgroup's usage stands
// still) and reports paused; resumed, the same process runs on, the variable is there and so
// are the files.
func TestPauseKeepsProcessesVariablesAndFiles(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Stateful = true })
	caps := p.Capabilities()
	require.True(t, caps.Pause)
	require.True(t, caps.Snapshots)
	require.True(t, caps.PreviewPorts)
	sb := create(t, p, allowPol)
	ctx := t.Context()

	r := run(t, sb, providers.ExecSpec{Code: "answer = 42", Language: "python", Context: providers.DefaultContext})
	require.NoError(t, r.err)
	sh(t, sb, "echo kept > note.txt")
	x := sb.(providers.Executions)
	// A busy process that counts, so that it both burns CPU and shows it is still running.
	info, err := x.Start(ctx, providers.ExecSpec{ID: "busy-" + randomSuffix(), Background: true,
		Command: `python3 -c 'import time
n = 0
while True:
    n += 1
    if n % 200000 == 0:
        open("count", "w").write(str(n))'`})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.TrimSpace(sh(t, sb, "cat count 2>/dev/null || true")) != "" }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, sb.Close())

	require.NoError(t, p.Pause(ctx, sb.ID()))
	require.NoError(t, p.Pause(ctx, sb.ID()), "pausing a paused sandbox is fine")
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	require.True(t, ins.State.Paused)

	before := cpuUsage(t, sb.ID())
	time.Sleep(time.Second)
	assert.Equal(t, before, cpuUsage(t, sb.ID()), "a paused container uses no CPU")

	require.NoError(t, p.Resume(ctx, sb.ID()))
	require.NoError(t, p.Resume(ctx, sb.ID()), "resuming a running sandbox is fine")
	ins, err = inspect(t, sb.ID())
	require.NoError(t, err)
	require.False(t, ins.State.Paused)

	sb2, err := p.Attach(ctx, sb.ID(), agent, allowPol)
	require.NoError(t, err)
	defer sb2.Close()
	r = run(t, sb2, providers.ExecSpec{Code: "print(answer)", Language: "python", Context: providers.DefaultContext})
	require.NoError(t, r.err)
	assert.Equal(t, "42\n", r.stdout, "the context's variable survived")
	assert.Equal(t, "kept\n", readAll(t, sb2, "note.txt"))
	first := strings.TrimSpace(sh(t, sb2, "cat count"))
	require.Eventually(t, func() bool { return strings.TrimSpace(sh(t, sb2, "cat count")) != first }, 30*time.Second, 50*time.Millisecond,
		"the background process counts on")
	assert.Contains(t, sh(t, sb2, "ps -o pid= -p "+fmt.Sprint(info.PID)+" || true"), fmt.Sprint(info.PID), "the same process")
	assert.Greater(t, cpuUsage(t, sb.ID()), before, "resumed, it uses CPU again")

	err = p.Pause(ctx, "0000000000000000000000000000000000000000000000000000000000000000")
	require.True(t, fault.IsKind(err, fault.Gone), "%v", err)
}

// TestDialPortReachesAServerInTheSandbox talks HTTP to a server a program started on the
// sandbox's loopback, through sandboxd, also in a sandbox without network; a closed port is
// a conflict.
func TestDialPortReachesAServerInTheSandbox(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Stateful = true })
	denyPol := allowPol
	denyPol.NetworkEgress = providers.EgressDeny
	sb := create(t, p, denyPol)
	ctx := t.Context()
	sh(t, sb, "mkdir -p site && echo 'hello from the sandbox' > site/index.html")
	_, err := sb.(providers.Executions).Start(ctx, providers.ExecSpec{ID: "web-" + randomSuffix(), Background: true,
		Command: "exec python3 -m http.server 8000 --bind 127.0.0.1 --directory site"})
	require.NoError(t, err)
	d := sb.(providers.PortDialer)
	var body string
	require.Eventually(t, func() bool {
		conn, err := d.DialPort(ctx, 8000)
		if err != nil {
			return false
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /index.html HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n"); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, "hello from the sandbox\n", body)

	_, err = d.DialPort(ctx, 8001)
	require.True(t, fault.IsKind(err, fault.Conflict), "%v", err)
	_, err = d.DialPort(ctx, 0)
	require.True(t, fault.IsKind(err, fault.Validation), "%v", err)
}
