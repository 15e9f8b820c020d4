package docker_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// attackSandboxd is a program that tries everything a program may try against its sandbox's
// sandboxd (the child of the container's init that runs "serve"): stop, kill and terminate
// it, trace it, read its environment and memory. It prints one line per attempt.
const attackSandboxd = `import ctypes, os, signal
pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and os.path.exists("/proc/%s/cmdline" % p)
           and open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[1:2] == [b"serve"])
print("uid", os.getuid(), "sandboxd", pid, "as", os.stat("/proc/%d" % pid).st_uid)
for name in ("SIGSTOP", "SIGKILL", "SIGTERM"):
    try:
        os.kill(pid, getattr(signal, name))
        print(name, "sent")
    except OSError as e:
        print(name, e.strerror)
libc = ctypes.CDLL(None, use_errno=True)
for name, req in (("PTRACE_ATTACH", 16), ("PTRACE_SEIZE", 0x4206)):
    r = libc.ptrace(req, pid, None, None)
    print(name, "attached" if r == 0 else os.strerror(ctypes.get_errno()))
for f in ("environ", "mem"):
    try:
        open("/proc/%d/%s" % (pid, f), "rb").read(1)
        print(f, "readable")
    except OSError as e:
        print(f, e.strerror)
`

// TestProgramsCannotStopSandboxd: a program cannot stop (SIGSTOP), kill or trace the
// sandboxd of its sandbox, nor read it: sandboxd runs as root with a few capabilities and
// starts programs as docker.user. The sandbox stays usable, and the programs own the
// workspace.
func TestProgramsCannotStopSandboxd(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	sh(t, sb, "echo mine > mine.txt")
	_, err := sb.WriteFile(t.Context(), "up/loaded.txt", strings.NewReader("x"), -1)
	require.NoError(t, err)
	out := sh(t, sb, "id -u; stat -c %u /workspace mine.txt up up/loaded.txt")
	assert.Equal(t, "65532\n65532\n65532\n65532\n65532\n", out, "programs run as docker's default program user and own what they and uploads made")
	// Their pipes are theirs, also opened again by name.
	r := run(t, sb, providers.ExecSpec{Command: "cat /dev/stdin > /dev/stdout; echo err > /dev/stderr", Stdin: strings.NewReader("in\n")})
	require.NoError(t, r.err)
	assert.Equal(t, "in\n", r.stdout, r.stderr)
	assert.Equal(t, "err\n", r.stderr)

	for i := range 2 { // from a plain execution, then from a context
		spec := providers.ExecSpec{Code: attackSandboxd, Language: "python"}
		if i == 1 {
			spec.Context = providers.DefaultContext
		}
		r = run(t, sb, spec)
		require.NoError(t, r.err)
		require.Equal(t, 0, r.st.ExitCode, "stderr %s", r.stderr)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 8, r.stdout)
		assert.Regexp(t, `^uid 65532 sandboxd \d+ as 0$`, lines[0])
		assert.Equal(t, []string{
			"SIGSTOP Operation not permitted", "SIGKILL Operation not permitted", "SIGTERM Operation not permitted",
			"PTRACE_ATTACH Operation not permitted", "PTRACE_SEIZE Operation not permitted",
			"environ Permission denied", "mem Permission denied",
		}, lines[1:])
	}
	// sandboxd was neither stopped nor ended: it answers, and its process is not stopped.
	assert.Equal(t, "still here\n", sh(t, sb, "echo still here"))
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, "running", ins.State.Status)
	if state, ok := sandboxdState(ins.State.Pid); ok {
		assert.NotEqual(t, "T", state, "sandboxd's process is stopped")
	}
}

// sandboxdState returns the state letter (/proc/<pid>/stat) of the sandboxd under the
// container's init initPID, when the engine's processes are visible here.
func sandboxdState(initPID int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", initPID, initPID))
	if err != nil {
		return "", false
	}
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		if fields := strings.Fields(rest); len(fields) > 0 {
			return fields[0], true
		}
	}
	return "", false
}

// TestNonRootSandboxdRunsProgramsAsItself: docker.sandboxd.user names a non-root user: it
// cannot switch users, so programs run as it (the profile is warned about at start).
func TestNonRootSandboxdRunsProgramsAsItself(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) { o.Config.Sandboxd.User = "7777:7777" })
	sb := create(t, p, allowPol)
	assert.Equal(t, "7777\n", sh(t, sb, "id -u"))
}
