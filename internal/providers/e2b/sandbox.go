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
// The process is tagged spec.ID (when given), so that Reattach, WriteStdin, Resize and Stop
// find it from any gateway. With spec.StdinOpen its standard input stays open after
// spec.Stdin (WriteStdin feeds it); with spec.PTY the command runs on a terminal of that size
// (envd's pty: one output stream, written to Stdout; TERM=xterm-256color unless spec.Env sets
// it; spec.Stdin is typed into it first).
//
// When spec.Timeout passes, or ctx ends, the process gets SIGKILL through envd
// (SendSignal): TimedOut, or ctx.Err(). envd signals the process it started only; see the
// package doc on process trees. Errors: CheckExecSpec's; a fault.Policy working folder;
// fault.Validation for a background spec (Start runs those) and for a command over 64 KiB on
// a terminal; fault.Conflict when this gateway runs an interactive execution of the same id;
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
	if spec.Background {
		return providers.ExitStatus{}, fault.New(fault.Validation, "e2b: a background process is started (Executions.Start), not run to its end")
	}
	ps, err := s.procSpec(ctx, spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	var x *execution
	if ps.open {
		if x, err = s.st.register(ctx, spec.ID, ps.pty != nil, nil); err != nil {
			return providers.ExitStatus{}, err
		}
		defer s.st.done(spec.ID, x)
	}
	return s.run(ctx, ps, x, spec.Output)
}

// procSpec is one envd process to start.
type procSpec struct {
	cmd     string
	args    []string
	env     map[string]string
	cwd     string
	tag     string              // the execution id ("" for none)
	pty     *providers.TermSize // run on a terminal of this size
	prefix  []byte              // program text fed ahead of stdin (programs over argMax)
	stdin   io.Reader           // the first input; nil for none
	open    bool                // the input stays open after prefix and stdin (StdinOpen, PTY)
	timeout time.Duration
}

// feeds reports whether the process's input is written to at all.
func (ps procSpec) feeds() bool { return ps.open || ps.prefix != nil || ps.stdin != nil }

// procSpec maps spec (a command or context-less code, checked) onto the process that runs it.
func (s *Sandbox) procSpec(ctx context.Context, spec providers.ExecSpec) (procSpec, error) {
	cwd, err := s.workingDir(ctx, spec.Dir)
	if err != nil {
		return procSpec{}, err
	}
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	ps := procSpec{cwd: cwd, env: env, tag: spec.ID, pty: spec.PTY, stdin: spec.Stdin,
		open: spec.StdinOpen || spec.PTY != nil, timeout: spec.Timeout}
	program := spec.Command
	switch {
	case spec.Command != "":
		ps.cmd, ps.args = "/bin/sh", []string{"-c", spec.Command}
	case spec.Language == "python":
		ps.cmd, ps.args, program = s.p.cfg.Python, []string{"-c", spec.Code}, spec.Code
		if _, ok := env["PYTHONUNBUFFERED"]; !ok {
			env["PYTHONUNBUFFERED"] = "1"
		}
	case spec.Language == "bash":
		ps.cmd, ps.args, program = "bash", []string{"-c", spec.Code}, spec.Code
	}
	if spec.PTY != nil {
		if _, ok := env["TERM"]; !ok {
			env["TERM"] = "xterm-256color"
		}
	}
	if len(program) > argMax {
		if spec.PTY != nil {
			// The bootstrap reads the program from standard input, which a terminal echoes.
			return procSpec{}, fault.New(fault.Validation, "e2b: a command on a terminal is limited to %d KiB; put a longer one in a file and run that", argMax>>10)
		}
		ps.prefix = []byte(program)
		n := strconv.Itoa(len(ps.prefix))
		if spec.Language == "python" {
			ps.args = []string{"-c", pythonBootstrap, n}
		} else {
			ps.args = []string{"-c", shellBootstrap, "sandgate", n}
		}
	}
	return ps, nil
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
	return s.run(ctx, procSpec{cmd: s.p.cfg.Python, args: args, cwd: s.p.cfg.Workdir}, nil, out)
}

// startStream starts ps (process.Process/Start) and reads its stream up to the start event:
// it returns the stream, positioned after it, and the process id. The stream lives in ctx:
// its deadline is the process's (envd kills the process when it passes), its end only
// disconnects (envd keeps the process running). Errors: startError's.
func (s *Sandbox) startStream(ctx context.Context, ps procSpec) (*connect.ServerStreamForClient[wire.StartResponse], uint32, error) {
	cwd := ps.cwd
	req := &wire.StartRequest{Process: &wire.ProcessConfig{Cmd: ps.cmd, Args: ps.args, Envs: ps.env, Cwd: &cwd}}
	if ps.tag != "" {
		tag := ps.tag
		req.Tag = &tag
	}
	if ps.pty != nil {
		req.Pty = &wire.PTY{Size: &wire.PTYSize{Cols: uint32(ps.pty.Cols), Rows: uint32(ps.pty.Rows)}}
	} else {
		feed := ps.feeds()
		req.Stdin = &feed
	}
	stream, err := s.startProcess(ctx, req)
	if err != nil {
		return nil, 0, startError(err)
	}
	for stream.Receive() {
		if ev := stream.Msg().Event; ev != nil && ev.Start != nil {
			return stream, ev.Start.Pid, nil
		}
	}
	err = stream.Err()
	_ = stream.Close()
	if err == nil {
		err = errors.New("the process stream ended before the process started")
	}
	return nil, 0, startError(err)
}

// run starts ps and follows it to its end, writing its output to out. x, when not nil, is
// the execution's entry in this process (interactive executions): its input is ready for
// WriteStdin once the first input is in.
func (s *Sandbox) run(ctx context.Context, ps procSpec, x *execution, out providers.Output) (providers.ExitStatus, error) {
	streamCtx, cancelStream := context.WithCancel(ctx)
	defer cancelStream()
	if ps.timeout > 0 {
		// envd kills the process itself this long after our own timeout, should the gateway
		// be gone by then (envd takes the request's deadline as the process's).
		var cancel context.CancelFunc
		streamCtx, cancel = context.WithTimeout(streamCtx, ps.timeout+killGrace)
		defer cancel()
	}
	stream, pid, err := s.startStream(streamCtx, ps)
	if err != nil {
		if x != nil {
			x.inputReady()
		}
		return providers.ExitStatus{}, err
	}
	defer stream.Close()

	var (
		timedOut atomic.Bool
		killOnce sync.Once
		feeder   sync.WaitGroup
	)
	kill := func() {
		killOnce.Do(func() { s.kill(context.WithoutCancel(ctx), wire.PidSelector(pid)) })
	}
	feedCtx, stopFeed := context.WithCancel(streamCtx)
	defer func() {
		stopFeed()
		feeder.Wait()
	}()
	feeder.Add(1)
	go func() {
		defer feeder.Done()
		if err := s.feedInput(feedCtx, pid, ps, x); err != nil && feedCtx.Err() == nil {
			s.p.logger.Debug("e2b: feeding standard input stopped", "sandbox", s.id, "error", err)
		}
	}()
	var killDeadline <-chan time.Time
	if ps.timeout > 0 {
		timer := time.AfterFunc(ps.timeout, func() {
			timedOut.Store(true)
			kill()
		})
		defer timer.Stop()
	}
	refresh := s.refresher(ctx)
	defer refresh.stop()

	for stream.Receive() {
		ev := stream.Msg().Event
		switch {
		case ev == nil:
		case ev.Data != nil:
			writeData(ev.Data, out)
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
	kill()
	return providers.ExitStatus{}, fault.Wrap(fault.Provision, err, "e2b: following the program in sandbox %s", s.id)
}

// writeData writes one data event to out: a terminal's output (pty) is Stdout.
func writeData(d *wire.DataEvent, out providers.Output) {
	if len(d.Stdout) > 0 && out.Stdout != nil {
		_, _ = out.Stdout.Write(d.Stdout)
	}
	if len(d.Pty) > 0 && out.Stdout != nil {
		_, _ = out.Stdout.Write(d.Pty)
	}
	if len(d.Stderr) > 0 && out.Stderr != nil {
		_, _ = out.Stderr.Write(d.Stderr)
	}
}

// kill sends SIGKILL to the process sel selects (a process that is gone already is fine).
func (s *Sandbox) kill(ctx context.Context, sel *wire.ProcessSelector) {
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := unary[wire.SendSignalRequest, wire.Empty](kctx, s, wire.ProcSendSignal, &wire.SendSignalRequest{Process: sel, Signal: wire.SignalSIGKILL})
	if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		s.p.logger.Warn("e2b: killing a process failed", "sandbox", s.id, "error", err)
	}
}

// inputChunk is the most bytes one SendInput carries.
const inputChunk = 64 << 10

// feedInput writes ps's first input to process pid — the program prefix, then ps.stdin, in
// chunks (typed into its terminal for a pty) — and closes the input unless ps.open. x, when
// not nil, holds other writers of this process back until then.
func (s *Sandbox) feedInput(ctx context.Context, pid uint32, ps procSpec, x *execution) error {
	if x != nil {
		defer x.inputReady()
	}
	if !ps.feeds() {
		return nil
	}
	sel := wire.PidSelector(pid)
	send := func(b []byte) error {
		in := &wire.ProcessInput{Stdin: b}
		if ps.pty != nil {
			in = &wire.ProcessInput{Pty: b}
		}
		_, err := unary[wire.SendInputRequest, wire.Empty](ctx, s, wire.ProcSendInput, &wire.SendInputRequest{Process: sel, Input: in})
		return err
	}
	for prefix := ps.prefix; len(prefix) > 0; {
		n := min(inputChunk, len(prefix))
		if err := send(prefix[:n]); err != nil {
			return err
		}
		prefix = prefix[n:]
	}
	if ps.stdin != nil {
		buf := make([]byte, inputChunk)
		for {
			n, err := ps.stdin.Read(buf)
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
	if ps.open {
		return nil
	}
	_, err := unary[wire.CloseStdinRequest, wire.Empty](ctx, s, wire.ProcCloseStdin, &wire.CloseStdinRequest{Process: sel})
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
