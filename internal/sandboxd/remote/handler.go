//go:build unix

package remote

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"

	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// maxJSONBody bounds JSON request bodies (an exec request carries its code and stdin).
const maxJSONBody = 256 << 20

// Handler returns the HTTP handler of the runtime API (see the package doc) serving rt, with
// token as the bearer secret of every /v1 route. log receives request failures; nil discards.
// It panics when token is empty: an API without a secret must not exist.
func Handler(rt *sandboxd.Runtime, token string, log *slog.Logger) http.Handler {
	if token == "" {
		panic("remote.Handler: empty token; sandboxd must not serve its API without a secret")
	}
	s := &secret{}
	s.set(token)
	return newHandler(rt, s, nil, log)
}

// HandlerAwaitingToken returns the handler of the runtime API serving rt before it has a
// secret (sandboxd serve --await-token): until PUT /v1/token sets one, every other /v1
// request is answered 503 (kind awaiting-token) and nothing runs. The first token set wins;
// the same value again is accepted, another one refused (409). onToken, when not nil, is
// called once, after the token is set (sandboxd opens its TCP listener then).
func HandlerAwaitingToken(rt *sandboxd.Runtime, log *slog.Logger, onToken func()) http.Handler {
	return newHandler(rt, &secret{}, onToken, log)
}

func newHandler(rt *sandboxd.Runtime, sec *secret, onToken func(), log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{rt: rt, log: log, secret: sec, onToken: onToken}

	v1 := http.NewServeMux()
	v1.HandleFunc("POST /v1/exec", s.exec)
	v1.HandleFunc("POST /v1/executions", s.startExecution)
	v1.HandleFunc("GET /v1/executions", s.listExecutions)
	v1.HandleFunc("GET /v1/executions/{id}", s.getExecution)
	v1.HandleFunc("DELETE /v1/executions/{id}", s.deleteExecution)
	v1.HandleFunc("POST /v1/executions/{id}/stdin", s.writeStdin)
	v1.HandleFunc("POST /v1/executions/{id}/resize", s.resize)
	v1.HandleFunc("GET /v1/files", s.readFile)
	v1.HandleFunc("PUT /v1/files", s.writeFile)
	v1.HandleFunc("DELETE /v1/files", s.removeFile)
	v1.HandleFunc("GET /v1/files/list", s.listFiles)
	v1.HandleFunc("POST /v1/files/folders", s.makeDir)
	v1.HandleFunc("POST /v1/files/move", s.moveFile)
	v1.HandleFunc("GET /v1/contexts", s.listContexts)
	v1.HandleFunc("POST /v1/contexts", s.createContext)
	v1.HandleFunc("POST /v1/contexts/{name}/restart", s.restartContext)
	v1.HandleFunc("DELETE /v1/contexts/{name}", s.deleteContext)
	v1.HandleFunc("GET /v1/ports/{port}", s.tunnelPort)
	v1.HandleFunc("GET /v1/workspace/archive", s.readArchive)
	v1.HandleFunc("PUT /v1/workspace/archive", s.writeArchive)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", health)
	mux.HandleFunc("GET /readyz", health)
	mux.HandleFunc("PUT /v1/token", s.setToken)
	mux.Handle("/v1/", requireToken(sec, problemsForUnmatched(v1)))
	return problemsForUnmatched(mux)
}

// Limits of a token given with PUT /v1/token.
const (
	minTokenLen  = 32
	maxTokenLen  = 1024
	maxTokenBody = 4 << 10
)

// secret is the bearer secret, set once: at start, or by PUT /v1/token.
type secret struct {
	mu   sync.Mutex
	sum  [sha256.Size]byte // SHA-256 of "Bearer <token>"
	have atomic.Bool
}

// set sets the token when none is set yet; it reports whether the token set now (or before)
// is token, compared in constant time.
func (s *secret) set(token string) (first, same bool) {
	sum := sha256.Sum256([]byte("Bearer " + token))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.have.Load() {
		s.sum = sum
		s.have.Store(true)
		return true, true
	}
	return false, subtle.ConstantTimeCompare(sum[:], s.sum[:]) == 1
}

// check compares an Authorization header with the token; ok is false without a token.
func (s *secret) check(authorization string) (set, ok bool) {
	if !s.have.Load() {
		return false, false
	}
	got := sha256.Sum256([]byte(authorization))
	s.mu.Lock()
	want := s.sum
	s.mu.Unlock()
	return true, subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

type server struct {
	rt      *sandboxd.Runtime
	log     *slog.Logger
	secret  *secret
	onToken func()
}

func health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// requireToken lets a request through only with "Authorization: Bearer <token>". The
// comparison is of SHA-256 sums in constant time, so it leaks neither content nor length.
// Without a token yet, the answer is 503 (kind awaiting-token).
func requireToken(sec *secret, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set, ok := sec.check(r.Header.Get("Authorization"))
		if !set {
			writeProblem(w, newProblem(http.StatusServiceUnavailable, kindAwaitingToken, "sandboxd awaits its token (PUT /v1/token); nothing runs before it is set"))
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
			writeProblem(w, newProblem(http.StatusUnauthorized, kindUnauthenticated, "a valid sandboxd bearer token is required"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// setToken is PUT /v1/token: the first token set wins (204), the same one again is accepted
// (204), another one is refused (409). It needs no bearer token: the body is the secret.
func (s *server) setToken(w http.ResponseWriter, r *http.Request) {
	var body tokenBody
	if !s.decodeLimit(w, r, &body, maxTokenBody) {
		return
	}
	if n := len(body.Token); n < minTokenLen || n > maxTokenLen || !tokenChars(body.Token) {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), fmt.Sprintf("the token must have %d to %d printable ASCII characters and no spaces", minTokenLen, maxTokenLen)))
		return
	}
	first, same := s.secret.set(body.Token)
	if !same {
		writeProblem(w, newProblem(http.StatusConflict, string(fault.Conflict), "sandboxd already has another token"))
		return
	}
	if first {
		s.log.Info("sandboxd: token set")
		if s.onToken != nil {
			s.onToken()
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// tokenChars reports whether t has only printable ASCII characters other than space.
func tokenChars(t string) bool {
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// problemsForUnmatched answers requests mux has no route for (404) or no method for (405)
// with a problem document instead of plain text.
func problemsForUnmatched(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			writeProblem(w, newProblem(http.StatusNotFound, kindUnknownRoute, "no route "+r.URL.Path))
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeProblem(w, newProblem(http.StatusMethodNotAllowed, kindMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path))
		default:
			mux.ServeHTTP(w, r) // a redirect
		}
	})
}

// statusRecorder keeps the status and headers of ServeMux's own 404 and 405 answers.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (s *statusRecorder) WriteHeader(status int)      { s.status = status }

func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	var body execBody
	if !s.decode(w, r, &body) {
		return
	}
	req, ok := body.request(w)
	if !ok {
		return
	}
	if id := r.Header.Get(headerExecutionID); id != "" {
		s.execKept(w, r, id, req)
		return
	}

	st := &stream{w: w, rc: http.NewResponseController(w)}
	res, err := s.rt.Exec(r.Context(), req, sandboxd.Streams{
		Stdout:     frameWriter{st, FrameStdout},
		Stderr:     frameWriter{st, FrameStderr},
		ResultFunc: st.richResult,
	})
	if err != nil {
		if r.Context().Err() != nil {
			s.log.Debug("sandboxd: the client went away; the execution was killed", "error", err)
			return
		}
		if fault.KindOf(err) == fault.Internal {
			s.log.Warn("sandboxd: execution failed", "error", err)
		}
		if !st.begun() {
			writeProblem(w, problemFor(err))
			return
		}
		_ = st.frame(FrameError, problemFor(err).json())
		return
	}
	data, _ := json.Marshal(res)
	if err := st.frame(FrameResult, data); err != nil {
		s.log.Debug("sandboxd: the result could not be sent", "error", err)
	}
}

// stream writes exec frames; the status line and headers go out with the first frame.
type stream struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	rc     *http.ResponseController
	header bool
	err    error
}

// failed reports whether a write of the stream failed (the client went away).
func (s *stream) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

func (s *stream) begun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header
}

// frame writes one frame and flushes it.
func (s *stream) frame(typ byte, payload []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if !s.header {
		h := s.w.Header()
		h.Set("Content-Type", StreamContentType)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		s.w.WriteHeader(http.StatusOK)
		s.header = true
	}
	var head [frameHeader]byte
	head[0] = typ
	binary.BigEndian.PutUint32(head[1:], uint32(len(payload)))
	if _, s.err = s.w.Write(head[:]); s.err != nil {
		return s.err
	}
	if _, s.err = s.w.Write(payload); s.err != nil {
		return s.err
	}
	s.err = s.rc.Flush()
	return s.err
}

// richResult writes a rich result frame.
func (s *stream) richResult(r sandboxd.RichResult) {
	if data, err := json.Marshal(r); err == nil {
		_ = s.frame(FrameRichResult, data)
	}
}

// frameWriter writes output as frames of one type.
type frameWriter struct {
	s   *stream
	typ byte
}

func (f frameWriter) Write(p []byte) (int, error) {
	if err := f.s.frame(f.typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// pathParam is the request's path parameter; a request without one is answered 400 (ok false).
func pathParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	q := r.URL.Query()
	if !q.Has("path") {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "the path query parameter is required (a workspace-relative path; \".\" for the workspace)"))
		return "", false
	}
	return q.Get("path"), true
}

func (s *server) readFile(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	rc, err := s.rt.ReadFile(p)
	if err != nil {
		s.fail(w, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	if st, ok := rc.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if info, err := st.Stat(); err == nil {
			w.Header().Set("Content-Length", strconv.FormatInt(info.Size(), 10))
		}
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Debug("sandboxd: sending a file failed", "error", err)
	}
}

func (s *server) writeFile(w http.ResponseWriter, r *http.Request) {
	maxBytes, ok := maxBytesOf(w, r)
	if !ok {
		return
	}
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	n, err := s.rt.WriteFile(p, r.Body, maxBytes)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, writeResult{Bytes: n})
}

func (s *server) listFiles(w http.ResponseWriter, r *http.Request) {
	list, err := s.rt.ListFiles(r.URL.Query().Get("path")) // absent: the workspace
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) removeFile(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	remove := s.rt.RemoveFile
	if r.URL.Query().Get("recursive") == "true" {
		remove = s.rt.RemoveAll
	}
	if err := remove(p); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) makeDir(w http.ResponseWriter, r *http.Request) {
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	if err := s.rt.MakeDir(p); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// moveBody is the body of POST /v1/files/move.
type moveBody struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func (s *server) moveFile(w http.ResponseWriter, r *http.Request) {
	var body moveBody
	if !s.decode(w, r, &body) {
		return
	}
	if err := s.rt.Move(body.From, body.To); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) listContexts(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.rt.ListContexts())
}

func (s *server) createContext(w http.ResponseWriter, r *http.Request) {
	var body createContextBody
	if !s.decode(w, r, &body) {
		return
	}
	info, err := s.rt.CreateContext(body.Name, body.Language)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (s *server) restartContext(w http.ResponseWriter, r *http.Request) {
	info, err := s.rt.RestartContext(r.PathValue("name"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *server) deleteContext(w http.ResponseWriter, r *http.Request) {
	if err := s.rt.DeleteContext(r.PathValue("name")); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decode reads a JSON body into v (unknown fields refused); on failure it answers with a
// problem and returns false.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return s.decodeLimit(w, r, v, maxJSONBody)
}

// decodeLimit is decode with a body of at most limit bytes.
func (s *server) decodeLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, newProblem(http.StatusRequestEntityTooLarge, string(fault.TooLarge), "the request body is over the limit"))
			return false
		}
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), "malformed request body: "+err.Error()))
		return false
	}
	// Reading to EOF lets the server watch the connection: when the client goes away, the
	// request's context ends.
	_, _ = io.Copy(io.Discard, body)
	return true
}

// fail answers with err's problem.
func (s *server) fail(w http.ResponseWriter, err error) {
	if fault.KindOf(err) == fault.Internal {
		s.log.Warn("sandboxd: request failed", "error", err)
	}
	writeProblem(w, problemFor(err))
}

func writeProblem(w http.ResponseWriter, p problem) {
	w.Header().Set("Content-Type", problemType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.json())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, newProblem(http.StatusInternalServerError, string(fault.Internal), "encoding the answer failed"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// maxBytesOf reads the X-Max-Bytes header of an upload: -1 without one (no limit). A bad
// value is answered with a validation problem (ok false).
func maxBytesOf(w http.ResponseWriter, r *http.Request) (n int64, ok bool) {
	v := r.Header.Get(headerMaxBytes)
	if v == "" {
		return -1, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		writeProblem(w, newProblem(http.StatusBadRequest, string(fault.Validation), headerMaxBytes+" must be a non-negative integer (leave it out for no limit)"))
		return 0, false
	}
	return n, true
}
