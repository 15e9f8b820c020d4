package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// TestHeadWhereverGet: HEAD answers like GET, without the body, on the probes, the contract,
// the docs, the API and files.
func TestHeadWhereverGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	require.Equal(t, 200, e.do(tok, "PUT", "/v1/sessions/"+id+"/files/dir/a.bin", []byte("0123456789")).Status)
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/openapi.json", "/docs/", "/v1/me", "/v1/profiles",
		"/v1/sessions/" + id, "/v1/sessions/" + id + "/files", "/v1/sessions/" + id + "/files/dir/a.bin", "/v1/tasks", "/", "/.well-known/oauth-protected-resource"} {
		get := e.do(tok, "GET", path, nil)
		require.Equal(t, 200, get.Status, "GET %s: %s", path, get.Body)
		head := e.do(tok, "HEAD", path, nil)
		require.Equal(t, 200, head.Status, "HEAD %s", path)
		require.Empty(t, head.Body, path)
		require.Equal(t, get.Header.Get("Content-Type"), head.Header.Get("Content-Type"), path)
	}
	head := e.do(tok, "HEAD", "/v1/sessions/"+id+"/files/dir/a.bin", nil)
	require.Equal(t, "10", head.Header.Get("Content-Length"))
	require.NotEmpty(t, head.Header.Get("ETag"))
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+id+"/files/none", nil), 404, "not-found")
	require.Equal(t, 404, e.do(tok, "HEAD", "/v1/sessions/"+id+"/files/none", nil).Status)
	require.Equal(t, 401, e.do("", "HEAD", "/v1/me", nil).Status)

	// HEAD on an event stream answers at once, not when the task ends.
	task := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 30", "wait_s": 0}).JSON(t)
	start := time.Now()
	r := e.do(tok, "HEAD", "/v1/tasks/"+task["id"].(string)+"/output", nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
	require.Less(t, time.Since(start), 20*time.Second)
	require.Equal(t, 200, e.do(tok, "POST", "/v1/tasks/"+task["id"].(string)+"/cancel", nil).Status)
}

// TestEvery405NamesTheAllowedMethods (RFC 9110 §15.5.6), on the API and on what is mounted
// beside it.
func TestEvery405NamesTheAllowedMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/healthz", "GET, HEAD"},
		{"PUT", "/openapi.json", "GET, HEAD"},
		{"DELETE", "/openapi.yaml", "GET, HEAD"},
		{"PATCH", "/v1/me", "GET, HEAD"},
		{"PUT", "/v1/sessions", "GET, HEAD, POST"},
		{"POST", "/v1/sessions/default", "GET, HEAD, PATCH, DELETE"},
		{"PATCH", "/v1/sessions/default/files/a.txt", "GET, HEAD, PUT, DELETE"},
		{"GET", "/v1/runs", "POST"},
		{"POST", "/docs/", "GET, HEAD"},
		{"POST", "/", "GET, HEAD"},
		{"PUT", "/mcp", ""},
		{"POST", "/.well-known/oauth-protected-resource", "GET, HEAD, OPTIONS"},
		{"PUT", "/dev/oidc/keys", ""},
	} {
		r := e.do(tok, c.method, c.path, nil)
		if c.allow == "" { // whatever the mounted handler allows, it must say so
			if r.Status == 405 {
				require.NotEmpty(t, r.Header.Get("Allow"), "%s %s", c.method, c.path)
			}
			continue
		}
		requireProblem(t, r, 405, "method-not-allowed")
		require.Equal(t, c.allow, r.Header.Get("Allow"), "%s %s", c.method, c.path)
	}
}

// TestRequestIDIsEchoed: a sane X-Request-Id is kept (answer, problem, log); anything else
// is replaced by a fresh one.
func TestRequestIDIsEchoed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	fresh := regexp.MustCompile(`^[0-9a-f]{32}$`)

	r := e.send("", "GET", "/healthz", "", nil, 0, map[string]string{"X-Request-Id": "trace-42.a:b_c"})
	require.Equal(t, "trace-42.a:b_c", r.Header.Get("X-Request-Id"))
	r = e.send("", "GET", "/v1/me", "", nil, 0, map[string]string{"X-Request-Id": "trace-43"})
	require.Equal(t, "trace-43", requireProblem(t, r, 401, "unauthenticated")["request_id"])
	require.Equal(t, "trace-43", r.Header.Get("X-Request-Id"))

	for _, bad := range []string{strings.Repeat("a", 129), "has space", "semi;colon", "quote\"", "ünï"} {
		r = e.send("", "GET", "/healthz", "", nil, 0, map[string]string{"X-Request-Id": bad})
		require.Regexp(t, fresh, r.Header.Get("X-Request-Id"), "%q is replaced", bad)
	}
	a, b := e.do("", "GET", "/healthz", nil), e.do("", "GET", "/healthz", nil)
	require.Regexp(t, fresh, a.Header.Get("X-Request-Id"))
	require.NotEqual(t, a.Header.Get("X-Request-Id"), b.Header.Get("X-Request-Id"))
}

// TestCORS: no origin is allowed unless configured; a configured one gets its preflight
// answered and may read the answers' header fields.
func TestCORS(t *testing.T) {
	t.Parallel()
	preflight := map[string]string{"Origin": "https://app.example.test", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}

	closed := newEnv(t, envOpts{})
	r := closed.send("", "OPTIONS", "/v1/sessions", "", nil, 0, preflight)
	require.Empty(t, r.Header.Get("Access-Control-Allow-Origin"), "no origin by default")
	r = closed.send("", "GET", "/healthz", "", nil, 0, map[string]string{"Origin": "https://app.example.test"})
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Header.Get("Access-Control-Allow-Origin"))

	open := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Server.CORS.AllowedOrigins = []string{"https://app.example.test"}
		c.Server.CORS.MaxAge = config.Duration(5 * time.Minute)
	}})
	r = open.send("", "OPTIONS", "/v1/sessions", "", nil, 0, preflight)
	require.Contains(t, []int{200, 204}, r.Status)
	require.Equal(t, "https://app.example.test", r.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, r.Header.Get("Access-Control-Allow-Methods"), "POST")
	require.Contains(t, strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "authorization")
	require.Equal(t, "300", r.Header.Get("Access-Control-Max-Age"))
	require.Empty(t, r.Header.Get("Access-Control-Allow-Credentials"), "bearer tokens, never cookies")

	tok := open.token("alice")
	r = open.send(tok, "GET", "/v1/me", "", nil, 0, map[string]string{"Origin": "https://app.example.test"})
	require.Equal(t, 200, r.Status)
	require.Equal(t, "https://app.example.test", r.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, r.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id")
	r = open.send(tok, "GET", "/v1/me", "", nil, 0, map[string]string{"Origin": "https://evil.example.test"})
	require.Empty(t, r.Header.Get("Access-Control-Allow-Origin"))
	r = open.send("", "OPTIONS", "/v1/sessions", "", nil, 0, map[string]string{"Origin": "https://evil.example.test", "Access-Control-Request-Method": "POST"})
	require.Empty(t, r.Header.Get("Access-Control-Allow-Origin"))
}

// TestGzipForJSONOnly: JSON answers of 1 KiB or more are gzipped for callers that accept
// it, smaller ones are not; event streams and files never are.
func TestGzipForJSONOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	gz := map[string]string{"Accept-Encoding": "gzip"}

	r := e.send(tok, "GET", "/v1/profiles", "", nil, 0, gz)
	require.Equal(t, 200, r.Status)
	require.Equal(t, "gzip", r.Header.Get("Content-Encoding"))
	require.Contains(t, r.Header.Values("Vary"), "Accept-Encoding")
	zr, err := gzip.NewReader(bytes.NewReader(r.Body))
	require.NoError(t, err)
	plain, err := io.ReadAll(zr)
	require.NoError(t, err)
	var profiles map[string]any
	require.NoError(t, json.Unmarshal(plain, &profiles))
	require.NotEmpty(t, profiles["profiles"])

	r = e.send("", "GET", "/v1/profiles", "", nil, 0, gz)
	require.Equal(t, 401, r.Status)
	require.Empty(t, r.Header.Get("Content-Encoding"), "a small answer costs more to compress than it saves")
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))

	id := e.newSession(tok, "default")
	data := bytes.Repeat([]byte("compressible "), 1000)
	require.Equal(t, 200, e.do(tok, "PUT", "/v1/sessions/"+id+"/files/big.txt", data).Status)
	r = e.send(tok, "GET", "/v1/sessions/"+id+"/files/big.txt", "", nil, 0, gz)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Header.Get("Content-Encoding"), "a file is sent as stored")
	require.Equal(t, data, r.Body)

	body, _ := json.Marshal(map[string]any{"command": "echo streamed"})
	r = e.send(tok, "POST", "/v1/sessions/"+id+"/commands", "application/json", bytes.NewReader(body), int64(len(body)),
		map[string]string{"Accept": "text/event-stream", "Accept-Encoding": "gzip"})
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.Header.Get("Content-Encoding"), "an event stream is sent as produced")
	require.Contains(t, string(r.Body), "event: result")
}

// TestVersionInHealth: the probes name the build's version ("dev" unless stamped).
func TestVersionInHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	require.Equal(t, "dev", e.do("", "GET", "/healthz", nil).JSON(t)["version"])
	require.Equal(t, "dev", e.do("", "GET", "/readyz", nil).JSON(t)["version"])
}

// TestFileDownloadValidatorsAndRanges: ETag and If-None-Match (304), single byte ranges
// (206) and If-Range, on GET and HEAD.
func TestFileDownloadValidatorsAndRanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	path := "/v1/sessions/" + id + "/files/out/data.bin"
	data := []byte("0123456789abcdefghij")
	require.Equal(t, 200, e.do(tok, "PUT", path, data).Status)
	get := func(h map[string]string) reply { return e.send(tok, "GET", path, "", nil, 0, h) }

	r := get(nil)
	require.Equal(t, 200, r.Status)
	require.Equal(t, data, r.Body)
	etag := r.Header.Get("ETag")
	require.Regexp(t, `^"[0-9a-f]+-[0-9a-f]+"$`, etag)
	require.Equal(t, "bytes", r.Header.Get("Accept-Ranges"))
	lm, err := http.ParseTime(r.Header.Get("Last-Modified"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), lm, time.Minute)
	require.True(t, strings.HasPrefix(etag, `"`+strconv.FormatInt(int64(len(data)), 16)+"-"), "size first: %s", etag)

	r = get(map[string]string{"If-None-Match": etag})
	require.Equal(t, 304, r.Status)
	require.Empty(t, r.Body)
	require.Equal(t, etag, r.Header.Get("ETag"))
	require.Equal(t, 304, get(map[string]string{"If-None-Match": `"other", W/` + etag}).Status)
	require.Equal(t, 200, get(map[string]string{"If-None-Match": `"other"`}).Status)

	for rng, want := range map[string]struct {
		body, contentRange string
	}{
		"bytes=0-3":   {"0123", "bytes 0-3/20"},
		"bytes=10-":   {"abcdefghij", "bytes 10-19/20"},
		"bytes=-5":    {"fghij", "bytes 15-19/20"},
		"bytes=18-99": {"ij", "bytes 18-19/20"},
		"bytes=-100":  {string(data), "bytes 0-19/20"},
	} {
		r = get(map[string]string{"Range": rng})
		require.Equal(t, 206, r.Status, rng)
		require.Equal(t, want.body, string(r.Body), rng)
		require.Equal(t, want.contentRange, r.Header.Get("Content-Range"), rng)
		require.Equal(t, strconv.Itoa(len(want.body)), r.Header.Get("Content-Length"), rng)
	}
	// Ignored: several ranges, another unit, nonsense; If-Range naming another version.
	for _, h := range []map[string]string{
		{"Range": "bytes=0-1,4-5"}, {"Range": "items=0-1"}, {"Range": "bytes=5-2"},
		{"Range": "bytes=0-3", "If-Range": `"stale"`},
	} {
		r = get(h)
		require.Equal(t, 200, r.Status, h)
		require.Equal(t, data, r.Body, h)
	}
	r = get(map[string]string{"Range": "bytes=0-3", "If-Range": etag})
	require.Equal(t, 206, r.Status)
	r = get(map[string]string{"Range": "bytes=20-"})
	requireProblem(t, r, 416, "range-not-satisfiable")
	require.Equal(t, "bytes */20", r.Header.Get("Content-Range"))

	r = e.send(tok, "HEAD", path, "", nil, 0, map[string]string{"Range": "bytes=2-5"})
	require.Equal(t, 206, r.Status)
	require.Equal(t, "4", r.Header.Get("Content-Length"))
	require.Empty(t, r.Body)

	// A new write is a new version: the old ETag no longer matches.
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, 200, e.do(tok, "PUT", path, []byte("0123456789abcdefghiX")).Status)
	r = get(map[string]string{"If-None-Match": etag})
	require.Equal(t, 200, r.Status)
	require.NotEqual(t, etag, r.Header.Get("ETag"))
	assert.Equal(t, "0123456789abcdefghiX", string(r.Body))
}
