package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

func TestRestartedGatewayReattaches(t *testing.T) {
	t.Parallel()
	first := newProvider(t)
	sb := create(t, first, allowPol)
	_, err := sb.WriteFile(t.Context(), "state.txt", strings.NewReader("kept"), 100)
	require.NoError(t, err)
	require.NoError(t, sb.Close())
	require.NoError(t, first.Close())

	// A new provider (a restarted gateway) finds the container by id.
	second := newProvider(t, func(o *docker.Options) { o.Profile = "restarted" })
	again, err := second.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err)
	assert.Equal(t, sb.ID(), again.ID())
	assert.Equal(t, "kept", readAll(t, again, "state.txt"))

	// A stopped container is started again, its workspace intact.
	cli := engineClient(t)
	defer cli.Close()
	timeout := 0
	require.NoError(t, cli.ContainerStop(t.Context(), sb.ID(), container.StopOptions{Timeout: &timeout}))
	again, err = second.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err)
	assert.Equal(t, "kept", sh(t, again, "cat state.txt"))
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.True(t, ins.State.Running)
}

func TestSweepOrphans(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	other := newProvider(t) // another profile's sandbox is never touched
	kept := create(t, p, allowPol)
	orphan1 := create(t, p, allowPol)
	orphan2 := create(t, p, allowPol)
	foreign := create(t, other, allowPol)
	keep := func(id string) bool { return id == kept.ID() }

	// Young containers are protected (their session may not be recorded yet).
	removed, err := p.SweepOrphans(t.Context(), keep)
	require.NoError(t, err)
	assert.Empty(t, removed)

	p.OrphanMinAge = time.Nanosecond
	other.OrphanMinAge = time.Nanosecond
	removed, err = p.SweepOrphans(t.Context(), keep)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{orphan1.ID(), orphan2.ID()}, removed)
	for _, id := range removed {
		_, err := p.Attach(t.Context(), id, agent, allowPol)
		assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	}
	_, err = p.Attach(t.Context(), kept.ID(), agent, allowPol)
	assert.NoError(t, err)
	_, err = other.Attach(t.Context(), foreign.ID(), agent, allowPol)
	assert.NoError(t, err)
}

func TestZombiesAreReaped(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	// Orphans that exit: their parent is gone, so only PID 1 can reap them.
	sh(t, sb, "for i in 1 2 3 4 5; do (sleep 0.2 &) ; done; sleep 1")
	r := run(t, sb, providers.ExecSpec{Code: "import os\nfor _ in range(5):\n    if os.fork() == 0:\n        if os.fork() == 0:\n            os._exit(0)\n        os._exit(0)\n    os.wait()\nimport time; time.sleep(0.5)", Language: "python"})
	require.NoError(t, r.err)
	time.Sleep(500 * time.Millisecond)
	ps := sh(t, sb, "ps -eo stat=,pid=,comm=")
	for _, line := range strings.Split(strings.TrimSpace(ps), "\n") {
		assert.False(t, strings.HasPrefix(strings.TrimSpace(line), "Z"), "a zombie: %q\n%s", line, ps)
	}
	assert.Contains(t, sh(t, sb, "ps -o comm= -p 1"), "docker-init", "an init is PID 1")
}

func TestTimeoutLeavesNoProcess(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	r := run(t, sb, providers.ExecSpec{
		Command: "sleep 301 & (trap '' TERM; sleep 302) & python3 -c 'import time; time.sleep(303)' & echo started; wait",
		Timeout: time.Second,
	})
	require.NoError(t, r.err)
	assert.True(t, r.st.TimedOut)
	assert.Equal(t, "started\n", r.stdout)
	assert.Less(t, r.elapsed, 15*time.Second)
	ps := sh(t, sb, "ps -eo args=")
	for _, leftover := range []string{"sleep 301", "sleep 302", "sleep(303)"} {
		assert.NotContains(t, ps, leftover)
	}
}

func TestExitCodesAreNotSignals(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	for _, tc := range []struct {
		command string
		code    int
		signal  string
	}{
		{"exit 130", 130, ""},
		{"exit 255", 255, ""},
		{"kill -INT $$", 130, "SIGINT"},
		{"kill -KILL $$", 137, "SIGKILL"},
	} {
		r := run(t, sb, providers.ExecSpec{Command: tc.command})
		require.NoError(t, r.err, tc.command)
		assert.Equal(t, tc.code, r.st.ExitCode, tc.command)
		assert.Equal(t, tc.signal, r.st.Signal, tc.command)
		assert.False(t, r.st.TimedOut, tc.command)
	}
	// The helper leaves no record behind.
	assert.Equal(t, "clean\n", sh(t, sb, "ls -A /dev/shm /tmp | grep -q sandgate || echo clean"))
}

func TestEscapedProcessDoesNotHangTheCall(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	// setsid leaves the execution's session, so it survives it, holding stdout.
	r := run(t, sb, providers.ExecSpec{Command: "setsid sleep 60 & echo started", Timeout: time.Minute})
	require.NoError(t, r.err)
	assert.False(t, r.st.TimedOut)
	assert.Equal(t, "started\n", r.stdout)
	assert.Less(t, r.elapsed, 15*time.Second)
	assert.NotContains(t, sh(t, sb, "ps -eo args="), "sleep 60", "and it does not outlive the call")
}

// TestEscapedProcessesEnd: processes that leave the execution's session (setsid, a double
// fork) end with the execution — when it returns, when it times out, and from a context —
// but not while another execution that may own them still runs.
func TestEscapedProcessesEnd(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	alive := func(what string) bool {
		return strings.Contains(sh(t, sb, "ps -eo args="), what)
	}
	// Each waits a little so the escape is complete (not ended with the session) when it returns.
	sh(t, sb, "(setsid sleep 311 &); setsid -f sleep 312 </dev/null >/dev/null 2>&1; sleep 0.3; echo started")
	assert.False(t, alive("sleep 311"), "a double fork into a new session ends with the call")
	assert.False(t, alive("sleep 312"))

	r := run(t, sb, providers.ExecSpec{Command: "(setsid sleep 313 &); sleep 30", Timeout: time.Second})
	require.NoError(t, r.err)
	assert.True(t, r.st.TimedOut)
	assert.False(t, alive("sleep 313"), "and with a timed-out one")

	r = run(t, sb, providers.ExecSpec{Code: "import os, time\nos.system('(setsid sleep 314 &)')\ntime.sleep(0.3)", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.False(t, alive("sleep 314"), "and with a context's run")

	// While a longer execution runs, an escaped process started during it may be its own.
	long := make(chan result, 1)
	go func() { long <- run(t, sb, providers.ExecSpec{Command: "sleep 3"}) }()
	time.Sleep(500 * time.Millisecond)
	sh(t, sb, "(setsid sleep 315 &); sleep 0.3")
	assert.True(t, alive("sleep 315"), "kept while an execution that may own it runs")
	require.NoError(t, (<-long).err)
	assert.Eventually(t, func() bool { return !alive("sleep 315") }, 5*time.Second, 100*time.Millisecond, "ended once it has")
}

func TestEnvironmentAndWorkingFolder(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	sh(t, sb, "mkdir -p sub")
	r := run(t, sb, providers.ExecSpec{
		Command: `printf '%s|%s|%s' "$HOME" "$PWD" "$PATH_EXTRA"`,
		Dir:     "sub",
		Env:     map[string]string{"PATH_EXTRA": "x y", "PATH": "/nonexistent"},
	})
	require.NoError(t, r.err)
	assert.Equal(t, 0, r.st.ExitCode, r.stderr)
	assert.Equal(t, "/workspace|/workspace/sub|x y", r.stdout, "a PATH override reaches the program, not the supervisor")
	r = run(t, sb, providers.ExecSpec{Command: "pwd", Dir: "missing"})
	require.True(t, fault.IsKind(r.err, fault.NotFound), "%v", r.err)
}

func TestInstallPackagesRejectsOptions(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	for _, pkgs := range [][]string{nil, {""}, {"-r", "/etc/passwd"}, {"--index-url=http://evil"}} {
		_, err := sb.InstallPackages(t.Context(), pkgs, providers.Output{})
		assert.True(t, fault.IsKind(err, fault.Validation), "%q: %v", pkgs, err)
	}
}

func TestDestroyLeavesForeignContainers(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	id := foreignContainer(t, "", false)
	require.NoError(t, p.Destroy(t.Context(), id))
	_, err := inspect(t, id)
	require.NoError(t, err, "a container without the managed-by label is never removed")
	_, err = p.Attach(t.Context(), id, agent, allowPol)
	assert.True(t, fault.IsKind(err, fault.Gone), "nor attached to: %v", err)
}

// foreignContainer starts a container that Sandgate did not create, removed when the test
// ends; workdir "" keeps the image's.
func foreignContainer(t *testing.T, workdir string, noNetwork bool) string {
	t.Helper()
	cli := engineClient(t)
	defer cli.Close()
	hc := &container.HostConfig{Init: new(true)}
	if noNetwork {
		hc.NetworkMode = "none"
	}
	name := "sandgate-test-foreign-" + randomSuffix()
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: testImage, Entrypoint: []string{"sleep", "infinity"}, WorkingDir: workdir}, hc, nil, nil, name)
	require.NoError(t, err)
	t.Cleanup(func() {
		cli := engineClient(t)
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	})
	require.NoError(t, cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}))
	return resp.ID
}

func TestAttachedProfile(t *testing.T) {
	t.Parallel()
	requireEngine(t)
	target := foreignContainer(t, "/data", true)
	ins, err := inspect(t, target)
	require.NoError(t, err)
	name := strings.TrimPrefix(ins.Name, "/")
	attached := func(t *testing.T, to string) *docker.Provider {
		return newProvider(t, func(o *docker.Options) { o.AttachTo = to })
	}
	deny := allowPol
	deny.NetworkEgress = providers.EgressDeny

	p := attached(t, name)
	sb, err := p.Create(t.Context(), agent, deny)
	require.NoError(t, err, "the target has no network, so deny is enforced")
	assert.Equal(t, target, sb.ID())
	assert.Equal(t, "/data\n", sh(t, sb, "pwd"), "the workspace is the target's working folder")
	_, err = sb.WriteFile(t.Context(), "in-target.txt", strings.NewReader("x"), 10)
	require.NoError(t, err)
	assert.Equal(t, "x", sh(t, sb, "cat /data/in-target.txt"))

	// Destroy never removes the target, by id or by name.
	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	require.NoError(t, p.Destroy(t.Context(), name))
	_, err = inspect(t, target)
	require.NoError(t, err)

	// A policy the target's configuration does not enforce: refused under strict.
	mem := deny
	mem.MemoryMB = 64
	_, err = p.Create(t.Context(), agent, mem)
	require.True(t, fault.IsKind(err, fault.Policy), "%v", err)
	mem.Strict = false
	_, err = p.Create(t.Context(), agent, mem)
	require.NoError(t, err, "without strict: a warning")

	// A stopped target is started by Attach.
	cli := engineClient(t)
	defer cli.Close()
	timeout := 0
	require.NoError(t, cli.ContainerStop(t.Context(), target, container.StopOptions{Timeout: &timeout}))
	again, err := p.Attach(t.Context(), target, agent, deny)
	require.NoError(t, err)
	assert.Equal(t, "x", readAll(t, again, "in-target.txt"))

	// A target that is gone: Gone, from Create and Attach.
	require.NoError(t, cli.ContainerRemove(t.Context(), target, container.RemoveOptions{Force: true}))
	_, err = p.Create(t.Context(), agent, deny)
	require.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	_, err = p.Attach(t.Context(), target, agent, deny)
	require.True(t, fault.IsKind(err, fault.Gone), "%v", err)
}

func TestClosedProviderRefusesNewSandboxesAndStillCleansUp(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	require.NoError(t, sb.Close())
	require.NoError(t, p.Close())

	_, err := p.Create(t.Context(), agent, allowPol)
	assert.True(t, fault.IsKind(err, fault.Provision), "Create after Close: %v", err)
	_, err = p.Attach(t.Context(), sb.ID(), agent, allowPol)
	assert.True(t, fault.IsKind(err, fault.Provision), "Attach after Close: %v", err)

	// Clean-up after shutdown still works, and (goleak in TestMain) leaves no connection open.
	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	_, err = inspect(t, sb.ID())
	assert.True(t, cerrdefs.IsNotFound(err), "destroyed after Close: %v", err)
}
