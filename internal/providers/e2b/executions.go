package e2b

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/outlog"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// Kept executions (providers.Executions) on envd: every execution with an id is an envd
// process tagged with that id, so any gateway finds it by the id alone — Connect follows it,
// SendInput and CloseStdin feed it, Update resizes its terminal, SendSignal stops it.
//
// envd replays nothing: a Connect gets what the process writes from then on. So the gateway
// that starts a background process (Start) keeps its start stream — which carries the output
// from the first byte — and copies it into a bounded log in this process (the start and the
// end of each stream, keptOutputBytes each), which Reattach through any handle of this
// provider follows from its start. That is how the domain's own follower, which attaches right
// after Start, sees all of the output. Any other follower (another replica, a gateway that
// adopts the task after this one died) connects by tag and sees the output from the moment it
// connected; byte offsets then count from there.

var (
	_ providers.Executions = (*Sandbox)(nil)
	_ providers.Executions = (*CodeSandbox)(nil)
)

// Bounds of the executions this process keeps.
const (
	// keptOutputBytes is how much of each stream of a started execution this process keeps
	// for its followers: half from its start, half from its end (package outlog).
	keptOutputBytes = 2 << 20
	// keepEnded is how long an ended execution's output and end stay here for followers.
	keepEnded = 5 * time.Minute
	// reconnects bounds how often a broken process stream is connected again.
	reconnects = 3
)

// StoppedDir is the sandbox folder (outside the workspace) where Stop records the executions
// it stopped, one empty file per execution, named by a hash of its id: a follower on any
// gateway that sees the process die of a signal looks there to tell a stop from a kill by
// someone else (providers.ErrExecutionStopped).
const StoppedDir = "/tmp/.sandgate/stopped"

// execution is what this process knows of one execution of a sandbox, by id: an interactive
// execution or a background process it started (until keepEnded after its end), or one whose
// input it writes to.
type execution struct {
	users int   // holders; under sandboxState.execMu
	local bool  // started by this process; under sandboxState.execMu
	kept  *kept // for one started by Start; under sandboxState.execMu

	// in is the lock of its input (a channel of capacity 1, so that waiting for it can end
	// with a context): each writer holds it while it writes, and the gateway that starts the
	// execution from before the process exists until its first input (Stdin, the program
	// text) is in — a writer of this process never gets ahead of that input.
	in        chan struct{}
	readyOnce sync.Once
	ptyKnown  bool // under in: whether it runs on a terminal is known
	pty       bool
}

func (x *execution) lockInput(ctx context.Context) error {
	select {
	case x.in <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (x *execution) unlockInput() { <-x.in }

// inputReady lets writers at a local execution's input, once its first input is in.
func (x *execution) inputReady() { x.readyOnce.Do(x.unlockInput) }

// kept is the output and end of a background process this process started.
type kept struct {
	log     *outlog.Log
	done    chan struct{} // closed once st and err are set
	st      providers.ExitStatus
	err     error
	stopped atomic.Bool
	cancel  context.CancelFunc // disconnects its stream (Provider.Close); the process runs on
}

// finish records how the process ended.
func (k *kept) finish(st providers.ExitStatus, err error) {
	k.st, k.err = st, err
	k.log.Close()
	close(k.done)
}

// register records execution id (pty: on a terminal; k: Start's kept output) as started by
// this process and takes its input lock — after a writer of this process that holds it —
// until inputReady. Errors: fault.Conflict when this process runs an execution of that id;
// ctx.Err() while waiting.
func (st *sandboxState) register(ctx context.Context, id string, pty bool, k *kept) (*execution, error) {
	st.execMu.Lock()
	x := st.entryLocked(id)
	if x.local {
		st.execMu.Unlock()
		return nil, fault.New(fault.Conflict, "e2b: an execution with id '%s' runs already; follow it instead", id)
	}
	x.users++
	x.local, x.kept = true, k
	st.execMu.Unlock()
	if err := x.lockInput(ctx); err != nil {
		st.done(id, x)
		return nil, err
	}
	x.ptyKnown, x.pty = true, pty
	return x, nil
}

// entryLocked returns the entry of id, made when there is none. execMu is held.
func (st *sandboxState) entryLocked(id string) *execution {
	if x := st.execs[id]; x != nil {
		return x
	}
	if st.execs == nil {
		st.execs = map[string]*execution{}
	}
	x := &execution{in: make(chan struct{}, 1)}
	st.execs[id] = x
	return x
}

// acquire returns the entry of execution id for a writer, made when this process knows none;
// release gives it up.
func (st *sandboxState) acquire(id string) *execution {
	st.execMu.Lock()
	defer st.execMu.Unlock()
	x := st.entryLocked(id)
	x.users++
	return x
}

func (st *sandboxState) release(id string, x *execution) {
	st.execMu.Lock()
	defer st.execMu.Unlock()
	st.releaseLocked(id, x)
}

func (st *sandboxState) releaseLocked(id string, x *execution) {
	x.users--
	if x.users <= 0 && st.execs[id] == x {
		delete(st.execs, id)
	}
}

// done gives up the entry of a local execution that ended (or never started).
func (st *sandboxState) done(id string, x *execution) {
	st.execMu.Lock()
	defer st.execMu.Unlock()
	x.local, x.kept = false, nil
	st.releaseLocked(id, x)
}

// keptOf returns the kept output of background process id, if this process started it.
func (st *sandboxState) keptOf(id string) *kept {
	st.execMu.Lock()
	defer st.execMu.Unlock()
	if x := st.execs[id]; x != nil {
		return x.kept
	}
	return nil
}

// disconnect ends the streams of the background processes this process follows.
func (st *sandboxState) disconnect() {
	st.execMu.Lock()
	defer st.execMu.Unlock()
	for _, x := range st.execs {
		if x.kept != nil {
			x.kept.cancel()
		}
	}
}

// Close disconnects this process from the background processes it started: their processes
// run on in their sandboxes, and another gateway can follow them (Reattach connects by id).
// Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	states := make([]*sandboxState, 0, len(p.state))
	for _, st := range p.state {
		states = append(states, st)
	}
	p.mu.Unlock()
	for _, st := range states {
		st.disconnect()
	}
	return nil
}

// Start starts spec — a command or context-less code — as an envd process tagged spec.ID and
// returns once it runs (envd's start event), with envd's process id. It runs until it ends,
// is stopped, its timeout passes (spec.Timeout; 0 means none: envd gets no deadline) or the
// sandbox goes; the start stream stays open in this process, which keeps the process's output
// for Reattach and refreshes the sandbox's timeout while it runs. spec.StdinOpen and spec.PTY
// work as in Exec.
//
// Errors: CheckExecSpec's; fault.Validation without spec.ID, or for code in a context (the
// code interpreter keeps no executions); fault.Conflict when a process of the sandbox carries
// the tag already; Exec's errors of starting.
func (s *Sandbox) Start(ctx context.Context, spec providers.ExecSpec) (providers.ProcessInfo, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ProcessInfo{}, err
	}
	if err := s.open(); err != nil {
		return providers.ProcessInfo{}, err
	}
	switch {
	case spec.ID == "":
		return providers.ProcessInfo{}, fault.New(fault.Validation, "e2b: starting an execution needs an id")
	case spec.Context != "":
		return providers.ProcessInfo{}, fault.New(fault.Validation, "e2b: code in a context runs in the code interpreter, which keeps no executions to follow; start a command or context-less code")
	}
	ps, err := s.procSpec(ctx, spec)
	if err != nil {
		return providers.ProcessInfo{}, err
	}
	if err := s.tagFree(ctx, spec.ID); err != nil {
		return providers.ProcessInfo{}, err
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k := &kept{log: outlog.New(keptOutputBytes), done: make(chan struct{}), cancel: cancel}
	x, err := s.st.register(ctx, spec.ID, ps.pty != nil, k)
	if err != nil {
		cancel()
		return providers.ProcessInfo{}, err
	}
	streamCtx, cancelDeadline := pctx, context.CancelFunc(func() {})
	if ps.timeout > 0 {
		// As for Exec: envd kills the process itself should this gateway be gone.
		streamCtx, cancelDeadline = context.WithTimeout(pctx, ps.timeout+killGrace)
	}
	giveUp := context.AfterFunc(ctx, cancel) // the caller gives up before the process runs
	stream, pid, err := s.startStream(streamCtx, ps)
	if !giveUp() && err == nil {
		// The caller gave up as the process started: it must not run on unseen.
		_ = stream.Close()
		s.kill(pctx, wire.PidSelector(pid))
		err = ctx.Err()
	}
	if err != nil {
		cancelDeadline()
		cancel()
		k.finish(providers.ExitStatus{}, err) // for a follower that came meanwhile
		x.inputReady()
		s.st.done(spec.ID, x)
		return providers.ProcessInfo{}, err
	}
	started := time.Now()
	go func() {
		defer cancel()
		defer cancelDeadline()
		s.pump(streamCtx, spec.ID, x, k, stream, pid, ps)
	}()
	return providers.ProcessInfo{ID: spec.ID, PID: int(pid), StartedAt: started}, nil
}

// tagFree checks that no process of the sandbox carries tag (envd itself allows duplicates).
// Errors: fault.Conflict; startError's when envd cannot be asked.
func (s *Sandbox) tagFree(ctx context.Context, tag string) error {
	list, err := unary[wire.ListRequest, wire.ListResponse](ctx, s, wire.ProcList, &wire.ListRequest{})
	if err != nil {
		return startError(err)
	}
	for _, p := range list.Processes {
		if p.Tag != nil && *p.Tag == tag {
			return fault.New(fault.Conflict, "e2b: process %d of sandbox %s is execution '%s' already; follow it instead", p.Pid, s.id, tag)
		}
	}
	return nil
}

// pump copies background process id's stream into k until the process ends (connecting
// again, by pid, when the stream breaks), feeds its first input, kills it at its timeout and
// refreshes the sandbox's timeout meanwhile. It records the end and forgets x keepEnded later.
func (s *Sandbox) pump(ctx context.Context, id string, x *execution, k *kept, stream *connect.ServerStreamForClient[wire.StartResponse], pid uint32, ps procSpec) {
	var timedOut atomic.Bool
	var feeder sync.WaitGroup
	feedCtx, stopFeed := context.WithCancel(ctx)
	feeder.Add(1)
	go func() {
		defer feeder.Done()
		if err := s.feedInput(feedCtx, pid, ps, x); err != nil && feedCtx.Err() == nil {
			s.p.logger.Debug("e2b: feeding standard input stopped", "sandbox", s.id, "execution", id, "error", err)
		}
	}()
	if ps.timeout > 0 {
		timer := time.AfterFunc(ps.timeout, func() {
			timedOut.Store(true)
			s.kill(context.WithoutCancel(ctx), wire.PidSelector(pid))
		})
		defer timer.Stop()
	}
	refresh := s.refresher(ctx)
	out := providers.Output{Stdout: logWriter{k.log, "stdout"}, Stderr: logWriter{k.log, "stderr"}}
	st, err := s.drain(ctx, stream, out, wire.PidSelector(pid))
	refresh.stop()
	switch {
	case timedOut.Load():
		st, err = providers.ExitStatus{TimedOut: true}, nil
	case err != nil && ctx.Err() != nil:
		err = fault.Wrap(fault.Provision, err, "e2b: this gateway stopped following execution '%s' (it runs on in sandbox %s)", id, s.id)
	case err == nil && st.Signal != "" && !k.stopped.Load():
		// Stopped by another gateway?
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		k.stopped.Store(s.stopMarked(mctx, id))
		cancel()
	}
	stopFeed()
	feeder.Wait()
	k.finish(st, err)
	x.inputReady()
	time.AfterFunc(keepEnded, func() { s.st.done(id, x) })
}

// drain writes the events of stream (first) and then, when it breaks before the process's
// end, of Connect streams of sel (envd replays nothing: what the process wrote meanwhile is
// lost) to out, until the end event, whose status it returns. Errors: fault.NotFound when
// envd no longer knows the process; the stream's error after reconnects tries; ctx.Err().
func (s *Sandbox) drain(ctx context.Context, stream *connect.ServerStreamForClient[wire.StartResponse], out providers.Output, sel *wire.ProcessSelector) (providers.ExitStatus, error) {
	seen := stream != nil // a start stream has shown the process already
	wait := time.Second
	for tries := 0; ; {
		if stream == nil {
			var err error
			if stream, err = s.connectProcess(ctx, sel); err != nil {
				return providers.ExitStatus{}, err
			}
		}
		for stream.Receive() {
			ev := stream.Msg().Event
			switch {
			case ev == nil:
			case ev.Start != nil:
				seen = true
				sel = wire.PidSelector(ev.Start.Pid) // exactly this process from now on
			case ev.Data != nil:
				writeData(ev.Data, out)
			case ev.End != nil:
				_ = stream.Close()
				return endStatus(ev.End), nil
			}
		}
		err := stream.Err()
		_ = stream.Close()
		stream = nil
		switch {
		case ctx.Err() != nil:
			return providers.ExitStatus{}, ctx.Err()
		case connect.CodeOf(err) == connect.CodeNotFound:
			if seen {
				return providers.ExitStatus{}, fault.Wrap(fault.NotFound, err, "e2b: the process of sandbox %s ended while its stream was down, and envd no longer knows how", s.id)
			}
			return providers.ExitStatus{}, fault.Wrap(fault.NotFound, err, "e2b: sandbox %s runs no such process (it never ran there, or it ended more than 30 s ago)", s.id)
		case tries >= reconnects:
			if err == nil {
				err = errors.New("the process stream ended without an end event")
			}
			return providers.ExitStatus{}, envdError(err, "following a process of sandbox "+s.id)
		}
		tries++
		select {
		case <-ctx.Done():
			return providers.ExitStatus{}, ctx.Err()
		case <-time.After(wait):
			wait *= 2
		}
	}
}

// connectProcess calls process.Process/Connect for sel and returns its event stream.
func (s *Sandbox) connectProcess(ctx context.Context, sel *wire.ProcessSelector) (*connect.ServerStreamForClient[wire.StartResponse], error) {
	c := connect.NewClient[wire.ConnectRequest, wire.ConnectResponse](s.p.http, s.envdURL()+wire.ProcConnect, connect.WithCodec(wire.Codec{}))
	r := connect.NewRequest(&wire.ConnectRequest{Process: sel})
	s.headers(r.Header(), wire.EnvdPort)
	r.Header().Set(wire.KeepalivePingHeader, "30")
	stream, err := c.CallServerStream(ctx, r)
	if err != nil {
		return nil, envdError(err, "following a process of sandbox "+s.id)
	}
	return stream, nil
}

// logWriter appends a stream's writes to a log (which copies them).
type logWriter struct {
	log    *outlog.Log
	stream string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Append(w.stream, p)
	return len(p), nil
}

// Reattach follows execution id to its end and returns how it ended. A background process
// this process started (Start) is followed from its first byte — its kept output, the start
// and the end of each stream, writers with a Skip(n int64) method told of the middle dropped
// from a long one. Any other execution is followed by envd's Connect (by tag): from the
// moment of connecting, without what the process wrote before. The sandbox's timeout is
// refreshed while it runs.
//
// Errors: fault.NotFound when the sandbox runs no process of that id (it never ran there, or
// it ended more than 30 s before — envd keeps an exit that long); providers.ErrExecutionStopped
// when Stop ended it (from any gateway); ctx.Err() (the execution runs on); envd's errors.
func (s *Sandbox) Reattach(ctx context.Context, id string, out providers.Output) (providers.ExitStatus, error) {
	if err := s.open(); err != nil {
		return providers.ExitStatus{}, err
	}
	if k := s.st.keptOf(id); k != nil {
		return k.follow(ctx, out)
	}
	refresh := s.refresher(ctx)
	defer refresh.stop()
	st, err := s.drain(ctx, nil, out, wire.TagSelector(id))
	if err == nil && st.Signal != "" && s.stopMarked(ctx, id) {
		return st, providers.ErrExecutionStopped
	}
	return st, err
}

// follow writes k's output to out from its start, in order, waits for the end and returns
// it: ErrExecutionStopped when it was stopped, ctx.Err() when ctx ends first.
func (k *kept) follow(ctx context.Context, out providers.Output) (providers.ExitStatus, error) {
	if err := k.log.Replay(ctx, out.Stdout, out.Stderr, k.done); err != nil {
		return providers.ExitStatus{}, err
	}
	if k.stopped.Load() {
		return k.st, providers.ErrExecutionStopped
	}
	return k.st, k.err
}

// Stop ends execution id: it records the stop in the sandbox (StoppedDir), then envd sends
// SIGKILL to the process it started (SendSignal by tag). envd signals that one process only:
// its children — a pipeline's other members, what it put in the background — are not
// signalled and run on until they exit or the sandbox goes (on a terminal, the kernel sends
// SIGHUP to the terminal's foreground jobs as its shell dies). Errors: fault.NotFound when no
// process of the sandbox carries the id (never started, or ended).
func (s *Sandbox) Stop(ctx context.Context, id string) error {
	if err := s.open(); err != nil {
		return err
	}
	if k := s.st.keptOf(id); k != nil {
		select {
		case <-k.done:
		default:
			k.stopped.Store(true)
		}
	}
	if err := s.markStopped(ctx, id); err != nil {
		// Followers elsewhere then report a kill by SIGKILL instead of a stop.
		s.p.logger.Warn("e2b: recording a stop in the sandbox failed", "sandbox", s.id, "execution", id, "error", err)
	}
	_, err := unary[wire.SendSignalRequest, wire.Empty](ctx, s, wire.ProcSendSignal, &wire.SendSignalRequest{Process: wire.TagSelector(id), Signal: wire.SignalSIGKILL})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case connect.CodeOf(err) == connect.CodeInternal:
		return nil // envd could not signal it: it has just ended, and is left as it is
	}
	return envdError(err, fmt.Sprintf("stopping execution '%s'", id))
}

// stopMarker is the file recording that execution id was stopped.
func stopMarker(id string) string {
	sum := sha256.Sum256([]byte(id))
	return path.Join(StoppedDir, hex.EncodeToString(sum[:16]))
}

func (s *Sandbox) markStopped(ctx context.Context, id string) error {
	resp, err := s.httpFiles(ctx, http.MethodPost, stopMarker(id), bytes.NewReader(nil))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return filesError(resp, "recording a stop")
	}
	resp.Body.Close()
	return nil
}

// stopMarked reports whether Stop recorded execution id in the sandbox.
func (s *Sandbox) stopMarked(ctx context.Context, id string) bool {
	_, err := s.stat(ctx, stopMarker(id))
	if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		s.p.logger.Warn("e2b: looking for a stop record failed", "sandbox", s.id, "execution", id, "error", err)
	}
	return err == nil
}

// WriteStdin copies in to the input of execution id (SendInput by tag, in 64 KiB pieces) and
// returns the bytes that went in; with eof it then closes that input (CloseStdin; a terminal
// gets ^D). Input goes to standard input, or is typed into the terminal of a process on one:
// envd refuses the one that does not apply, and the other is tried. Writes through this
// gateway never interleave, and wait for an execution it starts to have its first input
// (spec.Stdin); writes of two gateways at once may interleave by piece. A program that does
// not read blocks the write once its pipe is full, until ctx ends.
//
// Errors: fault.NotFound when no process of the sandbox carries the id; fault.Conflict when
// it takes no input (started without an open input, closed, or its program closed it); the
// reading error of in; ctx.Err().
func (s *Sandbox) WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	x := s.st.acquire(id)
	defer s.st.release(id, x)
	if err := x.lockInput(ctx); err != nil {
		return 0, err
	}
	defer x.unlockInput()
	var n int64
	if in != nil {
		buf := make([]byte, inputChunk)
		for {
			m, rerr := in.Read(buf)
			if m > 0 {
				if err := s.input(ctx, x, id, buf[:m]); err != nil {
					return n, err
				}
				n += int64(m)
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return n, fmt.Errorf("e2b: reading the input for execution '%s': %w", id, rerr)
			}
		}
	}
	if !eof {
		return n, nil
	}
	if x.ptyKnown && x.pty {
		return n, s.input(ctx, x, id, []byte{4})
	}
	_, err := unary[wire.CloseStdinRequest, wire.Empty](ctx, s, wire.ProcCloseStdin, &wire.CloseStdinRequest{Process: wire.TagSelector(id)})
	switch {
	case err == nil:
		return n, nil
	case ctx.Err() != nil:
		return n, ctx.Err()
	case connect.CodeOf(err) == connect.CodeNotFound:
		return n, inputError(err, id)
	case connect.CodeOf(err) == connect.CodeUnimplemented:
		return n, fault.Wrap(fault.Capability, err, "e2b: the sandbox's envd cannot close standard input (CloseStdin came with envd 0.5.2: rebuild the template)")
	}
	if !x.ptyKnown {
		// envd refuses to close a terminal's input: end it with ^D instead.
		if perr := s.sendInput(ctx, id, &wire.ProcessInput{Pty: []byte{4}}); perr == nil {
			x.ptyKnown, x.pty = true, true
			return n, nil
		}
	}
	return n, inputError(err, id)
}

// input sends b to execution id's input: its standard input or its terminal, trying the
// other when envd refuses the first (and remembering which one it took). x.in is held.
func (s *Sandbox) input(ctx context.Context, x *execution, id string, b []byte) error {
	in := func(pty bool) *wire.ProcessInput {
		if pty {
			return &wire.ProcessInput{Pty: b}
		}
		return &wire.ProcessInput{Stdin: b}
	}
	if x.ptyKnown {
		err := s.sendInput(ctx, id, in(x.pty))
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		return inputError(err, id)
	}
	err := s.sendInput(ctx, id, in(false))
	if err == nil {
		x.ptyKnown = true
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if connect.CodeOf(err) == connect.CodeInternal {
		// "tty assigned to process", or a standard input that is closed: try the terminal.
		if perr := s.sendInput(ctx, id, in(true)); perr == nil {
			x.ptyKnown, x.pty = true, true
			return nil
		}
	}
	return inputError(err, id)
}

func (s *Sandbox) sendInput(ctx context.Context, id string, in *wire.ProcessInput) error {
	_, err := unary[wire.SendInputRequest, wire.Empty](ctx, s, wire.ProcSendInput, &wire.SendInputRequest{Process: wire.TagSelector(id), Input: in})
	return err
}

// inputError classifies an envd error of writing to execution id's input: NotFound stays,
// a refused write (Internal, Unknown: no open input, a closed or broken pipe) is Conflict.
func inputError(err error, id string) error {
	if err == nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return fault.Wrap(fault.NotFound, err, "e2b: no process of the sandbox is execution '%s' (it has not started, or it ended)", id)
	case connect.CodeInternal, connect.CodeUnknown:
		var ce *connect.Error
		if errors.As(err, &ce) {
			return fault.Wrap(fault.Conflict, err, "e2b: execution '%s' takes no more input (it was started without an open stdin, its stdin was closed, or its program closed it)", id)
		}
	}
	return envdError(err, fmt.Sprintf("writing to the input of execution '%s'", id))
}

// Resize sets the size of execution id's terminal (Update by tag; the program gets
// SIGWINCH). Errors: fault.Validation for a size outside 1 to 1000; fault.NotFound when no
// process carries the id; fault.Conflict when it has no terminal.
func (s *Sandbox) Resize(ctx context.Context, id string, size providers.TermSize) error {
	if err := s.open(); err != nil {
		return err
	}
	if size.Rows < 1 || size.Cols < 1 || size.Rows > 1000 || size.Cols > 1000 {
		return fault.New(fault.Validation, "a terminal needs rows and cols from 1 to 1000")
	}
	req := &wire.UpdateRequest{Process: wire.TagSelector(id), Pty: &wire.PTY{Size: &wire.PTYSize{Cols: uint32(size.Cols), Rows: uint32(size.Rows)}}}
	_, err := unary[wire.UpdateRequest, wire.Empty](ctx, s, wire.ProcUpdate, req)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case connect.CodeOf(err) == connect.CodeNotFound:
		return fault.Wrap(fault.NotFound, err, "e2b: no process of the sandbox is execution '%s' (it has not started, or it ended)", id)
	case connect.CodeOf(err) == connect.CodeInternal:
		return fault.Wrap(fault.Conflict, err, "e2b: execution '%s' has no terminal (it was started without a pty)", id)
	}
	return envdError(err, fmt.Sprintf("resizing the terminal of execution '%s'", id))
}
