// Package e2bfake is a local stand-in for E2B, for tests: it serves the control-plane REST
// API, envd (its Connect-RPC process and filesystem services and its HTTP files API) and the
// code interpreter's /execute and /contexts, in the wire shapes of package wire, on two
// loopback httptest servers, so that both Sandgate's e2b provider and E2B's official
// JavaScript SDKs (e2b, @e2b/code-interpreter) can be pointed at it.
//
// Reaching it. API is the control plane's base URL (the SDK's E2B_API_URL, the provider's
// api_url). Sandboxes is the one URL of every sandbox's envd and code interpreter (the
// SDK's E2B_SANDBOX_URL, the provider's sandbox_url): like E2B's sandbox proxy it routes
// each request by its E2b-Sandbox-Id and E2b-Sandbox-Port headers (49983 envd, 49999 the
// code interpreter), or else by a Host of the form <port>-<sandbox id>.<domain>.
//
// A sandbox is a folder: <Dir>/<id>/root stands for the sandbox's "/", and its
// home/user — the default user's home and working folder, as in E2B's templates — is the
// workspace of a sandboxd.Runtime (internal/sandboxd) that runs every process and keeps the
// code contexts. Programs therefore really run, on this machine, as the test's user; what a
// micro-VM adds is not played: programs see the host's file system (absolute paths in
// programs are the host's; envd's file API maps absolute paths into the sandbox's root and
// refuses to leave it), egress rules (allow_internet_access, network) are recorded but not
// enforced, cpu and memory are whatever the template would give (not modelled).
//
// envd's Connect-RPC messages are decoded strictly (wire.StrictCodec), although envd
// (connect-go) discards fields it does not know: the strictness checks that package wire
// describes every field the SDKs send, and that the provider sends only fields it describes.
//
// Processes follow envd's rules where a client can see them: a process outlives the stream
// that started it (Connect-Timeout-Ms bounds its life); its output goes to the streams
// subscribed when it is written (Start's from the first byte, Connect's from the moment of
// connecting: nothing is replayed, output nobody follows is dropped, a stream that does not
// read holds the program up); it is found by pid or tag; stdin, a terminal (pty) and input
// are refused the way envd refuses them; an ended process's exit is kept 30 s for a late
// Connect (envd 0.6.12+).
//
// What differs from real E2B, knowingly:
//   - a process runs in its own session (sandboxd): when it exits, what it left running is
//     killed, and a signal from SendSignal ends its whole process tree. envd signals only the
//     process it started, and its stream ends only when the process's output pipes close;
//   - a process on a terminal is a kept sandboxd execution: a follower more than its kept
//     output (2 MiB) behind loses the middle, where envd would hold the program up;
//   - pids are the fake's own numbers, not the guest's;
//   - the code interpreter runs code with sandboxd's Python and bash contexts, not Jupyter
//     kernels: no rich results (a cell's last expression is not echoed as a "result"),
//     execution counts are the fake's, a kernel that dies reports the error
//     ContextRestarting (as the code interpreter does when Jupyter restarts a kernel), and
//     a client that goes away interrupts the code (SIGINT) as the real server does;
//   - the sandbox timeout is kept (a sandbox is killed when it passes), auto-pause,
//     snapshots, volumes, templates and metrics are not served.
package e2bfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Defaults of Options.
const (
	DefaultAPIKey      = "e2b_fake_0123456789abcdef"
	DefaultEnvdVersion = "0.6.13"
	DefaultDomain      = "e2b.fake"
	// Home is the default user's home in the sandbox: envd's working folder, and the folder
	// relative envd paths are taken from.
	Home = "/home/user"
)

// Options configure New.
type Options struct {
	// APIKey is the only key the control plane accepts. Default DefaultAPIKey.
	APIKey string
	// Dir holds the sandbox folders. Default a t.TempDir().
	Dir string
	// Python is sandboxd's interpreter. Default "python3".
	Python string
	// KillGrace is sandboxd's time between SIGTERM and SIGKILL. Default 500 ms.
	KillGrace time.Duration
	// Keepalive is the interval of keepalive events on process streams. Default 15 s.
	Keepalive time.Duration
	Logger    *slog.Logger
}

// Server is a running fake.
type Server struct {
	// API is the control plane's base URL (http://127.0.0.1:port).
	API string
	// Sandboxes is the base URL of every sandbox's envd and code interpreter.
	Sandboxes string
	// Domain is the domain sandboxes report (their Host-routed URLs use it).
	Domain string
	// APIKey is the accepted API key.
	APIKey string

	opts   Options
	api    *httptest.Server
	sbx    *httptest.Server
	envd   *http.ServeMux
	interp *http.ServeMux
	logger *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*sandbox // live ones
	killed    map[string]*sandbox // killed sandboxes, for Sandbox
	calls     []Call
}

// Call records one control-plane request.
type Call struct {
	Method, Path string
	Status       int
	Body         []byte // the request body
}

// New starts a fake with two loopback servers, closed (with every sandbox) when t ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.APIKey == "" {
		opts.APIKey = DefaultAPIKey
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = 500 * time.Millisecond
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		Domain: DefaultDomain, APIKey: opts.APIKey, opts: opts, logger: opts.Logger,
		sandboxes: map[string]*sandbox{}, killed: map[string]*sandbox{},
	}
	s.envd, s.interp = s.newEnvdMux(), s.newInterpMux()
	s.api = httptest.NewServer(http.HandlerFunc(s.serveAPI))
	s.sbx = httptest.NewUnstartedServer(http.HandlerFunc(s.serveSandbox))
	s.sbx.EnableHTTP2 = true
	s.sbx.Start()
	s.API, s.Sandboxes = s.api.URL, s.sbx.URL
	t.Cleanup(s.Close)
	return s
}

// Close kills every sandbox and stops the servers.
func (s *Server) Close() {
	s.mu.Lock()
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	for _, sb := range all {
		s.kill(sb.id)
	}
	s.sbx.CloseClientConnections()
	s.api.Close()
	s.sbx.Close()
}

// Calls returns the control-plane requests made so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Created is what a sandbox was created with.
type Created struct {
	Request wire.NewSandbox
	EndAt   time.Time
	Killed  bool
	// Workspace is the host folder of the sandbox's /home/user.
	Workspace string
}

// Sandbox reports sandbox id's creation request, expiry and workspace; ok is false for an
// unknown id.
func (s *Server) Sandbox(id string) (Created, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	killed := false
	if !ok {
		if sb, killed = s.killed[id]; !killed {
			return Created{}, false
		}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return Created{Request: sb.req, EndAt: sb.endAt, Workspace: sb.home, Killed: killed}, true
}

// Processes lists the running envd processes of sandbox id (as envd's List answers); nil for
// an unknown sandbox.
func (s *Server) Processes(id string) []wire.ProcessInfo {
	sb := s.get(id)
	if sb == nil {
		return nil
	}
	sb.procs.mu.Lock()
	defer sb.procs.mu.Unlock()
	out := []wire.ProcessInfo{}
	for _, p := range sb.procs.m {
		out = append(out, wire.ProcessInfo{Config: p.cfg, Pid: p.pid, Tag: p.tag})
	}
	return out
}

// Expire makes sandbox id time out now, as E2B does when its timeout passes.
func (s *Server) Expire(id string) { s.kill(id) }

// ---- control plane ----

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	rec := &statusRecorder{ResponseWriter: w, status: 200}
	defer func() {
		s.mu.Lock()
		s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Status: rec.status, Body: body})
		s.mu.Unlock()
	}()
	if r.Header.Get(wire.APIKeyHeader) != s.APIKey {
		apiError(rec, http.StatusUnauthorized, "Invalid API key, it must start with 'e2b_' prefix and be a valid key")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v2")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "sandboxes" && r.Method == http.MethodPost:
		s.create(rec, body)
	case len(parts) == 1 && parts[0] == "sandboxes" && r.Method == http.MethodGet:
		s.list(rec, r)
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == http.MethodGet:
		s.detail(rec, parts[1])
	case len(parts) == 2 && parts[0] == "sandboxes" && r.Method == http.MethodDelete:
		if !s.kill(parts[1]) {
			apiError(rec, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" doesn't exist or you don't have access to it", parts[1]))
			return
		}
		rec.WriteHeader(http.StatusNoContent)
	case len(parts) == 3 && parts[0] == "sandboxes" && r.Method == http.MethodPost:
		s.sandboxOp(rec, parts[1], parts[2], body)
	default:
		apiError(rec, http.StatusNotFound, "no such route in the fake: "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) create(w http.ResponseWriter, body []byte) {
	var req wire.NewSandbox
	if err := json.Unmarshal(body, &req); err != nil || req.TemplateID == "" {
		apiError(w, http.StatusBadRequest, "request body must be a NewSandbox with a templateID")
		return
	}
	if req.AutoPause != nil && *req.AutoPause {
		apiError(w, http.StatusBadRequest, "the fake does not pause sandboxes (autoPause)")
		return
	}
	timeout := int32(15)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	sb, err := s.newSandbox(req)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.mu.Lock()
	s.sandboxes[sb.id] = sb
	s.mu.Unlock()
	s.setTimeout(sb, timeout, false)
	writeJSON(w, http.StatusCreated, sb.info())
}

func (s *Server) sandboxOp(w http.ResponseWriter, id, op string, body []byte) {
	sb := s.get(id)
	if sb == nil {
		apiError(w, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" doesn't exist or you don't have access to it", id))
		return
	}
	switch op {
	case "connect":
		var req wire.ConnectSandbox
		if err := json.Unmarshal(body, &req); err != nil {
			apiError(w, http.StatusBadRequest, "request body must be a ConnectSandbox")
			return
		}
		s.setTimeout(sb, req.Timeout, true)
		writeJSON(w, http.StatusOK, sb.info())
	case "timeout":
		var req wire.TimeoutRequest
		if err := json.Unmarshal(body, &req); err != nil {
			apiError(w, http.StatusBadRequest, "request body must be a SandboxTimeoutRequest")
			return
		}
		s.setTimeout(sb, req.Timeout, false)
		w.WriteHeader(http.StatusNoContent)
	case "refreshes":
		var req struct {
			Duration int32 `json:"duration"`
		}
		_ = json.Unmarshal(body, &req)
		s.setTimeout(sb, req.Duration, true)
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusNotFound, "the fake does not serve sandbox operation "+op)
	}
}

func (s *Server) detail(w http.ResponseWriter, id string) {
	sb := s.get(id)
	if sb == nil {
		apiError(w, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" doesn't exist or you don't have access to it", id))
		return
	}
	sb.mu.Lock()
	d := wire.SandboxDetail{ListedSandbox: sb.listed(), EnvdAccessToken: sb.token, AllowInternetAccess: sb.req.AllowInternetAccess, Network: sb.req.Network}
	sb.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
}

// list serves GET /sandboxes and /v2/sandboxes: metadata=url-encoded "k=v&k2=v2" filters,
// state=running,paused (the fake has only running ones). One page: no X-Next-Token.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	want, err := url.ParseQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "metadata must be url-encoded key=value pairs")
		return
	}
	if st := r.URL.Query().Get("state"); st != "" && !slices.Contains(strings.Split(st, ","), "running") {
		writeJSON(w, http.StatusOK, []wire.ListedSandbox{})
		return
	}
	s.mu.Lock()
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	out := []wire.ListedSandbox{}
	for _, sb := range all {
		sb.mu.Lock()
		l := sb.listed()
		sb.mu.Unlock()
		match := true
		for k, vs := range want {
			if l.Metadata[k] != vs[0] {
				match = false
			}
		}
		if match {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b wire.ListedSandbox) int { return b.StartedAt.Compare(a.StartedAt) })
	w.Header().Set("X-Total-Running", strconv.Itoa(len(out)))
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id]
}

// setTimeout sets sandbox sb to expire secs from now; extendOnly keeps a later expiry.
func (s *Server) setTimeout(sb *sandbox, secs int32, extendOnly bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	end := time.Now().Add(time.Duration(secs) * time.Second)
	if extendOnly && end.Before(sb.endAt) {
		return
	}
	sb.endAt = end
	if sb.timer != nil {
		sb.timer.Stop()
	}
	id := sb.id
	sb.timer = time.AfterFunc(time.Until(end), func() { s.kill(id) })
}

// kill ends sandbox id: its processes and contexts end and its folder is removed. It
// reports whether the sandbox was alive.
func (s *Server) kill(id string) bool {
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	if ok {
		delete(s.sandboxes, id)
		s.killed[id] = sb
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	sb.close()
	return true
}

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, wire.Error{Code: int32(status), Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- one sandbox ----

type sandbox struct {
	id       string
	root     string // host folder standing for the sandbox's "/"
	home     string // root + Home: the runtime's workspace
	token    string // envd access token ("" unless secure)
	traffic  string // traffic access token of the other ports ("" when public)
	rt       *sandboxd.Runtime
	started  time.Time
	interp   bool // runs the code interpreter
	ctx      context.Context
	cancel   context.CancelFunc
	procs    *processTable
	contexts *contextTable

	mu    sync.Mutex
	req   wire.NewSandbox
	endAt time.Time
	timer *time.Timer
}

func (s *Server) newSandbox(req wire.NewSandbox) (*sandbox, error) {
	id := "i" + randomID(19)
	root := filepath.Join(s.opts.Dir, id, "root")
	home := filepath.Join(root, filepath.FromSlash(Home))
	for _, d := range []string{home, filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "USER=user", "LOGNAME=user", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1"}
	for k, v := range req.EnvVars {
		env = append(env, k+"="+v)
	}
	rt, err := sandboxd.New(sandboxd.Options{
		Workspace: home, Env: env, Python: s.opts.Python, KillGrace: s.opts.KillGrace,
		DrainDelay: 250 * time.Millisecond, MaxContexts: 64, Logger: s.logger,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sb := &sandbox{
		id: id, root: root, home: home, rt: rt, started: time.Now(), req: req,
		interp: strings.HasPrefix(req.TemplateID, "code-interpreter"),
		ctx:    ctx, cancel: cancel, procs: newProcessTable(), contexts: newContextTable(),
	}
	if req.Secure != nil && *req.Secure {
		sb.token = randomHex(16)
	}
	if n := req.Network; n != nil && n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
		sb.traffic = randomHex(16)
	}
	if sb.interp {
		// The code interpreter starts with a default python context (template/server main.py).
		if _, err := sb.contexts.create(sb, "python", Home); err != nil {
			sb.close()
			return nil, err
		}
	}
	return sb, nil
}

func (sb *sandbox) info() wire.Sandbox {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	info := wire.Sandbox{TemplateID: sb.req.TemplateID, SandboxID: sb.id, ClientID: "e2bfake", EnvdVersion: DefaultEnvdVersion, EnvdAccessToken: sb.token}
	if sb.traffic != "" {
		info.TrafficAccessToken = &sb.traffic
	}
	return info
}

// listed is the sandbox's ListedSandbox; sb.mu is held.
func (sb *sandbox) listed() wire.ListedSandbox {
	return wire.ListedSandbox{
		TemplateID: sb.req.TemplateID, SandboxID: sb.id, ClientID: "e2bfake",
		StartedAt: sb.started.UTC(), EndAt: sb.endAt.UTC(), CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024,
		Metadata: sb.req.Metadata, State: "running", EnvdVersion: DefaultEnvdVersion,
	}
}

func (sb *sandbox) close() {
	sb.mu.Lock()
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.mu.Unlock()
	sb.cancel()
	_ = sb.rt.Close()
	_ = os.RemoveAll(filepath.Dir(sb.root))
}
