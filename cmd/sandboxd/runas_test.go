package main_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// programUID is the user the --run-as tests run programs as.
const programUID = 65532

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and the --run-as tests need root (to switch users)")
		}
		t.Skip("the --run-as tests need root (to switch users)")
	}
}

// TestRunAsProtectsSandboxd: with --run-as, programs run as that user and can neither stop,
// kill, trace nor read sandboxd; the workspace, the files sandboxd writes there and the state
// of bash contexts are theirs.
func TestRunAsProtectsSandboxd(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	// Programs must reach their workspace and interpreters: a folder under a world-searchable
	// one, and the system's PATH (not one under root's home).
	ws, err := os.MkdirTemp("", "sbd-ws")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(ws) })
	d := startIn(t, ws, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDBOXD_TOKEN=" + token}, "--run-as", strconv.Itoa(programUID))
	c := d.client(t, token)
	pid := d.cmd.Process.Pid
	run := func(req sandboxd.ExecRequest) (sandboxd.Result, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		res, err := c.Exec(t.Context(), req, sandboxd.Streams{Stdout: &out, Stderr: &errOut})
		require.NoError(t, err)
		return res, out.String(), errOut.String()
	}

	_, out, _ := run(sandboxd.ExecRequest{Command: "id -u; id -g; id -G"})
	assert.Equal(t, "65532\n65532\n65532\n", out, "programs run as the --run-as user, without root's groups")
	_, out, _ = run(sandboxd.ExecRequest{Code: "import os\nprint(os.getuid(), os.geteuid())", Language: "python", Context: "py"})
	assert.Equal(t, "65532 65532\n", out, "and so do contexts")
	// Their pipes are theirs: opened again by name, as shells and scripts do.
	res, out, stderr := run(sandboxd.ExecRequest{Command: "cat /dev/stdin > /dev/stdout; echo err > /dev/stderr", Stdin: []byte("in\n")})
	assert.Equal(t, 0, res.ExitCode, stderr)
	assert.Equal(t, "in\n", out)
	assert.Equal(t, "err\n", stderr)
	res, out, stderr = run(sandboxd.ExecRequest{Language: "python", Context: "py", Code: "print(open('/dev/stdin').read().strip(), file=open('/dev/stdout', 'w'))", Stdin: []byte("cell\n")})
	assert.Equal(t, 0, res.ExitCode, stderr)
	assert.Equal(t, "cell\n", out)
	long := "echo " + strings.Repeat("x", 70<<10) + " | wc -c"
	res, out, stderr = run(sandboxd.ExecRequest{Command: long})
	assert.Equal(t, 0, res.ExitCode, "program text over 64 KiB goes through /dev/fd/3: %s", stderr)
	assert.Equal(t, "71681\n", strings.TrimLeft(out, " "))

	for _, sig := range []string{"STOP", "KILL", "TERM"} {
		res, _, stderr := run(sandboxd.ExecRequest{Command: "kill -" + sig + " " + strconv.Itoa(pid)})
		assert.NotEqual(t, 0, res.ExitCode, "kill -%s of sandboxd succeeded", sig)
		assert.Contains(t, strings.ToLower(stderr), "not permitted", sig)
	}
	// ptrace(PTRACE_ATTACH) and PTRACE_SEIZE are refused; sandboxd's memory and environment
	// cannot be read.
	res, out, stderr = run(sandboxd.ExecRequest{Language: "python", Code: `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for req in (16, 0x4206):
    r = libc.ptrace(req, ` + strconv.Itoa(pid) + `, None, None)
    print(r, os.strerror(ctypes.get_errno()))
for f in ("environ", "mem"):
    try:
        open("/proc/` + strconv.Itoa(pid) + `/" + f, "rb").read(1)
        print(f, "readable")
    except OSError as e:
        print(f, e.strerror)
`})
	require.Equal(t, 0, res.ExitCode, stderr)
	assert.Equal(t, "-1 Operation not permitted\n-1 Operation not permitted\nenviron Permission denied\nmem Permission denied\n", out)
	require.NoError(t, c.Ready(t.Context()), "sandboxd still answers")
	var st syscall.WaitStatus
	wpid, _ := syscall.Wait4(pid, &st, syscall.WNOHANG|syscall.WUNTRACED, nil)
	assert.Zero(t, wpid, "sandboxd was neither stopped nor ended")

	// The workspace and what sandboxd writes in it belong to the programs' user.
	owner := func(p string) uint32 {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(d.workspace, p))
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	assert.Equal(t, uint32(programUID), owner("."))
	_, err = c.WriteFile(t.Context(), "a/b/up.txt", strings.NewReader("uploaded"), -1)
	require.NoError(t, err)
	for _, p := range []string{"a", "a/b", "a/b/up.txt"} {
		assert.Equal(t, uint32(programUID), owner(p), p)
	}
	res, _, stderr = run(sandboxd.ExecRequest{Command: "echo more >> a/b/up.txt && mkdir a/b/c && mv a/b/up.txt a/b/c/"})
	assert.Equal(t, 0, res.ExitCode, "programs change what sandboxd wrote: %s", stderr)
	rd, err := c.ReadFile(t.Context(), "a/b/c/up.txt")
	require.NoError(t, err)
	data, _ := io.ReadAll(rd)
	_ = rd.Close()
	assert.Equal(t, "uploadedmore\n", string(data), "and sandboxd reads what they wrote")
	res, _, _ = run(sandboxd.ExecRequest{Command: "echo secret > private && chmod 000 private"})
	require.Equal(t, 0, res.ExitCode)
	rd, err = c.ReadFile(t.Context(), "private")
	require.NoError(t, err, "sandboxd reads a file its owner closed to everyone")
	_ = rd.Close()

	// A bash context keeps its state in a folder of the programs' user; a symlink a program
	// puts in its place of the code file is not written through.
	sh := func(code string) string {
		t.Helper()
		res, out, stderr := run(sandboxd.ExecRequest{Language: "bash", Context: "sh", Code: code})
		require.Equal(t, 0, res.ExitCode, stderr)
		return out
	}
	sh("export KEPT=yes; cd a")
	assert.Equal(t, "yes "+filepath.Join(d.workspaceReal(t), "a")+"\n", sh(`echo "$KEPT $PWD"`))
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("untouched"), 0o644))
	sh(`d=$(dirname "$BASH_SOURCE"); ln -sf ` + victim + ` "$d/code.next"; rm -f "$d/code"; ln -s ` + victim + ` "$d/code"`)
	assert.Equal(t, "yes\n", sh(`echo "$KEPT"`))
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "untouched", string(got))
}

// workspaceReal is the daemon's workspace with symlinks resolved.
func (d *daemon) workspaceReal(t *testing.T) string {
	real, err := filepath.EvalSymlinks(d.workspace)
	require.NoError(t, err)
	return real
}

// TestRunAsRefusesWithoutCapabilities: a sandboxd that cannot switch users refuses to start
// rather than run programs as itself.
func TestRunAsRefusesWithoutCapabilities(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	dir, err := os.MkdirTemp("", "sbd-nocap")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	bin := filepath.Join(dir, "sandboxd")
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	cmd := exec.Command(bin, "serve", "--socket", filepath.Join(dir, "s.sock"), "--workspace", dir, "--run-as", "65532")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SANDBOXD_TOKEN=" + token}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	assert.Equal(t, 2, exitStatus(err), "%s", out)
	assert.Contains(t, string(out), "CAP_SETUID")

	cmd = exec.Command(binary, "serve", "--socket", filepath.Join(dir, "s2.sock"), "--workspace", dir, "--run-as", "no-such-user")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SANDBOXD_TOKEN=" + token}
	out, err = cmd.CombinedOutput()
	assert.Equal(t, 2, exitStatus(err), "%s", out)
	assert.Contains(t, string(out), `no user "no-such-user"`)
}
