package providers

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// The helpers below map between this package's types and the sandbox runtime's
// (internal/sandboxd), for providers that execute through it: in-process (local_subprocess)
// or over its socket (docker in sandboxd mode).

// RuntimeRequest maps spec onto a runtime execution request. spec.Stdin is read to its end
// (a runtime over a socket takes standard input as bytes); a read error is returned wrapped.
// In-process runtimes stream it instead: see RuntimeRequestStreaming.
func RuntimeRequest(spec ExecSpec) (sandboxd.ExecRequest, error) {
	req := RuntimeRequestStreaming(spec)
	req.StdinReader = nil
	if spec.Stdin != nil {
		in, err := io.ReadAll(spec.Stdin)
		if err != nil {
			return req, fmt.Errorf("reading standard input: %w", err)
		}
		if in == nil {
			in = []byte{} // empty input, not "no input"
		}
		req.Stdin = in
	}
	return req, nil
}

// RuntimeRequestStreaming maps spec onto a runtime execution request for a runtime in this
// process: spec.Stdin is streamed (sandboxd.ExecRequest.StdinReader), never read ahead.
func RuntimeRequestStreaming(spec ExecSpec) sandboxd.ExecRequest {
	req := sandboxd.ExecRequest{
		Command: spec.Command, Code: spec.Code, Language: spec.Language, Env: spec.Env,
		Dir: spec.Dir, Timeout: spec.Timeout, Context: spec.Context, StdinReader: spec.Stdin, ID: spec.ID,
		StdinOpen: spec.StdinOpen, Background: spec.Background, MaxResults: max(spec.MaxResultBytes, 0),
	}
	if spec.PTY != nil {
		req.PTY = RuntimeTermSize(*spec.PTY)
	}
	return req
}

// RuntimeTermSize maps a terminal size onto the runtime's (values out of range become 0,
// which the runtime refuses).
func RuntimeTermSize(t TermSize) *sandboxd.TermSize {
	clamp := func(v int) uint16 {
		if v < 1 || v > sandboxd.MaxTermCells {
			return 0
		}
		return uint16(v)
	}
	return &sandboxd.TermSize{Rows: clamp(t.Rows), Cols: clamp(t.Cols)}
}

// RuntimeProcess maps a kept execution's description onto a ProcessInfo.
func RuntimeProcess(info sandboxd.ExecutionInfo) ProcessInfo {
	return ProcessInfo{ID: info.ID, PID: info.PID, StartedAt: info.StartedAt}
}

// RuntimeStreams returns out's writers, io.Discard for the unset ones, and its ResultFunc.
func RuntimeStreams(out Output) sandboxd.Streams {
	s := sandboxd.Streams{Stdout: out.Stdout, Stderr: out.Stderr}
	if s.Stdout == nil {
		s.Stdout = io.Discard
	}
	if s.Stderr == nil {
		s.Stderr = io.Discard
	}
	if f := out.ResultFunc; f != nil {
		s.ResultFunc = func(r sandboxd.RichResult) { f(RuntimeRichResult(r)) }
	}
	return s
}

// RuntimeRichResult maps a runtime rich result onto a RichResult (sharing its data).
func RuntimeRichResult(r sandboxd.RichResult) RichResult {
	out := RichResult{Data: r.Data, Main: r.Main}
	if r.Dropped != nil {
		out.Dropped = &DroppedResult{Types: r.Dropped.Types, Bytes: r.Dropped.Bytes}
	}
	return out
}

// HeldRuntime is a runtime client that can follow an execution its sandboxd holds
// (remote.Client).
type HeldRuntime interface {
	Reattach(ctx context.Context, id string, out sandboxd.Streams) (sandboxd.Result, error)
}

// ReattachRuntime is Reattacher.Reattach over rt, the one mapping of how following a held
// execution ends: the runtime's stopped error (stopped, e.g. remote.ErrStopped) becomes
// ErrExecutionStopped, an error once ctx ended becomes ctx.Err(), any other goes through
// classify (the provider's own error mapping). It also returns the runtime's result.
func ReattachRuntime(ctx context.Context, rt HeldRuntime, id string, out Output, stopped error, classify func(error) error) (ExitStatus, sandboxd.Result, error) {
	res, err := rt.Reattach(ctx, id, RuntimeStreams(out))
	st := RuntimeStatus(res)
	switch {
	case errors.Is(err, stopped):
		return st, res, ErrExecutionStopped
	case err != nil && ctx.Err() != nil:
		return st, res, ctx.Err()
	case err != nil:
		return st, res, classify(err)
	}
	return st, res, nil
}

// RuntimeStatus maps a runtime result onto an ExitStatus.
func RuntimeStatus(r sandboxd.Result) ExitStatus {
	st := ExitStatus{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, OOMKilled: r.OOMKilled, ContextLost: r.ContextLost, ContextReset: r.ContextReset}
	if e := r.Error; e != nil {
		st.Error = &CodeError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
	}
	for _, rr := range r.Results {
		st.Results = append(st.Results, RuntimeRichResult(rr))
	}
	return st
}

// RuntimeContext maps a runtime context description onto a ContextInfo.
func RuntimeContext(c sandboxd.ContextInfo) ContextInfo {
	return ContextInfo{Name: c.Name, Language: c.Language, CreatedAt: c.CreatedAt, Executions: c.Executions, Alive: c.Alive}
}

// RuntimeFiles maps a runtime workspace listing onto FileInfos.
func RuntimeFiles(list []sandboxd.FileInfo) []FileInfo {
	out := make([]FileInfo, len(list))
	for i, f := range list {
		out[i] = FileInfo{Name: f.Name, Path: f.Path, Type: FileType(f.Type), Size: f.Size, Mode: f.Mode, ModTime: f.ModTime}
	}
	return out
}

// KeptRuntime is a runtime that keeps executions by id (sandboxd.Runtime.Start): a
// remote.Client, or InProcess for a runtime in this process.
type KeptRuntime interface {
	HeldRuntime
	Start(ctx context.Context, req sandboxd.ExecRequest) (sandboxd.ExecutionInfo, error)
	StopExecution(ctx context.Context, id string) error
	WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error)
	Resize(ctx context.Context, id string, size sandboxd.TermSize) error
}

// RuntimeExecutions implements Executions, but Reattach, over a kept runtime: the sandboxes of
// providers that run sandboxd (local in process, docker and kubernetes over its socket) embed
// it. Runtime returns the sandbox's runtime after checking the handle (its errors are
// returned as they are); Classify maps the runtime's errors as the provider does elsewhere.
type RuntimeExecutions struct {
	Subject  string // names the provider in errors
	Caps     func() Capabilities
	Runtime  func() (KeptRuntime, error)
	Classify func(error) error
}

// Start starts spec in the sandbox's runtime (see Executions.Start). spec.Stdin is read to
// its end first: it becomes the execution's first input.
func (x RuntimeExecutions) Start(ctx context.Context, spec ExecSpec) (ProcessInfo, error) {
	if err := CheckExecSpec(x.Subject, x.Caps(), spec); err != nil {
		return ProcessInfo{}, err
	}
	if spec.ID == "" {
		return ProcessInfo{}, fault.New(fault.Validation, "starting an execution needs an id")
	}
	rt, err := x.Runtime()
	if err != nil {
		return ProcessInfo{}, err
	}
	req, err := RuntimeRequest(spec)
	if err != nil {
		return ProcessInfo{}, err
	}
	info, err := rt.Start(ctx, req)
	if err != nil {
		return ProcessInfo{}, x.err(ctx, err)
	}
	return RuntimeProcess(info), nil
}

// Stop stops execution id (see Executions.Stop).
func (x RuntimeExecutions) Stop(ctx context.Context, id string) error {
	rt, err := x.Runtime()
	if err != nil {
		return err
	}
	return x.err(ctx, rt.StopExecution(ctx, id))
}

// WriteStdin feeds execution id's input (see Executions.WriteStdin).
func (x RuntimeExecutions) WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error) {
	rt, err := x.Runtime()
	if err != nil {
		return 0, err
	}
	n, err := rt.WriteStdin(ctx, id, in, eof)
	return n, x.err(ctx, err)
}

// Resize sets execution id's terminal size (see Executions.Resize).
func (x RuntimeExecutions) Resize(ctx context.Context, id string, size TermSize) error {
	rt, err := x.Runtime()
	if err != nil {
		return err
	}
	return x.err(ctx, rt.Resize(ctx, id, *RuntimeTermSize(size)))
}

func (x RuntimeExecutions) err(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return x.Classify(err)
}

// ErrInProcessStopped is the stopped error of InProcess's Reattach (ReattachRuntime's
// stopped argument for runtimes in this process).
var ErrInProcessStopped = errors.New("the execution was stopped")

// InProcess is a runtime in this process as a KeptRuntime.
func InProcess(rt *sandboxd.Runtime) KeptRuntime { return inProcess{rt} }

type inProcess struct{ rt *sandboxd.Runtime }

func (p inProcess) Start(_ context.Context, req sandboxd.ExecRequest) (sandboxd.ExecutionInfo, error) {
	e, err := p.rt.Start(req)
	if err != nil {
		return sandboxd.ExecutionInfo{}, err
	}
	return e.Info(), nil
}

func (p inProcess) StopExecution(_ context.Context, id string) error { return p.rt.Stop(id) }

func (p inProcess) WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error) {
	return p.rt.WriteStdin(ctx, id, in, eof)
}

func (p inProcess) Resize(_ context.Context, id string, size sandboxd.TermSize) error {
	return p.rt.Resize(id, size)
}

// Reattach follows kept execution id from its start; a stopped one ends with
// ErrInProcessStopped.
func (p inProcess) Reattach(ctx context.Context, id string, out sandboxd.Streams) (sandboxd.Result, error) {
	e, err := p.rt.Execution(id)
	if err != nil {
		return sandboxd.Result{}, err
	}
	res, err := e.Follow(ctx, out)
	if errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return res, ErrInProcessStopped
	}
	return res, err
}
