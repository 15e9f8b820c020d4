package e2bfake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

type sandboxKey struct{}

func sandboxFrom(ctx context.Context) *sandbox { return ctx.Value(sandboxKey{}).(*sandbox) }

// serveSandbox is the sandbox proxy: it finds the sandbox and port of r and hands r to envd
// or the code interpreter.
func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request) {
	id, port := r.Header.Get(wire.SandboxIDHeader), r.Header.Get(wire.SandboxPortHeader)
	if id == "" {
		// <port>-<id>.<domain>
		host, _, _ := strings.Cut(r.Host, ".")
		port, id, _ = strings.Cut(host, "-")
	}
	sb := s.get(id)
	if sb == nil {
		http.Error(w, fmt.Sprintf("The sandbox %s was not found", id), http.StatusBadGateway)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), sandboxKey{}, sb))
	switch port {
	case strconv.Itoa(wire.EnvdPort):
		if sb.token != "" && r.URL.Path != "/health" && r.Header.Get(wire.AccessTokenHeader) != sb.token {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"code":"unauthenticated","message":"invalid access token"}`)
			return
		}
		s.envd.ServeHTTP(w, r)
	case strconv.Itoa(wire.CodeInterpreterPort):
		if sb.traffic != "" && r.Header.Get(wire.TrafficTokenHeader) != sb.traffic {
			// E2B's proxy: a sandbox without public traffic answers on its other ports only
			// with the traffic access token.
			http.Error(w, "missing or invalid traffic access token (header e2b-traffic-access-token)", http.StatusForbidden)
			return
		}
		if !sb.interp {
			http.Error(w, "nothing listens on port 49999 of this sandbox (its template runs no code interpreter)", http.StatusBadGateway)
			return
		}
		s.interp.ServeHTTP(w, r)
	default:
		http.Error(w, "nothing listens on port "+port+" of this sandbox", http.StatusBadGateway)
	}
}

// newEnvdMux serves envd's routes; the handlers find their sandbox in the request context.
func (s *Server) newEnvdMux() *http.ServeMux {
	{
		opt := connect.WithCodec(wire.StrictCodec{})
		m := http.NewServeMux()
		m.Handle(wire.ProcStart, connect.NewServerStreamHandler(wire.ProcStart, s.start, opt))
		m.Handle(wire.ProcConnect, connect.NewServerStreamHandler(wire.ProcConnect, s.connectProc, opt))
		m.Handle(wire.ProcUpdate, connect.NewUnaryHandlerSimple(wire.ProcUpdate, s.update, opt))
		m.Handle(wire.ProcList, connect.NewUnaryHandlerSimple(wire.ProcList, s.listProcs, opt))
		m.Handle(wire.ProcSendInput, connect.NewUnaryHandlerSimple(wire.ProcSendInput, s.sendInput, opt))
		m.Handle(wire.ProcCloseStdin, connect.NewUnaryHandlerSimple(wire.ProcCloseStdin, s.closeStdin, opt))
		m.Handle(wire.ProcSendSignal, connect.NewUnaryHandlerSimple(wire.ProcSendSignal, s.sendSignal, opt))
		m.Handle(wire.FSStat, connect.NewUnaryHandlerSimple(wire.FSStat, s.stat, opt))
		m.Handle(wire.FSListDir, connect.NewUnaryHandlerSimple(wire.FSListDir, s.listDir, opt))
		m.Handle(wire.FSMakeDir, connect.NewUnaryHandlerSimple(wire.FSMakeDir, s.makeDir, opt))
		m.Handle(wire.FSMove, connect.NewUnaryHandlerSimple(wire.FSMove, s.move, opt))
		m.Handle(wire.FSRemove, connect.NewUnaryHandlerSimple(wire.FSRemove, s.remove, opt))
		m.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
		m.HandleFunc("GET /envs", func(w http.ResponseWriter, r *http.Request) {
			sb := sandboxFrom(r.Context())
			sb.mu.Lock()
			env := sb.req.EnvVars
			sb.mu.Unlock()
			if env == nil {
				env = map[string]string{}
			}
			writeJSON(w, http.StatusOK, env)
		})
		m.HandleFunc("GET /files", s.download)
		m.HandleFunc("POST /files", s.upload)
		return m
	}
}

// ---- paths ----

// hostPath maps an envd path (absolute, or relative to /home/user) onto the host folder of
// sb's file system. Errors: an empty path after cleaning is fine ("/").
func (sb *sandbox) hostPath(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(Home, p)
	}
	return filepath.Join(sb.root, filepath.FromSlash(path.Clean("/"+p)))
}

// guestPath maps a host path back into the sandbox: "/…" under its root, else the host path
// itself (a symlink a program pointed out of the fake's file system).
func (sb *sandbox) guestPath(host string) string {
	rel, err := filepath.Rel(sb.root, host)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return host
	}
	return path.Clean("/" + filepath.ToSlash(rel))
}

// confined resolves host path hp's symlinks and refuses a result outside sb's root: the fake
// stands for a whole machine, but must not hand out the test host's files.
func (sb *sandbox) confined(hp string) (string, error) {
	real, err := filepath.EvalSymlinks(hp)
	if err != nil {
		return "", err
	}
	if sb.guestPath(real) == real {
		return "", connect.NewError(connect.CodePermissionDenied, fmt.Errorf("path '%s' leads out of the fake sandbox's file system", sb.guestPath(hp)))
	}
	return real, nil
}

// ---- process service ----

// A process runs with the sandbox's sandboxd runtime — with Runtime.Exec, or on a terminal as
// a kept execution (Runtime.Start, whose terminal WriteStdin types into and Resize resizes) —
// and its output goes to the streams subscribed when it is written, as envd's multiplexer
// does: a Start stream from the first byte, a Connect stream from the moment it connects;
// nothing is replayed, output nobody follows is dropped, and a follower that does not read
// holds the program up once its buffer is full.
type process struct {
	pid uint32
	tag *string
	cfg *wire.ProcessConfig
	pty bool
	id  string // the runtime's execution id, for a process on a terminal

	cancel  context.CancelFunc // ends a process without a terminal (sandboxd kills its session)
	stdinMu sync.Mutex
	stdin   *os.File // write end; nil when closed or not opened (no terminal)

	sigMu  sync.Mutex
	signal string // the signal SendSignal asked for ("SIGKILL"), reported if the process dies of it

	out  *fanout
	done chan struct{} // closed once endEv is set
	end  *wire.EndEvent
}

// fanout delivers a process's events to its subscribed streams, in order, waiting for each.
type fanout struct {
	writeMu sync.Mutex // one event at a time
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
}

type subscriber struct {
	ch   chan *wire.ProcessEvent
	gone chan struct{}
}

func newFanout() *fanout { return &fanout{subs: map[*subscriber]struct{}{}} }

func (f *fanout) subscribe() *subscriber {
	s := &subscriber{ch: make(chan *wire.ProcessEvent, 64), gone: make(chan struct{})}
	f.mu.Lock()
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	return s
}

func (f *fanout) unsubscribe(s *subscriber) {
	f.mu.Lock()
	delete(f.subs, s)
	f.mu.Unlock()
	close(s.gone)
}

func (f *fanout) send(ev *wire.ProcessEvent) {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	f.mu.Lock()
	subs := make([]*subscriber, 0, len(f.subs))
	for s := range f.subs {
		subs = append(subs, s)
	}
	f.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// writer is one output stream of the fanout.
func (f *fanout) writer(stream string) io.Writer {
	return writerFunc(func(b []byte) {
		d := &wire.DataEvent{}
		switch stream {
		case "stdout":
			d.Stdout = slices.Clone(b)
		case "stderr":
			d.Stderr = slices.Clone(b)
		default:
			d.Pty = slices.Clone(b)
		}
		f.send(&wire.ProcessEvent{Data: d})
	})
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

// exited is the end event of a process that ended, kept for late Connects (envd 0.6.12+).
type exited struct {
	pid uint32
	tag *string
	end *wire.EndEvent
}

// exitRetention is how long envd keeps an ended process's end event for Connect.
const exitRetention = 30 * time.Second

type processTable struct {
	mu     sync.Mutex
	next   uint32
	m      map[uint32]*process
	exited map[uint32]*exited
}

func newProcessTable() *processTable {
	return &processTable{next: 1000, m: map[uint32]*process{}, exited: map[uint32]*exited{}}
}

// newPID hands out the next process id.
func (t *processTable) newPID() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	return t.next
}

// add makes p (its pid from newPID) findable, once it runs.
func (t *processTable) add(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[p.pid] = p
	if p.tag != nil {
		for pid, e := range t.exited {
			if e.tag != nil && *e.tag == *p.tag {
				delete(t.exited, pid) // a new process with the tag hides the old one's end
			}
		}
	}
}

// ended moves p from the running processes to the ended ones, for exitRetention.
func (t *processTable) ended(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, p.pid)
	e := &exited{pid: p.pid, tag: p.tag, end: p.end}
	t.exited[p.pid] = e
	time.AfterFunc(exitRetention, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.exited[e.pid] == e {
			delete(t.exited, e.pid)
		}
	})
}

func matches(sel *wire.ProcessSelector, pid uint32, tag *string) bool {
	return sel != nil && ((sel.Pid != nil && *sel.Pid == pid) || (sel.Tag != nil && tag != nil && *sel.Tag == *tag))
}

func (t *processTable) find(sel *wire.ProcessSelector) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.m {
		if matches(sel, p.pid, p.tag) {
			return p, nil
		}
	}
	if sel != nil && sel.Tag != nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", *sel.Tag))
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("process with pid not found"))
}

func (t *processTable) findExited(sel *wire.ProcessSelector) *exited {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.exited {
		if matches(sel, e.pid, e.tag) {
			return e
		}
	}
	return nil
}

// start runs a process with sandboxd and streams its events: start, data (as produced),
// keepalive (every Options.Keepalive), end. The process lives on when the client goes away
// (as on envd); Connect-Timeout-Ms, as on envd, bounds its life.
func (s *Server) start(ctx context.Context, req *connect.Request[wire.StartRequest], stream *connect.ServerStream[wire.StartResponse]) error {
	sb := sandboxFrom(ctx)
	cfg := req.Msg.Process
	if cfg == nil || cfg.Cmd == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd := Home
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = *cfg.Cwd
	}
	hp := sb.hostPath(cwd)
	rel, err := filepath.Rel(sb.home, hp)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' is outside %s, the only folder the fake runs processes in", cwd, Home))
	}
	if st, err := os.Stat(hp); err != nil || !st.IsDir() {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", cwd))
	}
	if rel == "." {
		rel = ""
	}
	var timeout time.Duration
	if ms, err := strconv.ParseInt(req.Header().Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	p := &process{tag: req.Msg.Tag, cfg: cfg, out: newFanout(), done: make(chan struct{})}
	er := sandboxd.ExecRequest{Argv: append([]string{cfg.Cmd}, cfg.Args...), Env: cfg.Envs, Dir: rel}
	sub := p.out.subscribe() // this stream gets everything
	defer p.out.unsubscribe(sub)

	var run func() *wire.EndEvent
	if pty := req.Msg.Pty; pty != nil {
		if pty.Size == nil || pty.Size.Rows == 0 || pty.Size.Cols == 0 || pty.Size.Rows > sandboxd.MaxTermCells || pty.Size.Cols > sandboxd.MaxTermCells {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("error starting pty: the fake takes 1 to 1000 rows and cols"))
		}
		p.pty, p.pid = true, sb.procs.newPID()
		p.id = "envd-" + strconv.FormatUint(uint64(p.pid), 10)
		er.PTY, er.Timeout, er.ID = &sandboxd.TermSize{Rows: uint16(pty.Size.Rows), Cols: uint16(pty.Size.Cols)}, timeout, p.id
		e, err := sb.rt.Start(er)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("error starting pty with command '%s': %w", cfg.Cmd, err))
		}
		sb.procs.add(p)
		run = func() *wire.EndEvent {
			defer sb.rt.Forget(p.id)
			// The kept execution's log holds what a slow follower has not read yet (within
			// its bounds); Follow then waits for its end.
			res, err := e.Follow(sb.ctx, sandboxd.Streams{Stdout: p.out.writer("pty"), Stderr: p.out.writer("pty")})
			if err != nil && sb.ctx.Err() == nil {
				<-e.Done()
				res, err = e.End()
			}
			return p.endEvent(res, err)
		}
	} else {
		var procCtx context.Context
		if timeout > 0 {
			procCtx, p.cancel = context.WithTimeout(sb.ctx, timeout)
		} else {
			procCtx, p.cancel = context.WithCancel(sb.ctx)
		}
		if req.Msg.Stdin == nil || *req.Msg.Stdin { // envd's default before the field existed
			r, w, err := os.Pipe()
			if err != nil {
				p.cancel()
				return connect.NewError(connect.CodeInternal, err)
			}
			er.StdinReader, p.stdin = r, w
		}
		p.pid = sb.procs.newPID()
		sb.procs.add(p)
		run = func() *wire.EndEvent {
			defer p.cancel()
			defer p.closeStdin()
			if r, ok := er.StdinReader.(*os.File); ok {
				defer r.Close()
			}
			res, err := sb.rt.Exec(procCtx, er, sandboxd.Streams{Stdout: p.out.writer("stdout"), Stderr: p.out.writer("stderr")})
			if err != nil && procCtx.Err() == nil {
				msg := fmt.Sprintf("error starting process '%s': %v", cfg.Cmd, err)
				return &wire.EndEvent{ExitCode: -1, Status: msg, Error: &msg}
			}
			return p.endEvent(res, err)
		}
	}
	go func() {
		end := run()
		p.end = end
		// Ended before its end is sent: a client that saw the end finds it ended (a signal
		// to it is NotFound), never running.
		sb.procs.ended(p)
		close(p.done)
	}()
	send := s.sender(stream.Send)
	send(&wire.ProcessEvent{Start: &wire.StartEvent{Pid: p.pid}})
	return s.follow(ctx, p, sub, send)
}

// sender serialises the events of one stream; a client that went away stops listening only.
func (s *Server) sender(send func(*wire.StartResponse) error) func(*wire.ProcessEvent) {
	var mu sync.Mutex
	return func(ev *wire.ProcessEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = send(&wire.StartResponse{Event: ev})
	}
}

// follow sends what sub receives of p, then p's end, with keepalives meanwhile.
func (s *Server) follow(ctx context.Context, p *process, sub *subscriber, send func(*wire.ProcessEvent)) error {
	tick := time.NewTicker(s.opts.Keepalive)
	defer tick.Stop()
	for {
		select {
		case ev := <-sub.ch:
			send(ev)
		case <-p.done:
			for { // every write finished before the end: what is buffered comes first
				select {
				case ev := <-sub.ch:
					send(ev)
					continue
				default:
				}
				break
			}
			send(&wire.ProcessEvent{End: p.end})
			return nil
		case <-tick.C:
			send(&wire.ProcessEvent{Keepalive: &struct{}{}})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// endEvent is p's end from how sandboxd ended it: the signal SendSignal asked for wins (envd
// signals exactly that); a process ended by its deadline died of SIGKILL.
func (p *process) endEvent(res sandboxd.Result, err error) *wire.EndEvent {
	p.sigMu.Lock()
	sig := p.signal
	p.sigMu.Unlock()
	switch {
	case sig != "":
	case res.TimedOut, err != nil:
		sig = "SIGKILL" // Connect-Timeout-Ms passed: envd's CommandContext kills with SIGKILL
	default:
		sig = res.Signal
	}
	return endEvent(res.ExitCode, sig)
}

// connectProc follows a running process again: a start event, then its output from now on,
// then its end; a process that ended within exitRetention gives its start and end only.
func (s *Server) connectProc(ctx context.Context, req *connect.Request[wire.ConnectRequest], stream *connect.ServerStream[wire.ConnectResponse]) error {
	sb := sandboxFrom(ctx)
	send := s.sender(stream.Send)
	p, err := sb.procs.find(req.Msg.Process)
	if err != nil {
		if e := sb.procs.findExited(req.Msg.Process); e != nil {
			send(&wire.ProcessEvent{Start: &wire.StartEvent{Pid: e.pid}})
			send(&wire.ProcessEvent{End: e.end})
			return nil
		}
		return err
	}
	sub := p.out.subscribe()
	defer p.out.unsubscribe(sub)
	send(&wire.ProcessEvent{Start: &wire.StartEvent{Pid: p.pid}})
	return s.follow(ctx, p, sub, send)
}

// endEvent is envd's EndEvent for a process that exited with code, or died of signal sig
// (os.ProcessState's view: exit code -1, "signal: killed").
func endEvent(code int, sig string) *wire.EndEvent {
	if sig != "" {
		status := "signal: " + unix.Signal(unix.SignalNum(sig)).String()
		return &wire.EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := "exit status " + strconv.Itoa(code)
	ev := &wire.EndEvent{ExitCode: int32(code), Exited: true, Status: status}
	if code != 0 {
		ev.Error = &status
	}
	return ev
}

func (p *process) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
}

func (s *Server) listProcs(ctx context.Context, _ *wire.ListRequest) (*wire.ListResponse, error) {
	sb := sandboxFrom(ctx)
	sb.procs.mu.Lock()
	defer sb.procs.mu.Unlock()
	out := &wire.ListResponse{}
	for _, p := range sb.procs.m {
		out.Processes = append(out.Processes, wire.ProcessInfo{Config: p.cfg, Pid: p.pid, Tag: p.tag})
	}
	return out, nil
}

// sendInput writes to a process's standard input or its terminal, refusing the one it does not
// have as envd does (Internal).
func (s *Server) sendInput(ctx context.Context, req *wire.SendInputRequest) (*wire.Empty, error) {
	sb := sandboxFrom(ctx)
	p, err := sb.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	in := req.Input
	switch {
	case in == nil || (in.Stdin == nil) == (in.Pty == nil):
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("invalid input type"))
	case in.Pty != nil && !p.pty:
		return nil, connect.NewError(connect.CodeInternal, errors.New("error writing to tty: tty not assigned to process — input should be written to the stdin, not the tty"))
	case in.Stdin != nil && p.pty:
		return nil, connect.NewError(connect.CodeInternal, errors.New("error writing to stdin: tty assigned to process — input should be written to the pty, not the stdin"))
	case p.pty:
		if _, err := sb.rt.WriteStdin(ctx, p.id, bytes.NewReader(in.Pty), false); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error writing to tty: %w", err))
		}
		return &wire.Empty{}, nil
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("error writing to stdin: stdin not enabled or closed"))
	}
	if _, err := p.stdin.Write(in.Stdin); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error writing to stdin: error writing to stdin of process '%d': %w", p.pid, err))
	}
	return &wire.Empty{}, nil
}

// closeStdin closes a process's standard input (EOF); envd refuses it for a terminal.
func (s *Server) closeStdin(ctx context.Context, req *wire.CloseStdinRequest) (*wire.Empty, error) {
	p, err := sandboxFrom(ctx).procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	if p.pty {
		return nil, connect.NewError(connect.CodeUnknown, errors.New("error closing stdin: cannot close stdin for PTY process — send Ctrl+D (0x04) instead"))
	}
	p.closeStdin()
	return &wire.Empty{}, nil
}

// update resizes a process's terminal (Internal without one, as envd).
func (s *Server) update(ctx context.Context, req *wire.UpdateRequest) (*wire.Empty, error) {
	sb := sandboxFrom(ctx)
	p, err := sb.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	if req.Pty == nil {
		return &wire.Empty{}, nil
	}
	if !p.pty {
		return nil, connect.NewError(connect.CodeInternal, errors.New("error resizing tty: tty not assigned to process"))
	}
	var size sandboxd.TermSize
	if req.Pty.Size != nil {
		size = sandboxd.TermSize{Rows: uint16(min(req.Pty.Size.Rows, 1<<16-1)), Cols: uint16(min(req.Pty.Size.Cols, 1<<16-1))}
	}
	if err := sb.rt.Resize(p.id, size); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error resizing tty: %w", err))
	}
	return &wire.Empty{}, nil
}

// sendSignal ends the process for SIGKILL and SIGTERM (sandboxd signals its whole session:
// see the package doc).
func (s *Server) sendSignal(ctx context.Context, req *wire.SendSignalRequest) (*wire.Empty, error) {
	sb := sandboxFrom(ctx)
	p, err := sb.procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Signal {
	case wire.SignalSIGKILL:
		sig = "SIGKILL"
	case wire.SignalSIGTERM:
		sig = "SIGTERM"
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("invalid signal: %s", req.Signal))
	}
	p.sigMu.Lock()
	p.signal = sig
	p.sigMu.Unlock()
	if p.pty {
		_ = sb.rt.Stop(p.id)
	} else {
		p.cancel()
	}
	return &wire.Empty{}, nil
}

// ---- filesystem service ----

func (sb *sandbox) entry(hp string) (*wire.EntryInfo, error) {
	fi, err := os.Lstat(hp)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %w", err))
		}
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	e := &wire.EntryInfo{
		Name: fi.Name(), Path: sb.guestPath(hp), Size: wire.Int64(fi.Size()),
		Mode: uint32(fi.Mode().Perm()), Permissions: fi.Mode().String(), Owner: "user", Group: "user",
		ModifiedTime: &wire.Timestamp{Time: fi.ModTime()},
	}
	mode := fi.Mode()
	if mode&fs.ModeSymlink != 0 {
		// envd: the resolved target (the link itself when it dangles) and the target's type.
		target := hp
		if t, err := filepath.EvalSymlinks(hp); err == nil {
			target = t
		}
		g := sb.guestPath(target)
		e.SymlinkTarget = &g
		e.Type = wire.FileTypeUnspecified
		e.Mode = 0
		if st, err := os.Stat(target); err == nil {
			mode = st.Mode()
			e.Mode = uint32(mode.Perm())
		} else {
			return e, nil
		}
	}
	switch {
	case mode.IsRegular():
		e.Type = wire.FileTypeFile
	case mode.IsDir():
		e.Type = wire.FileTypeDirectory
	default:
		e.Type = wire.FileTypeUnspecified
	}
	return e, nil
}

func (s *Server) stat(ctx context.Context, req *wire.StatRequest) (*wire.StatResponse, error) {
	sb := sandboxFrom(ctx)
	e, err := sb.entry(sb.hostPath(req.Path))
	if err != nil {
		return nil, err
	}
	return &wire.StatResponse{Entry: e}, nil
}

func (s *Server) listDir(ctx context.Context, req *wire.ListDirRequest) (*wire.ListDirResponse, error) {
	sb := sandboxFrom(ctx)
	if req.Depth > 1 {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("the fake lists one level only (depth 1)"))
	}
	hp := sb.hostPath(req.Path)
	real, err := sb.confined(hp)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path not found: %w", err))
		}
		return nil, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("directory not found: %w", err))
	}
	if !st.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", req.Path))
	}
	des, err := os.ReadDir(real)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	out := &wire.ListDirResponse{}
	for _, de := range des {
		e, err := sb.entry(filepath.Join(real, de.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		e.Path = path.Join(path.Clean("/"+strings.TrimPrefix(req.Path, "/")), de.Name())
		if !path.IsAbs(req.Path) {
			e.Path = path.Join(Home, req.Path, de.Name())
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

func (s *Server) makeDir(ctx context.Context, req *wire.MakeDirRequest) (*wire.MakeDirResponse, error) {
	sb := sandboxFrom(ctx)
	hp := sb.hostPath(req.Path)
	if st, err := os.Stat(hp); err == nil {
		if st.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", req.Path))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", req.Path))
	}
	if err := os.MkdirAll(hp, 0o755); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	e, err := sb.entry(hp)
	if err != nil {
		return nil, err
	}
	return &wire.MakeDirResponse{Entry: e}, nil
}

func (s *Server) move(ctx context.Context, req *wire.MoveRequest) (*wire.MoveResponse, error) {
	sb := sandboxFrom(ctx)
	src, dst := sb.hostPath(req.Source), sb.hostPath(req.Destination)
	if _, err := os.Lstat(src); err != nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: %w", err))
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error renaming: %w", err))
	}
	e, err := sb.entry(dst)
	if err != nil {
		return nil, err
	}
	return &wire.MoveResponse{Entry: e}, nil
}

func (s *Server) remove(ctx context.Context, req *wire.RemoveRequest) (*wire.Empty, error) {
	sb := sandboxFrom(ctx)
	hp := sb.hostPath(req.Path)
	if hp == sb.root {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("the fake will not remove its whole file system"))
	}
	if err := os.RemoveAll(hp); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error removing file or directory: %w", err))
	}
	return &wire.Empty{}, nil
}

// ---- HTTP files API ----

func envdError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	writeJSON(w, status, wire.Error{Code: int32(status), Message: msg})
}

// download serves GET /files?path=… (following symlinks): 404 missing, 400 a folder.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	sb := sandboxFrom(r.Context())
	p := r.URL.Query().Get("path")
	if p == "" {
		envdError(w, http.StatusBadRequest, "path is required")
		return
	}
	real, err := sb.confined(sb.hostPath(p))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			envdError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
			return
		}
		envdError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, err := os.Open(real)
	if err != nil {
		envdError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		envdError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if st.IsDir() {
		envdError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(real)}))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

// upload serves POST /files: a raw body (application/octet-stream, path required) or
// multipart parts named file (path from the query, else each part's file name). Parents are
// made; a file is overwritten in place, as envd does.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	sb := sandboxFrom(r.Context())
	qpath := r.URL.Query().Get("path")
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []wire.UploadedEntry
	put := func(p string, body io.Reader) (int, error) {
		if p == "" {
			return http.StatusBadRequest, errors.New("path query parameter is required for raw body upload")
		}
		hp := sb.hostPath(p)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return http.StatusBadRequest, err
		}
		if st, err := os.Stat(hp); err == nil && st.IsDir() {
			return http.StatusBadRequest, fmt.Errorf("path '%s' is a directory", p)
		}
		f, err := os.OpenFile(hp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return http.StatusInternalServerError, err
		}
		if _, err := io.Copy(f, body); err != nil {
			f.Close()
			return http.StatusInternalServerError, err
		}
		if err := f.Close(); err != nil {
			return http.StatusInternalServerError, err
		}
		g := sb.guestPath(hp)
		written = append(written, wire.UploadedEntry{Path: g, Name: path.Base(g), Type: "file"})
		return http.StatusOK, nil
	}
	switch {
	case mediaType == "application/octet-stream":
		if status, err := put(qpath, r.Body); err != nil {
			envdError(w, status, err.Error())
			return
		}
	case strings.HasPrefix(mediaType, "multipart/"):
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				envdError(w, http.StatusInternalServerError, "error parsing multipart form: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				continue
			}
			p := qpath
			if p == "" {
				p = part.FileName()
			}
			if status, err := put(p, part); err != nil {
				envdError(w, status, err.Error())
				return
			}
		}
	default:
		envdError(w, http.StatusBadRequest, fmt.Sprintf("unsupported content type: %s, expected multipart/form-data or application/octet-stream", r.Header.Get("Content-Type")))
		return
	}
	writeJSON(w, http.StatusOK, written)
}

// ---- text streams (code interpreter) ----

// textWriter turns a byte stream into text chunks that never split a UTF-8 character; bytes
// that are not UTF-8 become U+FFFD, as a Jupyter kernel's stream text would carry.
type textWriter struct {
	mu   sync.Mutex
	pend []byte
	emit func(string)
}

func (t *textWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pend = append(t.pend, b...)
	cut := len(t.pend)
	// Keep an incomplete character at the end for the next write.
	for i := 1; i <= utf8.UTFMax && i <= len(t.pend); i++ {
		c := t.pend[len(t.pend)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(t.pend[len(t.pend)-i:]) {
				cut = len(t.pend) - i
			}
			break
		}
	}
	if cut > 0 {
		t.emit(strings.ToValidUTF8(string(t.pend[:cut]), "\uFFFD"))
		t.pend = slices.Clone(t.pend[cut:])
	}
	return len(b), nil
}

func (t *textWriter) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pend) > 0 {
		t.emit(strings.ToValidUTF8(string(t.pend), "\uFFFD"))
		t.pend = nil
	}
}
