//go:build unix

package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/outlog"
)

// Executions a Runtime keeps by id (Start): they run detached from whoever started them and
// keep their output and end for whoever follows them (see the package doc, "Kept executions").
const (
	// ExecutionLogBytes is how much of each stream a kept execution retains: half from its
	// start, half from its end (package outlog).
	ExecutionLogBytes = 2 << 20
	// KeepEnded is how long an ended execution stays followable, unless Forget comes first.
	KeepEnded = 10 * time.Minute
	// MaxExecutions bounds the kept executions, running and ended; the oldest ended ones make
	// room for new ones.
	MaxExecutions = 256
)

// executionIDForm is the form of an execution id (the gateway uses its task ids).
var executionIDForm = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidExecutionID reports whether id may name an execution: 1 to 128 letters, digits, '.',
// '_' or '-'.
func ValidExecutionID(id string) bool { return executionIDForm.MatchString(id) }

// Execution is an execution the runtime keeps by id (Runtime.Start). Its methods are safe for
// concurrent use.
type Execution struct {
	rt     *Runtime
	id     string
	log    *outlog.Log
	cancel context.CancelFunc
	done   chan struct{} // closed once the end is recorded
	// started is closed once the program runs (or could not start: done then follows).
	started chan struct{}

	inMu       sync.Mutex    // serialises writes to the program's input
	inputReady chan struct{} // closed once writers may take inMu (Stdin, the first input, goes first)
	input      *os.File      // our end of its standard input (a pipe, or the terminal's master); nil when closed or none
	pipe       *os.File      // our end of an open input pipe (StdinOpen without a PTY), closed at the end
	child      *os.File      // the program's end of that pipe, closed at the end (run closes it sooner)

	mu    sync.Mutex
	info  ExecutionInfo
	term  *os.File // the terminal's master (PTY), for Resize; nil otherwise
	res   Result
	err   error
	ended time.Time
	timer *time.Timer // forgets it KeepEnded after its end
}

// execHooks connect a started execution's program to its Execution.
type execHooks struct {
	stdin   *os.File                     // the program's end of an open standard input (StdinOpen)
	onStart func(pid int, term *os.File) // called once the program runs; term is the PTY master
}

// ID returns the execution's id.
func (e *Execution) ID() string { return e.id }

// Log returns the execution's kept output: the start and the end of each stream, within
// ExecutionLogBytes; it is closed once the program's output ended.
func (e *Execution) Log() *outlog.Log { return e.log }

// Done returns a channel closed once the execution has ended and End is set.
func (e *Execution) Done() <-chan struct{} { return e.done }

// End returns how the execution ended: its Result, or the error Exec would have returned
// (ctx.Err()-like context.Canceled when it was stopped). Valid once Done is closed.
func (e *Execution) End() (Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.res, e.err
}

// Info describes the execution now.
func (e *Execution) Info() ExecutionInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	info := e.info
	if info.EndedAt != nil {
		t := *info.EndedAt
		info.EndedAt = &t
	}
	if info.Result != nil {
		r := *info.Result
		info.Result = &r
	}
	return info
}

// Start starts req as a kept execution named req.ID and returns it once its program runs (or
// could not be started, which its End then says: exit 127 or 126, as with Exec). The
// execution runs on, detached from any caller: only its Timeout, Stop, Close (or, for a
// PTY, the terminal's end) end it. It keeps its output (ExecutionLogBytes of each stream)
// and, for KeepEnded after it ended, its end — unless Forget drops it sooner.
//
// req may set StdinOpen, PTY and Background, which Exec refuses.
//
// Errors: those of Exec for a malformed request; fault.Validation for an id that is not
// ValidExecutionID, a PTY or Background with a Context or with code, or a bad TermSize;
// fault.Conflict when the id is kept already; fault.Quota when MaxExecutions are running;
// fault.Gone once Close was called.
func (r *Runtime) Start(req ExecRequest) (*Execution, error) {
	if !ValidExecutionID(req.ID) {
		return nil, fault.New(fault.Validation, "an execution id must be 1 to 128 letters, digits, '.', '_' or '-'")
	}
	if req.PTY != nil || req.Background {
		switch {
		case req.Context != "":
			return nil, fault.New(fault.Validation, "a pty or background execution runs a command or argv, not code in a context")
		case req.PTY != nil && !req.PTY.valid():
			return nil, fault.New(fault.Validation, "a pty needs rows and cols from 1 to %d", MaxTermCells)
		}
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	var input *os.File
	hooks := &execHooks{}
	if req.StdinOpen && req.PTY == nil {
		rd, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandboxd: making the stdin pipe: %w", err)
		}
		hooks.stdin, input = rd, w
	}
	e := &Execution{
		rt: r, id: req.ID, log: outlog.New(ExecutionLogBytes),
		done: make(chan struct{}), started: make(chan struct{}), inputReady: make(chan struct{}),
		input: input, pipe: input, child: hooks.stdin,
		info: ExecutionInfo{
			ID: req.ID, Program: programOf(req), Background: req.Background,
			PTY: req.PTY != nil, StdinOpen: req.StdinOpen || req.PTY != nil, StartedAt: time.Now(),
		},
	}
	var once sync.Once
	hooks.onStart = func(pid int, term *os.File) {
		e.mu.Lock()
		e.info.PID, e.term = pid, term
		e.mu.Unlock()
		if term != nil {
			e.inMu.Lock()
			e.input = term
			e.inMu.Unlock()
		}
		once.Do(func() { close(e.started) })
	}
	req.hooks = hooks
	if err := r.keep(e); err != nil {
		closeFiles([]*os.File{hooks.stdin, input})
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	var initial []byte // with an open input, Stdin is its first write
	if req.StdinOpen || req.PTY != nil {
		initial, req.Stdin, req.StdinReader = req.Stdin, nil, nil
	}
	go func() {
		defer cancel()
		res, err := r.exec(ctx, req, Streams{Stdout: logWriter{e.log, "stdout"}, Stderr: logWriter{e.log, "stderr"}, ResultFunc: e.logResult})
		e.finish(res, err)
		once.Do(func() { close(e.started) })
	}()
	<-e.started
	if len(initial) > 0 {
		// Stdin comes first, before any WriteStdin (writers wait for inputReady, closed once
		// this one holds the input); a program that reads slowly must not hold Start up.
		go func() {
			e.inMu.Lock()
			defer e.inMu.Unlock()
			close(e.inputReady)
			_, _ = e.writeLocked(ctx, bytes.NewReader(initial), false)
		}()
	} else {
		close(e.inputReady)
	}
	return e, nil
}

// finish records how e ended, closes its input and log, and schedules its forgetting.
func (e *Execution) finish(res Result, err error) {
	// Closing unblocks a write in progress (it holds inMu) with os.ErrClosed. The terminal's
	// master, when there is one, run has closed already.
	closeFiles([]*os.File{e.pipe, e.child})
	e.inMu.Lock()
	e.input = nil
	e.inMu.Unlock()
	now := time.Now()
	e.mu.Lock()
	e.res, e.err, e.ended = res, err, now
	e.info.EndedAt = &now
	if err == nil {
		r := res
		e.info.Result = &r
	} else {
		e.info.Error = err.Error()
	}
	e.term = nil
	e.mu.Unlock()
	e.log.Close()
	e.rt.keptEnded(e)
	close(e.done)
}

// programOf summarises what req runs, for ExecutionInfo.Program.
func programOf(req ExecRequest) string {
	var s string
	switch {
	case req.Command != "":
		s = req.Command
	case len(req.Argv) > 0:
		s = strings.Join(req.Argv, " ")
	default:
		s = req.Language + " code"
		if req.Context != "" {
			s += " in context " + req.Context
		}
	}
	const max = 1 << 10
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// logWriter appends what a stream writes to a log (the log copies it).
type logWriter struct {
	log    *outlog.Log
	stream string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Append(w.stream, p)
	return len(p), nil
}

// Execution returns the kept execution id; fault.NotFound when there is none (it never ran
// here, it ended more than KeepEnded ago or was forgotten, or sandboxd restarted).
func (r *Runtime) Execution(id string) (*Execution, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.kept[id]; e != nil {
		return e, nil
	}
	return nil, fault.New(fault.NotFound, "no execution '%s' is kept here (it never ran here, ended more than %s ago, or sandboxd restarted)", id, KeepEnded)
}

// Executions describes the kept executions, oldest start first.
func (r *Runtime) Executions() []ExecutionInfo {
	r.mu.Lock()
	list := make([]*Execution, 0, len(r.kept))
	for _, e := range r.kept {
		list = append(list, e)
	}
	r.mu.Unlock()
	out := make([]ExecutionInfo, len(list))
	for i, e := range list {
		out[i] = e.Info()
	}
	slices.SortFunc(out, func(a, b ExecutionInfo) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Stop ends execution id like a cancel (its whole process tree is killed; its End is
// context.Canceled with the partial output kept). An ended execution is left as it is.
// Errors: fault.NotFound as Execution.
func (r *Runtime) Stop(id string) error {
	e, err := r.Execution(id)
	if err != nil {
		return err
	}
	e.cancel()
	return nil
}

// Forget drops ended execution id at once (its caller has its end); a running one is kept.
func (r *Runtime) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.kept[id]; e != nil {
		select {
		case <-e.done:
			r.dropLocked(e)
		default:
		}
	}
}

// WriteStdin copies in to the standard input of execution id (started with StdinOpen or a
// PTY) and returns how many bytes went in; with eof it then closes that input (CloseStdin).
// Writes of concurrent calls do not interleave. A program that does not read blocks the
// write once the pipe is full, until ctx ends.
//
// Errors: fault.NotFound as Execution; fault.Conflict when the execution has no open input
// (not started with it, closed already, or ended); ctx.Err() when it ended first; the
// reading error of in.
func (r *Runtime) WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error) {
	e, err := r.Execution(id)
	if err != nil {
		return 0, err
	}
	return e.write(ctx, in, eof)
}

// CloseStdin closes the standard input of execution id: the program reads end of file (on a
// PTY, the terminal's end-of-file character, ^D, is sent). Closing again is not an error.
// Errors: fault.NotFound as Execution; fault.Conflict when it had no open input.
func (r *Runtime) CloseStdin(id string) error {
	_, err := r.WriteStdin(context.Background(), id, nil, true)
	return err
}

// errBrokenPipe is what a write to the input of a program that closed it gets.
var errBrokenPipe = syscall.EPIPE

// errNoInput is the Conflict of an input that is not open.
func errNoInput(id string) error {
	return fault.New(fault.Conflict, "execution '%s' takes no more input (it was started without an open stdin, its stdin was closed, or it ended)", id)
}

func (e *Execution) write(ctx context.Context, in io.Reader, eof bool) (int64, error) {
	select {
	case <-e.inputReady:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	e.inMu.Lock()
	defer e.inMu.Unlock()
	return e.writeLocked(ctx, in, eof)
}

func (e *Execution) writeLocked(ctx context.Context, in io.Reader, eof bool) (int64, error) {
	w := e.input
	if w == nil {
		if eof && in == nil && e.info.StdinOpen {
			select {
			case <-e.done:
			default:
				return 0, nil // closed already
			}
		}
		return 0, errNoInput(e.id)
	}
	var n int64
	if in != nil {
		// The end of ctx interrupts a write the program does not take. Once started, that
		// interruption must be over before the deadline is cleared, or it could land after
		// and fail every later write to this input ("i/o timeout").
		interrupted := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			_ = w.SetWriteDeadline(time.Now())
			close(interrupted)
		})
		var err error
		n, err = io.Copy(w, in)
		if !stop() {
			<-interrupted
		}
		_ = w.SetWriteDeadline(time.Time{})
		switch {
		case err != nil && ctx.Err() != nil:
			return n, ctx.Err()
		case errors.Is(err, os.ErrClosed), errors.Is(err, errBrokenPipe), errors.Is(err, syscall.EIO):
			// EIO: the terminal's other side closed: the program ended as its input was
			// written, which is a conflict like a closed pipe.
			return n, errNoInput(e.id)
		case err != nil:
			return n, fmt.Errorf("sandboxd: writing to the execution's input: %w", err)
		}
	}
	if eof {
		e.mu.Lock()
		isTerm := e.term != nil && e.term == w
		e.mu.Unlock()
		if isTerm {
			_, _ = w.Write([]byte{4}) // ^D: end of file for a program reading the terminal
			return n, nil
		}
		_ = w.Close()
		e.input = nil
	}
	return n, nil
}

// Resize sets the size of execution id's terminal (the program gets SIGWINCH).
// Errors: fault.NotFound as Execution; fault.Conflict when it has no terminal (not a PTY
// execution, or ended); fault.Validation for a bad size.
func (r *Runtime) Resize(id string, size TermSize) error {
	if !size.valid() {
		return fault.New(fault.Validation, "a terminal needs rows and cols from 1 to %d", MaxTermCells)
	}
	e, err := r.Execution(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil {
		return fault.New(fault.Conflict, "execution '%s' has no terminal (it was started without a pty, or it ended)", id)
	}
	if err := pty.Setsize(e.term, &pty.Winsize{Rows: size.Rows, Cols: size.Cols}); err != nil {
		return fmt.Errorf("sandboxd: resizing the terminal: %w", err)
	}
	return nil
}

// keep registers e: fault.Conflict when its id is kept, fault.Quota when full.
func (r *Runtime) keep(e *Execution) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fault.New(fault.Gone, "%s", errShutdown)
	}
	if r.kept == nil {
		r.kept = map[string]*Execution{}
	}
	if _, ok := r.kept[e.id]; ok {
		return fault.New(fault.Conflict, "an execution with id '%s' is kept already; follow it instead", e.id)
	}
	if len(r.kept) >= MaxExecutions && !r.evictEndedLocked() {
		// Not Conflict: a client takes that for its own execution, kept already.
		return fault.New(fault.Quota, "sandboxd keeps %d running executions, its most; wait for one to end or stop one", MaxExecutions)
	}
	r.kept[e.id] = e
	return nil
}

// keptEnded schedules the forgetting of ended execution e.
func (r *Runtime) keptEnded(e *Execution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kept[e.id] == e {
		e.timer = time.AfterFunc(KeepEnded, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.kept[e.id] == e {
				r.dropLocked(e)
			}
		})
	}
}

// evictEndedLocked forgets the execution that ended first; false when none has ended.
func (r *Runtime) evictEndedLocked() bool {
	var oldest *Execution
	var oldestEnd time.Time
	for _, e := range r.kept {
		e.mu.Lock()
		ended := e.ended
		e.mu.Unlock()
		if !ended.IsZero() && (oldest == nil || ended.Before(oldestEnd)) {
			oldest, oldestEnd = e, ended
		}
	}
	if oldest == nil {
		return false
	}
	r.dropLocked(oldest)
	return true
}

func (r *Runtime) dropLocked(e *Execution) {
	delete(r.kept, e.id)
	if e.timer != nil {
		e.timer.Stop()
	}
}

// Skipper is implemented by writers that are told where bytes of their stream were dropped
// (the middle of a long output): Skip(n) stands for n bytes not written.
type Skipper interface {
	Skip(n int64)
}

// resultStream is the stream of a kept execution's log that holds its rich results, one
// piece (its JSON) each, so that followers get them in order with its output. The log keeps
// the start and the end of it like of the others, whole pieces only; a result the log let go
// is in Result.Results all the same.
const resultStream = "result"

// logResult appends rich result r to e's log.
func (e *Execution) logResult(r RichResult) {
	data, err := json.Marshal(r)
	if err == nil {
		e.log.Append(resultStream, data)
	}
}

// Follow writes e's kept output to out from its start, in order (writers that implement
// Skipper are told where the middle of a long stream was dropped), and its rich results
// to out.ResultFunc (those its log still keeps), waits for its end and returns it (see
// End). When ctx ends first it returns ctx.Err(): following stops, the execution runs on. A
// writer's error stops following and is returned.
func (e *Execution) Follow(ctx context.Context, out Streams) (Result, error) {
	writers := map[string]io.Writer{"stdout": out.Stdout, "stderr": out.Stderr}
	if out.ResultFunc != nil {
		writers[resultStream] = resultWriter(out.ResultFunc)
	}
	if err := e.log.ReplayStreams(ctx, writers, e.done); err != nil {
		return Result{}, err
	}
	return e.End()
}

// resultWriter passes the rich results of a log's result stream, one piece each, on.
type resultWriter func(RichResult)

func (f resultWriter) Write(p []byte) (int, error) {
	var r RichResult
	if err := json.Unmarshal(p, &r); err == nil {
		f(r)
	}
	return len(p), nil
}
