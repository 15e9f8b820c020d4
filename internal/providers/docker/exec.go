package docker

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// argvMax is the longest program text passed as an argument; longer text is fed to the
// helper on standard input and reaches the program on file descriptor 3 (Linux limits one
// argument to 128 KiB).
const argvMax = 64 << 10

// pythonFromFD3 runs the code read from file descriptor 3 the way `python -c` would.
const pythonFromFD3 = `exec(compile(open(3, encoding="utf-8").read(), "<string>", "exec"))`

// shell runs commands (docs/semantics.md §12: commands run by /bin/sh -c).
const shell = "/bin/sh"

// Timing of the end of an execution.
const (
	// killWait is how long Exec waits for the output to end after the SIGKILL round before
	// it closes the connection itself.
	killWait = 5 * time.Second
	// stdinWait is how long Exec waits for the copy of ExecSpec.Stdin once the program ended.
	stdinWait = time.Second
)

// Exec runs spec to completion in the container (see the package doc for how) and returns how
// it ended; a non-zero exit is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.Policy or
// fault.NotFound for a working folder that escapes or is missing, fault.Validation when it is
// not a folder; fault.Gone when the container no longer exists or does not run; fault.Conflict
// on a closed handle; ctx.Err() (with the status of the killed program) when ctx ends first.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := ctx.Err(); err != nil {
		return providers.ExitStatus{}, err
	}
	if s.rt != nil {
		return s.execSandboxd(ctx, spec)
	}
	if spec.Context != "" {
		return providers.ExitStatus{}, fault.Unsupported(TypeName, "stateful")
	}
	dir, _ := providers.CleanPath(spec.Dir) // checked by CheckExecSpec
	argv, script := s.argv(spec)
	return s.run(ctx, runSpec{
		argv: argv, script: script, dir: dir, env: s.environ(spec.Env),
		stdin: spec.Stdin, out: spec.Output, timeout: spec.Timeout,
	})
}

// InstallPackages runs `python3 -m pip install --no-input -- <packages>` in the container,
// with no time limit but ctx. A failed installation is a status, never an error. Package
// names must not be empty or start with "-" (fault.Validation), so none can pass pip an
// option.
func (s *Sandbox) InstallPackages(ctx context.Context, packages []string, out providers.Output) (providers.ExitStatus, error) {
	if len(packages) == 0 {
		return providers.ExitStatus{}, fault.New(fault.Validation, "give at least one package to install")
	}
	for _, pkg := range packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") || strings.ContainsAny(pkg, "\x00\n\r") {
			return providers.ExitStatus{}, fault.New(fault.Validation, "invalid package name %q", pkg)
		}
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if s.rt != nil {
		// sandboxd runs as a non-root user on a read-only root file system: install into the
		// user's site-packages under the workspace (HOME).
		argv := append([]string{"python3", "-m", "pip", "install", "--user", "--no-input", "--disable-pip-version-check", "--"}, packages...)
		return s.runSandboxd(ctx, sandboxd.ExecRequest{Argv: argv, Env: map[string]string{
			"PIP_NO_CACHE_DIR": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1",
		}}, out)
	}
	argv := append([]string{s.interp.python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--"}, packages...)
	env := s.environ(map[string]string{
		"PIP_ROOT_USER_ACTION":      "ignore",
		"PIP_NO_CACHE_DIR":          "1", // no cache in the workspace (HOME)
		"PIP_BREAK_SYSTEM_PACKAGES": "1", // the sandbox is disposable: no Debian "externally managed" refusal
	})
	return s.run(ctx, runSpec{argv: argv, dir: ".", env: env, out: out})
}

// argv returns the program's argument vector and, when the text is too long for argv, the
// text to feed on file descriptor 3.
func (s *Sandbox) argv(spec providers.ExecSpec) (argv []string, script string) {
	interp, text := shell, spec.Command
	switch {
	case spec.Command != "":
	case spec.Language == "python":
		interp, text = s.interp.python, spec.Code
	case spec.Language == "bash":
		interp, text = s.interp.bash, spec.Code
	}
	if len(text) <= argvMax {
		return []string{interp, "-c", text}, ""
	}
	if interp == s.interp.python {
		return []string{interp, "-c", pythonFromFD3}, text
	}
	return []string{interp, "/dev/fd/3"}, text
}

// environ builds an execution's environment on top of the container's: the workspace as HOME,
// LANG=C.UTF-8 and PYTHONUNBUFFERED=1 (so output printed before a timeout is not lost in a
// buffer), then extra, which may override them; passed natively to the engine.
func (s *Sandbox) environ(extra map[string]string) []string {
	vars := map[string]string{
		"HOME":             s.ws,
		"LANG":             "C.UTF-8",
		"PYTHONUNBUFFERED": "1",
	}
	maps.Copy(vars, extra)
	env := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return env
}

// runSpec is one supervised execution.
type runSpec struct {
	argv    []string
	script  string // fed on fd 3 when set
	dir     string // clean, relative to the workspace
	env     []string
	stdin   io.Reader
	out     providers.Output
	timeout time.Duration
}

// run executes r.argv under the helper's supervisor (mode run): the program runs in its own
// session; when it exits, the rest of its session is killed; the helper also enforces the
// timeout itself, so a program that exhausts the pids limit (and with it any further exec)
// still ends. Exec's own timer sends SIGTERM, then SIGKILL, through a second exec.
func (s *Sandbox) run(ctx context.Context, r runSpec) (providers.ExitStatus, error) {
	var deadline <-chan time.Time
	if r.timeout > 0 {
		timer := time.NewTimer(r.timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	token := randomHex(12)
	grace := s.p.killGrace()
	cmd := s.helperCmd("run", token, s.ws, r.dir, millis(r.timeout), millis(grace), strconv.Itoa(len(r.script)), "--")
	cmd = append(cmd, r.argv...)
	withStdin := r.stdin != nil || r.script != ""
	execID, hr, err := s.startExec(ctx, cmd, r.env, withStdin)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	defer hr.Close()

	var fed chan struct{}
	if withStdin {
		fed = make(chan struct{})
		go func() {
			defer close(fed)
			if r.script != "" {
				if _, err := io.WriteString(hr.Conn, r.script); err != nil {
					return
				}
			}
			if r.stdin != nil {
				_, _ = io.Copy(hr.Conn, r.stdin)
			}
			_ = hr.CloseWrite()
		}()
	}

	pre := &preamble{w: r.out.Stdout}
	stderr := r.out.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	errOut := &safeWriter{w: stderr}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(pre, errOut, hr.Reader)
		copied <- err
	}()

	var timedOut bool
	var ctxErr error
	select {
	case <-copied:
		copied <- nil // re-armed for the wait below
	case <-deadline:
		timedOut = true
	case <-ctx.Done():
		ctxErr = ctx.Err()
	}
	if timedOut || ctxErr != nil {
		select {
		case <-copied: // it ended at the same moment: not a timeout
			copied <- nil
			timedOut, ctxErr = false, nil
		default:
			s.terminate(token, copied, hr, grace)
		}
	}
	<-copied
	hr.Close()
	if fed != nil {
		select {
		case <-fed:
		case <-time.After(stdinWait): // a Stdin whose Read blocks: leave its goroutine behind
		}
	}

	// The status is collected even when ctx has ended.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), helperTimeout)
	defer cancel()
	if !pre.started {
		if timedOut || ctxErr != nil {
			return providers.ExitStatus{TimedOut: timedOut}, ctxErr
		}
		code := -1
		if ins, err := s.p.cli.ContainerExecInspect(bg, execID); err == nil {
			code = ins.ExitCode
		}
		return providers.ExitStatus{}, fmt.Errorf("%s: the program did not start in sandbox '%s' (exit %d): %s",
			TypeName, s.id, code, strings.TrimSpace(firstLines(errOut.tail(), 5)))
	}
	if pre.failed {
		return providers.ExitStatus{}, dirStatus(pre.status(), r.dir)
	}
	code, err := s.exitCode(bg, execID)
	if err != nil {
		return providers.ExitStatus{TimedOut: timedOut}, err
	}
	st := providers.ExitStatus{ExitCode: code, TimedOut: timedOut}
	if code > 128 {
		sig, oom, helperTimedOut := s.runStatus(bg, token)
		if sig > 0 {
			st.Signal = signalName(sig)
		}
		if helperTimedOut {
			st.TimedOut = true
		}
		if oom {
			s.p.log.Warn("a sandbox program was killed for lack of memory", "sandbox_id", s.id)
			_, _ = io.WriteString(errOut, oomNotice)
		}
	}
	if ctxErr != nil {
		return st, ctxErr
	}
	return st, nil
}

// oomNotice is appended to the standard error of a program the kernel killed because the
// sandbox reached its memory limit.
const oomNotice = "\nsandgate: the program was killed because the sandbox ran out of memory (policy memory_mb)\n"

// terminate ends the execution of token: SIGTERM to its session, SIGKILL after grace, then
// closing the connection when the output still has not ended.
func (s *Sandbox) terminate(token string, copied chan error, hr types.HijackedResponse, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case err := <-copied:
			copied <- err
			return true
		case <-t.C:
			return false
		}
	}
	s.signal(ctx, token, syscall.SIGTERM)
	if wait(grace) {
		return
	}
	s.signal(ctx, token, syscall.SIGKILL)
	if wait(killWait) {
		return
	}
	s.p.log.Warn("a killed execution's output did not end; closing it", "sandbox_id", s.id)
	hr.Close()
}

// signal sends sig to the session of the execution token through the helper (kill mode).
func (s *Sandbox) signal(ctx context.Context, token string, sig syscall.Signal) {
	if _, err := s.helper(ctx, "kill", token, strconv.Itoa(int(sig))); err != nil {
		// The helper enforces the deadline itself, e.g. when a fork bomb leaves no room for
		// another exec.
		s.p.log.Debug("signalling an execution failed", "sandbox_id", s.id, "signal", sig, "err", err)
	}
}

// exitCode waits for the exec to be reported finished and returns its exit code.
func (s *Sandbox) exitCode(ctx context.Context, execID string) (int, error) {
	for i := 0; ; i++ {
		ins, err := s.p.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, s.p.execErr(err, s.id)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if i >= 100 {
			return 0, fmt.Errorf("%s: the execution in sandbox '%s' is still reported running after its output ended", TypeName, s.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runStatus fetches the record the helper leaves when a program ended by a signal or
// timed out: the signal, whether the kernel's OOM killer sent it, whether the helper's own
// deadline passed. With no record the exit code was the program's own.
func (s *Sandbox) runStatus(ctx context.Context, token string) (sig int, oom, timedOut bool) {
	rep, err := s.helper(ctx, "status", token)
	if err != nil || len(rep) < 2 || rep[0] != "ok" {
		return 0, false, false
	}
	f := strings.Fields(rep[1])
	if len(f) != 3 {
		return 0, false, false
	}
	sig, _ = strconv.Atoi(f[0])
	return sig, f[1] == "1", f[2] == "1"
}

// dirStatus turns the helper's refusal of a working folder into an error.
func dirStatus(status, dir string) error {
	switch status {
	case "escape":
		return fault.New(fault.Policy, "working folder '%s' escapes the sandbox workspace", dir)
	case "notfound":
		return fault.New(fault.NotFound, "no working folder '%s' in the sandbox workspace", dir)
	case "notdir":
		return fault.New(fault.Validation, "working folder '%s' is not a folder", dir)
	}
	return pathStatus(status, dir)
}

// startExec creates and starts an exec of cmd and returns its id and attached streams.
func (s *Sandbox) startExec(ctx context.Context, cmd, env []string, stdin bool) (string, types.HijackedResponse, error) {
	resp, err := s.p.cli.ContainerExecCreate(ctx, s.id, s.execOptions(cmd, env, stdin))
	if err != nil {
		return "", types.HijackedResponse{}, s.p.execErr(err, s.id)
	}
	hr, err := s.p.cli.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", types.HijackedResponse{}, s.p.execErr(err, s.id)
	}
	return resp.ID, hr, nil
}

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func signalName(sig int) string {
	if name := unix.SignalName(syscall.Signal(sig)); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(sig)
}

// preamble strips the helper's first stdout byte: 0 when the program started (everything after
// it is the program's output), 1 followed by a status word when it could not (working folder).
// Writes to the program's writer that fail are dropped so the stream keeps draining.
type preamble struct {
	w       io.Writer
	started bool // the first byte arrived
	failed  bool
	msg     []byte
}

func (p *preamble) Write(b []byte) (int, error) {
	n := len(b)
	if !p.started && len(b) > 0 {
		p.started, p.failed = true, b[0] != 0
		b = b[1:]
	}
	switch {
	case len(b) == 0:
	case p.failed:
		if len(p.msg) < 256 {
			p.msg = append(p.msg, b...)
		}
	case p.w != nil:
		if _, err := p.w.Write(b); err != nil {
			p.w = nil
		}
	}
	return n, nil
}

func (p *preamble) status() string { return string(p.msg) }

// safeWriter forwards to w until w fails, and keeps the last bytes for error messages.
type safeWriter struct {
	w    io.Writer
	last []byte
}

func (s *safeWriter) Write(b []byte) (int, error) {
	if s.w != nil {
		if _, err := s.w.Write(b); err != nil {
			s.w = nil
		}
	}
	s.last = append(s.last, b...)
	if len(s.last) > 4096 {
		s.last = s.last[len(s.last)-4096:]
	}
	return len(b), nil
}

func (s *safeWriter) tail() string { return string(s.last) }
