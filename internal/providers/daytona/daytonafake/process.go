package daytonafake

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var upgrader = websocket.Upgrader{
	CheckOrigin:  func(*http.Request) bool { return true },
	Subprotocols: nil,
}

// Stream markers of a session command's log.
var (
	stdoutPrefix = []byte{1, 1, 1}
	stderrPrefix = []byte{2, 2, 2}
)

func (s *Server) toolboxRoutes(mux *http.ServeMux) {
	h := func(pattern string, f func(http.ResponseWriter, *http.Request, *sandbox)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			b := s.lookup(r.PathValue("id"))
			if b == nil {
				writeError(w, http.StatusNotFound, "sandbox %s not found", r.PathValue("id"))
				return
			}
			if b.runtime() == nil {
				writeError(w, http.StatusBadRequest, "sandbox %s is not started", b.id)
				return
			}
			f(w, r, b)
		})
	}
	const t = "/toolbox/{id}"
	h("GET "+t+"/work-dir", func(w http.ResponseWriter, _ *http.Request, b *sandbox) {
		writeJSON(w, http.StatusOK, map[string]string{"dir": b.home})
	})
	h("GET "+t+"/user-home-dir", func(w http.ResponseWriter, _ *http.Request, b *sandbox) {
		writeJSON(w, http.StatusOK, map[string]string{"dir": b.home})
	})
	h("GET "+t+"/version", func(w http.ResponseWriter, _ *http.Request, _ *sandbox) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "fake"})
	})
	h("POST "+t+"/process/execute", s.execute)
	h("POST "+t+"/process/code-run", s.codeRun)
	h("POST "+t+"/process/session", s.createSession)
	h("GET "+t+"/process/session", s.listSessions)
	h("GET "+t+"/process/session/{sid}", s.getSession)
	h("DELETE "+t+"/process/session/{sid}", s.deleteSession)
	h("POST "+t+"/process/session/{sid}/exec", s.sessionExec)
	h("GET "+t+"/process/session/{sid}/command/{cid}", s.getCommand)
	h("GET "+t+"/process/session/{sid}/command/{cid}/logs", s.commandLogs)
	s.fileRoutes(h, t)
	s.interpreterRoutes(h, t)
}

// splitCommand splits a command the way Daytona's daemon does for /process/execute: at
// spaces outside quotes; a quote character opens a group that its twin closes, and quotes
// themselves are dropped. No other shell syntax applies.
func splitCommand(command string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	for _, r := range command {
		switch {
		case (r == '"' || r == '\'') && quote == 0:
			quote = r
		case r == quote:
			quote = 0
		case r == ' ' && quote == 0:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// lockedBuffer is an output buffer both streams may write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, b *sandbox) {
	var req struct {
		Command string            `json:"command"`
		Cwd     string            `json:"cwd"`
		Envs    map[string]string `json:"envs"`
		Timeout *int              `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		writeError(w, http.StatusBadRequest, "command is required")
		return
	}
	argv := splitCommand(req.Command)
	if len(argv) == 0 {
		writeError(w, http.StatusBadRequest, "empty command")
		return
	}
	timeout := 360 * time.Second
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	dir := ""
	if req.Cwd != "" {
		rel, ok := b.relPath(req.Cwd)
		if !ok {
			writeError(w, http.StatusForbidden, "cwd is outside the sandbox")
			return
		}
		dir = strings.TrimPrefix(rel, "home/daytona/")
		if rel == "home/daytona" {
			dir = ""
		}
	}
	out := &lockedBuffer{}
	res, err := b.runtime().Exec(r.Context(), sandboxd.ExecRequest{Argv: argv, Env: req.Envs, Dir: dir, Timeout: timeout},
		sandboxd.Streams{Stdout: out, Stderr: out})
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "%v", err)
	case res.TimedOut:
		writeError(w, http.StatusRequestTimeout, "command execution timeout")
	default:
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": res.ExitCode, "result": out.String()})
	}
}

func (s *Server) codeRun(w http.ResponseWriter, r *http.Request, b *sandbox) {
	var req struct {
		Code     string            `json:"code"`
		Language string            `json:"language"`
		Argv     []string          `json:"argv"`
		Envs     map[string]string `json:"envs"`
		Timeout  *int              `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Code == "" {
		writeError(w, http.StatusBadRequest, "code is required")
		return
	}
	if req.Language != "python" {
		writeError(w, http.StatusBadRequest, "unsupported language %q (the fake runs python)", req.Language)
		return
	}
	var timeout time.Duration
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	out := &lockedBuffer{}
	res, err := b.runtime().Exec(r.Context(), sandboxd.ExecRequest{Code: req.Code, Language: "python", Env: req.Envs, Timeout: timeout},
		sandboxd.Streams{Stdout: out, Stderr: out})
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	code := res.ExitCode
	if res.TimedOut {
		code = -1
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": out.String(), "artifacts": map[string]any{"charts": []any{}}})
}

// session is a toolbox session: a sandboxd bash context, one command at a time.
type session struct {
	id      string
	ctxName string
	b       *sandbox
	turn    chan struct{} // one command at a time

	mu       sync.Mutex
	ended    bool
	commands map[string]*command
	order    []string
}

// command is one session command and its labelled log.
type command struct {
	id, text string

	mu      sync.Mutex
	log     []byte
	exit    *int
	done    bool // finished (exit set) or its session ended
	changed chan struct{}
}

func newCommand(text string) *command {
	return &command{id: randomHex(16), text: text, changed: make(chan struct{})}
}

func (c *command) appendLog(p []byte) {
	c.mu.Lock()
	c.log = append(c.log, p...)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *command) finish(exit *int) {
	c.mu.Lock()
	if !c.done {
		c.exit, c.done = exit, true
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.mu.Unlock()
}

// since returns the log after off, whether the command is done, and a channel closed on the
// next change.
func (c *command) since(off int) ([]byte, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var data []byte
	if off < len(c.log) {
		data = append([]byte(nil), c.log[off:]...)
	}
	return data, c.done, c.changed
}

func (c *command) view() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := map[string]any{"id": c.id, "command": c.text}
	if c.exit != nil {
		v["exitCode"] = *c.exit
	}
	return v
}

// split returns the log without markers: combined, stdout, stderr.
func (c *command) split() (string, string, string) {
	c.mu.Lock()
	log := append([]byte(nil), c.log...)
	c.mu.Unlock()
	var all, out, errb bytes.Buffer
	var cur *bytes.Buffer
	for len(log) > 0 {
		switch {
		case bytes.HasPrefix(log, stdoutPrefix):
			cur, log = &out, log[3:]
			continue
		case bytes.HasPrefix(log, stderrPrefix):
			cur, log = &errb, log[3:]
			continue
		}
		all.WriteByte(log[0])
		if cur != nil {
			cur.WriteByte(log[0])
		}
		log = log[1:]
	}
	return all.String(), out.String(), errb.String()
}

// labeller writes one stream into a command's log the way the daemon's labelling loop does
// (`while IFS= read -r line || [ -n "$line" ]; do printf '<marker>%s\n' "$line"; done`):
// whole lines, each after the marker; NUL bytes dropped; a last line without a line break
// gets one (flush).
type labeller struct {
	c       *command
	prefix  []byte
	partial []byte
}

func (l *labeller) Write(p []byte) (int, error) {
	n := len(p)
	for _, c := range p {
		if c == 0 {
			continue
		}
		l.partial = append(l.partial, c)
		if c == '\n' {
			l.c.appendLog(append(append([]byte(nil), l.prefix...), l.partial...))
			l.partial = l.partial[:0]
		}
	}
	return n, nil
}

func (l *labeller) flush() {
	if len(l.partial) > 0 {
		l.c.appendLog(append(append(append([]byte(nil), l.prefix...), l.partial...), '\n'))
		l.partial = nil
	}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, b *sandbox) {
	var req struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SessionID == "" {
		writeError(w, http.StatusBadRequest, "sessionId is required")
		return
	}
	b.mu.Lock()
	if _, ok := b.sessions[req.SessionID]; ok {
		b.mu.Unlock()
		writeError(w, http.StatusConflict, "session already exists")
		return
	}
	b.seq++
	se := &session{id: req.SessionID, ctxName: "session-" + randomHex(8), b: b, turn: make(chan struct{}, 1), commands: map[string]*command{}}
	b.sessions[req.SessionID] = se
	b.mu.Unlock()
	if _, err := b.runtime().CreateContext(se.ctxName, "bash"); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (b *sandbox) session(id string) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions[id]
}

func (s *Server) sessionOr404(w http.ResponseWriter, r *http.Request, b *sandbox) *session {
	se := b.session(r.PathValue("sid"))
	if se == nil {
		writeError(w, http.StatusNotFound, "session not found")
	}
	return se
}

func (se *session) view() map[string]any {
	se.mu.Lock()
	cmds := make([]*command, 0, len(se.order))
	for _, id := range se.order {
		cmds = append(cmds, se.commands[id])
	}
	se.mu.Unlock()
	list := make([]map[string]any, 0, len(cmds))
	for _, c := range cmds {
		list = append(list, c.view())
	}
	return map[string]any{"sessionId": se.id, "commands": list}
}

func (s *Server) listSessions(w http.ResponseWriter, _ *http.Request, b *sandbox) {
	b.mu.Lock()
	ids := make([]string, 0, len(b.sessions))
	for id := range b.sessions {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	sort.Strings(ids)
	out := []map[string]any{}
	for _, id := range ids {
		if se := b.session(id); se != nil {
			out = append(out, se.view())
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, b *sandbox) {
	if se := s.sessionOr404(w, r, b); se != nil {
		writeJSON(w, http.StatusOK, se.view())
	}
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, b *sandbox) {
	se := s.sessionOr404(w, r, b)
	if se == nil {
		return
	}
	b.mu.Lock()
	delete(b.sessions, se.id)
	b.mu.Unlock()
	se.end()
	w.WriteHeader(http.StatusNoContent)
}

// end kills what runs in the session (its process group, as the daemon does) and ends
// followers of its commands.
func (se *session) end() {
	se.mu.Lock()
	se.ended = true
	cmds := make([]*command, 0, len(se.commands))
	for _, c := range se.commands {
		cmds = append(cmds, c)
	}
	se.mu.Unlock()
	if rt := se.b.runtime(); rt != nil {
		_ = rt.DeleteContext(se.ctxName)
	}
	for _, c := range cmds {
		c.finish(nil)
	}
}

func (s *Server) sessionExec(w http.ResponseWriter, r *http.Request, b *sandbox) {
	se := s.sessionOr404(w, r, b)
	if se == nil {
		return
	}
	var req struct {
		Command  string `json:"command"`
		RunAsync bool   `json:"runAsync"`
		Async    bool   `json:"async"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || strings.TrimSpace(req.Command) == "" {
		writeError(w, http.StatusBadRequest, "command cannot be empty")
		return
	}
	c := newCommand(req.Command)
	se.mu.Lock()
	se.commands[c.id] = c
	se.order = append(se.order, c.id)
	se.mu.Unlock()
	go se.run(c)
	if req.RunAsync || req.Async {
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.id})
		return
	}
	for {
		_, done, changed := c.since(0)
		if done {
			break
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
	all, out, errs := c.split()
	resp := map[string]any{"cmdId": c.id, "output": all, "stdout": out, "stderr": errs}
	if v := c.view(); v["exitCode"] != nil {
		resp["exitCode"] = v["exitCode"]
	}
	writeJSON(w, http.StatusOK, resp)
}

// run runs c in the session's bash context when it is the session's turn.
func (se *session) run(c *command) {
	se.turn <- struct{}{}
	defer func() { <-se.turn }()
	se.mu.Lock()
	ended := se.ended
	se.mu.Unlock()
	rt := se.b.runtime()
	if ended || rt == nil {
		c.finish(nil)
		return
	}
	out := &labeller{c: c, prefix: stdoutPrefix}
	errs := &labeller{c: c, prefix: stderrPrefix}
	res, err := rt.Exec(context.Background(), sandboxd.ExecRequest{Code: c.text, Language: "bash", Context: se.ctxName},
		sandboxd.Streams{Stdout: out, Stderr: errs})
	out.flush()
	errs.flush()
	se.mu.Lock()
	ended = se.ended
	se.mu.Unlock()
	if err != nil || ended {
		c.finish(nil)
		return
	}
	code := res.ExitCode
	c.finish(&code)
}

func (se *session) command(id string) *command {
	se.mu.Lock()
	defer se.mu.Unlock()
	return se.commands[id]
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request, b *sandbox) {
	se := s.sessionOr404(w, r, b)
	if se == nil {
		return
	}
	c := se.command(r.PathValue("cid"))
	if c == nil {
		writeError(w, http.StatusNotFound, "command not found")
		return
	}
	writeJSON(w, http.StatusOK, c.view())
}

// separatesStreams reports whether the client announced an SDK version that gets stdout and
// stderr apart (0.167.0 or later, like the daemon); clients that announce none get the
// combined output.
func separatesStreams(r *http.Request) bool {
	v := r.Header.Get("X-Daytona-SDK-Version")
	if v == "" {
		for _, p := range websocket.Subprotocols(r) {
			if after, ok := strings.CutPrefix(p, "X-Daytona-SDK-Version~"); ok {
				v = after
			}
		}
	}
	major, minor, ok := minorVersion(v)
	return ok && (major > 0 || minor >= 167)
}

func (s *Server) commandLogs(w http.ResponseWriter, r *http.Request, b *sandbox) {
	se := s.sessionOr404(w, r, b)
	if se == nil {
		return
	}
	c := se.command(r.PathValue("cid"))
	if c == nil {
		writeError(w, http.StatusNotFound, "command not found")
		return
	}
	separate := separatesStreams(r)
	if !websocket.IsWebSocketUpgrade(r) {
		all, out, errs := c.split()
		if separate {
			writeJSON(w, http.StatusOK, map[string]string{"output": all, "stdout": out, "stderr": errs})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(all))
		return
	}
	follow := r.URL.Query().Get("follow") == "true"
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	off := 0
	for {
		data, done, changed := c.since(off)
		if len(data) > 0 {
			off += len(data)
			if !separate {
				data = bytes.ReplaceAll(bytes.ReplaceAll(data, stdoutPrefix, nil), stderrPrefix, nil)
			}
			if err := conn.WriteMessage(websocket.BinaryMessage, data); err != nil {
				return
			}
			continue
		}
		if done || !follow {
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		}
		select {
		case <-changed:
		case <-gone:
			return
		}
	}
}

// minorVersion reads MAJOR and MINOR from a version "MAJOR.MINOR.PATCH".
func minorVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
