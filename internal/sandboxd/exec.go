//go:build unix

package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
	"github.com/sandgate/sandgate/internal/wspath"
)

// argvMax is the longest program text passed as an argument; longer text goes through a pipe
// on file descriptor 3 (Linux limits one argument to 128 KiB).
const argvMax = 64 << 10

// pythonFromFD3 runs the code read from file descriptor 3 the way `python -c` would: the
// program still sees sys.argv[0] == "-c", sys.path[0] == "" and tracebacks in "<string>".
const pythonFromFD3 = `exec(compile(open(3, encoding="utf-8").read(), "<string>", "exec"))`

// Exit codes of a program that could not be started, as shells report them.
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// Exec runs req to completion and returns how it ended; see the package doc for how programs
// and contexts run. Output is written to out as it is produced. A non-zero exit is a Result,
// never an error.
//
// When ctx ends first, the program is killed like on a timeout (a python context is
// interrupted) and Exec returns the partial Result with ctx.Err().
//
// Errors: fault.Validation for a malformed request (see checkRequest); fault.Policy or
// fault.NotFound for a working folder that escapes or is missing, fault.Validation when it is
// not a folder; fault.Capability when the interpreter of req.Language (or /bin/sh) is not
// installed; fault.Provision when a python context cannot start; fault.NotFound when the
// context was deleted meanwhile; fault.Gone once Close was called (also for an execution it
// killed).
func (r *Runtime) Exec(ctx context.Context, req ExecRequest, out Streams) (Result, error) {
	if req.StdinOpen || req.PTY != nil || req.Background {
		return Result{}, fault.New(fault.Validation, "stdin_open, pty and background need a kept execution (Start, with an execution id)")
	}
	req.hooks = nil
	if err := checkRequest(req); err != nil {
		return Result{}, err
	}
	return r.exec(ctx, req, out)
}

// exec is Exec of a checked request (Start's too).
func (r *Runtime) exec(ctx context.Context, req ExecRequest, out Streams) (Result, error) {
	end, err := r.begin(req.Background)
	if err != nil {
		return Result{}, err
	}
	defer end()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	cwd := ""
	if req.Context == "" || req.Dir != "" {
		if cwd, err = r.workingDir(req.Dir); err != nil {
			return Result{}, err
		}
	}
	if req.Context != "" {
		return r.execInContext(ctx, req, cwd, out)
	}
	return r.execPlain(ctx, req, cwd, out)
}

// checkRequest validates req. Errors: fault.Validation unless exactly one of Command, Argv
// and Code is set; for Code without a Language (unless it names a Context, whose language it
// then takes) or a Language without Code; for a language other than python and bash; for a Context with Command or Argv, or a bad context name; for
// a negative Timeout, MaxOutput or MaxResults; for an empty argv[0]; for a NUL byte in program text,
// argv or Env; for an Env name that is not letters, digits and underscores starting with a
// letter or underscore.
func checkRequest(req ExecRequest) error {
	n := 0
	for _, set := range []bool{req.Command != "", len(req.Argv) > 0, req.Code != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return fault.New(fault.Validation, "give one of command, argv and code, not several")
	case n == 0:
		return fault.New(fault.Validation, "give a command, argv or code to run")
	case req.Code != "" && req.Language == "" && req.Context == "":
		return fault.New(fault.Validation, "code needs a language (python or bash)")
	case req.Code == "" && req.Language != "":
		return fault.New(fault.Validation, "a language applies to code only, not to a command or argv")
	case req.Code != "" && req.Language != "" && !validLanguage(req.Language):
		return fault.New(fault.Validation, "unknown language %q: use python or bash", req.Language)
	case req.Context != "" && req.Code == "":
		return fault.New(fault.Validation, "a context runs code only, not a command or argv")
	case req.Timeout < 0:
		return fault.New(fault.Validation, "timeout must not be negative")
	case req.MaxOutput < 0:
		return fault.New(fault.Validation, "max_output_bytes must not be negative")
	case req.MaxResults < 0:
		return fault.New(fault.Validation, "max_result_bytes must not be negative")
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return fault.New(fault.Validation, "argv[0] names the program and must not be empty")
	}
	if req.Context != "" {
		if err := checkContextName(req.Context); err != nil {
			return err
		}
	}
	if strings.IndexByte(req.Command, 0) >= 0 || strings.IndexByte(req.Code, 0) >= 0 {
		return fault.New(fault.Validation, "the program text contains a NUL byte")
	}
	for i, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fault.New(fault.Validation, "argv[%d] contains a NUL byte", i)
		}
	}
	for name, value := range req.Env {
		if !validEnvName(name) {
			return fault.New(fault.Validation, "invalid environment variable name %q: use letters, digits and underscores, not starting with a digit", name)
		}
		if strings.IndexByte(value, 0) >= 0 {
			return fault.New(fault.Validation, "environment variable %s contains a NUL byte", name)
		}
	}
	if strings.IndexByte(req.Dir, 0) >= 0 {
		return fault.New(fault.Validation, "the working folder contains a NUL byte")
	}
	return nil
}

func validLanguage(l string) bool { return l == "python" || l == "bash" }

// validEnvName is wspath.ValidEnvName: ^[A-Za-z_][A-Za-z0-9_]*$.
func validEnvName(name string) bool { return wspath.ValidEnvName(name) }

// execPlain runs a command, argv or code in a fresh process.
func (r *Runtime) execPlain(ctx context.Context, req ExecRequest, cwd string, out Streams) (Result, error) {
	fixed := map[string]string{"PWD": cwd}
	if req.PTY != nil {
		fixed["TERM"] = "xterm-256color" // unless req.Env names another
	}
	env := mergeEnv(mergeEnv(r.env, fixed), req.Env)
	spec := runSpec{dir: cwd, env: env, timeout: req.Timeout, maxOutput: req.MaxOutput, pty: req.PTY}
	spec.stdin = stdinOf(req)
	spec.hook(req.hooks)
	var text string
	switch {
	case req.Command != "":
		if executable(shell) != nil {
			return Result{}, fault.Unsupported("this sandbox", "shell ("+shell+" is not installed)")
		}
		spec.path, text = shell, req.Command
	case req.Code != "":
		interp, err := r.interpreter(req.Language)
		if err != nil {
			return Result{}, err
		}
		spec.path, text = interp, req.Code
	default:
		p, err := lookPath(req.Argv[0], envValue(env, "PATH"), cwd)
		if err != nil {
			return r.notStarted(out, req.Argv[0], err), nil
		}
		spec.path, spec.args = p, req.Argv
	}
	if spec.args == nil {
		switch {
		case len(text) <= argvMax:
			spec.args = []string{spec.path, "-c", text}
		case req.Language == "python":
			spec.args, spec.script = []string{spec.path, "-c", pythonFromFD3}, text
		default:
			spec.args, spec.script = []string{spec.path, "/dev/fd/3"}, text
		}
	}
	ectx, cancel := r.execContext(ctx)
	defer cancel(nil)
	res, err := r.run(ectx, spec, out)
	if err != nil && ectx.Err() != nil {
		return res, r.cancelled(ctx, ectx)
	}
	return res, err
}

// notStarted is the Result of a program that could not be started: 127 when it does not
// exist, 126 otherwise, with the reason on stderr.
func (r *Runtime) notStarted(out Streams, name string, err error) Result {
	code, why := exitNotExecutable, "cannot execute"
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code, why = exitNotFound, "command not found"
	case errors.Is(err, syscall.EAGAIN):
		why = "cannot start a process: the sandbox is at its process limit (pids_limit); end some processes or contexts"
	}
	if out.Stderr != nil {
		_, _ = fmt.Fprintf(out.Stderr, "sandboxd: %s: %s\n", name, why)
	}
	return Result{ExitCode: code}
}

// execContext derives the context of one execution: it ends with ctx, or with cause
// errShutdown when Close is called.
func (r *Runtime) execContext(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	ectx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(r.life, func() { cancel(errShutdown) })
	return ectx, func(cause error) {
		stop()
		cancel(cause)
	}
}

// cancelled returns the error of an execution whose context ectx (derived from ctx) ended:
// ctx's own error, or fault.Gone when Close killed it, or the cause it was cancelled with.
func (r *Runtime) cancelled(ctx, ectx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cause := context.Cause(ectx)
	if errors.Is(cause, errShutdown) {
		return fault.New(fault.Gone, "%s: the execution was killed", errShutdown)
	}
	return cause
}

// runSpec is one program for run.
type runSpec struct {
	path      string   // absolute path of the program
	args      []string // argv, args[0] included
	script    string   // fed on file descriptor 3 when not empty
	dir       string
	env       []string
	stdin     io.Reader // nil: /dev/null
	stdinFile *os.File  // the program's end of an open input (StdinOpen): given as is, not fed
	pty       *TermSize // run on a new terminal of this size
	onStart   func(pid int, term *os.File)
	timeout   time.Duration
	maxOutput int64
}

// hook connects spec to a kept execution's hooks (nil: nothing to connect).
func (spec *runSpec) hook(h *execHooks) {
	if h == nil {
		return
	}
	if h.stdin != nil {
		spec.stdin, spec.stdinFile = nil, h.stdin
	}
	spec.onStart = h.onStart
}

// run starts spec in its own session, streams its output, and supervises it until it and its
// session are gone (see the package doc). It returns ctx.Err() with the partial Result when
// ctx ended first.
func (r *Runtime) run(ctx context.Context, spec runSpec, out Streams) (Result, error) {
	cmd := &exec.Cmd{Path: spec.path, Args: spec.args, Dir: spec.dir, Env: spec.env}
	if cmd.Env == nil {
		cmd.Env = []string{} // never sandboxd's own environment
	}
	var (
		capt      *capture
		childEnds []*os.File
		term      *os.File // the terminal's master (spec.pty)
	)
	if spec.pty != nil {
		master, tty, err := pty.Open()
		if err != nil {
			return Result{}, fault.Wrap(fault.Capability, err, "sandboxd: this sandbox cannot open a pseudo-terminal")
		}
		_ = pty.Setsize(master, &pty.Winsize{Rows: spec.pty.Rows, Cols: spec.pty.Cols})
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setctty: true, Ctty: 0}
		childEnds, term = []*os.File{tty}, master
		capt = captureOf(master, out.Stdout, spec.maxOutput)
	} else {
		c, stdout, stderr, err := newCapture(out, spec.maxOutput)
		if err != nil {
			return Result{}, fmt.Errorf("sandboxd: making output pipes: %w", err)
		}
		capt, cmd.Stdout, cmd.Stderr = c, stdout, stderr
		childEnds = []*os.File{stdout, stderr}
		if spec.stdinFile != nil {
			cmd.Stdin, childEnds = spec.stdinFile, append(childEnds, spec.stdinFile)
		}
	}
	var stdin, script *feeder
	fail := func(err error) (Result, error) {
		closeFiles(childEnds)
		stdin.stop()
		script.stop()
		capt.drain(0)
		return Result{}, fmt.Errorf("sandboxd: starting %s: %w", spec.path, err)
	}
	if spec.stdin != nil && spec.pty == nil {
		child, f, err := newFeeder(spec.stdin, r.drainDelay)
		if err != nil {
			return fail(err)
		}
		childEnds, stdin, cmd.Stdin = append(childEnds, child), f, child
	}
	if spec.script != "" {
		child, f, err := newFeeder(strings.NewReader(spec.script), r.drainDelay)
		if err != nil {
			return fail(err)
		}
		childEnds, script, cmd.ExtraFiles = append(childEnds, child), f, []*os.File{child}
	}

	var deadline <-chan time.Time
	if spec.timeout > 0 {
		timer := time.NewTimer(spec.timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	r.givePrograms(childEnds)
	cmd.SysProcAttr = r.credential(cmd.SysProcAttr)
	oomBefore := oomKills()
	proc, err := r.orphans.start(cmd, r.cgroups)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EAGAIN)) {
			closeFiles(childEnds)
			stdin.stop()
			script.stop()
			capt.drain(0)
			return r.notStarted(out, spec.args[0], err), nil
		}
		return fail(err)
	}
	closeFiles(childEnds)
	if spec.onStart != nil {
		spec.onStart(proc.Pid(), term)
	}

	exited := proc.Exited()
	var timedOut bool
	var ctxErr error
	select {
	case <-exited:
	case <-deadline:
		select {
		case <-exited: // finished at the deadline: not a timeout
		default:
			timedOut = true
		}
	case <-ctx.Done():
		select {
		case <-exited:
		default:
			ctxErr = ctx.Err()
		}
	}
	if timedOut || ctxErr != nil {
		proc.Terminate(r.killGrace)
		r.log.Debug("sandboxd: execution killed", "timed_out", timedOut, "reason", context.Cause(ctx))
	}
	// Wait kills whatever the program left running in its session, then reaps it; the pipes
	// then reach EOF unless a process that escaped the session holds them.
	ps, waitErr := proc.Wait()
	r.orphans.forget(proc)
	capt.drain(r.drainDelay)
	stdin.stop()
	script.stop()
	if ps == nil {
		return Result{}, fmt.Errorf("sandboxd: waiting for %s: %w", spec.path, waitErr)
	}
	code, sig := procgroup.ExitStatus(ps)
	res := Result{
		ExitCode:  code,
		Signal:    sig,
		TimedOut:  timedOut,
		Truncated: capt.truncated.Load(),
		OOMKilled: oomKills() > oomBefore,
	}
	return res, ctxErr
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// stdinOf is req's standard input: StdinReader, else Stdin; nil (/dev/null) when neither
// has anything.
func stdinOf(req ExecRequest) io.Reader {
	if req.StdinReader != nil {
		return req.StdinReader
	}
	if len(req.Stdin) > 0 {
		return bytes.NewReader(req.Stdin)
	}
	return nil
}
