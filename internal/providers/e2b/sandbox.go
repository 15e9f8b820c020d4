package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// Sandbox is a handle on one E2B sandbox. It holds no connection: every call is a request
// to the sandbox's envd (or code interpreter).
type Sandbox struct {
	p       *Provider
	id      string
	domain  string
	token   string // envd access token
	traffic string // traffic access token of the other ports ("" when they are public)
	st      *sandboxState
	closed  atomic.Bool
}

var _ providers.Sandbox = (*Sandbox)(nil)

// ID is E2B's sandbox id.
func (s *Sandbox) ID() string { return s.id }

// Close forgets the handle; the sandbox runs on (Attach finds it again). Idempotent.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	return nil
}

func (s *Sandbox) open() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "e2b: the handle on sandbox %s is closed", s.id)
	}
	return nil
}

// argMax is the longest program text passed as an argument; longer ones are fed on standard
// input ahead of the caller's (the kernel refuses one argument over 128 KiB).
const argMax = 64 << 10

// pythonBootstrap reads n (its first argument) bytes of program from standard input and runs
// them as __main__, leaving the rest of standard input to the program.
const pythonBootstrap = `import os as _o, sys as _s
def _r(n):
    b = bytearray()
    while len(b) < n:
        c = _o.read(0, n - len(b))
        if not c:
            break
        b += c
    return bytes(b)
_c = compile(_r(int(_s.argv[1])), "<string>", "exec")
del _r, _o
_s.argv = ["-c"]
exec(_c)
`

// shellBootstrap does the same for sh and bash: head -c reads exactly n bytes.
const shellBootstrap = `eval "$(head -c "$1")"`

// killGrace is how long Exec waits for the end of a process it killed.
const killGrace = 30 * time.Second

// Exec runs one program through envd (process.Process/Start): a command as /bin/sh -c, python
// code with the configured interpreter's -c, bash code with bash -c, each in the workspace (or
// spec.Dir, confined like every path) with spec.Env added natively to envd's environment
// (python code also gets PYTHONUNBUFFERED=1). Program text over 64 KiB goes on standard input
// ahead of spec.Stdin, read by a small bootstrap. Output is written as envd streams it. Code
// naming a context runs in the code interpreter instead (CodeSandbox).
//
// When spec.Timeout passes, or ctx ends, the process gets SIGKILL through envd
// (SendSignal): TimedOut, or ctx.Err(). envd signals the process it started only; see the
// package doc on process trees. Errors: CheckExecSpec's; a fault.Policy working folder;
// providers.ErrUnreached (wrapped) when envd could not be reached and nothing ran.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.open(); err != nil {
		return providers.ExitStatus{}, err
	}
	if spec.Context != "" {
		return providers.ExitStatus{}, fault.Unsupported(TypeName, "stateful")
	}
	cwd, err := s.workingDir(ctx, spec.Dir)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	var cmd string
	var args []string
	program := spec.Command
	switch {
	case spec.Command != "":
		cmd, args = "/bin/sh", []string{"-c", spec.Command}
	case spec.Language == "python":
		cmd, args, program = s.p.cfg.Python, []string{"-c", spec.Code}, spec.Code
		if _, ok := env["PYTHONUNBUFFERED"]; !ok {
			env["PYTHONUNBUFFERED"] = "1"
		}
	case spec.Language == "bash":
		cmd, args, program = "bash", []string{"-c", spec.Code}, spec.Code
	}
	var prefix []byte
	if len(program) > argMax {
		prefix = []byte(program)
		n := strconv.Itoa(len(prefix))
		if spec.Language == "python" {
			args = []string{"-c", pythonBootstrap, n}
		} else {
			args = []string{"-c", shellBootstrap, "sandgate", n}
		}
	}
	return s.run(ctx, cmd, args, env, cwd, prefix, spec.Stdin, spec.Timeout, spec.Output)
}

// InstallPackages runs `python3 -m pip install <packages>` through envd. Errors:
// fault.Validation for an empty list or a name that is empty or starts with "-".
func (s *Sandbox) InstallPackages(ctx context.Context, packages []string, out providers.Output) (providers.ExitStatus, error) {
	if err := s.open(); err != nil {
		return providers.ExitStatus{}, err
	}
	if len(packages) == 0 {
		return providers.ExitStatus{}, fault.New(fault.Validation, "give at least one package to install")
	}
	for _, p := range packages {
		if p == "" || strings.HasPrefix(p, "-") || strings.ContainsRune(p, 0) {
			return providers.ExitStatus{}, fault.New(fault.Validation, "invalid package name %q", p)
		}
	}
	args := append([]string{"-m", "pip", "install", "--disable-pip-version-check"}, packages...)
	return s.run(ctx, s.p.cfg.Python, args, nil, s.p.cfg.Workdir, nil, nil, 0, out)
}

// run starts cmd args in cwd and follows it to its end; prefix and then stdin are fed to its
// standard input.
func (s *Sandbox) run(ctx context.Context, cmd string, args []string, env map[string]string, cwd string, prefix []byte, stdin io.Reader, timeout time.Duration, out providers.Output) (providers.ExitStatus, error) {
	streamCtx, cancelStream := context.WithCancel(ctx)
	defer cancelStream()
	if timeout > 0 {
		// envd kills the process itself this long after our own timeout, should the gateway
		// be gone by then (envd takes the request's deadline as the process's).
		var cancel context.CancelFunc
		streamCtx, cancel = context.WithTimeout(streamCtx, timeout+killGrace)
		defer cancel()
	}
	feed := prefix != nil || stdin != nil
	req := &wire.StartRequest{Process: &wire.ProcessConfig{Cmd: cmd, Args: args, Envs: env, Cwd: &cwd}, Stdin: &feed}
	stream, err := s.startProcess(streamCtx, req)
	if err != nil {
		return providers.ExitStatus{}, startError(err)
	}
	defer stream.Close()

	var (
		pid      uint32
		started  bool
		timedOut atomic.Bool
		killOnce sync.Once
		feeder   sync.WaitGroup
	)
	kill := func() {
		killOnce.Do(func() {
			if !started {
				return
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, err := unary[wire.SendSignalRequest, wire.Empty](kctx, s, wire.ProcSendSignal, &wire.SendSignalRequest{Process: wire.PidSelector(pid), Signal: wire.SignalSIGKILL})
			if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
				s.p.logger.Warn("e2b: killing a process failed", "sandbox", s.id, "pid", pid, "error", err)
			}
		})
	}
	feedCtx, stopFeed := context.WithCancel(streamCtx)
	defer func() {
		stopFeed()
		feeder.Wait()
	}()
	var timer *time.Timer
	var killDeadline <-chan time.Time
	refresh := s.refresher(ctx)
	defer refresh.stop()

	for stream.Receive() {
		ev := stream.Msg().Event
		switch {
		case ev == nil:
		case ev.Start != nil && !started:
			started, pid = true, ev.Start.Pid
			if feed {
				feeder.Add(1)
				go func() {
					defer feeder.Done()
					if err := s.feedStdin(feedCtx, pid, prefix, stdin); err != nil && feedCtx.Err() == nil {
						s.p.logger.Debug("e2b: feeding standard input stopped", "sandbox", s.id, "error", err)
					}
				}()
			}
			if timeout > 0 {
				timer = time.AfterFunc(timeout, func() {
					timedOut.Store(true)
					kill()
				})
				defer timer.Stop()
			}
		case ev.Data != nil:
			if len(ev.Data.Stdout) > 0 && out.Stdout != nil {
				_, _ = out.Stdout.Write(ev.Data.Stdout)
			}
			if len(ev.Data.Stderr) > 0 && out.Stderr != nil {
				_, _ = out.Stderr.Write(ev.Data.Stderr)
			}
		case ev.End != nil:
			st := endStatus(ev.End)
			st.TimedOut = timedOut.Load()
			return st, nil
		}
		if timedOut.Load() && killDeadline == nil {
			killDeadline = time.After(killGrace)
		}
		select {
		case <-killDeadline:
			return providers.ExitStatus{TimedOut: true}, nil
		default:
		}
	}
	err = stream.Err()
	if ctx.Err() != nil {
		kill()
		return providers.ExitStatus{}, ctx.Err()
	}
	if timedOut.Load() {
		return providers.ExitStatus{TimedOut: true}, nil
	}
	if err == nil {
		err = errors.New("the process stream ended without an end event")
	}
	if !started {
		return providers.ExitStatus{}, startError(err)
	}
	kill()
	return providers.ExitStatus{}, fault.Wrap(fault.Provision, err, "e2b: following the program in sandbox %s", s.id)
}

// feedStdin writes prefix, then r, to process pid's standard input in chunks, and closes it.
func (s *Sandbox) feedStdin(ctx context.Context, pid uint32, prefix []byte, r io.Reader) error {
	const chunk = 64 << 10
	send := func(b []byte) error {
		_, err := unary[wire.SendInputRequest, wire.Empty](ctx, s, wire.ProcSendInput, &wire.SendInputRequest{Process: wire.PidSelector(pid), Input: &wire.ProcessInput{Stdin: b}})
		return err
	}
	for len(prefix) > 0 {
		n := min(chunk, len(prefix))
		if err := send(prefix[:n]); err != nil {
			return err
		}
		prefix = prefix[n:]
	}
	if r != nil {
		buf := make([]byte, chunk)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if err := send(buf[:n]); err != nil {
					return err
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
	}
	_, err := unary[wire.CloseStdinRequest, wire.Empty](ctx, s, wire.ProcCloseStdin, &wire.CloseStdinRequest{Process: wire.PidSelector(pid)})
	return err
}

// endStatus maps envd's end event: an exit code, or — for a process a signal ended, which
// envd reports as exit code -1 with status "signal: killed" (Go's os.ProcessState) —
// 128+n and the signal's name.
func endStatus(ev *wire.EndEvent) providers.ExitStatus {
	if ev.Exited || !strings.HasPrefix(ev.Status, "signal: ") {
		return providers.ExitStatus{ExitCode: int(ev.ExitCode)}
	}
	desc := strings.TrimSuffix(strings.TrimPrefix(ev.Status, "signal: "), " (core dumped)")
	for n := unix.Signal(1); n < 65; n++ {
		if n.String() == desc {
			return providers.ExitStatus{ExitCode: 128 + int(n), Signal: unix.SignalName(n)}
		}
	}
	return providers.ExitStatus{ExitCode: int(ev.ExitCode)}
}

// refresher extends the sandbox's timeout every half idle timeout while an execution runs,
// so that a long execution counts as use (docs/semantics.md §8).
type refresher struct{ done chan struct{} }

func (s *Sandbox) refresher(ctx context.Context) refresher {
	r := refresher{done: make(chan struct{})}
	every := s.p.idle / 2
	if every < time.Second {
		every = time.Second
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				if err := s.p.api.setTimeout(rctx, s.id, s.p.timeoutSeconds()); err != nil {
					s.p.logger.Warn("e2b: refreshing the sandbox timeout failed", "sandbox", s.id, "error", err)
				}
				cancel()
			case <-r.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return r
}

func (r refresher) stop() { close(r.done) }

// startError classifies a failure to start a process: envd (or E2B's proxy, which answers 502
// for a sandbox it no longer has) unreachable wraps providers.ErrUnreached — nothing ran, and
// the domain attaches again; anything else is envdError's.
func startError(err error) error {
	if c := connect.CodeOf(err); c == connect.CodeUnavailable || c == connect.CodeUnknown && !errors.As(err, new(*connect.Error)) {
		return fault.Wrap(fault.Provision, fmt.Errorf("%w: %w", providers.ErrUnreached, err), "e2b: starting the program")
	}
	return envdError(err, "starting the program")
}
