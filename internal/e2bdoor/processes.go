package e2bdoor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"
	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// envd's process service (packages/envd/spec/process/process.proto). Every process is a
// background process of the session (docs/semantics.md §9 "Background processes"), as every
// envd process is: it runs beside the others, outlives the stream that started it, and is
// bounded by the request's Connect-Timeout-Ms (the SDKs' timeoutMs) as envd bounds it. Its
// pid is its pid in the sandbox. Its output is the task's live output: Start streams it from
// the start, Connect from the moment it connects (envd replays nothing). A signal ends the
// process's whole tree (sandboxd runs each process in a session of its own and kills it
// whole). The command line is run as E2B gives it, as an argv: quoted word by word
// (shellescape) into `exec <argv>` for the session's shell, never pieced together from
// unquoted input.

func (h *Handler) envdMux() *http.ServeMux {
	opts := []connect.HandlerOption{connect.WithCodec(wire.StrictCodec{}), connect.WithReadMaxBytes(maxInput)}
	m := http.NewServeMux()
	m.Handle(wire.ProcStart, streaming(connect.NewServerStreamHandler(wire.ProcStart, h.start, opts...)))
	m.Handle(wire.ProcConnect, streaming(connect.NewServerStreamHandler(wire.ProcConnect, h.connectProcess, opts...)))
	m.Handle(wire.ProcList, connect.NewUnaryHandlerSimple(wire.ProcList, h.listProcesses, opts...))
	m.Handle(wire.ProcSendInput, connect.NewUnaryHandlerSimple(wire.ProcSendInput, h.sendInput, opts...))
	m.Handle(wire.ProcCloseStdin, connect.NewUnaryHandlerSimple(wire.ProcCloseStdin, h.closeStdin, opts...))
	m.Handle(wire.ProcSendSignal, connect.NewUnaryHandlerSimple(wire.ProcSendSignal, h.sendSignal, opts...))
	m.Handle(wire.ProcUpdate, connect.NewUnaryHandlerSimple(wire.ProcUpdate, h.update, opts...))
	m.Handle(wire.FSStat, connect.NewUnaryHandlerSimple(wire.FSStat, h.stat, opts...))
	m.Handle(wire.FSListDir, connect.NewUnaryHandlerSimple(wire.FSListDir, h.listDir, opts...))
	m.Handle(wire.FSMakeDir, connect.NewUnaryHandlerSimple(wire.FSMakeDir, h.makeDir, opts...))
	m.Handle(wire.FSMove, connect.NewUnaryHandlerSimple(wire.FSMove, h.move, opts...))
	m.Handle(wire.FSRemove, connect.NewUnaryHandlerSimple(wire.FSRemove, h.remove, opts...))
	m.Handle(wire.FSWatchDir, streaming(connect.NewServerStreamHandler(wire.FSWatchDir, h.watchDir, opts...)))
	m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("GET /files", h.download)
	m.HandleFunc("POST /files", h.upload)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.apiError(w, r, http.StatusNotFound, "not-found", fmt.Sprintf("Sandgate's E2B door does not serve envd's %s %s (docs/e2b-door.md)", r.Method, r.URL.Path))
	})
	return m
}

// maxInput bounds one envd request message (SendInput's data, mostly).
const maxInput = 8 << 20

// streaming lifts the server's write timeout off a long-lived stream (a process, a watch):
// server.stream_idle_timeout still cuts one its client stops reading, and the stream sends
// keepalives meanwhile.
func streaming(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

func mustPrincipal(r *http.Request) principal.Principal {
	p, _ := principal.FromContext(r.Context())
	return p
}

func principalOf(ctx context.Context) principal.Principal {
	p, _ := principal.FromContext(ctx)
	return p
}

// checkUser refuses a user other than E2B's default one: processes run as the sandbox's own
// user (the profile's identity decides it), files belong to it.
func checkUser(user string) error {
	if user == "" || user == DefaultUser {
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
		"user '%s' is not offered: Sandgate runs every process as the sandbox's own user (E2B's '%s'); the profile's identity settings decide who that is (docs/e2b-door.md)", user, DefaultUser))
}

// keepaliveEvery is the keepalive interval a stream's client asks for (Keepalive-Ping-Interval,
// in seconds), else DefaultKeepalive.
func keepaliveEvery(hdr http.Header) time.Duration {
	if n, err := strconv.Atoi(hdr.Get(wire.KeepalivePingHeader)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return DefaultKeepalive
}

// commandLine is the shell command that runs argv as it is: `exec` and each word quoted.
func commandLine(argv []string) string { return "exec " + shellescape.QuoteCommand(argv) }

// argvOf reads back the argv of a command line commandLine made; ok is false for any other
// program (one started elsewhere, or cut because it was long).
func argvOf(program string) ([]string, bool) {
	rest, ok := strings.CutPrefix(program, "exec ")
	if !ok {
		return nil, false
	}
	var argv []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(rest); {
		switch c := rest[i]; c {
		case ' ':
			if inWord {
				argv, inWord = append(argv, word.String()), false
				word.Reset()
			}
			i++
		case '\'', '"':
			end := strings.IndexByte(rest[i+1:], c)
			if end < 0 {
				return nil, false
			}
			word.WriteString(rest[i+1 : i+1+end])
			inWord = true
			i += end + 2
		default:
			word.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		argv = append(argv, word.String())
	}
	return argv, len(argv) > 0
}

// terminalArgv is the argv of E2B's terminals (the SDKs' pty.create).
var terminalArgv = []string{"/bin/bash", "-i", "-l"}

// onTerminal reports whether task t is one of E2B's terminals, whose output Connect sends as
// pty data. The door keeps no more of a process than its task: it tells a terminal by the
// argv E2B's SDKs start every terminal with.
func onTerminal(t sandbox.Task) bool {
	argv, ok := argvOf(t.Program)
	return ok && slices.Equal(argv, terminalArgv)
}

// processConfig is how List describes task t's program.
func processConfig(t sandbox.Task) *wire.ProcessConfig {
	if argv, ok := argvOf(t.Program); ok {
		return &wire.ProcessConfig{Cmd: argv[0], Args: argv[1:]}
	}
	return &wire.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", t.Program}}
}

func (h *Handler) start(ctx context.Context, req *connect.Request[wire.StartRequest], stream *connect.ServerStream[wire.StartResponse]) error {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	if err := checkUser(envdUserOf(req.Header())); err != nil {
		return err
	}
	m := req.Msg
	cfg := m.Process
	switch {
	case cfg == nil || cfg.Cmd == "":
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	case m.Tag != nil:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process tags are not offered by Sandgate's E2B door: select processes by pid (docs/e2b-door.md)"))
	}
	in := sandbox.ExecInput{SessionID: sess.ID, Command: commandLine(append([]string{cfg.Cmd}, cfg.Args...)), Env: cfg.Envs, Background: true}
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		rel, err := workspacePath(*cfg.Cwd)
		if err != nil {
			return h.rpcError(ctx, err)
		}
		in.Cwd = execDir(rel)
	}
	if pty := m.Pty; pty != nil {
		if pty.Size == nil {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("pty.size (rows and cols) is required"))
		}
		in.PTY = &sandbox.TermSize{Rows: int(pty.Size.Rows), Cols: int(pty.Size.Cols)}
	} else {
		in.StdinOpen = m.Stdin == nil || *m.Stdin // envd's default before the field existed
	}
	if deadline, ok := ctx.Deadline(); ok {
		// envd ends a process when its request's Connect-Timeout-Ms passes.
		if in.Timeout = time.Until(deadline); in.Timeout <= 0 {
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the request's timeout passed before the process started"))
		}
	}
	out, err := h.svc.Execute(ctx, p, in)
	if err != nil {
		return h.rpcError(ctx, err)
	}
	t := out.Task
	f, _, err := h.follower(ctx, p, t.ID, false)
	if err != nil {
		return err
	}
	defer f.Close()
	send := func(ev *wire.ProcessEvent) error { return stream.Send(&wire.StartResponse{Event: ev}) }
	if err := send(&wire.ProcessEvent{Start: &wire.StartEvent{Pid: uint32(t.PID)}}); err != nil {
		return err
	}
	return h.stream(ctx, f, m.Pty != nil, keepaliveEvery(req.Header()), send)
}

// rpcUser is the user of the envd call in ctx (its Authorization Basic header; "" for none).
func rpcUser(ctx context.Context) string {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return basicUser(ci.RequestHeader().Get("Authorization"))
	}
	return ""
}

// envdUserOf is the user of an envd request's Authorization Basic header ("" for none).
func envdUserOf(hdr http.Header) string { return basicUser(hdr.Get("Authorization")) }

// follower follows task id's output from its start or, with fromNow, from what it writes
// next: what it wrote so far is read past (envd replays nothing to a process it connects
// to). done is its last batch when it had ended already.
func (h *Handler) follower(ctx context.Context, p principal.Principal, id string, fromNow bool) (f *sandbox.Follower, done *sandbox.Batch, err error) {
	f, err = h.svc.Follow(ctx, p, id, sandbox.Position{})
	if err != nil {
		return nil, nil, h.rpcError(ctx, err)
	}
	for fromNow {
		b, err := f.Next(ctx, 0)
		if err != nil {
			f.Close()
			return nil, nil, h.rpcError(ctx, err)
		}
		if b.Done {
			return f, &b, nil
		}
		if len(b.Events) == 0 && len(b.Gaps) == 0 {
			break
		}
	}
	return f, nil, nil
}

// stream sends what f reads as envd's data events — a terminal's (pty) as pty data — with
// keepalives every so often, then the end event.
func (h *Handler) stream(ctx context.Context, f *sandbox.Follower, pty bool, every time.Duration, send func(*wire.ProcessEvent) error) error {
	for {
		b, err := f.Next(ctx, every)
		if err != nil {
			return h.rpcError(ctx, err)
		}
		for _, ev := range b.Events {
			if ev.Stream == sandbox.StreamResult {
				continue // code's rich results; a process has none
			}
			d := &wire.DataEvent{}
			switch {
			case pty:
				d.Pty = ev.Data
			case ev.Stream == sandbox.StreamStderr:
				d.Stderr = ev.Data
			default:
				d.Stdout = ev.Data
			}
			if err := send(&wire.ProcessEvent{Data: d}); err != nil {
				return err
			}
		}
		if b.Done {
			return h.sendEnd(ctx, b, send)
		}
		if len(b.Events) == 0 && len(b.Gaps) == 0 {
			if err := send(&wire.ProcessEvent{Keepalive: &struct{}{}}); err != nil {
				return err
			}
		}
	}
}

// sendEnd sends the end event of b, a finished execution's last batch; a machinery failure
// ends the stream with its error instead.
func (h *Handler) sendEnd(ctx context.Context, b sandbox.Batch, send func(*wire.ProcessEvent) error) error {
	if b.Err != nil {
		return h.rpcError(ctx, b.Err)
	}
	return send(&wire.ProcessEvent{End: endEvent(b.Result)})
}

// endEvent is envd's EndEvent for res, as envd fills it from Go's os.ProcessState: a process
// ended by a signal (or stopped, or timed out: killed) has exit code -1, not exited, status
// "signal: killed"; one that exited has its code and "exit status N", with the status as its
// error unless it was 0.
func endEvent(res *sandbox.Result) *wire.EndEvent {
	sig := ""
	switch {
	case res == nil:
		sig = "SIGKILL"
	case res.Signal != "":
		sig = res.Signal
	case res.Status == sandbox.ResultCancelled || res.Status == sandbox.ResultTimedOut || res.ExitCode == nil:
		sig = "SIGKILL"
	}
	if sig != "" {
		status := "signal: " + unix.Signal(unix.SignalNum(sig)).String()
		return &wire.EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	code := *res.ExitCode
	status := "exit status " + strconv.Itoa(code)
	ev := &wire.EndEvent{ExitCode: int32(code), Exited: true, Status: status}
	if code != 0 {
		ev.Error = &status
	}
	return ev
}

// process finds the background process of session sess whose pid is sel's: a running one,
// else (running false) the one that ended last. Errors: connect NotFound, as envd's.
func (h *Handler) process(ctx context.Context, p principal.Principal, sess sandbox.Session, sel *wire.ProcessSelector, running bool) (sandbox.Task, error) {
	if sel == nil || sel.Pid == nil {
		if sel != nil && sel.Tag != nil {
			return sandbox.Task{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process tags are not offered by Sandgate's E2B door: select processes by pid (docs/e2b-door.md)"))
		}
		return sandbox.Task{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.pid is required"))
	}
	tasks, err := h.svc.ListProcesses(ctx, p, sess.ID, "")
	if err != nil {
		return sandbox.Task{}, h.rpcError(ctx, err)
	}
	var ended *sandbox.Task
	for i, t := range tasks { // newest first
		if t.PID <= 0 || uint32(t.PID) != *sel.Pid {
			continue
		}
		if t.FinishedAt == nil {
			return t, nil
		}
		if ended == nil {
			ended = &tasks[i]
		}
	}
	if ended != nil && !running {
		return *ended, nil
	}
	return sandbox.Task{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", *sel.Pid))
}

func (h *Handler) connectProcess(ctx context.Context, req *connect.Request[wire.ConnectRequest], stream *connect.ServerStream[wire.ConnectResponse]) error {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	t, err := h.process(ctx, p, sess, req.Msg.Process, false)
	if err != nil {
		return err
	}
	// Past what it wrote so far before the start event: the client acts on the start (it
	// sends input), and what that makes the process write is the follower's.
	f, done, err := h.follower(ctx, p, t.ID, true)
	if err != nil {
		return err
	}
	defer f.Close()
	send := func(ev *wire.ProcessEvent) error { return stream.Send(&wire.ConnectResponse{Event: ev}) }
	if err := send(&wire.ProcessEvent{Start: &wire.StartEvent{Pid: uint32(t.PID)}}); err != nil {
		return err
	}
	if done != nil {
		return h.sendEnd(ctx, *done, send)
	}
	return h.stream(ctx, f, onTerminal(t), keepaliveEvery(req.Header()), send)
}

func (h *Handler) listProcesses(ctx context.Context, _ *wire.ListRequest) (*wire.ListResponse, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	tasks, err := h.svc.ListProcesses(ctx, p, sess.ID, "")
	if err != nil {
		return nil, h.rpcError(ctx, err)
	}
	out := &wire.ListResponse{}
	for _, t := range tasks {
		if t.FinishedAt == nil && t.StartedAt != nil && t.PID > 0 {
			out.Processes = append(out.Processes, wire.ProcessInfo{Config: processConfig(t), Pid: uint32(t.PID)})
		}
	}
	slices.SortFunc(out.Processes, func(a, b wire.ProcessInfo) int { return int(a.Pid) - int(b.Pid) })
	return out, nil
}

// sendInput writes to a process's standard input (or its terminal: the door does not tell
// them apart, both take the bytes as typed).
func (h *Handler) sendInput(ctx context.Context, req *wire.SendInputRequest) (*wire.Empty, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	in := req.Input
	if in == nil || (in.Stdin == nil) == (in.Pty == nil) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input must be one of stdin or pty"))
	}
	t, err := h.process(ctx, p, sess, req.Process, true)
	if err != nil {
		return nil, err
	}
	data := in.Stdin
	if in.Pty != nil {
		data = in.Pty
	}
	if _, err := h.svc.WriteStdin(ctx, p, t.ID, bytes.NewReader(data), false); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	return &wire.Empty{}, nil
}

// closeStdin closes a process's standard input (a terminal gets ^D).
func (h *Handler) closeStdin(ctx context.Context, req *wire.CloseStdinRequest) (*wire.Empty, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	t, err := h.process(ctx, p, sess, req.Process, true)
	if err != nil {
		return nil, err
	}
	if _, err := h.svc.WriteStdin(ctx, p, t.ID, bytes.NewReader(nil), true); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	return &wire.Empty{}, nil
}

// sendSignal ends a process and its whole tree for SIGKILL and SIGTERM (its task is
// stopped; the call returns once it ended).
func (h *Handler) sendSignal(ctx context.Context, req *wire.SendSignalRequest) (*wire.Empty, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	if req.Signal != wire.SignalSIGKILL && req.Signal != wire.SignalSIGTERM {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %s is not offered: SIGKILL and SIGTERM end the process's whole tree", req.Signal))
	}
	t, err := h.process(ctx, p, sess, req.Process, true)
	if err != nil {
		return nil, err
	}
	if _, err := h.svc.StopProcess(ctx, p, sess.ID, "", t.ID); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	return &wire.Empty{}, nil
}

// update resizes a process's terminal.
func (h *Handler) update(ctx context.Context, req *wire.UpdateRequest) (*wire.Empty, error) {
	p, sess := principalOf(ctx), sessionFrom(ctx)
	t, err := h.process(ctx, p, sess, req.Process, true)
	if err != nil {
		return nil, err
	}
	if req.Pty == nil || req.Pty.Size == nil {
		return &wire.Empty{}, nil
	}
	if err := h.svc.Resize(ctx, p, t.ID, sandbox.TermSize{Rows: int(req.Pty.Size.Rows), Cols: int(req.Pty.Size.Cols)}); err != nil {
		return nil, h.rpcError(ctx, err)
	}
	return &wire.Empty{}, nil
}
