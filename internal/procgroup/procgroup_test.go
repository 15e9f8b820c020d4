//go:build unix

package procgroup_test

import (
	"bytes"
	"fmt"
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

	"github.com/sandgate/sandgate/internal/procgroup"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const slow = 15 * time.Second

// pids reads the pids a program wrote, one per line, into file.
func pids(t *testing.T, file string, want int) []int {
	t.Helper()
	var out []int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		out = out[:0]
		for _, f := range strings.Fields(string(data)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				out = append(out, pid)
			}
		}
		return len(out) >= want
	}, slow, 10*time.Millisecond)
	return out
}

func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS != "linux" && syscall.Kill(pid, 0) == nil
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func TestWaitKillsLeftovers(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "pids")
	// One leftover in the process group, one that moved to a group of its own.
	cmd := exec.Command("sh", "-c", `sleep 60 & echo $! >> "$1"; python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(60)' & echo $! >> "$1"; echo $$ >> "$1"`, "sh", file)
	p, err := procgroup.Start(cmd)
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, p.Pid())
	got := pids(t, file, 3)
	assert.Equal(t, p.Pid(), got[2])
	ps, err := p.Wait()
	require.NoError(t, err)
	code, sig := procgroup.ExitStatus(ps)
	assert.Equal(t, 0, code)
	assert.Empty(t, sig)
	for _, pid := range got[:1] {
		require.Eventually(t, func() bool { return !alive(pid) }, slow, 10*time.Millisecond, "leftover %d lives", pid)
	}
	if runtime.GOOS == "linux" {
		require.Eventually(t, func() bool { return !alive(got[1]) }, slow, 10*time.Millisecond, "leftover in its own group %d lives", got[1])
	}
	ps2, err2 := p.Wait()
	assert.Same(t, ps, ps2, "Wait may be called again")
	assert.Equal(t, err, err2)
	assert.ErrorIs(t, p.Signal(syscall.SIGTERM), os.ErrProcessDone)
}

func TestTerminateEscalates(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		script string
		code   int
		signal string
	}{
		"stops on SIGTERM":    {script: "exec sleep 60", code: 128 + 15, signal: "SIGTERM"},
		"ignores SIGTERM":     {script: "trap '' TERM; sleep 60 & wait", code: 128 + 9, signal: "SIGKILL"},
		"handles it, exits 3": {script: "trap 'exit 3' TERM; sleep 60 & wait", code: 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := procgroup.Start(exec.Command("sh", "-c", tt.script))
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond) // let the shell set its trap
			start := time.Now()
			p.Terminate(300 * time.Millisecond)
			assert.Less(t, time.Since(start), slow)
			ps, _ := p.Wait()
			code, sig := procgroup.ExitStatus(ps)
			assert.Equal(t, tt.code, code)
			assert.Equal(t, tt.signal, sig)
		})
	}
}

func TestKillAndExited(t *testing.T) {
	t.Parallel()
	p, err := procgroup.Start(exec.Command("sleep", "60"))
	require.NoError(t, err)
	select {
	case <-p.Exited():
		t.Fatal("exited too early")
	default:
	}
	require.NoError(t, p.Signal(0))
	p.Kill()
	<-p.Exited()
	ps, _ := p.Wait()
	code, sig := procgroup.ExitStatus(ps)
	assert.Equal(t, 137, code)
	assert.Equal(t, "SIGKILL", sig)
	p.SignalSession(syscall.SIGKILL) // after Wait: a no-op, never another process
}

func TestOwnSession(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	cmd := exec.Command("python3", "-c", "import os; print(os.getsid(0) == os.getpid() == os.getpgid(0))")
	cmd.Stdout = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // overridden: setsid makes the group
	p, err := procgroup.Start(cmd)
	require.NoError(t, err)
	_, err = p.Wait()
	require.NoError(t, err)
	assert.Equal(t, "True\n", out.String())
}

func TestStartError(t *testing.T) {
	t.Parallel()
	_, err := procgroup.Start(exec.Command(filepath.Join(t.TempDir(), "missing")))
	require.Error(t, err)
	code, sig := procgroup.ExitStatus(nil)
	assert.Equal(t, -1, code)
	assert.Empty(t, sig)
	assert.Equal(t, "SIGKILL", procgroup.SignalName(syscall.SIGKILL))
}

// cgroups returns Cgroups for the test, or skips it where this process may not make cgroups
// (not root, no cgroup v2, Linux older than 5.14).
func cgroups(t *testing.T) *procgroup.Cgroups {
	t.Helper()
	cg, err := procgroup.DetectCgroups("sandgate-test")
	if err != nil {
		t.Skipf("no cgroups for this test: %v", err)
	}
	return cg
}

// TestCgroupKillsEscapees: with a cgroup, a process that left the session (setsid) and one
// that double-forked out of it die with the execution too, and the cgroup is removed.
func TestCgroupKillsEscapees(t *testing.T) {
	t.Parallel()
	cg := cgroups(t)
	file := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command("sh", "-c", `setsid sleep 60 & echo $! >> "$1"; (setsid sh -c 'sleep 60 & echo $! >> "$1"' sh "$1" &); echo $$ >> "$1"`, "sh", file)
	p, err := procgroup.StartIn(cmd, cg)
	require.NoError(t, err)
	got := pids(t, file, 3)
	dir := p.Cgroup()
	require.DirExists(t, dir)
	_, err = p.Wait()
	require.NoError(t, err)
	for _, pid := range got {
		require.Eventually(t, func() bool { return !alive(pid) }, slow, 10*time.Millisecond, "escapee %d lives", pid)
	}
	assert.NoDirExists(t, dir, "the process's cgroup is removed")
}

// TestCgroupTerminateReachesEscapees: Terminate signals the whole cgroup, so an escapee that
// ignores nothing ends at SIGTERM and one that ignores SIGTERM at SIGKILL.
func TestCgroupTerminateReachesEscapees(t *testing.T) {
	t.Parallel()
	cg := cgroups(t)
	file := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command("sh", "-c", `setsid sh -c 'trap "" TERM; sleep 60' & echo $! >> "$1"; sleep 60`, "sh", file)
	p, err := procgroup.StartIn(cmd, cg)
	require.NoError(t, err)
	got := pids(t, file, 1)
	start := time.Now()
	p.Terminate(300 * time.Millisecond)
	_, _ = p.Wait()
	assert.Less(t, time.Since(start), slow)
	require.Eventually(t, func() bool { return !alive(got[0]) }, slow, 10*time.Millisecond, "escapee %d lives", got[0])
}

// TestTerminateReachesSetsidDescendants: without a cgroup, a descendant that left the session
// (setsid) is signalled with it while its parent lives — and still gets the SIGKILL when it
// ignores SIGTERM and its parent ended on the SIGTERM, which hands it to init.
func TestTerminateReachesSetsidDescendants(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command("sh", "-c", `setsid sh -c 'trap "" TERM; echo $$ >> "$1"; while :; do sleep 0.05; done' sh "$1" & setsid sleep 60 & echo $! >> "$1"; wait`, "sh", file)
	p, err := procgroup.Start(cmd)
	require.NoError(t, err)
	got := pids(t, file, 2)
	start := time.Now()
	p.Terminate(300 * time.Millisecond)
	_, _ = p.Wait()
	assert.Less(t, time.Since(start), slow)
	for _, pid := range got {
		require.Eventually(t, func() bool { return !alive(pid) }, slow, 10*time.Millisecond, "descendant %d lives", pid)
	}
}

// killOthersLeader starts a python leader that starts children every way a cell can — a
// child, one in a session of its own, one handed to init by a shell that ended — writes
// their pids to file, and stays.
const killOthersLeader = `
import os, subprocess, sys, time
f = sys.argv[1]
a = subprocess.Popen(["sleep", "60"])
b = subprocess.Popen(["sleep", "60"], start_new_session=True)
os.system("sleep 60 & echo $! >> " + f)
with open(f, "a") as out:
    out.write("%d\n%d\n" % (a.pid, b.pid))
while True:
    time.sleep(0.05)
`

func testKillOthers(t *testing.T, cg *procgroup.Cgroups) {
	file := filepath.Join(t.TempDir(), "pids")
	p, err := procgroup.StartIn(exec.Command("python3", "-c", killOthersLeader, file), cg)
	require.NoError(t, err)
	defer func() {
		p.Kill()
		_, _ = p.Wait()
	}()
	got := pids(t, file, 3)
	p.KillOthers()
	for _, pid := range got {
		require.Eventually(t, func() bool { return !alive(pid) }, slow, 10*time.Millisecond, "child %d lives", pid)
	}
	select {
	case <-p.Exited():
		t.Fatal("KillOthers ended the leader")
	default:
	}
	assert.True(t, alive(p.Pid()), "the leader runs on")
}

// TestKillOthersKeepsTheLeader: KillOthers ends what the leader started, wherever it went,
// and leaves the leader running.
func TestKillOthersKeepsTheLeader(t *testing.T) {
	t.Parallel()
	testKillOthers(t, nil)
}

// TestCgroupKillOthersKeepsTheLeader: the same with a cgroup, which also holds a process whose
// parent ended after it left the session.
func TestCgroupKillOthersKeepsTheLeader(t *testing.T) {
	t.Parallel()
	testKillOthers(t, cgroups(t))
}
