//go:build unix

package sandboxd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	testGrace = 300 * time.Millisecond
	// slow bounds "promptly": far above what any of these takes, far below what a hang takes.
	slow = 15 * time.Second
)

type testBundle struct {
	rt        *sandboxd.Runtime
	workspace string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: testGrace, DrainDelay: testGrace})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	real, err := filepath.EvalSymlinks(ws)
	require.NoError(t, err)
	return &testBundle{rt: rt, workspace: real}
}

type outcome struct {
	res    sandboxd.Result
	stdout string
	stderr string
	err    error
}

func (b *testBundle) exec(t *testing.T, req sandboxd.ExecRequest) outcome {
	t.Helper()
	return execCtx(t.Context(), b.rt, req)
}

func execCtx(ctx context.Context, rt *sandboxd.Runtime, req sandboxd.ExecRequest) outcome {
	var out, errOut bytes.Buffer
	res, err := rt.Exec(ctx, req, sandboxd.Streams{Stdout: &out, Stderr: &errOut})
	return outcome{res: res, stdout: out.String(), stderr: errOut.String(), err: err}
}

// ok runs req and requires it to succeed with exit code 0; it returns stdout.
func (b *testBundle) ok(t *testing.T, req sandboxd.ExecRequest) string {
	t.Helper()
	o := b.exec(t, req)
	require.NoError(t, o.err)
	require.Equal(t, 0, o.res.ExitCode, "stdout %q, stderr %q", o.stdout, o.stderr)
	return o.stdout
}

func py(ctxName, code string) sandboxd.ExecRequest {
	return sandboxd.ExecRequest{Context: ctxName, Language: "python", Code: code, Timeout: time.Minute}
}

func sh(ctxName, code string) sandboxd.ExecRequest {
	return sandboxd.ExecRequest{Context: ctxName, Language: "bash", Code: code, Timeout: time.Minute}
}

func requireKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, fault.IsKind(err, k), "want %s, got %s: %v", k, fault.KindOf(err), err)
}

func TestNewRefusesBadWorkspaces(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, ws := range []string{"", "relative", "/", file, filepath.Join(t.TempDir(), "missing")} {
		_, err := sandboxd.New(sandboxd.Options{Workspace: ws})
		requireKind(t, err, fault.Validation)
	}
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, req := range map[string]sandboxd.ExecRequest{
		"nothing":             {},
		"command and code":    {Command: "true", Code: "pass", Language: "python"},
		"command and argv":    {Command: "true", Argv: []string{"true"}},
		"code without lang":   {Code: "pass"},
		"lang with command":   {Command: "true", Language: "bash"},
		"unknown language":    {Code: "1", Language: "ruby"},
		"NUL in command":      {Command: "echo a\x00b"},
		"NUL in argv":         {Argv: []string{"echo", "a\x00"}},
		"NUL in env":          {Command: "true", Env: map[string]string{"A": "x\x00"}},
		"bad env name":        {Command: "true", Env: map[string]string{"1A": "x"}},
		"env name with dash":  {Command: "true", Env: map[string]string{"A-B": "x"}},
		"empty argv0":         {Argv: []string{""}},
		"negative timeout":    {Command: "true", Timeout: -time.Second},
		"negative max output": {Command: "true", MaxOutput: -1},
		"context for command": {Command: "true", Context: "c"},
		"bad context name":    {Code: "1", Language: "python", Context: "a/b"},
		"context name dot":    {Code: "1", Language: "python", Context: "."},
		"context name dotdot": {Code: "1", Language: "python", Context: ".."},
		"long context name":   {Code: "1", Language: "python", Context: strings.Repeat("a", 65)},
		"NUL in dir":          {Command: "true", Dir: "a\x00"},
	} {
		_, err := b.rt.Exec(t.Context(), req, sandboxd.Streams{})
		requireKind(t, err, fault.Validation)
		_ = name
	}
}

func TestPlainExecution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.Mkdir(filepath.Join(b.workspace, "sub"), 0o755))
	tests := []struct {
		name     string
		req      sandboxd.ExecRequest
		stdout   string
		stderr   string
		exitCode int
		signal   string
	}{
		{name: "command", req: sandboxd.ExecRequest{Command: "echo hi; echo err >&2; exit 3"}, stdout: "hi\n", stderr: "err\n", exitCode: 3},
		{name: "python code", req: sandboxd.ExecRequest{Code: "import sys; print(sys.argv[0])", Language: "python"}, stdout: "-c\n"},
		{name: "bash code", req: sandboxd.ExecRequest{Code: `echo "${BASH_VERSION%%.*}" | grep -q . && echo bash`, Language: "bash"}, stdout: "bash\n"},
		{name: "argv is not a shell string", req: sandboxd.ExecRequest{Argv: []string{"echo", "$HOME;", "`id`"}}, stdout: "$HOME; `id`\n"},
		{name: "stdin", req: sandboxd.ExecRequest{Command: "cat; echo", Stdin: []byte("in put")}, stdout: "in put\n"},
		{name: "empty stdin", req: sandboxd.ExecRequest{Command: "cat; echo end"}, stdout: "end\n"},
		{name: "env added and overriding", req: sandboxd.ExecRequest{Command: `echo "$FOO $LANG"`, Env: map[string]string{"FOO": "a b", "LANG": "C"}}, stdout: "a b C\n"},
		{name: "minimal base env", req: sandboxd.ExecRequest{Command: `echo "$PYTHONUNBUFFERED $LANG"`}, stdout: "1 C.UTF-8\n"},
		{name: "working folder", req: sandboxd.ExecRequest{Command: "pwd -P; echo $PWD", Dir: "sub/"}, stdout: b.workspace + "/sub\n" + b.workspace + "/sub\n"},
		{name: "default folder", req: sandboxd.ExecRequest{Command: "pwd -P"}, stdout: b.workspace + "\n"},
		{name: "killed by a signal", req: sandboxd.ExecRequest{Command: "kill -9 $$"}, exitCode: 137, signal: "SIGKILL"},
		{name: "missing program", req: sandboxd.ExecRequest{Argv: []string{"no-such-program-sandboxd"}}, stderr: "sandboxd: no-such-program-sandboxd: command not found\n", exitCode: 127},
		{name: "own session", req: sandboxd.ExecRequest{Code: "import os; print(os.getsid(0) == os.getpid())", Language: "python"}, stdout: "True\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := b.exec(t, tt.req)
			require.NoError(t, o.err)
			assert.Equal(t, tt.stdout, o.stdout)
			assert.Equal(t, tt.stderr, o.stderr)
			assert.Equal(t, tt.exitCode, o.res.ExitCode)
			assert.Equal(t, tt.signal, o.res.Signal)
			assert.False(t, o.res.TimedOut)
			assert.False(t, o.res.Truncated)
		})
	}
}

func TestSandboxdSecretsStayOut(t *testing.T) {
	t.Setenv("SANDBOXD_SECRET_PROBE", "leak")
	b := setup(t)
	out := b.ok(t, sandboxd.ExecRequest{Command: "env"})
	assert.NotContains(t, out, "SANDBOXD_SECRET_PROBE", "programs get the base environment, not sandboxd's")
}

func TestTimeoutKillsTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Now()
	o := b.exec(t, sandboxd.ExecRequest{Command: "echo before; sleep 30 & sleep 30", Timeout: 300 * time.Millisecond})
	require.NoError(t, o.err)
	assert.True(t, o.res.TimedOut)
	assert.Equal(t, "before\n", o.stdout, "output written before the timeout is kept")
	assert.Less(t, time.Since(start), slow)
}

func TestCancellationKillsTheProgram(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	o := execCtx(ctx, b.rt, sandboxd.ExecRequest{Command: "echo $$ > pid; sleep 30"})
	require.ErrorIs(t, o.err, context.Canceled)
	requireGone(t, b.workspace)
}

// requireGone reads the pid a program wrote into file "pid" of the workspace and requires
// that process to be gone.
func requireGone(t *testing.T, workspace string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(workspace, "pid"))
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(strings.TrimSpace(string(data)), &pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !processAlive(pid) }, slow, 20*time.Millisecond, "process %d still runs", pid)
}

func TestBackgroundChildrenDoNotHoldTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Now()
	o := b.exec(t, sandboxd.ExecRequest{Command: "sleep 100 & echo $! > pid; echo started"})
	require.NoError(t, o.err)
	assert.Equal(t, "started\n", o.stdout)
	assert.Less(t, time.Since(start), slow)
	requireGone(t, b.workspace)
}

func TestEscapedProcessIsReadForDrainDelayOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Now()
	o := b.exec(t, sandboxd.ExecRequest{Command: "setsid sh -c 'echo $$ > pid; sleep 5' & sleep 0.2; echo done"})
	require.NoError(t, o.err)
	assert.Equal(t, "done\n", o.stdout)
	assert.Less(t, time.Since(start), 4*time.Second, "the escaped sleep holds stdout for 5s")
	t.Cleanup(func() {
		if data, err := os.ReadFile(filepath.Join(b.workspace, "pid")); err == nil {
			var pid int
			if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &pid); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// recorder records writes to two streams in order.
type recorder struct {
	mu     sync.Mutex
	events []string
	first  chan struct{}
	once   sync.Once
}

func (r *recorder) stream(name string) *streamWriter { return &streamWriter{r: r, name: name} }

type streamWriter struct {
	r    *recorder
	name string
}

func (w *streamWriter) Write(p []byte) (int, error) {
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

func TestOutputIsStreamedInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, req := range map[string]sandboxd.ExecRequest{
		"plain":          {Command: "echo a; sleep 1; echo b >&2; sleep 1; echo c"},
		"python context": py("streaming", "import sys, time\nprint('a')\ntime.sleep(1)\nprint('b', file=sys.stderr)\ntime.sleep(1)\nprint('c')"),
		"bash context":   sh("streaming-bash", "echo a; sleep 1; echo b >&2; sleep 1; echo c"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{first: make(chan struct{})}
			done := make(chan struct{})
			var res sandboxd.Result
			var err error
			go func() {
				defer close(done)
				res, err = b.rt.Exec(t.Context(), req, sandboxd.Streams{Stdout: rec.stream("out"), Stderr: rec.stream("err")})
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
			require.Equal(t, 0, res.ExitCode)
			assert.Equal(t, []string{"out:a\n", "err:b\n", "out:c\n"}, rec.events)
		})
	}
}

func TestOutputIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, req := range map[string]sandboxd.ExecRequest{
		"plain":  {Command: "head -c 300000 /dev/zero; echo tail >&2"},
		"python": py("capped", "import sys; sys.stdout.write('x' * 300000); print('tail', file=sys.stderr)"),
	} {
		req.MaxOutput = 1000
		o := b.exec(t, req)
		require.NoError(t, o.err, name)
		assert.Equal(t, 0, o.res.ExitCode, name)
		assert.Len(t, o.stdout, 1000, name)
		assert.Equal(t, "tail\n", o.stderr, name)
		assert.True(t, o.res.Truncated, name)
	}
}

func TestWorkingFolderIsConfined(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(b.workspace, "out")))
	require.NoError(t, os.WriteFile(filepath.Join(b.workspace, "file"), nil, 0o600))
	for dir, kind := range map[string]fault.Kind{
		"..":      fault.Policy,
		"../x":    fault.Policy,
		"/tmp":    fault.Policy,
		"out":     fault.Policy,
		"missing": fault.NotFound,
		"file":    fault.Validation,
	} {
		for _, req := range []sandboxd.ExecRequest{{Command: "pwd", Dir: dir}, {Code: "1", Language: "python", Context: "confined", Dir: dir}} {
			_, err := b.rt.Exec(t.Context(), req, sandboxd.Streams{})
			requireKind(t, err, kind)
		}
	}
}

func TestLongProgramTextGoesThroughFD3(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pad := strings.Repeat("#", 200<<10) + "\n"
	for name, req := range map[string]sandboxd.ExecRequest{
		"command": {Command: pad + "echo $0"},
		"bash":    {Code: pad + "echo bash", Language: "bash"},
		"python":  {Code: pad + "import sys; print(sys.argv[0])", Language: "python"},
		"context": py("long", pad+"print('context')"),
		// Several MiB of code reach a python context whole.
		"context, MiBs": py("long", "s = '"+strings.Repeat("y", 4<<20)+"'\nprint(len(s))"),
	} {
		out := b.ok(t, req)
		assert.Contains(t, []string{"/dev/fd/3\n", "bash\n", "-c\n", "context\n", "4194304\n"}, out, name)
	}
}

func TestPythonContextKeepsState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("p", "x = 41\ndef inc(v):\n    return v + 1"))
	assert.Equal(t, "42 __main__\n", b.ok(t, py("p", "print(inc(x), __name__)")))

	before := b.rt.ListContexts()[0].CreatedAt
	info, err := b.rt.RestartContext("p")
	require.NoError(t, err)
	assert.True(t, info.Alive)
	assert.Equal(t, 0, info.Executions)
	assert.True(t, info.CreatedAt.After(before), "a restart dates the context anew")

	o := b.exec(t, py("p", "print(x)"))
	require.NoError(t, o.err)
	assert.Equal(t, 1, o.res.ExitCode)
	require.NotNil(t, o.res.Error)
	assert.Equal(t, "NameError", o.res.Error.Name)
	assert.Contains(t, o.res.Error.Value, "'x' is not defined")
	assert.Contains(t, o.stderr, "Traceback (most recent call last):")
	// The first cell after a restart is cell 1 of the new interpreter; its line is quoted.
	assert.Contains(t, o.stderr, `File "<cell 1>", line 1, in <module>`)
	assert.Contains(t, o.stderr, "    print(x)\n")
	assert.Contains(t, o.stderr, "NameError: name 'x' is not defined")
	assert.NotContains(t, o.stderr, "run_cell", "driver frames are left out")
	assert.Equal(t, o.stderr, o.res.Error.Traceback)
	assert.False(t, o.res.ContextLost)
}

// TestPythonContextTracebacksQuoteEarlierCells: a function defined in one cell and failing in
// a later one shows the failing line of the earlier cell, as a notebook would.
func TestPythonContextTracebacksQuoteEarlierCells(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("p", "def half(v):\n    return v / 0"))
	o := b.exec(t, py("p", "half(4)"))
	require.NoError(t, o.err)
	assert.Equal(t, 1, o.res.ExitCode)
	assert.Contains(t, o.stderr, `File "<cell 2>", line 1, in <module>`)
	assert.Contains(t, o.stderr, `File "<cell 1>", line 2, in half`)
	assert.Contains(t, o.stderr, "return v / 0")
	assert.Equal(t, "ZeroDivisionError", o.res.Error.Name)
}

func TestPythonContextSurvivesBuiltinRebinding(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("rebind", "open = len = exec = compile = print = None\nclass Exception: pass"))
	o := b.exec(t, py("rebind", "del open, len, exec, compile, print, Exception\nprint('still here')"))
	require.NoError(t, o.err)
	assert.Equal(t, "still here\n", o.stdout, o.stderr)
}

func TestPythonContextSystemExit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("exit", "kept = 'yes'"))
	for code, want := range map[string]int{
		"raise SystemExit(4)":    4,
		"import sys; sys.exit()": 0,
		"exit('bye')":            1,
	} {
		o := b.exec(t, py("exit", code))
		require.NoError(t, o.err)
		assert.Equal(t, want, o.res.ExitCode, code)
		assert.False(t, o.res.ContextLost)
		assert.Nil(t, o.res.Error)
	}
	assert.Equal(t, "yes\n", b.ok(t, py("exit", "print(kept)")))
}

func TestPythonContextCrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("crash", "x = 1"))
	for code, want := range map[string]struct {
		exit   int
		signal string
		why    string
	}{
		"import os; print('bye', flush=True); os._exit(3)":        {3, "", "exit status 3"},
		"import os, signal; os.kill(os.getpid(), signal.SIGKILL)": {137, "SIGKILL", "killed by SIGKILL"},
	} {
		o := b.exec(t, py("crash", code))
		require.NoError(t, o.err)
		assert.Equal(t, want.exit, o.res.ExitCode, code)
		assert.Equal(t, want.signal, o.res.Signal, code)
		assert.True(t, o.res.ContextLost, code)
		assert.Contains(t, o.stderr, "sandboxd: the python context 'crash' ended ("+want.why+"); its state is lost and the next execution starts a fresh one\n")
		infos := b.rt.ListContexts()
		require.Len(t, infos, 1)
		assert.False(t, infos[0].Alive)

		// The next execution runs in a fresh interpreter.
		o = b.exec(t, py("crash", "print('x' in globals())\nx = 1"))
		require.NoError(t, o.err)
		assert.Equal(t, "False\n", o.stdout, o.stderr)
		assert.False(t, o.res.ContextLost)
		infos = b.rt.ListContexts()
		assert.True(t, infos[0].Alive)
		assert.Equal(t, 1, infos[0].Executions, "executions count from the fresh start")
	}
}

func TestPythonContextTimeouts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("slow", "kept = 7"))
	for _, code := range []string{"while True: pass", "import time; time.sleep(60)", "import subprocess; subprocess.run(['sleep', '60'])"} {
		start := time.Now()
		req := py("slow", code)
		req.Timeout = 300 * time.Millisecond
		o := b.exec(t, req)
		require.NoError(t, o.err)
		assert.True(t, o.res.TimedOut, code)
		assert.False(t, o.res.ContextLost, "KeyboardInterrupt keeps the context: %s", code)
		require.NotNil(t, o.res.Error, code)
		assert.Equal(t, "KeyboardInterrupt", o.res.Error.Name)
		assert.Less(t, time.Since(start), slow)
		assert.Equal(t, "7\n", b.ok(t, py("slow", "print(kept)")), code)
	}

	// Code that swallows the interrupt is killed with its context.
	req := py("slow", "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass")
	req.Timeout = 300 * time.Millisecond
	o := b.exec(t, req)
	require.NoError(t, o.err)
	assert.True(t, o.res.TimedOut)
	assert.True(t, o.res.ContextLost)
	assert.Equal(t, "SIGKILL", o.res.Signal)
	assert.Contains(t, o.stderr, "sandboxd: the python context 'slow' ended (killed: it did not stop")
	assert.Equal(t, "False\n", b.ok(t, py("slow", "print('kept' in globals())")))
}

func TestPythonContextCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, py("cancel", "kept = 1"))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	o := execCtx(ctx, b.rt, py("cancel", "import time; time.sleep(60)"))
	require.ErrorIs(t, o.err, context.Canceled)
	assert.Equal(t, "1\n", b.ok(t, py("cancel", "print(kept)")))
}

func TestPythonContextIO(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.Mkdir(filepath.Join(b.workspace, "sub"), 0o755))
	req := py("io", "import sys, os\nprint(sys.stdin.read().upper(), os.environ['ONLY_NOW'], os.getcwd())")
	req.Stdin = []byte("abc")
	req.Env = map[string]string{"ONLY_NOW": "v"}
	req.Dir = "sub"
	assert.Equal(t, "ABC v "+b.workspace+"/sub\n", b.ok(t, req))
	assert.Equal(t, "None  "+b.workspace+"/sub\n", b.ok(t, py("io", "import os, sys\nprint(os.environ.get('ONLY_NOW'), sys.stdin.read(), os.getcwd())")),
		"env applies to one execution, stdin is empty, the folder stays")
	assert.Equal(t, "1\n", b.ok(t, py("io", "import subprocess; subprocess.run(['sh', '-c', 'echo 1'])")), "children write to the same pipes")
}

// cellChildren is a cell that starts processes every way notebook code does — a child, one
// in a session of its own, one a shell leaves behind (os.system with &) — and, with daemon,
// a double-forked daemon in a session of its own whose parent is gone; it prints their pids
// and the interpreter's.
func cellChildren(daemon bool) string {
	code := `import os, subprocess, time
kept = "state"
p = subprocess.Popen(["sleep", "100"])
q = subprocess.Popen(["sleep", "100"], start_new_session=True)
os.system("sleep 100 & echo $! > shell.pid")
pids = [p.pid, q.pid, int(open("shell.pid").read())]
`
	if daemon {
		code += `r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, b"%d\n" % os.getpid())
        time.sleep(100)
    os._exit(0)
os.wait()
pids.append(int(os.read(r, 64)))
`
	}
	return code + "print(os.getpid(), *pids)\n"
}

// requireCellChildrenGone runs cellChildren in context name and requires that every process
// it started is gone once the cell returned, and that the interpreter and its state are not.
func requireCellChildrenGone(t *testing.T, b *testBundle, name string, daemon bool) {
	t.Helper()
	start := time.Now()
	out := b.ok(t, py(name, cellChildren(daemon)))
	assert.Less(t, time.Since(start), slow)
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err, "stdout %q", out)
		pids = append(pids, pid)
	}
	require.NotEmpty(t, pids)
	for _, pid := range pids[1:] {
		require.Eventually(t, func() bool { return !processAlive(pid) }, slow, 20*time.Millisecond, "process %d started by the cell still runs", pid)
	}
	assert.Equal(t, fmt.Sprintf("state %d -9\n", pids[0]), b.ok(t, py(name, "print(kept, os.getpid(), p.wait())")), "the interpreter and its state live on; the cell's child was killed")
}

// TestPythonContextCellChildrenEndWithTheCell: what a cell starts ends with it; the
// interpreter runs on.
func TestPythonContextCellChildrenEndWithTheCell(t *testing.T) {
	t.Parallel()
	b := setup(t)
	requireCellChildrenGone(t, b, "bg", false)
	requireCellChildrenGone(t, b, "bg", false)
}

// TestPythonContextCellChildrenEndWithTheCellInACgroup: with a cgroup per context, a daemon
// that double-forked into a session of its own ends with the cell too.
func TestPythonContextCellChildrenEndWithTheCellInACgroup(t *testing.T) {
	t.Parallel()
	cg, err := procgroup.DetectCgroups("sandboxd-test")
	if err != nil {
		t.Skipf("no cgroups for this test: %v", err)
	}
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: testGrace, DrainDelay: testGrace, Cgroups: cg})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	b := &testBundle{rt: rt, workspace: ws}
	requireCellChildrenGone(t, b, "bg", true)
	requireCellChildrenGone(t, b, "bg", true)
}

func TestBashContextKeepsFolderAndExports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ok(t, sh("b", "mkdir -p d/e && cd d/e && export X=1 && Y=2 && export Z='a b'\"'\"' c'"))
	assert.Equal(t, b.workspace+"/d/e|1||a b' c\n", b.ok(t, sh("b", `echo "$(pwd -P)|$X|$Y|$Z"`)))

	o := b.exec(t, sh("b", "export X=3; cd ..; exit 4"))
	require.NoError(t, o.err)
	assert.Equal(t, 4, o.res.ExitCode)
	assert.Equal(t, b.workspace+"/d|3\n", b.ok(t, sh("b", `echo "$(pwd -P)|$X"`)), "exit N still saves the state")

	b.ok(t, sh("b", "unset HOME"))
	assert.Equal(t, "unset\n", b.ok(t, sh("b", `echo "${HOME-unset}"`)), "an unset variable stays unset")

	req := sh("b", `echo "$X $ONCE"; export KEEP=$ONCE`)
	req.Env = map[string]string{"X": "override", "ONCE": "o"}
	assert.Equal(t, "override o\n", b.ok(t, req))
	assert.Equal(t, "3 unset o\n", b.ok(t, sh("b", `echo "$X ${ONCE-unset} $KEEP"`)), "env applies to one execution only")

	req = sh("b", "pwd -P")
	req.Dir = "d/e"
	assert.Equal(t, b.workspace+"/d/e\n", b.ok(t, req), "Dir overrides the saved folder")

	info, err := b.rt.RestartContext("b")
	require.NoError(t, err)
	assert.Equal(t, "bash", info.Language)
	assert.Equal(t, b.workspace+"|unset\n", b.ok(t, sh("b", `echo "$(pwd -P)|${X-unset}"`)), "restart forgets the state")
}

// TestPythonContextEnvAppliesPerCall: a call's Env reaches the interpreter as far as it can
// take it — os.environ, the time zone, the LC_CTYPE locale — for that call only; a variable
// the code changed keeps the code's value.
func TestPythonContextEnvAppliesPerCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	probe := py("p", "import os, time, locale, datetime\n"+
		"print(os.environ.get('TZ', '-'), os.environ.get('ONCE', '-'), time.strftime('%Z %H', time.localtime(0)),\n"+
		"      datetime.datetime.fromtimestamp(0).hour, time.timezone, locale.setlocale(locale.LC_CTYPE))")
	before := b.ok(t, probe)

	// TZ in POSIX form: no zone database needed.
	req := probe
	req.Env = map[string]string{"TZ": "ABC-3", "ONCE": "yes"}
	assert.Regexp(t, `^ABC-3 yes ABC 03 3 -10800 `, b.ok(t, req), "the time zone follows TZ")
	assert.Equal(t, before, b.ok(t, probe), "the next call has the previous environment and time zone")

	// The code's own change of a variable the call set stays, as in a bash context.
	req = py("p", "import os, time\nos.environ['TZ'] = 'XYZ+2'\ndel os.environ['ONCE']\ntime.tzset()")
	req.Env = map[string]string{"TZ": "ABC-3", "ONCE": "yes", "OTHER": "o"}
	b.ok(t, req)
	assert.Regexp(t, `^XYZ\+2 - XYZ 22 22 7200 `, b.ok(t, probe), "the code's TZ stays, its removal too")
	assert.Equal(t, "-\n", b.ok(t, py("p", "import os\nprint(os.environ.get('OTHER', '-'))")), "the call's own variable is gone")
	b.ok(t, py("p", "import os, time\ndel os.environ['TZ']\ntime.tzset()"))
	assert.Equal(t, before, b.ok(t, probe))

	// The locale variables set LC_CTYPE as at an interpreter's start: as a plain execution
	// with the same variables sees it.
	python, err := exec.LookPath("python3")
	require.NoError(t, err)
	for _, lc := range []map[string]string{{"LC_ALL": "C.utf8"}, {"LANG": "C.utf8", "LC_CTYPE": "C.UTF-8"}} {
		plain := b.ok(t, sandboxd.ExecRequest{Argv: []string{python, "-c", "import locale; print(locale.setlocale(locale.LC_CTYPE))"}, Env: lc})
		req = py("p", "import locale; print(locale.setlocale(locale.LC_CTYPE))")
		req.Env = lc
		assert.Equal(t, plain, b.ok(t, req), "LC_CTYPE with %v", lc)
		assert.Equal(t, before, b.ok(t, probe), "LC_CTYPE is restored after %v", lc)
	}
	// A C locale keeps the interpreter's UTF-8 one, as Python's start coerces it (PEP 538).
	req = py("p", "import locale; print(locale.getpreferredencoding(False))")
	req.Env = map[string]string{"LC_ALL": "C"}
	assert.Equal(t, "UTF-8\n", b.ok(t, req))
}

// TestBashContextEnvAppliesPerCall: bash applies a call's TZ to itself and the programs it
// starts, for that call only.
func TestBashContextEnvAppliesPerCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	probe := sh("b", `printf '%s %(%Z %H)T ' "${TZ--}" 0; date -d @0 +%Z`)
	before := b.ok(t, probe)
	req := probe
	req.Env = map[string]string{"TZ": "ABC-3"}
	assert.Equal(t, "ABC-3 ABC 03 ABC\n", b.ok(t, req))
	assert.Equal(t, before, b.ok(t, probe), "the next call has the previous time zone")
}

func TestContextsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := time.Now().Add(-time.Second)
	info, err := b.rt.CreateContext("zeta", "python")
	require.NoError(t, err)
	assert.Equal(t, sandboxd.ContextInfo{Name: "zeta", Language: "python", CreatedAt: info.CreatedAt, Alive: true}, info)
	assert.True(t, info.CreatedAt.After(before))
	_, err = b.rt.CreateContext("alpha", "bash")
	require.NoError(t, err)

	_, err = b.rt.CreateContext("zeta", "python")
	requireKind(t, err, fault.Conflict)
	_, err = b.rt.CreateContext("bad name", "python")
	requireKind(t, err, fault.Validation)
	_, err = b.rt.CreateContext("c", "ruby")
	requireKind(t, err, fault.Validation)
	_, err = b.rt.Exec(t.Context(), sh("zeta", "echo"), sandboxd.Streams{})
	requireKind(t, err, fault.Validation)

	b.ok(t, py("zeta", "pass"))
	b.ok(t, py("auto", "pass")) // created on first use
	list := b.rt.ListContexts()
	require.Len(t, list, 3)
	assert.Equal(t, []string{"alpha", "auto", "zeta"}, []string{list[0].Name, list[1].Name, list[2].Name})
	assert.Equal(t, 1, list[2].Executions)
	assert.Equal(t, "python", list[1].Language)

	require.NoError(t, b.rt.DeleteContext("zeta"))
	requireKind(t, b.rt.DeleteContext("zeta"), fault.NotFound)
	_, err = b.rt.RestartContext("zeta")
	requireKind(t, err, fault.NotFound)
	assert.Len(t, b.rt.ListContexts(), 2)
}

func TestDeleteEndsARunningExecution(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, req := range []sandboxd.ExecRequest{py("del-py", "import time; time.sleep(60)"), sh("del-sh", "sleep 60")} {
		_, err := b.rt.CreateContext(req.Context, req.Language)
		require.NoError(t, err)
		time.AfterFunc(300*time.Millisecond, func() { _ = b.rt.DeleteContext(req.Context) })
		start := time.Now()
		o := b.exec(t, req)
		require.NoError(t, o.err)
		assert.True(t, o.res.ContextLost, req.Language)
		assert.Contains(t, o.stderr, "it was deleted")
		assert.Less(t, time.Since(start), slow)
	}
	assert.Empty(t, b.rt.ListContexts())
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: testGrace, DrainDelay: testGrace})
	require.NoError(t, err)
	_, err = rt.CreateContext("p", "python")
	require.NoError(t, err)

	errs := make(chan error, 2)
	for _, req := range []sandboxd.ExecRequest{{Command: "sleep 60"}, py("p", "import time; time.sleep(60)")} {
		go func() {
			_, err := rt.Exec(context.Background(), req, sandboxd.Streams{})
			errs <- err
		}()
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, rt.Close())
	require.NoError(t, rt.Close(), "idempotent")
	for range 2 {
		requireKind(t, <-errs, fault.Gone)
	}
	_, err = rt.Exec(t.Context(), sandboxd.ExecRequest{Command: "true"}, sandboxd.Streams{})
	requireKind(t, err, fault.Gone)
}

// TestFolders: folders made with their parents, entries moved as rename(2) moves them (the
// destination's parents made), folders removed with what they hold — all in the workspace
// only, a symlink moved or removed itself and never followed out.
func TestFolders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rt := b.rt
	isDir := func(p string) bool {
		st, err := os.Lstat(filepath.Join(b.workspace, p))
		return err == nil && st.IsDir()
	}
	exists := func(p string) bool {
		_, err := os.Lstat(filepath.Join(b.workspace, p))
		return err == nil
	}

	require.NoError(t, rt.MakeDir("x/y/z"))
	assert.True(t, isDir("x/y/z"))
	require.NoError(t, rt.MakeDir("x/y"), "a folder already there is fine")
	_, err := rt.WriteFile("x/f.txt", strings.NewReader("f"), -1)
	require.NoError(t, err)
	requireKind(t, rt.MakeDir("x/f.txt"), fault.Conflict)
	requireKind(t, rt.MakeDir("x/f.txt/sub"), fault.Conflict)
	requireKind(t, rt.MakeDir("."), fault.Validation)

	// Moves: a file into new parents, a folder with what it holds, over a file.
	require.NoError(t, rt.Move("x/f.txt", "p/q/g.txt"))
	assert.False(t, exists("x/f.txt"))
	data, err := os.ReadFile(filepath.Join(b.workspace, "p/q/g.txt"))
	require.NoError(t, err)
	assert.Equal(t, "f", string(data))
	require.NoError(t, rt.Move("x", "p/moved"))
	assert.True(t, isDir("p/moved/y/z"))
	_, err = rt.WriteFile("h.txt", strings.NewReader("h"), -1)
	require.NoError(t, err)
	require.NoError(t, rt.Move("h.txt", "p/q/g.txt"), "a file is replaced")
	data, _ = os.ReadFile(filepath.Join(b.workspace, "p/q/g.txt"))
	assert.Equal(t, "h", string(data))
	requireKind(t, rt.Move("missing", "m"), fault.NotFound)
	requireKind(t, rt.Move("p/moved", "p/q"), fault.Conflict) // a folder that is not empty
	requireKind(t, rt.Move("p/q/g.txt", "p/moved"), fault.Conflict)
	requireKind(t, rt.Move("p/moved", "p/moved/y/in"), fault.Validation)
	requireKind(t, rt.Move("p", "."), fault.Validation)
	requireKind(t, rt.Move("p/q/g.txt/x", "k"), fault.NotFound)

	// Outside the workspace: never reached, through a path or a symlink.
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(b.workspace, "out")))
	for _, p := range []string{"..", "../x", "/etc/x", "a/../../x", "out/x", "out/new/deeper"} {
		requireKind(t, rt.MakeDir(p), fault.Policy)
		requireKind(t, rt.Move("p/q/g.txt", p), fault.Policy)
		requireKind(t, rt.RemoveAll(p), fault.Policy)
	}
	requireKind(t, rt.Move("out/secret", "stolen"), fault.Policy)
	requireKind(t, rt.Move("a\x00", "b"), fault.Policy)
	require.NoError(t, rt.Move("out", "link"), "a symlink is moved itself")
	assert.FileExists(t, filepath.Join(outside, "secret"))

	// RemoveAll: a folder with what it holds; a symlink itself, never what it leads to.
	require.NoError(t, rt.RemoveAll("link"))
	assert.FileExists(t, filepath.Join(outside, "secret"))
	require.NoError(t, rt.RemoveAll("p"))
	assert.False(t, exists("p"))
	require.NoError(t, rt.RemoveAll("p"), "missing is fine")
	requireKind(t, rt.RemoveAll(""), fault.Validation)
	assert.True(t, isDir("."), "the workspace stays")
}

func TestFiles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rt := b.rt

	n, err := rt.WriteFile("a/b/c.txt", strings.NewReader("hello"), 5)
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)
	st, err := os.Stat(filepath.Join(b.workspace, "a/b/c.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	st, err = os.Stat(filepath.Join(b.workspace, "a/b"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm()&0o755)

	rc, err := rt.ReadFile("a/b/../b/c.txt")
	require.NoError(t, err)
	data, err := readAll(rc)
	require.NoError(t, err)
	assert.Equal(t, "hello", data)

	// Over the limit: an error and nothing left behind, the old content intact.
	_, err = rt.WriteFile("a/b/c.txt", strings.NewReader("too long"), 5)
	requireKind(t, err, fault.TooLarge)
	_, err = rt.WriteFile("a/new.txt", strings.NewReader("too long"), 0)
	requireKind(t, err, fault.TooLarge)
	list, err := rt.ListFiles("a/b")
	require.NoError(t, err)
	require.Len(t, list, 1, "no temporary file left")
	assert.Equal(t, sandboxd.FileInfo{Name: "c.txt", Path: "a/b/c.txt", Type: sandboxd.FileRegular, Size: 5, Mode: 0o644, ModTime: list[0].ModTime}, list[0])
	_, err = os.Stat(filepath.Join(b.workspace, "a/new.txt"))
	assert.True(t, os.IsNotExist(err))

	// A reader failing mid-way leaves nothing either.
	_, err = rt.WriteFile("a/fail.txt", failingReader{}, -1)
	require.Error(t, err)
	list, err = rt.ListFiles("a")
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, names(list))

	// Symlinks: inside is fine, outside is a policy error.
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(b.workspace, "out")))
	require.NoError(t, os.Symlink("a/b/c.txt", filepath.Join(b.workspace, "in")))
	rc, err = rt.ReadFile("in")
	require.NoError(t, err)
	data, _ = readAll(rc)
	assert.Equal(t, "hello", data)
	_, err = rt.ReadFile("out/secret")
	requireKind(t, err, fault.Policy)
	_, err = rt.WriteFile("out/x", strings.NewReader("x"), -1)
	requireKind(t, err, fault.Policy)
	_, err = rt.ListFiles("out")
	requireKind(t, err, fault.Policy)
	for _, p := range []string{"..", "../x", "/etc/passwd", "a/../../x"} {
		_, err = rt.ReadFile(p)
		requireKind(t, err, fault.Policy)
		_, err = rt.WriteFile(p, strings.NewReader("x"), -1)
		requireKind(t, err, fault.Policy)
		requireKind(t, rt.RemoveFile(p), fault.Policy)
	}
	// A NUL byte is refused like an escape, as the gateway's providers do (wspath.Clean).
	_, err = rt.ReadFile("a\x00")
	requireKind(t, err, fault.Policy)

	// Writing replaces a symlink itself, not its target.
	_, err = rt.WriteFile("in", strings.NewReader("new"), -1)
	require.NoError(t, err)
	data2, _ := os.ReadFile(filepath.Join(b.workspace, "a/b/c.txt"))
	assert.Equal(t, "hello", string(data2))

	list, err = rt.ListFiles("")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "in", "out"}, names(list))
	assert.Equal(t, sandboxd.FileDir, list[0].Type)
	assert.Equal(t, sandboxd.FileRegular, list[1].Type)
	assert.Equal(t, sandboxd.FileSymlink, list[2].Type)

	// Conflicts and missing paths.
	_, err = rt.ReadFile("a")
	requireKind(t, err, fault.Conflict)
	_, err = rt.WriteFile("a/b", strings.NewReader("x"), -1)
	requireKind(t, err, fault.Conflict)
	_, err = rt.WriteFile("a/b/c.txt/d", strings.NewReader("x"), -1)
	requireKind(t, err, fault.Conflict)
	_, err = rt.WriteFile("", strings.NewReader("x"), -1)
	requireKind(t, err, fault.Validation) // the workspace itself is no file
	_, err = rt.ReadFile("missing")
	requireKind(t, err, fault.NotFound)
	_, err = rt.ListFiles("missing")
	requireKind(t, err, fault.NotFound)
	_, err = rt.ListFiles("in")
	requireKind(t, err, fault.Conflict)
	requireKind(t, rt.RemoveFile("a"), fault.Conflict)
	requireKind(t, rt.RemoveFile(""), fault.Validation) // nor can it be removed

	require.NoError(t, rt.RemoveFile("a/b/c.txt"))
	require.NoError(t, rt.RemoveFile("a/b/c.txt"), "missing is fine")
	require.NoError(t, rt.RemoveFile("a/b"))
	require.NoError(t, rt.RemoveFile("out"))
	_, err = os.Stat(filepath.Join(outside, "secret"))
	assert.NoError(t, err, "removing a symlink leaves its target")
}

type failingReader struct{}

func (failingReader) Read(p []byte) (int, error) {
	return 0, errors.New("reader broke")
}

func names(list []sandboxd.FileInfo) []string {
	out := make([]string, 0, len(list))
	for _, f := range list {
		out = append(out, f.Name)
	}
	return out
}

func readAll(rc interface {
	Read([]byte) (int, error)
	Close() error
}) (string, error) {
	defer rc.Close()
	var buf bytes.Buffer
	_, err := buf.ReadFrom(rc)
	return buf.String(), err
}

func processAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: a zombie counts as alive
	}
	// "pid (comm) state ...": a zombie has been killed, only not reaped by its parent.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// TestContextsAreCapped: every context is a process sharing the sandbox's limits, so a runtime
// keeps at most MaxContexts; deleting one makes room.
func TestContextsAreCapped(t *testing.T) {
	t.Parallel()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: t.TempDir(), MaxContexts: 2, KillGrace: testGrace, DrainDelay: testGrace})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	_, err = rt.CreateContext("a", "bash")
	require.NoError(t, err)
	o := execCtx(t.Context(), rt, py("b", "pass")) // auto-created
	require.NoError(t, o.err)
	_, err = rt.CreateContext("c", "python")
	requireKind(t, err, fault.Conflict)
	o = execCtx(t.Context(), rt, py("d", "pass"))
	requireKind(t, o.err, fault.Conflict)
	require.NoError(t, rt.DeleteContext("a"))
	_, err = rt.CreateContext("c", "python")
	require.NoError(t, err)
}

// TestPythonContextSurvivesClosedStdout: closing sys.stdout in one cell does not silence the
// next cells of the context.
func TestPythonContextSurvivesClosedStdout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, py("p", "import sys\nkept = 1\nsys.stdout.close()\nsys.stderr.close()"))
	assert.Equal(t, "1\n", b.ok(t, py("p", "print(kept)")))
	o := b.exec(t, py("p", "import sys\nprint('err', file=sys.stderr)"))
	require.NoError(t, o.err)
	assert.Equal(t, "err\n", o.stderr)
}

// TestRestartedRuntimeReportsLostContexts: a runtime started again on the same state file (the
// sandbox restarted) tells the first execution of each context it lost that the state is
// gone, once; a context made anew on purpose, and one deleted before, report nothing.
func TestRestartedRuntimeReportsLostContexts(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	state := filepath.Join(t.TempDir(), "contexts.json")
	opts := sandboxd.Options{Workspace: ws, KillGrace: testGrace, DrainDelay: testGrace, StateFile: state}
	first, err := sandboxd.New(opts)
	require.NoError(t, err)
	b := &testBundle{rt: first, workspace: ws}
	b.ok(t, py("p", "x = 41"))
	b.ok(t, py("q", "y = 1"))
	b.ok(t, py("gone", "z = 1"))
	require.NoError(t, first.DeleteContext("gone"))
	if _, err := exec.LookPath("bash"); err == nil {
		b.ok(t, sandboxd.ExecRequest{Context: "sh", Language: "bash", Code: "export V=1"})
	}
	require.NoError(t, first.Close())

	again, err := sandboxd.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, again.Close()) })
	b = &testBundle{rt: again, workspace: ws}
	assert.Empty(t, again.ListContexts(), "the contexts themselves are gone")

	o := b.exec(t, py("p", "print(globals().get('x'))"))
	require.NoError(t, o.err)
	assert.True(t, o.res.ContextReset)
	assert.False(t, o.res.ContextLost, "it did not die during this execution")
	assert.Equal(t, "None\n", o.stdout)
	assert.Contains(t, o.stderr, "the python context 'p' was lost when the sandbox restarted")
	o = b.exec(t, py("p", "print(1)"))
	require.NoError(t, o.err)
	assert.False(t, o.res.ContextReset, "said once")
	assert.Empty(t, o.stderr)

	_, err = again.CreateContext("q", "python")
	require.NoError(t, err)
	o = b.exec(t, py("q", "print(1)"))
	require.NoError(t, o.err)
	assert.False(t, o.res.ContextReset, "made anew on purpose")

	o = b.exec(t, py("gone", "print(1)"))
	require.NoError(t, o.err)
	assert.False(t, o.res.ContextReset, "deleted before the restart")

	if _, err := exec.LookPath("bash"); err == nil {
		o = b.exec(t, sandboxd.ExecRequest{Context: "sh", Language: "bash", Code: "echo ${V:-unset}"})
		require.NoError(t, o.err)
		assert.True(t, o.res.ContextReset)
		assert.Equal(t, "unset\n", o.stdout)
	}

	// A third start still knows the live contexts, but not the ones already reported.
	require.NoError(t, again.Close())
	third, err := sandboxd.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, third.Close()) })
	o = execCtx(t.Context(), third, py("p", "print(1)"))
	require.NoError(t, o.err)
	assert.True(t, o.res.ContextReset, "p lived in the second start too")
}
