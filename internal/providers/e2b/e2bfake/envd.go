package e2bfake

import (
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

type process struct {
	pid     uint32
	tag     *string
	cfg     *wire.ProcessConfig
	cancel  context.CancelFunc
	stdinMu sync.Mutex
	stdin   *os.File // write end; nil when closed or not opened
	sigMu   sync.Mutex
	signal  string // the signal SendSignal asked for ("SIGKILL"), reported if the process dies of it
}

type processTable struct {
	mu   sync.Mutex
	next uint32
	m    map[uint32]*process
}

func newProcessTable() *processTable { return &processTable{next: 1000, m: map[uint32]*process{}} }

func (t *processTable) add(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	p.pid = t.next
	t.m[p.pid] = p
}

func (t *processTable) remove(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, pid)
}

func (t *processTable) find(sel *wire.ProcessSelector) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.m {
		if sel != nil && ((sel.Pid != nil && *sel.Pid == p.pid) || (sel.Tag != nil && p.tag != nil && *sel.Tag == *p.tag)) {
			return p, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("process not found"))
}

func (t *processTable) killAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.m {
		p.cancel()
	}
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

	var procCtx context.Context
	var cancel context.CancelFunc
	if ms, err := strconv.ParseInt(req.Header().Get("Connect-Timeout-Ms"), 10, 64); err == nil && ms > 0 {
		procCtx, cancel = context.WithTimeout(sb.ctx, time.Duration(ms)*time.Millisecond)
	} else {
		procCtx, cancel = context.WithCancel(sb.ctx)
	}
	defer cancel()
	p := &process{tag: req.Msg.Tag, cfg: cfg, cancel: cancel}
	var stdinR *os.File
	if req.Msg.Stdin == nil || *req.Msg.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		stdinR, p.stdin = r, w
		defer r.Close()
		defer p.closeStdin()
	}
	sb.procs.add(p)
	defer sb.procs.remove(p.pid)

	var sendMu sync.Mutex
	send := func(ev *wire.ProcessEvent) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = stream.Send(&wire.StartResponse{Event: ev}) // a client that went away stops listening only
	}
	send(&wire.ProcessEvent{Start: &wire.StartEvent{Pid: p.pid}})
	stopKeepalive := make(chan struct{})
	defer close(stopKeepalive)
	go func() {
		tick := time.NewTicker(s.opts.Keepalive)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				send(&wire.ProcessEvent{Keepalive: &struct{}{}})
			case <-stopKeepalive:
				return
			}
		}
	}()

	out := sandboxd.Streams{
		Stdout: writerFunc(func(b []byte) { send(&wire.ProcessEvent{Data: &wire.DataEvent{Stdout: slices.Clone(b)}}) }),
		Stderr: writerFunc(func(b []byte) { send(&wire.ProcessEvent{Data: &wire.DataEvent{Stderr: slices.Clone(b)}}) }),
	}
	er := sandboxd.ExecRequest{Argv: append([]string{cfg.Cmd}, cfg.Args...), Env: cfg.Envs, Dir: rel}
	if stdinR != nil {
		er.StdinReader = stdinR
	}
	res, err := sb.rt.Exec(procCtx, er, out)
	if err != nil && procCtx.Err() == nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("error starting process '%s': %w", cfg.Cmd, err))
	}
	p.sigMu.Lock()
	sig := p.signal
	p.sigMu.Unlock()
	if res.Signal != "" {
		sig = res.Signal
	}
	if err != nil && sig == "" {
		sig = "SIGKILL" // Connect-Timeout-Ms passed: envd's CommandContext kills with SIGKILL
	}
	send(&wire.ProcessEvent{End: endEvent(res.ExitCode, sig)})
	return nil
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

func (s *Server) sendInput(ctx context.Context, req *wire.SendInputRequest) (*wire.Empty, error) {
	p, err := sandboxFrom(ctx).procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	if req.Input == nil || req.Input.Pty != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("only stdin input is served (no pty)"))
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("stdin not enabled or closed"))
	}
	if _, err := p.stdin.Write(req.Input.Stdin); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error writing to stdin of process '%d': %w", p.pid, err))
	}
	return &wire.Empty{}, nil
}

func (s *Server) closeStdin(ctx context.Context, req *wire.CloseStdinRequest) (*wire.Empty, error) {
	p, err := sandboxFrom(ctx).procs.find(req.Process)
	if err != nil {
		return nil, err
	}
	p.closeStdin()
	return &wire.Empty{}, nil
}

// sendSignal ends the process for SIGKILL and SIGTERM (sandboxd signals its whole session:
// see the package doc).
func (s *Server) sendSignal(ctx context.Context, req *wire.SendSignalRequest) (*wire.Empty, error) {
	p, err := sandboxFrom(ctx).procs.find(req.Process)
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
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal: %s", req.Signal))
	}
	p.sigMu.Lock()
	p.signal = sig
	p.sigMu.Unlock()
	p.cancel()
	return &wire.Empty{}, nil
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

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
