package docker_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// interfaces lists the network interfaces a program in sb sees.
func interfaces(t *testing.T, sb providers.Sandbox) []string {
	t.Helper()
	r := run(t, sb, providers.ExecSpec{Code: "import os\nprint(' '.join(sorted(os.listdir('/sys/class/net'))))", Language: "python"})
	require.NoError(t, r.err)
	require.Equal(t, 0, r.st.ExitCode, r.stderr)
	return strings.Fields(r.stdout)
}

func TestNetworkDenyLeavesOnlyLoopback(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	deny := allowPol
	deny.NetworkEgress = providers.EgressDeny
	denied := create(t, p, deny)
	ins, err := inspect(t, denied.ID())
	require.NoError(t, err)
	assert.Equal(t, "none", string(ins.HostConfig.NetworkMode))
	assert.Equal(t, []string{"lo"}, interfaces(t, denied), "no interface but loopback under network_egress deny")
	r := run(t, denied, providers.ExecSpec{
		Code:     "import socket\ntry:\n    socket.create_connection(('10.255.255.1', 80), timeout=2)\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)",
		Language: "python",
	})
	require.NoError(t, r.err)
	assert.True(t, strings.HasPrefix(r.stdout, "refused"), "no route out: %s", r.stdout)

	// The check means something: with egress allowed the same image has an interface more
	// (unless the engine runs without a bridge).
	allowed := create(t, p, allowPol)
	if ifs := interfaces(t, allowed); len(ifs) < 2 {
		t.Logf("the engine gives containers no network interface (bridge disabled?): %v", ifs)
	} else {
		assert.Contains(t, ifs, "lo")
	}
}

func TestAllowlistUnderStrictIsRefusedBeforeTheEngine(t *testing.T) {
	t.Parallel()
	// An engine address nothing answers at: any engine call would be a provision error.
	p, err := docker.New(docker.Options{Profile: "allowlist", Installation: testInstallation, Config: docker.Config{Image: testImage, Host: "tcp://127.0.0.1:1"}, Logger: quietLogs})
	require.NoError(t, err)
	defer p.Close()
	pol := allowPol
	pol.NetworkEgress, pol.NetworkAllow = providers.EgressAllowlist, []string{"10.0.0.0/8"}
	_, err = p.Create(t.Context(), agent, pol)
	require.True(t, fault.IsKind(err, fault.Policy), "want a policy fault, got %v", err)
	assert.Contains(t, err.Error(), "allowlist")

	pol.Strict = false // then it warns and goes on: here to the engine, which does not answer
	_, err = p.Create(t.Context(), agent, pol)
	require.True(t, fault.IsKind(err, fault.Provision), "got %v", err)
}

func TestAllowlistWithoutStrictHasEgress(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	pol := allowPol
	pol.NetworkEgress, pol.NetworkAllow, pol.Strict = providers.EgressAllowlist, []string{"10.0.0.0/8"}, false
	sb := create(t, p, pol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.NotEqual(t, "none", string(ins.HostConfig.NetworkMode))
}

func TestMemoryLimitKillsAndSaysSo(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	pol := allowPol
	pol.MemoryMB = 64
	sb := create(t, p, pol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, int64(64<<20), ins.HostConfig.Memory)
	assert.Equal(t, ins.HostConfig.Memory, ins.HostConfig.MemorySwap, "no swap beyond the limit")
	assert.Equal(t, docker.OOMScoreAdj, ins.HostConfig.OomScoreAdj)
	adj := run(t, sb, providers.ExecSpec{Command: "cat /proc/self/oom_score_adj"})
	require.NoError(t, adj.err)
	assert.Equal(t, "1000\n", adj.stdout, "programs are the host OOM killer's first choice")

	r := run(t, sb, providers.ExecSpec{
		Code:     "print('allocating', flush=True)\nx = b'x' * (512 << 20)\nprint('survived')",
		Language: "python",
	})
	require.NoError(t, r.err)
	assert.Equal(t, 137, r.st.ExitCode)
	assert.Equal(t, "SIGKILL", r.st.Signal)
	assert.False(t, r.st.TimedOut)
	assert.Equal(t, "allocating\n", r.stdout)
	assert.Contains(t, r.stderr, "ran out of memory")

	// A program killed by SIGKILL for another reason is not reported as out of memory.
	r = run(t, sb, providers.ExecSpec{Command: "kill -9 $$"})
	require.NoError(t, r.err)
	assert.Equal(t, "SIGKILL", r.st.Signal)
	assert.NotContains(t, r.stderr, "memory")
	assert.Equal(t, "ok\n", sh(t, sb, "echo ok"), "the sandbox is usable afterwards")
}

func TestCPULimit(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	pol := allowPol
	pol.CPU = 0.5
	sb := create(t, p, pol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, int64(5e8), ins.HostConfig.NanoCPUs)
}

func TestForkBombIsContained(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Config.PidsLimit = 64 })
	sb := create(t, p, allowPol)
	t.Cleanup(func() {
		if t.Failed() { // what sandboxd said, before the container is removed
			out, _ := exec.Command("docker", "logs", "--tail", "40", sb.ID()).CombinedOutput()
			t.Logf("sandboxd's log:\n%s", out)
		}
	})
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	require.NotNil(t, ins.HostConfig.PidsLimit)
	assert.Equal(t, int64(64), *ins.HostConfig.PidsLimit)

	// A bomb whose every process keeps forking until the timeout: no further exec can start
	// while it runs, so the in-container supervisor ends it.
	r := run(t, sb, providers.ExecSpec{
		Code:     "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
		Language: "python",
		Timeout:  3 * time.Second,
	})
	require.NoError(t, r.err)
	assert.True(t, r.st.TimedOut, "%+v", r.st)
	assert.Less(t, r.elapsed, 30*time.Second)

	// The classic shell bomb, whose direct child returns at once.
	r = run(t, sb, providers.ExecSpec{Code: ":(){ :|:& };:", Language: "bash", Timeout: 5 * time.Second})
	require.NoError(t, r.err)

	// The sandbox is usable and nothing of either bomb is left.
	assert.Equal(t, "ok\n", sh(t, sb, "echo ok"))
	procs, err := strconv.Atoi(strings.TrimSpace(sh(t, sb, "ps -eo pid= | wc -l")))
	require.NoError(t, err)
	assert.LessOrEqual(t, procs, 8, "processes left after the bombs: %s", sh(t, sb, "ps -ef"))
}

func TestReadOnlyRootWithWritableWorkspace(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	pol := allowPol
	pol.FSAllowWrite = []string{"/workspace"}
	sb := create(t, p, pol)

	r := run(t, sb, providers.ExecSpec{Command: "touch /etc/sandgate-probe"})
	require.NoError(t, r.err)
	assert.NotEqual(t, 0, r.st.ExitCode)
	assert.Contains(t, r.stderr, "Read-only file system")
	assert.Equal(t, "ok\n", sh(t, sb, "touch /workspace/f /tmp/f && echo ok"), "the workspace and /tmp stay writable")

	// The file API works on the workspace volume.
	_, err := sb.WriteFile(t.Context(), "dir/up.txt", strings.NewReader("uploaded"), 1<<20)
	require.NoError(t, err)
	assert.Equal(t, "uploaded", sh(t, sb, "cat dir/up.txt"))
	assert.Equal(t, "uploaded", readAll(t, sb, "dir/up.txt"))
	names := []string{}
	infos, err := sb.ListFiles(t.Context(), "")
	require.NoError(t, err)
	for _, fi := range infos {
		names = append(names, fi.Name)
	}
	assert.ElementsMatch(t, []string{"dir", "f"}, names)
}

func TestAlwaysHardened(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	hc := ins.HostConfig
	require.NotNil(t, hc.Init)
	assert.True(t, *hc.Init, "an init as PID 1")
	assert.Contains(t, hc.SecurityOpt, "no-new-privileges")
	assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
	require.NotNil(t, hc.PidsLimit)
	assert.Equal(t, int64(docker.DefaultPidsLimit), *hc.PidsLimit)
	assert.Equal(t, "/workspace", ins.Config.WorkingDir)
	assert.Equal(t, docker.ManagedBy, ins.Config.Labels[docker.LabelManagedBy])
	assert.Equal(t, agent.Subject, ins.Config.Labels[docker.LabelOwner])
	assert.NotEmpty(t, ins.Config.Labels[docker.LabelProfile])
	assert.Equal(t, "/workspace\n", sh(t, sb, "pwd"))
	// No capability is effective, even for root.
	assert.Equal(t, "CapEff:\t0000000000000000\n", sh(t, sb, "grep CapEff /proc/self/status"))
}

func TestNonRootUser(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Config.User = "65534:65534" })
	sb := create(t, p, allowPol)
	assert.Equal(t, "65534\n", sh(t, sb, "id -u"))
	_, err := sb.WriteFile(t.Context(), "mine.txt", strings.NewReader("x"), 100)
	require.NoError(t, err)
	assert.Equal(t, "65534\n", sh(t, sb, "stat -c %u mine.txt"), "uploads belong to the sandbox user")
	assert.Equal(t, "x", readAll(t, sb, "mine.txt"))
}

func TestUnknownRuntimeIsConfigError(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Config.Runtime = "sandgate-no-such-runtime" })
	_, err := p.Create(t.Context(), agent, allowPol)
	require.True(t, fault.IsKind(err, fault.Config), "got %v", err)
	assert.Contains(t, err.Error(), "runc", "the message names the installed runtimes")
}

func TestMissingImageWithoutPull(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Config.Image = "sandgate/no-such-image:never" })
	_, err := p.Create(t.Context(), agent, allowPol)
	require.True(t, fault.IsKind(err, fault.Provision), "got %v", err)
	assert.Contains(t, err.Error(), "sandgate/no-such-image:never")
}

func TestAvailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	assert.False(t, docker.Available(ctx, "tcp://127.0.0.1:1"))
	requireEngine(t)
	assert.True(t, docker.Available(ctx, ""))
}
