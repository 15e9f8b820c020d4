package api

import (
	"context"
	"io"
	"net/http"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Background processes, and the input and terminal of running executions.

// processView is background process t as the API shows it.
func processView(t sandbox.Task) apigen.Process {
	v := apigen.Process{
		Id: t.ID, SessionId: t.SessionID, Command: t.Program, Status: apigen.TaskStatus(t.Status), Pid: ptr(t.PID),
		SubmittedAt: t.SubmittedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, Notice: ptr(t.Notice), Error: ptr(t.Error),
	}
	if r := t.Result; r != nil {
		v.ExitCode, v.Signal = r.ExitCode, ptr(r.Signal)
		if v.Notice == nil {
			v.Notice = ptr(r.Notice)
		}
	}
	return v
}

// processStarted is the 201 answer of a command started as background process t.
func processStarted(ctx context.Context, t sandbox.Task) apigen.ProcessStartedJSONResponse {
	return apigen.ProcessStartedJSONResponse{
		Body:    processView(t),
		Headers: apigen.ProcessStartedResponseHeaders{Location: location(ctx, "/v1/sessions/"+t.SessionID+"/processes/"+t.ID)},
	}
}

// ListProcesses lists a session's background processes.
func (s *Server) ListProcesses(ctx context.Context, req apigen.ListProcessesRequestObject) (apigen.ListProcessesResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	list, err := s.sandbox.ListProcesses(ctx, p, req.SessionId, deref(req.Params.Profile))
	if err != nil {
		return nil, err
	}
	out := apigen.ListProcesses200JSONResponse{Processes: make([]apigen.Process, 0, len(list))}
	for _, t := range list {
		out.Processes = append(out.Processes, processView(t))
	}
	return out, nil
}

// GetProcess returns one background process.
func (s *Server) GetProcess(ctx context.Context, req apigen.GetProcessRequestObject) (apigen.GetProcessResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.sandbox.GetProcess(ctx, p, req.SessionId, deref(req.Params.Profile), req.ProcessId)
	if err != nil {
		return nil, err
	}
	return apigen.GetProcess200JSONResponse(processView(t)), nil
}

// StopProcess stops a background process.
func (s *Server) StopProcess(ctx context.Context, req apigen.StopProcessRequestObject) (apigen.StopProcessResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.sandbox.StopProcess(ctx, p, req.SessionId, deref(req.Params.Profile), req.ProcessId)
	if err != nil {
		return nil, err
	}
	return apigen.StopProcess200JSONResponse(processView(t)), nil
}

// WriteTaskStdin streams the request body into a running execution's standard input.
func (s *Server) WriteTaskStdin(ctx context.Context, req apigen.WriteTaskStdinRequestObject) (apigen.WriteTaskStdinResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var body io.Reader = http.NoBody
	if req.Body != nil {
		body = req.Body
	}
	eof := deref(req.Params.Eof)
	n, err := s.sandbox.WriteStdin(ctx, p, req.TaskId, body, eof)
	if err != nil {
		return nil, err
	}
	return apigen.WriteTaskStdin200JSONResponse{TaskId: req.TaskId, Bytes: n, Closed: eof}, nil
}

// ResizeTaskTerminal sets the size of a running execution's terminal.
func (s *Server) ResizeTaskTerminal(ctx context.Context, req apigen.ResizeTaskTerminalRequestObject) (apigen.ResizeTaskTerminalResponseObject, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.sandbox.Resize(ctx, p, req.TaskId, sandbox.TermSize{Rows: req.Body.Rows, Cols: req.Body.Cols}); err != nil {
		return nil, err
	}
	return apigen.ResizeTaskTerminal204Response{}, nil
}
