// Package daytonafake is a local stand-in for Daytona: the control-plane API (sandboxes) and
// each sandbox's toolbox (processes, sessions, files, interpreter contexts), served by one
// httptest server on loopback, in the wire shapes of Daytona's public API and toolbox
// specifications, so that the daytona provider and Daytona's own TypeScript SDK can be
// pointed at it (the SDK's apiUrl; every Sandbox it returns carries a loopback
// toolboxProxyUrl).
//
// It implements the subset the provider and the SDK's core calls use:
//
//	control plane (under /api): POST /sandbox, GET /sandbox, GET|DELETE /sandbox/{idOrName},
//	POST /sandbox/{id}/start, POST /sandbox/{id}/stop, GET /sandbox/{id}/toolbox-proxy-url
//	toolbox (under /toolbox/{id}): GET /work-dir, /user-home-dir, /version;
//	POST /process/execute, POST /process/code-run; sessions (/process/session…: create,
//	get, list, delete, exec sync and async, command, logs as JSON or as a followed
//	WebSocket); files (GET|DELETE /files, GET /files/info, GET /files/download,
//	POST /files/bulk-upload, POST /files/bulk-download, POST /files/folder,
//	POST /files/move); interpreter contexts (POST|GET /process/interpreter/context,
//	DELETE /process/interpreter/context/{id}, the /process/interpreter/execute WebSocket)
//
// Requests need the bearer API key the fake was made with (401 otherwise); errors are
// Daytona's JSON {statusCode, message, error}.
//
// A sandbox is a folder on the test machine standing for its file system: <root>/home/daytona
// is its work dir and <root>/tmp its TMPDIR. Programs run through Sandgate's own runtime
// (internal/sandboxd) in process, as the test's user, without isolation: a session is a
// sandboxd bash context (its exported variables and working folder carry over between
// commands, like Daytona's session shell), /process/execute splits its command at spaces
// (quotes group) and runs it without a shell, as the daemon does, and an interpreter
// context is a sandboxd python context. Session output is labelled the way Daytona's daemon
// labels it: each line of stdout or stderr is written to the command's log after the marker
// 01 01 01 or 02 02 02, a last line without a line break gets one, NUL bytes are dropped.
// The interpreter reports an exception as an "error" message, not on stderr, and
// sys.exit() as a normal completion, as Daytona's worker does.
//
// Where the fake cannot be the real thing it says so: paths are confined to the sandbox's
// folder (an absolute path elsewhere, or a symlink leading out, is refused with 403, where a
// real sandbox would reach its container's own file system); network and resource settings
// are recorded (Sandbox) but not enforced; images are not built (a Dockerfile's FROM line is
// recorded) and snapshots are names.
package daytonafake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// DefaultSnapshot is the snapshot a sandbox is made from when the request names none.
const DefaultSnapshot = "daytonaio/sandbox:0.4.3"

// Server is the fake. Build it with New.
type Server struct {
	// URL is the API's base (what a client's apiUrl is set to): <server>/api.
	URL string
	// ToolboxURL is the toolbox proxy's base, <server>/toolbox; a sandbox's toolbox is at
	// ToolboxURL/<id>.
	ToolboxURL string
	// APIKey is the bearer token every request must carry.
	APIKey string
	// BuildPolls is how many GETs a sandbox built from an image stays in pending_build before
	// it is started (default 1), so clients' waiting is exercised.
	BuildPolls int

	ts   *httptest.Server
	root string

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	snapshots map[string]bool
	creates   []CreateRequest
	seq       int
}

// CreateRequest is a recorded POST /sandbox body.
type CreateRequest struct {
	Name             string            `json:"name"`
	Snapshot         string            `json:"snapshot"`
	User             string            `json:"user"`
	Env              map[string]string `json:"env"`
	Labels           map[string]string `json:"labels"`
	Public           bool              `json:"public"`
	Target           string            `json:"target"`
	CPU              int               `json:"cpu"`
	GPU              int               `json:"gpu"`
	Memory           int               `json:"memory"`
	Disk             int               `json:"disk"`
	AutoStopInterval *int              `json:"autoStopInterval"`
	NetworkBlockAll  bool              `json:"networkBlockAll"`
	NetworkAllowList string            `json:"networkAllowList"`
	BuildInfo        *struct {
		DockerfileContent string   `json:"dockerfileContent"`
		ContextHashes     []string `json:"contextHashes"`
	} `json:"buildInfo"`
}

// Sandbox is what the fake knows of one sandbox.
type Sandbox struct {
	ID, Name, State string
	Labels, Env     map[string]string
	Target          string
	Snapshot        string // "" when built from an image
	Image           string // the FROM of the build's Dockerfile
	CPU, Memory     int
	AutoStop        int // minutes
	BlockAll        bool
	AllowList       string
	// Root is the folder standing for the sandbox's file system; Home is its work dir.
	Root, Home string
}

// New starts a fake on loopback; it stops when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	root, err := os.MkdirTemp("", "daytonafake-")
	if err != nil {
		t.Fatalf("daytonafake: %v", err)
	}
	s := &Server{
		APIKey:     "dtn_fake_" + randomHex(12),
		BuildPolls: 1,
		root:       root,
		sandboxes:  map[string]*sandbox{},
		snapshots:  map[string]bool{DefaultSnapshot: true},
	}
	s.ts = httptest.NewServer(s.routes())
	s.URL = s.ts.URL + "/api"
	s.ToolboxURL = s.ts.URL + "/toolbox"
	t.Cleanup(s.Close)
	return s
}

// Close stops the server and every sandbox and removes their folders.
func (s *Server) Close() {
	s.ts.CloseClientConnections()
	s.ts.Close()
	s.mu.Lock()
	boxes := make([]*sandbox, 0, len(s.sandboxes))
	for _, b := range s.sandboxes {
		boxes = append(boxes, b)
	}
	s.sandboxes = map[string]*sandbox{}
	s.mu.Unlock()
	for _, b := range boxes {
		b.stop()
	}
	_ = os.RemoveAll(s.root)
}

// AddSnapshot makes name a snapshot sandboxes can be created from.
func (s *Server) AddSnapshot(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshots[name] = true
}

// Creates returns the POST /sandbox bodies received, in order.
func (s *Server) Creates() []CreateRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CreateRequest(nil), s.creates...)
}

// Sandbox returns what the fake knows of sandbox id; ok is false when there is none (or it
// was deleted).
func (s *Server) Sandbox(id string) (Sandbox, bool) {
	s.mu.Lock()
	b := s.sandboxes[id]
	s.mu.Unlock()
	if b == nil {
		return Sandbox{}, false
	}
	return b.snapshot(), true
}

// Sandboxes returns the ids of the sandboxes that exist, sorted.
func (s *Server) Sandboxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Stop stops sandbox id the way Daytona's auto-stop does: its processes (sessions,
// interpreter contexts) end, its files stay.
func (s *Server) Stop(id string) bool {
	s.mu.Lock()
	b := s.sandboxes[id]
	s.mu.Unlock()
	if b == nil {
		return false
	}
	b.stop()
	b.mu.Lock()
	b.state = "stopped"
	b.mu.Unlock()
	return true
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/sandbox", s.createSandbox)
	mux.HandleFunc("GET /api/sandbox", s.listSandboxes)
	mux.HandleFunc("GET /api/sandbox/{id}", s.getSandbox)
	mux.HandleFunc("DELETE /api/sandbox/{id}", s.deleteSandbox)
	mux.HandleFunc("POST /api/sandbox/{id}/start", s.startSandbox)
	mux.HandleFunc("POST /api/sandbox/{id}/stop", s.stopSandbox)
	mux.HandleFunc("GET /api/sandbox/{id}/toolbox-proxy-url", s.toolboxProxyURL)
	s.toolboxRoutes(mux)
	return s.auth(mux)
}

// auth refuses requests without the API key (WebSocket clients may send it as a header too).
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+s.APIKey {
			writeError(w, http.StatusUnauthorized, "Invalid credentials")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeError answers with Daytona's error shape.
func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]any{
		"statusCode": status,
		"message":    fmt.Sprintf(format, args...),
		"error":      http.StatusText(status),
		"timestamp":  time.Now().UTC().Format(time.RFC3339),
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

var fromLine = regexp.MustCompile(`(?im)^\s*FROM\s+(\S+)`)

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid body: %v", err)
		return
	}
	image := ""
	if req.BuildInfo != nil {
		if req.Snapshot != "" {
			writeError(w, http.StatusBadRequest, "Cannot specify a snapshot when using a build info entry")
			return
		}
		m := fromLine.FindStringSubmatch(req.BuildInfo.DockerfileContent)
		if m == nil {
			writeError(w, http.StatusBadRequest, "the Dockerfile has no FROM line")
			return
		}
		image = m[1]
	} else {
		if req.CPU != 0 || req.GPU != 0 || req.Memory != 0 || req.Disk != 0 {
			writeError(w, http.StatusBadRequest, "Cannot specify Sandbox resources when using a snapshot")
			return
		}
		if req.Snapshot == "" {
			req.Snapshot = DefaultSnapshot
		}
	}
	s.mu.Lock()
	if req.BuildInfo == nil && !s.snapshots[req.Snapshot] {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "Snapshot %s not found", req.Snapshot)
		return
	}
	s.creates = append(s.creates, req)
	s.seq++
	id := fmt.Sprintf("%08x-%s", s.seq, randomHex(8))
	s.mu.Unlock()

	b, err := newSandbox(filepath.Join(s.root, id), id, req, image)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	if image != "" {
		b.state, b.pendingPolls = "pending_build", s.BuildPolls
	}
	s.mu.Lock()
	s.sandboxes[id] = b
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.dto(b))
}

// lookup finds a sandbox by id or name.
func (s *Server) lookup(idOrName string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.sandboxes[idOrName]; b != nil {
		return b
	}
	for _, b := range s.sandboxes {
		if b.name == idOrName {
			return b
		}
	}
	return nil
}

func (s *Server) sandboxOr404(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("id")
	b := s.lookup(id)
	if b == nil {
		writeError(w, http.StatusNotFound, "Sandbox with ID or name %s not found", id)
	}
	return b
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	b := s.sandboxOr404(w, r)
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.state == "pending_build" {
		if b.pendingPolls--; b.pendingPolls < 0 {
			b.state = "started"
		}
	}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, s.dto(b))
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	b := s.sandboxOr404(w, r)
	if b == nil {
		return
	}
	s.mu.Lock()
	delete(s.sandboxes, b.id)
	s.mu.Unlock()
	b.stop()
	b.mu.Lock()
	b.state = "destroyed"
	b.mu.Unlock()
	_ = os.RemoveAll(b.root)
	writeJSON(w, http.StatusOK, s.dto(b))
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) {
	b := s.sandboxOr404(w, r)
	if b == nil {
		return
	}
	if err := b.start(); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, s.dto(b))
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	b := s.sandboxOr404(w, r)
	if b == nil {
		return
	}
	s.Stop(b.id)
	w.WriteHeader(http.StatusOK)
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	if b := s.sandboxOr404(w, r); b != nil {
		writeJSON(w, http.StatusOK, map[string]string{"url": s.ToolboxURL})
	}
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			writeError(w, http.StatusBadRequest, "labels must be a JSON object")
			return
		}
	}
	s.mu.Lock()
	boxes := make([]*sandbox, 0, len(s.sandboxes))
	for _, b := range s.sandboxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	sort.Slice(boxes, func(i, j int) bool { return boxes[i].id < boxes[j].id })
	items := []map[string]any{}
	for _, b := range boxes {
		snap := b.snapshot()
		match := true
		for k, v := range want {
			if snap.Labels[k] != v {
				match = false
			}
		}
		if match {
			items = append(items, s.dto(b))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": nil})
}

// dto renders a sandbox as Daytona's Sandbox.
func (s *Server) dto(b *sandbox) map[string]any {
	v := b.snapshot()
	d := map[string]any{
		"id": v.ID, "organizationId": "fake-organization", "name": v.Name, "user": "daytona",
		"env": v.Env, "labels": v.Labels, "public": false, "target": v.Target,
		"cpu": v.CPU, "gpu": 0, "memory": v.Memory, "disk": 10,
		"state": v.State, "desiredState": "started", "errorReason": nil,
		"autoStopInterval": v.AutoStop, "autoArchiveInterval": 10080, "autoDeleteInterval": -1,
		"networkBlockAll": v.BlockAll, "networkAllowList": v.AllowList,
		"createdAt": b.created.Format(time.RFC3339Nano), "updatedAt": time.Now().UTC().Format(time.RFC3339Nano),
		"toolboxProxyUrl": s.ToolboxURL, "daemonVersion": "fake", "sandboxClass": "container",
	}
	if v.Snapshot != "" {
		d["snapshot"] = v.Snapshot
	} else {
		d["buildInfo"] = map[string]any{"dockerfileContent": "FROM " + v.Image + "\n", "snapshotRef": "fake-build-" + v.ID}
	}
	return d
}

// sandbox is one fake sandbox.
type sandbox struct {
	id, name string
	root     string // its file system
	home     string // root/home/daytona, the work dir
	tmp      string // root/tmp, TMPDIR
	fsroot   *os.Root
	env      []string
	created  time.Time

	mu           sync.Mutex
	state        string
	pendingPolls int
	req          CreateRequest
	image        string
	rt           *sandboxd.Runtime // nil while stopped
	sessions     map[string]*session
	interps      map[string]*interp
	seq          int
}

func newSandbox(root, id string, req CreateRequest, image string) (*sandbox, error) {
	home, tmp := filepath.Join(root, "home", "daytona"), filepath.Join(root, "tmp")
	for _, d := range []string{home, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	fsroot, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = id
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{"PATH=" + path, "HOME=" + home, "TMPDIR=" + tmp, "LANG=C.UTF-8", "USER=daytona"}
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+req.Env[k])
	}
	b := &sandbox{
		id: id, name: name, root: root, home: home, tmp: tmp, fsroot: fsroot, env: env,
		created: time.Now().UTC(), state: "started", req: req, image: image,
	}
	if err := b.start(); err != nil {
		return nil, err
	}
	return b, nil
}

// start (re)starts the sandbox's runtime: its files are kept, its processes are new.
func (b *sandbox) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rt != nil {
		return nil
	}
	rt, err := sandboxd.New(sandboxd.Options{
		Workspace: b.home, Env: b.env, KillGrace: time.Second, MaxContexts: 256,
	})
	if err != nil {
		return err
	}
	b.rt, b.state = rt, "started"
	b.sessions, b.interps = map[string]*session{}, map[string]*interp{}
	return nil
}

// stop ends the sandbox's processes.
func (b *sandbox) stop() {
	b.mu.Lock()
	rt := b.rt
	b.rt = nil
	sessions := b.sessions
	b.sessions, b.interps = nil, nil
	b.mu.Unlock()
	for _, se := range sessions {
		se.end()
	}
	if rt != nil {
		_ = rt.Close()
	}
}

func (b *sandbox) snapshot() Sandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := Sandbox{
		ID: b.id, Name: b.name, State: b.state, Labels: copyMap(b.req.Labels), Env: copyMap(b.req.Env),
		Target: b.req.Target, Snapshot: b.req.Snapshot, Image: b.image, CPU: b.req.CPU, Memory: b.req.Memory,
		BlockAll: b.req.NetworkBlockAll, AllowList: b.req.NetworkAllowList, Root: b.root, Home: b.home,
	}
	if v.Target == "" {
		v.Target = "us"
	}
	if v.CPU == 0 {
		v.CPU = 1
	}
	if v.Memory == 0 {
		v.Memory = 1
	}
	if b.req.AutoStopInterval != nil {
		v.AutoStop = *b.req.AutoStopInterval
	} else {
		v.AutoStop = 15
	}
	return v
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// runtime returns the sandbox's runtime, nil when it is not started.
func (b *sandbox) runtime() *sandboxd.Runtime {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rt
}

// jsonBytes is json.Marshal for values that always marshal.
func jsonBytes(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// relPath maps a toolbox path onto the sandbox's folder: a relative path is relative to the
// work dir, an absolute one must lie inside the folder (it is given as the test machine
// sees it, since programs do too).
func (b *sandbox) relPath(p string) (string, bool) {
	if p == "" {
		p = "."
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(b.home, p)
	}
	p = filepath.Clean(p)
	rel, err := filepath.Rel(b.root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}
