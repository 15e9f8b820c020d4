//go:build unix

package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
	"github.com/sandgate/sandgate/internal/providers"
)

// argvMax is the longest program text passed as an argument; longer text goes through a pipe
// on file descriptor 3 (Linux limits one argument to 128 KiB).
const argvMax = 64 << 10

// pythonFromFD3 runs the code read from file descriptor 3 the way `python -c` would: the
// program still sees sys.argv[0] == "-c", sys.path[0] == "" and tracebacks in "<string>".
const pythonFromFD3 = `exec(compile(open(3, encoding="utf-8").read(), "<string>", "exec"))`

// Exec runs spec to completion in the sandbox folder (see the package doc for how) and
// returns how it ended; a non-zero exit is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.Policy or
// fault.NotFound for a working folder that escapes or is missing, fault.Validation when it is
// not a folder; fault.Gone when the sandbox was destroyed; fault.Conflict on a closed handle;
// ctx.Err() (with the status of the killed program) when ctx ends first; fault.Gone when
// Destroy removed the sandbox meanwhile.
//
// spec.Stdin (unless an *os.File, handed over as is) is copied into a pipe by a goroutine.
// Once the program has ended Exec waits for that copy at most DrainDelay: a Stdin whose Read
// blocks does not hold Exec up, and the goroutine ends when that Read returns, writing nothing
// more.
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
	if spec.Context != "" {
		return s.execContext(ctx, spec)
	}
	cwd, err := s.workingDir(spec.Dir)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	argv, script := s.p.argv(spec)
	env := s.p.environ(s.id, cwd, spec.Env)
	ex, untrack := s.p.track(s.id)
	defer untrack()
	st, err := s.p.run(ctx, ex.destroyed, argv, script, cwd, env, spec)
	if errors.Is(err, errDestroyed) {
		return st, fault.New(fault.Gone, "%s: sandbox '%s' was destroyed during the execution", TypeName, s.id)
	}
	return st, err
}

// errDestroyed ends run when Destroy killed the program.
var errDestroyed = errors.New("sandbox destroyed")

// workingDir resolves workspace folder dir to an absolute path without symlinks inside the
// sandbox folder.
func (s *Sandbox) workingDir(dir string) (string, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return s.id, nil
	}
	st, err := s.root.Stat(clean)
	if err != nil {
		return "", s.pathErr(dir, err)
	}
	if !st.IsDir() {
		return "", fault.New(fault.Validation, "working folder '%s' is not a folder", dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(s.id, filepath.FromSlash(clean)))
	if err != nil {
		return "", s.pathErr(dir, err)
	}
	if real != s.id && !strings.HasPrefix(real, s.id+string(filepath.Separator)) {
		return "", fault.New(fault.Policy, "path '%s' escapes the sandbox workspace", dir)
	}
	return real, nil
}

// argv returns the program's argument vector and, when the text is too long for argv, the
// text to feed on file descriptor 3.
func (p *Provider) argv(spec providers.ExecSpec) (argv []string, script string) {
	interp, text := shell, spec.Command
	switch {
	case spec.Command != "":
	case spec.Language == "python":
		interp, text = p.python, spec.Code
	case spec.Language == "bash":
		interp, text = p.bash, spec.Code
	}
	if len(text) <= argvMax {
		return []string{interp, "-c", text}, ""
	}
	if interp == p.python {
		return []string{interp, "-c", pythonFromFD3}, text
	}
	return []string{interp, "/dev/fd/3"}, text
}

// environ builds the program's environment: the minimal base, then extra (which may override
// the base), sorted by name.
func (p *Provider) environ(workspace, cwd string, extra map[string]string) []string {
	vars := map[string]string{
		"PATH":             p.pathEnv,
		"HOME":             workspace,
		"TMPDIR":           workspace,
		"PWD":              cwd,
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

// run starts argv in its own session and supervises it until it and its session are gone.
func (p *Provider) run(ctx context.Context, destroyed <-chan struct{}, argv []string, script, cwd string, env []string, spec providers.ExecSpec) (providers.ExitStatus, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = env

	// Every standard stream is an *os.File of ours (or nil: /dev/null, an immediate EOF for
	// stdin), so exec.Cmd runs no copying goroutines and Wait returns as soon as the process is
	// reaped (it would otherwise wait for EOF on its pipes, or for a blocked Stdin.Read); copying
	// ends when we decide.
	var (
		childEnds []*os.File // the child's ends; closed here once it started
		readers   []*os.File // our ends of the output pipes
		copiers   sync.WaitGroup
		scriptW   *os.File // our end of the fd-3 pipe carrying long program text
		stdinW    *os.File // our end of the stdin pipe
	)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	outPipe := func(w io.Writer) (*os.File, error) {
		r, cw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		childEnds = append(childEnds, cw)
		readers = append(readers, r)
		copiers.Go(func() { copyOutput(w, r) })
		return cw, nil
	}
	fail := func(err error) (providers.ExitStatus, error) {
		closeAll(childEnds)
		closeAll(readers)
		closeAll(slices.DeleteFunc([]*os.File{scriptW, stdinW}, func(f *os.File) bool { return f == nil }))
		copiers.Wait()
		return providers.ExitStatus{}, fmt.Errorf("%s: starting %s: %w", TypeName, argv[0], err)
	}

	if spec.Stdout != nil {
		w, err := outPipe(spec.Stdout)
		if err != nil {
			return fail(err)
		}
		cmd.Stdout = w
	}
	switch {
	case spec.Stderr == nil:
	case spec.Stdout != nil && sameWriter(spec.Stdout, spec.Stderr):
		cmd.Stderr = cmd.Stdout // one pipe keeps one writer single-threaded and in order
	default:
		w, err := outPipe(spec.Stderr)
		if err != nil {
			return fail(err)
		}
		cmd.Stderr = w
	}
	if f, ok := spec.Stdin.(*os.File); ok {
		cmd.Stdin = f
	} else if spec.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		childEnds = append(childEnds, r)
		stdinW = w
		cmd.Stdin = r
	}
	if script != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		childEnds = append(childEnds, r)
		scriptW = w
		cmd.ExtraFiles = []*os.File{r}
	}

	var deadline <-chan time.Time
	if spec.Timeout > 0 {
		timer := time.NewTimer(spec.Timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	proc, err := procgroup.Start(cmd) // the child leads its own session and process group
	if err != nil {
		return fail(err)
	}
	closeAll(childEnds)

	var feeder sync.WaitGroup
	if scriptW != nil {
		feeder.Go(func() {
			_, _ = io.WriteString(scriptW, script)
			_ = scriptW.Close()
		})
	}
	stdinDone := make(chan struct{})
	if stdinW != nil {
		go func() {
			defer close(stdinDone)
			_, _ = io.Copy(stdinW, spec.Stdin) // EPIPE once the program is gone
			_ = stdinW.Close()
		}()
	} else {
		close(stdinDone)
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
	case <-destroyed:
		select {
		case <-exited:
		default:
			ctxErr = errDestroyed
		}
	}
	if timedOut || ctxErr != nil {
		proc.Terminate(p.killGrace())
		p.logger.Debug("execution killed", "timed_out", timedOut, "reason", ctxErr)
	}
	// Wait kills whatever the direct child left running in its session, then reaps it.
	_, waitErr := proc.Wait()

	// Every process of the session is dead, so the pipes reach EOF once drained, unless a
	// process that left the session holds them: read for at most DrainDelay more.
	drained := make(chan struct{})
	go func() { copiers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(p.drainDelay()):
		closeAll(readers)
		<-drained
	}
	closeAll(readers)
	if scriptW != nil {
		_ = scriptW.Close() // unblocks a feeder whose reader is gone
	}
	feeder.Wait()
	if stdinW != nil {
		_ = stdinW.Close() // unblocks a stdin copy waiting to write
		select {
		case <-stdinDone:
		case <-time.After(p.drainDelay()):
			p.logger.Debug("execution ended while its stdin was still being read; not waiting for it")
		}
	}

	if cmd.ProcessState == nil {
		return providers.ExitStatus{}, fmt.Errorf("%s: waiting for %s: %w", TypeName, argv[0], waitErr)
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		p.logger.Warn("waiting for an execution failed", "error", waitErr)
	}
	st := exitStatus(cmd.ProcessState)
	st.TimedOut = timedOut
	if ctxErr != nil {
		return st, ctxErr
	}
	return st, nil
}

// copyOutput copies r to w; when w fails it keeps draining r so the program never blocks on a
// full pipe.
func copyOutput(w io.Writer, r io.Reader) {
	if _, err := io.Copy(w, r); err != nil {
		_, _ = io.Copy(io.Discard, r)
	}
}

// sameWriter reports whether a and b are the same writer (comparable and equal).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // uncomparable dynamic type
		}
	}()
	return a == b
}

// exitStatus turns a process state into an ExitStatus: the exit code, or 128+n and the
// signal's name when signal n ended the process.
func exitStatus(ps *os.ProcessState) providers.ExitStatus {
	code, sig := procgroup.ExitStatus(ps)
	return providers.ExitStatus{ExitCode: code, Signal: sig}
}
