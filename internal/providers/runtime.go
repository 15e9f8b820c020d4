package providers

import (
	"context"
	"errors"
	"fmt"
	"io"

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
	return sandboxd.ExecRequest{
		Command: spec.Command, Code: spec.Code, Language: spec.Language, Env: spec.Env,
		Dir: spec.Dir, Timeout: spec.Timeout, Context: spec.Context, StdinReader: spec.Stdin, ID: spec.ID,
	}
}

// RuntimeStreams returns out's writers, io.Discard for the unset ones.
func RuntimeStreams(out Output) sandboxd.Streams {
	s := sandboxd.Streams{Stdout: out.Stdout, Stderr: out.Stderr}
	if s.Stdout == nil {
		s.Stdout = io.Discard
	}
	if s.Stderr == nil {
		s.Stderr = io.Discard
	}
	return s
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
	return ExitStatus{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, OOMKilled: r.OOMKilled, ContextLost: r.ContextLost, ContextReset: r.ContextReset}
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
