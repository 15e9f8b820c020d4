//go:build unix

package local_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testGrace = 300 * time.Millisecond

var (
	agent = providers.Principal{Mode: "agent", Subject: "local-test"}
	pol   = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
)

// newProvider returns a provider whose workdir is a fresh temporary folder, with short kill
// grace and drain delay.
func newProvider(t *testing.T) *local.Provider {
	t.Helper()
	p, err := local.New(local.Options{Workdir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	p.KillGrace = testGrace
	p.DrainDelay = testGrace
	return p
}

func TestContract(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New:         func(t *testing.T) providers.Provider { return newProvider(t) },
		KillGrace:   testGrace,
		RichResults: true,
	})
}

// create makes a sandbox destroyed at the end of the test.
func create(t *testing.T, p *local.Provider) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = sb.Close()
		_ = p.Destroy(context.Background(), sb.ID())
	})
	return sb
}

func run(t *testing.T, sb providers.Sandbox, spec providers.ExecSpec) (providers.ExitStatus, string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	spec.Stdout, spec.Stderr = &out, &errOut
	st, err := sb.Exec(t.Context(), spec)
	return st, out.String(), errOut.String(), err
}

func requireKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	require.Error(t, err)
	require.Truef(t, fault.IsKind(err, k), "want %s, got %s: %v", k, fault.KindOf(err), err)
}

func TestIDIsTheSandboxFolder(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	id := sb.ID()
	assert.True(t, filepath.IsAbs(id))
	assert.Equal(t, p.Workdir(), filepath.Dir(id))
	assert.True(t, strings.HasPrefix(filepath.Base(id), local.SandboxPrefix), id)
	st, err := os.Lstat(id)
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	_, out, _, err := run(t, sb, providers.ExecSpec{Command: "pwd -P"})
	require.NoError(t, err)
	assert.Equal(t, id+"\n", out, "programs run in the sandbox folder")

	require.NoError(t, sb.Close())
	require.NoError(t, p.Destroy(t.Context(), id))
	_, err = os.Lstat(id)
	assert.True(t, os.IsNotExist(err), "destroy removes the folder")
}

func TestWorkdirIsCreatedAndResolved(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(base, link))
	p, err := local.New(local.Options{Workdir: filepath.Join(link, "new", "work"), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	real, err := filepath.EvalSymlinks(filepath.Join(base, "new", "work"))
	require.NoError(t, err)
	assert.Equal(t, real, p.Workdir(), "the workdir is made and its symlinks resolved")
	sb, err := p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	defer p.Destroy(context.Background(), sb.ID())
	defer sb.Close()
	assert.Equal(t, real, filepath.Dir(sb.ID()))
}

func TestDestroyOnlyRemovesSandboxFolders(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	wd := p.Workdir()
	outside := t.TempDir()
	keep := []string{
		filepath.Join(wd, "not-a-sandbox"),
		filepath.Join(outside, local.SandboxPrefix+"elsewhere"),
		filepath.Join(wd, local.SandboxPrefix+"x", local.SandboxPrefix+"nested"),
		filepath.Join(outside, "symlink-target"),
	}
	for _, d := range keep {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	link := filepath.Join(wd, local.SandboxPrefix+"link")
	require.NoError(t, os.Symlink(filepath.Join(outside, "symlink-target"), link))

	for _, id := range []string{
		keep[0], keep[1], keep[2], link,
		wd, "/", "", ".", local.SandboxPrefix + "x",
		filepath.Join(wd, local.SandboxPrefix),
		wd + "/./" + local.SandboxPrefix + "x",
		wd + "/../" + filepath.Base(wd) + "/" + local.SandboxPrefix + "x",
		filepath.Join(wd, local.SandboxPrefix+"missing"),
	} {
		require.NoError(t, p.Destroy(t.Context(), id), "destroy %q is a no-op", id)
	}
	for _, d := range append(keep, link, wd) {
		_, err := os.Lstat(d)
		assert.NoError(t, err, "%s must survive", d)
	}
}

func TestAttachOnlyToLiveSandboxFolders(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	wd := p.Workdir()
	outside := t.TempDir()
	plain := filepath.Join(wd, "plain")
	foreign := filepath.Join(outside, local.SandboxPrefix+"foreign")
	link := filepath.Join(wd, local.SandboxPrefix+"link")
	file := filepath.Join(wd, local.SandboxPrefix+"file")
	require.NoError(t, os.Mkdir(plain, 0o700))
	require.NoError(t, os.Mkdir(foreign, 0o700))
	require.NoError(t, os.Symlink(outside, link))
	require.NoError(t, os.WriteFile(file, nil, 0o600))

	for _, id := range []string{
		filepath.Join(wd, local.SandboxPrefix+"missing"), plain, foreign, link, file,
		wd, "/", "", "nonexistent-id", "../" + local.SandboxPrefix + "x",
	} {
		_, err := p.Attach(t.Context(), id, agent, pol)
		requireKind(t, err, fault.Gone)
	}
}

func TestDestroyRemovesFoldersProgramsLocked(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	_, _, stderr, err := run(t, sb, providers.ExecSpec{Command: "mkdir -p locked/inner && touch locked/inner/f && chmod 000 locked/inner && chmod 500 locked"})
	require.NoError(t, err, stderr)
	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	_, err = os.Lstat(sb.ID())
	assert.True(t, os.IsNotExist(err))
}

func TestHandleAfterCloseOrDestroy(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	other, err := p.Attach(t.Context(), sb.ID(), agent, pol)
	require.NoError(t, err)
	defer other.Close()

	require.NoError(t, sb.Close())
	_, _, _, err = run(t, sb, providers.ExecSpec{Command: "true"})
	requireKind(t, err, fault.Conflict)
	_, err = sb.ReadFile(t.Context(), "x")
	requireKind(t, err, fault.Conflict)

	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	_, _, _, err = run(t, other, providers.ExecSpec{Command: "true"})
	requireKind(t, err, fault.Gone)
	_, err = other.WriteFile(t.Context(), "x", strings.NewReader("x"), 10)
	requireKind(t, err, fault.Gone)
	_, err = other.ListFiles(t.Context(), "")
	requireKind(t, err, fault.Gone)
}

func TestWriteOverOutsideSymlinkReplacesTheLink(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	target := filepath.Join(t.TempDir(), "target.txt")
	require.NoError(t, os.WriteFile(target, []byte("outside"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(sb.ID(), "link")))

	_, err := sb.WriteFile(t.Context(), "link", strings.NewReader("inside"), 100)
	require.NoError(t, err)
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "outside", string(got), "the file outside is untouched")
	st, err := os.Lstat(filepath.Join(sb.ID(), "link"))
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular(), "the link became a file in the workspace")
}

func TestFIFOIsNotWaitedOn(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	_, _, stderr, err := run(t, sb, providers.ExecSpec{Command: "mkfifo pipe"})
	require.NoError(t, err, stderr)
	_, err = sb.ReadFile(t.Context(), "pipe")
	requireKind(t, err, fault.Conflict)
	infos, err := sb.ListFiles(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, providers.FileOther, infos[0].Type)
}

func TestTimeoutEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)

	st, _, _, err := run(t, sb, providers.ExecSpec{Command: "sleep 60", Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, st.TimedOut)
	assert.Equal(t, "SIGTERM", st.Signal)
	assert.Equal(t, 143, st.ExitCode)

	start := time.Now()
	st, out, _, err := run(t, sb, providers.ExecSpec{Command: "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.05; done", Timeout: 500 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, st.TimedOut)
	assert.Equal(t, "SIGKILL", st.Signal)
	assert.Equal(t, 137, st.ExitCode)
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond+testGrace, "SIGKILL only after the grace")
	assert.Equal(t, "ready\ngot TERM\n", out, "the program saw SIGTERM first and its output is kept")
}

func TestProcessThatLeftTheSessionDoesNotHang(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	start := time.Now()
	st, out, stderr, err := run(t, sb, providers.ExecSpec{Command: "setsid sleep 10 & echo started", Timeout: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 0, st.ExitCode, stderr)
	assert.Equal(t, "started\n", out)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestBackgroundLeftoversAreKilled(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	_, _, stderr, err := run(t, sb, providers.ExecSpec{Command: "(sleep 2; touch late) > /dev/null 2>&1 & echo $! > bg.pid"})
	require.NoError(t, err, stderr)
	time.Sleep(3 * time.Second)
	_, err = os.Lstat(filepath.Join(sb.ID(), "late"))
	assert.True(t, os.IsNotExist(err), "a background child does not outlive its execution")
}

func TestEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("SANDGATE_GATEWAY_SECRET", "do-not-leak")
	p := newProvider(t)
	sb := create(t, p)
	require.NoError(t, os.Mkdir(filepath.Join(sb.ID(), "sub"), 0o700))
	_, out, _, err := run(t, sb, providers.ExecSpec{
		Command: "env",
		Dir:     "sub",
		Env:     map[string]string{"EXTRA": "1", "LANG": "C"},
	})
	require.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	assert.NotContains(t, env, "SANDGATE_GATEWAY_SECRET")
	assert.Equal(t, sb.ID(), env["HOME"])
	assert.Equal(t, sb.ID(), env["TMPDIR"])
	assert.Equal(t, filepath.Join(sb.ID(), "sub"), env["PWD"])
	assert.Equal(t, "C", env["LANG"], "the caller's variables override the base")
	assert.Equal(t, "1", env["EXTRA"])
	assert.Equal(t, "1", env["PYTHONUNBUFFERED"])
	assert.NotEmpty(t, env["PATH"])
}

func TestCancelledContextRunsNothing(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := sb.Exec(ctx, providers.ExecSpec{Command: "touch ran"})
	require.ErrorIs(t, err, context.Canceled)
	_, err = os.Lstat(filepath.Join(sb.ID(), "ran"))
	assert.True(t, os.IsNotExist(err))
}

func TestUploadHonoursContext(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	ctx, cancel := context.WithCancel(t.Context())
	r := io.MultiReader(strings.NewReader("partial"), readerFunc(func([]byte) (int, error) {
		cancel()
		return 0, nil
	}), strings.NewReader("more"))
	_, err := sb.WriteFile(ctx, "f.txt", r, 1<<20)
	require.ErrorIs(t, err, context.Canceled)
	entries, err := os.ReadDir(sb.ID())
	require.NoError(t, err)
	assert.Empty(t, entries)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestInstallPackagesIsUnsupported(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	_, err := sb.InstallPackages(t.Context(), []string{"requests"}, providers.Output{})
	requireKind(t, err, fault.Capability)
	var fe *fault.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "package_install", fe.Capability)
	assert.Equal(t, local.TypeName, fe.Subject)
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	c := newProvider(t).Capabilities()
	assert.Equal(t, providers.IsolationNone, c.Isolation)
	assert.True(t, c.Shell && c.Files && c.Attach && c.Provisions && c.Stateful)
	assert.False(t, c.PackageInstall || c.AttachesExternal || c.PrincipalUser)
	assert.False(t, c.PolicyNetwork || c.PolicyFilesystem || c.PolicyResources)
	want := []string{"python", "bash"}
	if _, err := exec.LookPath("bash"); err != nil {
		want = want[:1]
	}
	assert.Equal(t, want, c.Languages)
}

func TestNewWarnsAboutIsolation(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	_, err := local.New(local.Options{Workdir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "NO isolation")
}

func TestNewRejectsMissingPython(t *testing.T) {
	t.Parallel()
	_, err := local.New(local.Options{Workdir: t.TempDir(), Python: "/nonexistent/python3", Logger: slog.New(slog.DiscardHandler)})
	requireKind(t, err, fault.Config)
}

func TestFactoryThroughRegistry(t *testing.T) {
	t.Parallel()
	reg := providers.NewRegistry()
	reg.Register(local.TypeName, local.Factory)

	_, err := reg.Build(providers.BuildContext{Type: local.TypeName, Profile: "dev"})
	requireKind(t, err, fault.Config)
	assert.Contains(t, err.Error(), "no local_subprocess block")

	dir := t.TempDir()
	p, err := reg.Build(providers.BuildContext{Type: local.TypeName, Profile: "dev", Options: local.Options{Workdir: dir}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	assert.Equal(t, local.TypeName, p.Type())
	want, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	assert.Equal(t, want, p.(*local.Provider).Workdir())
}

func TestTimeoutKillsOtherProcessGroupsOfTheSession(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("session members are found through /proc on Linux only")
	}
	t.Parallel()
	p := newProvider(t)
	if !p.Capabilities().SupportsLanguage("bash") {
		t.Skip("no bash on this host")
	}
	sb := create(t, p)
	// With job control (bash set -m) each background job gets its own process group.
	st, _, stderr, err := run(t, sb, providers.ExecSpec{
		Code:     "set -m; (sleep 3; touch late1) & (trap '' TERM; sleep 3; touch late2) & sleep 600",
		Language: "bash",
		Timeout:  500 * time.Millisecond,
	})
	require.NoError(t, err, stderr)
	assert.True(t, st.TimedOut)
	time.Sleep(4 * time.Second)
	for _, f := range []string{"late1", "late2"} {
		_, err = os.Lstat(filepath.Join(sb.ID(), f))
		assert.True(t, os.IsNotExist(err), "%s: a job in another process group outlived the execution", f)
	}
}

func TestBlockingStdinDoesNotHang(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	pr, pw := io.Pipe()
	defer pw.Close() // ends the stdin copier's Read
	start := time.Now()
	st, out, _, err := run(t, sb, providers.ExecSpec{Command: "echo hi", Stdin: pr, Timeout: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	assert.Equal(t, "hi\n", out)
	assert.Less(t, time.Since(start), 10*time.Second)
}

func TestDestroyDuringExecReturnsGone(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p)
	type outcome struct {
		out string
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		_, out, _, err := run(t, sb, providers.ExecSpec{Command: "echo started; sleep 600"})
		done <- outcome{out, err}
	}()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	assert.Less(t, time.Since(start), 10*time.Second)
	o := <-done
	requireKind(t, o.err, fault.Gone)
	assert.Equal(t, "started\n", o.out, "output written before the destroy is kept")
	_, err := os.Lstat(sb.ID())
	assert.True(t, os.IsNotExist(err))
}

// TestContextsStopWithTheSandbox: Destroy and Close kill the interpreters of a sandbox's
// contexts, so none outlives its sandbox or the gateway.
func TestContextsStopWithTheSandbox(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	pidOf := func(sb providers.Sandbox) int {
		var out bytes.Buffer
		st, err := sb.Exec(t.Context(), providers.ExecSpec{Code: "import os\nprint(os.getpid())", Language: "python", Context: "default", Output: providers.Output{Stdout: &out, Stderr: io.Discard}})
		require.NoError(t, err)
		require.Equal(t, 0, st.ExitCode)
		pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
		require.NoError(t, err)
		return pid
	}
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }

	sb := create(t, p)
	pid := pidOf(sb)
	require.True(t, alive(pid))
	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond, "context interpreter outlived Destroy")

	sb = create(t, p)
	pid = pidOf(sb)
	require.NoError(t, p.Close())
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 20*time.Millisecond, "context interpreter outlived Close")
}

// TestEscapeesAreContained: where the gateway may make cgroups, a process that left the
// execution's session (setsid) and one that double-forked out of it die with the execution.
func TestEscapeesAreContained(t *testing.T) {
	t.Parallel()
	if _, err := procgroup.DetectCgroups("sandgate"); err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	p := newProvider(t)
	sb := create(t, p)
	st, _, stderr, err := run(t, sb, providers.ExecSpec{
		Command: `setsid sh -c 'sleep 2; touch late1' & (setsid sh -c 'sleep 2; touch late2' &); echo started`,
		Timeout: time.Minute,
	})
	require.NoError(t, err, stderr)
	assert.Equal(t, 0, st.ExitCode)
	time.Sleep(3 * time.Second)
	for _, f := range []string{"late1", "late2"} {
		_, err = os.Lstat(filepath.Join(sb.ID(), f))
		assert.True(t, os.IsNotExist(err), "%s: a process that left the session outlived the execution", f)
	}
}

// Contexts end with the gateway process, and a later one says so: the first execution in a
// context the earlier process had reports ContextReset; one the sandbox never had does not.
func TestContextLostWithTheGatewayIsReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := func() *local.Provider {
		p, err := local.New(local.Options{Workdir: dir, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		p.KillGrace, p.DrainDelay = testGrace, testGrace
		return p
	}
	code := func(sb providers.Sandbox, ctxName, src string) (providers.ExitStatus, string) {
		var out bytes.Buffer
		st, err := sb.Exec(t.Context(), providers.ExecSpec{Code: src, Language: "python", Context: ctxName, Output: providers.Output{Stdout: &out, Stderr: io.Discard}})
		require.NoError(t, err)
		return st, strings.TrimSpace(out.String())
	}
	first := open()
	sb := create(t, first)
	st, _ := code(sb, "default", "x = 41")
	require.False(t, st.ContextReset)
	require.NoError(t, first.Close()) // the gateway stops

	second := open()
	t.Cleanup(func() { _ = second.Close() })
	again, err := second.Attach(t.Context(), sb.ID(), providers.Principal{}, providers.Policy{})
	require.NoError(t, err)
	st, out := code(again, "default", "print(globals().get('x', 'gone'))")
	require.True(t, st.ContextReset, "the lost context is reported")
	require.Equal(t, "gone", out)
	st, _ = code(again, "default", "x = 1")
	require.False(t, st.ContextReset, "once")
	st, _ = code(again, "other", "y = 1")
	require.False(t, st.ContextReset, "a context the sandbox never had")

	require.NoError(t, second.Destroy(t.Context(), sb.ID()))
	_, err = os.Stat(filepath.Join(second.Workdir(), ".contexts", filepath.Base(sb.ID())+".json"))
	require.True(t, os.IsNotExist(err), "destroying the sandbox removes its record")
}
