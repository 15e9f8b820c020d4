package api_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// previewServer is a small web server a test starts in a sandbox (python3 previewServer
// PORT): GET /headers answers the request's headers as JSON, GET /hostile answers with every
// header field that would act on the origin serving it (hostileHeaders), GET
// /redirect?to=LOCATION redirects (302) there, POST answers "posted:" and the body, a
// WebSocket upgrade echoes every message with "echo:" in front, and anything else is a file
// of the working folder (the workspace).
const previewServer = `import base64, hashlib, http.server, json, struct, sys, urllib.parse

HOSTILE = [
    ("Set-Cookie", "planted=1; Domain=localhost; Path=/"),
    ("Set-Cookie", "sandgate_preview=forged; Path=/"),
    ("Set-Cookie", "app=ok; Path=/; Domain=.preview.localhost; HttpOnly"),
    ("Set-Cookie2", "old=1"),
    ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
    ("Clear-Site-Data", '"*"'),
    ("Alt-Svc", 'h3=":443"; ma=86400'),
    ("Refresh", "0; url=https://evil.example/"),
    ("NEL", '{"report_to":"x","max_age":86400}'),
    ("Report-To", '{"group":"x","max_age":86400,"endpoints":[{"url":"https://evil.example/r"}]}'),
    ("Reporting-Endpoints", 'x="https://evil.example/r"'),
    ("Accept-CH", "Sec-CH-UA-Model"),
    ("Critical-CH", "Sec-CH-UA-Model"),
    ("Expect-CT", "max-age=86400"),
    ("Public-Key-Pins", 'pin-sha256="x"; max-age=1'),
    ("Service-Worker-Allowed", "/"),
    ("X-Kept", "yes"),
]

class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        if self.path.startswith("/hostile"):
            body = b"<h1>hostile</h1>"
            self.send_response(200)
            for k, v in HOSTILE:
                self.send_header(k, v)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/redirect"):
            to = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["to"][0]
            self.send_response(302)
            self.send_header("Location", to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/headers"):
            seen = {k.lower(): v for k, v in self.headers.items()}
            seen["path"] = self.path
            body = json.dumps(seen).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        return super().do_GET()

    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"posted:" + data
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        r, w = self.rfile, self.wfile
        while True:
            head = r.read(2)
            if len(head) < 2:
                return
            op, n = head[0] & 0x0F, head[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(b"\x88\x00")
                w.flush()
                return
            if op in (1, 2):
                out = b"echo:" + data
                size = bytes([len(out)]) if len(out) < 126 else b"\x7e" + struct.pack(">H", len(out))
                w.write(bytes([0x80 | op]) + size + out)
                w.flush()

http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// parkEnv is a gateway whose profiles park sessions, on a manual clock: "lax" (a local
// profile that cannot pause, strict: false), "lax-auto" (the same with auto_resume),
// "parking" (local, idle_action snapshot, idle_timeout 60 s), and the env's defaults. Runners
// count as lost only after an hour, so that the clock may move past idle timeouts.
func parkEnv(t *testing.T, more func(*config.Config)) (*testEnv, *sandboxtest.Clock) {
	t.Helper()
	clock := sandboxtest.NewClock(time.Now())
	e := newEnv(t, envOpts{now: clock.Now, config: func(c *config.Config) {
		c.Sandbox.Broker.LostAfter = config.Duration(time.Hour)
		c.Sandbox.Quotas.Snapshots = 3
		lb := c.Sandbox.Profiles["default"].Blocks
		lax := config.Policy{Strict: ptr(false)}
		c.Sandbox.Profiles["lax"] = config.Profile{Type: local.TypeName, Policy: lax, Blocks: lb}
		c.Sandbox.Profiles["lax-auto"] = config.Profile{Type: local.TypeName, Policy: lax, AutoResume: true, Blocks: lb}
		c.Sandbox.Profiles["parking"] = config.Profile{Type: local.TypeName, IdleTimeout: 60, IdleAction: config.IdleSnapshot, Blocks: lb}
		if more != nil {
			more(c)
		}
	}})
	return e, clock
}

// run runs command in session sid as tok and returns the result (200 required).
func (e *testEnv) run(tok, sid, command string) map[string]any {
	e.t.Helper()
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": command})
	require.Equal(e.t, 200, r.Status, "%s: %s", command, r.Body)
	return r.JSON(e.t)
}

// freePort is a TCP port on this host's loopback that nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestProfilesDeclareParking(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, nil)
	r := e.do(e.token("alice"), "GET", "/v1/profiles", nil)
	require.Equal(t, 200, r.Status)
	for _, p := range r.JSON(t)["profiles"].([]any) {
		prof := p.(map[string]any)
		caps := prof["capabilities"].(map[string]any)
		assert.Equal(t, false, caps["pause"], "local sandboxes cannot be frozen")
		assert.Equal(t, true, caps["snapshots"])
		assert.Equal(t, true, caps["preview_ports"])
		switch prof["name"] {
		case "parking":
			assert.Equal(t, "snapshot", prof["idle_action"])
		case "lax-auto":
			assert.Equal(t, true, prof["auto_resume"])
		default:
			assert.Equal(t, "reset", prof["idle_action"])
		}
	}
	me := e.do(e.token("alice"), "GET", "/v1/me", nil).JSON(t)
	assert.Equal(t, map[string]any{"used": float64(0), "limit": float64(3)}, me["quotas"].(map[string]any)["snapshots"])
}

// A provider that cannot pause: a strict profile refuses; a non-strict one holds the session
// (operations answer 409 paused) with a warning, or resumes it on use with auto_resume.
func TestPauseWithoutTheCapability(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, nil)
	tok := e.token("alice")
	sid := e.newSession(tok, "default")
	e.run(tok, sid, "true")
	p := requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/pause", nil), 422, "capability")
	assert.Contains(t, p["detail"], "pause")

	lax := e.newSession(tok, "lax")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+lax+"/pause", nil), 409, "conflict") // no sandbox yet
	e.run(tok, lax, "echo kept > f.txt")
	r := e.do(tok, "POST", "/v1/sessions/"+lax+"/pause", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	m := r.JSON(t)
	assert.Equal(t, "paused", m["state"])
	assert.NotEmpty(t, m["paused_at"])
	require.Len(t, m["warnings"], 1)
	assert.Contains(t, m["warnings"].([]any)[0], "keep running")
	assert.Equal(t, "paused", e.do(tok, "GET", "/v1/sessions/"+lax, nil).JSON(t)["state"])

	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+lax+"/commands", map[string]any{"command": "true"}), 409, "paused")
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+lax+"/files/f.txt", nil), 409, "paused")
	requireProblem(t, e.do(tok, "PUT", "/v1/sessions/"+lax+"/files/g.txt", []byte("x")), 409, "paused")
	requireProblem(t, e.do(e.token("bob"), "POST", "/v1/sessions/"+lax+"/resume", nil), 404, "not-found")
	requireProblem(t, e.do(e.token("bob"), "POST", "/v1/sessions/"+lax+"/pause", nil), 404, "not-found")

	r = e.do(tok, "POST", "/v1/sessions/"+lax+"/resume", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "running", r.JSON(t)["state"])
	assert.Equal(t, "kept\n", e.run(tok, lax, "cat f.txt")["stdout"])
	require.Equal(t, 200, e.do(tok, "POST", "/v1/sessions/"+lax+"/resume", nil).Status, "resuming a running session is fine")

	auto := e.newSession(tok, "lax-auto")
	e.run(tok, auto, "true")
	require.Equal(t, 200, e.do(tok, "POST", "/v1/sessions/"+auto+"/pause", nil).Status)
	out := e.run(tok, auto, "echo on")
	assert.Equal(t, "on\n", out["stdout"])
	assert.Contains(t, out["notice"], "auto_resume")
	assert.Equal(t, "running", e.do(tok, "GET", "/v1/sessions/"+auto, nil).JSON(t)["state"])

	// Shared sessions are paused by admins only; per_call profiles keep no sessions.
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/pause?profile=shared", nil), 403, "forbidden")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/pause?profile=oneshot", nil), 409, "conflict")
}

// Snapshots: taken of a session, listed, read and deleted by their owner only, counted
// against the quota; a fork starts from one with its files.
func TestSnapshotsAndForks(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, nil)
	alice, bob := e.token("alice"), e.token("bob")
	sid := e.newSession(alice, "default")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil), 409, "conflict") // no sandbox yet
	e.run(alice, sid, "mkdir -p src && echo 'print(6*7)' > src/main.py && echo v1 > state.txt")

	r := e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", map[string]any{"name": "first"})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	snap := r.JSON(t)
	snapID := snap["id"].(string)
	assert.Equal(t, "/v1/snapshots/"+snapID, r.Header.Get("Location"))
	assert.Equal(t, "first", snap["name"])
	assert.Equal(t, sid, snap["session_id"])
	assert.Equal(t, "default", snap["profile"])
	assert.Equal(t, "local_subprocess", snap["provider"])
	assert.Equal(t, "user", snap["kind"])
	assert.Positive(t, snap["size_bytes"])
	e.run(alice, sid, "echo v2 > state.txt")

	list := e.do(alice, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, snapID, list[0].(map[string]any)["id"])
	assert.Len(t, e.do(alice, "GET", "/v1/snapshots?session_id="+sid, nil).JSON(t)["snapshots"], 1)
	assert.Empty(t, e.do(bob, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"])
	require.Equal(t, 200, e.do(alice, "GET", "/v1/snapshots/"+snapID, nil).Status)
	requireProblem(t, e.do(bob, "GET", "/v1/snapshots/"+snapID, nil), 404, "not-found")
	requireProblem(t, e.do(bob, "DELETE", "/v1/snapshots/"+snapID, nil), 404, "not-found")
	requireProblem(t, e.do(bob, "POST", "/v1/sessions", map[string]any{"from_snapshot": snapID}), 404, "not-found")
	requireProblem(t, e.do(bob, "POST", "/v1/sessions/"+sid+"/snapshots", nil), 404, "not-found")

	// A fork: the snapshot's files, not what came after; its own sandbox.
	r = e.do(alice, "POST", "/v1/sessions", map[string]any{"from_snapshot": snapID, "name": "fork"})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	fork := r.JSON(t)
	assert.Equal(t, "running", fork["state"], "restored before the answer")
	assert.Equal(t, "default", fork["profile"])
	fid := fork["id"].(string)
	assert.Equal(t, "42\n", e.run(alice, fid, "python3 src/main.py")["stdout"])
	assert.Equal(t, "v1\n", e.run(alice, fid, "cat state.txt")["stdout"])
	e.run(alice, fid, "echo fork > state.txt")
	assert.Equal(t, "v2\n", e.run(alice, sid, "cat state.txt")["stdout"], "the source is untouched")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"from_snapshot": snapID, "profile": "lax"}), 400, "config")

	// The quota (3) counts snapshots, not sessions; deleting makes room.
	for range 2 {
		require.Equal(t, 201, e.do(alice, "POST", "/v1/sessions/"+fid+"/snapshots", nil).Status)
	}
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil)
	requireProblem(t, r, 429, "quota")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Equal(t, map[string]any{"used": float64(3), "limit": float64(3)}, e.do(alice, "GET", "/v1/me", nil).JSON(t)["quotas"].(map[string]any)["snapshots"])

	// Deleting the snapshot leaves its fork as it is.
	require.Equal(t, 204, e.do(alice, "DELETE", "/v1/snapshots/"+snapID, nil).Status)
	requireProblem(t, e.do(alice, "GET", "/v1/snapshots/"+snapID, nil), 404, "not-found")
	assert.Equal(t, "fork\n", e.run(alice, fid, "cat state.txt")["stdout"])
	require.Equal(t, 201, e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil).Status)

	// Snapshots outlive their session.
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/sessions/"+sid, nil).Status)
	assert.Len(t, e.do(alice, "GET", "/v1/snapshots?session_id="+sid, nil).JSON(t)["snapshots"], 1)
	requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+fid+"/snapshots", nil), 429, "quota")
}

// idle_action snapshot on a manual clock: the sweeper captures an idle session's workspace and
// removes its sandbox; the next use restores it (files kept, processes gone) and says so.
func TestIdleActionSnapshotParksTheSession(t *testing.T) {
	t.Parallel()
	e, clock := parkEnv(t, nil)
	tok := e.token("alice")
	sid := e.newSession(tok, "parking")
	e.run(tok, sid, "echo kept > notes.txt")
	sandboxID := e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["sandbox_id"].(string)

	clock.Advance(61 * time.Second)
	e.svc.SweepNow(t.Context())
	sess := e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)
	require.Equal(t, "parked", sess["state"], "%v", sess)
	assert.Nil(t, sess["sandbox_id"])
	parked := sess["parked_snapshot"].(string)
	snaps := e.do(tok, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"].([]any)
	require.Len(t, snaps, 1)
	assert.Equal(t, "idle", snaps[0].(map[string]any)["kind"])
	assert.Equal(t, parked, snaps[0].(map[string]any)["id"])
	requireProblem(t, e.do(tok, "DELETE", "/v1/snapshots/"+parked, nil), 409, "conflict")
	assert.NoDirExists(t, sandboxID, "the idle sandbox is gone")
	me := e.do(tok, "GET", "/v1/me", nil).JSON(t)
	assert.Equal(t, float64(0), me["quotas"].(map[string]any)["snapshots"].(map[string]any)["used"], "idle captures are not counted")

	out := e.run(tok, sid, "cat notes.txt")
	assert.Equal(t, "kept\n", out["stdout"])
	assert.Contains(t, out["notice"], "was idle for more than 60s")
	assert.Contains(t, out["notice"], "workspace files were kept")
	assert.Contains(t, out["notice"], "running processes, code-context variables and /tmp are gone")
	assert.Equal(t, "running", e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["state"])
	assert.Empty(t, e.do(tok, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"], "restored: its capture goes")
	assert.Empty(t, e.run(tok, sid, "true")["notice"], "said once")

	// A file read restores a parked session too, and the next execution still hears why.
	clock.Advance(61 * time.Second)
	e.svc.SweepNow(t.Context())
	require.Equal(t, "parked", e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["state"])
	r := e.do(tok, "GET", "/v1/sessions/"+sid+"/files/notes.txt", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "kept\n", string(r.Body))
	assert.Contains(t, e.run(tok, sid, "true")["notice"], "workspace files were kept")

	// Destroying a parked session removes its capture.
	clock.Advance(61 * time.Second)
	e.svc.SweepNow(t.Context())
	require.Len(t, e.do(tok, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"], 1)
	require.Equal(t, 200, e.do(tok, "DELETE", "/v1/sessions/"+sid, nil).Status)
	assert.Empty(t, e.do(tok, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"])
}

// sandbox.quotas.snapshot_bytes: a snapshot counts what its provider keeps (a sparse 3 GiB
// file costs next to nothing); one that would pass the limit is refused after the capture
// and nothing is kept; the captures that park idle sessions count too but are never
// refused, and then hold the caller's own snapshots back until the session is used or
// destroyed. /v1/me shows used and limit.
func TestSnapshotBytesQuota(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	e, clock := parkEnv(t, func(c *config.Config) { c.Sandbox.Quotas.SnapshotBytes = limit })
	alice := e.token("alice")
	bytesQuota := func() map[string]any {
		t.Helper()
		return e.do(alice, "GET", "/v1/me", nil).JSON(t)["quotas"].(map[string]any)["snapshot_bytes"].(map[string]any)
	}
	assert.Equal(t, map[string]any{"used": 0.0, "limit": float64(limit)}, bytesQuota())

	sid := e.newSession(alice, "default")
	e.run(alice, sid, "python3 -c \"f = open('disk.img', 'wb'); f.truncate(3 << 30); f.close()\" && echo note > note.txt")
	r := e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil)
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	size := r.JSON(t)["size_bytes"].(float64)
	assert.Less(t, size, float64(64<<10), "3 GiB of holes cost what the archive takes")
	assert.Equal(t, map[string]any{"used": size, "limit": float64(limit)}, bytesQuota())

	e.run(alice, sid, "head -c 2000000 /dev/urandom > random.bin")
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil)
	p := requireProblem(t, r, 429, "quota")
	assert.Contains(t, p["detail"], "sandbox.quotas.snapshot_bytes")
	assert.Contains(t, p["detail"], "nothing was kept")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.Len(t, e.do(alice, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"], 1)
	assert.Equal(t, size, bytesQuota()["used"])

	// Parking the session (2 MB of random bytes) is not refused; it counts.
	psid := e.newSession(alice, "parking")
	e.run(alice, psid, "head -c 2000000 /dev/urandom > random.bin")
	clock.Advance(61 * time.Second)
	e.svc.SweepNow(t.Context())
	require.Equal(t, "parked", e.do(alice, "GET", "/v1/sessions/"+psid, nil).JSON(t)["state"])
	used := bytesQuota()["used"].(float64)
	assert.Greater(t, used, float64(limit), "the idle capture counts")
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil)
	p = requireProblem(t, r, 429, "quota")
	assert.Contains(t, p["detail"], "captures that park idle sessions count too")
	assert.Equal(t, used, bytesQuota()["used"], "refused before anything was captured")

	// Destroying the parked session frees its bytes.
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/sessions/"+psid, nil).Status)
	assert.Equal(t, size, bytesQuota()["used"])
	e.run(alice, sid, "rm random.bin")
	require.Equal(t, 201, e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", nil).Status)
}

// Preview ports of a local sandbox: HTTP and a WebSocket echo through the bearer route and a
// share link; ownership, expiry and what the sandbox's server sees.
func TestPreviewPortsAndShareLinks(t *testing.T) {
	t.Parallel()
	e, clock := parkEnv(t, nil)
	alice, bob := e.token("alice"), e.token("bob")
	sid := e.newSession(alice, "default")
	port := freePort(t)
	base := fmt.Sprintf("/v1/sessions/%s/ports/%d", sid, port)
	requireProblem(t, e.do(alice, "GET", base+"/", nil), 409, "conflict") // no sandbox yet
	e.run(alice, sid, "cat > server.py <<'EOF'\n"+previewServer+"EOF\necho '<h1>hello preview</h1>' > index.html")
	r := e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("exec python3 server.py %d", port), "background": true})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	require.Eventually(t, func() bool { return e.do(alice, "GET", base+"/index.html", nil).Status == 200 }, 30*time.Second, 100*time.Millisecond)
	checkPreview(t, e, clock, alice, bob, sid, port)
}

// checkPreview checks the preview routes of port of session sid (owned by alice, whose server
// is previewServer): used on local and docker sandboxes alike.
func checkPreview(t *testing.T, e *testEnv, clock *sandboxtest.Clock, alice, bob, sid string, port int) {
	t.Helper()
	base := fmt.Sprintf("/v1/sessions/%s/ports/%d", sid, port)
	r := e.do(alice, "GET", base+"/index.html", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "<h1>hello preview</h1>\n", string(r.Body))
	assert.Contains(t, r.Header.Get("Content-Security-Policy"), "sandbox allow-scripts")

	// What the sandbox's server sees: the path after the port, the forwarding headers, never
	// the caller's token.
	seen := e.do(alice, "GET", base+"/headers?x=1", nil).JSON(t)
	assert.Equal(t, "/headers?x=1", seen["path"])
	assert.Equal(t, base, seen["x-forwarded-prefix"])
	assert.NotEmpty(t, seen["x-forwarded-host"])
	assert.Equal(t, "http", seen["x-forwarded-proto"])
	assert.Nil(t, seen["authorization"], "the gateway's bearer token never reaches the sandbox")
	r = e.do(alice, "POST", base+"/anything", []byte("body"))
	require.Equal(t, 201, r.Status)
	assert.Equal(t, "posted:body", string(r.Body))

	// Redirect to the folder, ownership, authentication, closed ports.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", e.URL+base+"?q=1", nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusPermanentRedirect, resp.StatusCode)
	assert.Equal(t, base+"/?q=1", resp.Header.Get("Location"))
	requireProblem(t, e.do(bob, "GET", base+"/index.html", nil), 404, "not-found")
	requireProblem(t, e.do("", "GET", base+"/index.html", nil), 401, "unauthenticated")
	requireProblem(t, e.do(alice, "GET", fmt.Sprintf("/v1/sessions/%s/ports/%d/", sid, freePort(t)), nil), 409, "conflict")
	requireProblem(t, e.do(alice, "GET", fmt.Sprintf("/v1/sessions/%s/ports/70000/", sid), nil), 400, "validation")

	// A WebSocket echo through the bearer route.
	wsURL := "ws" + strings.TrimPrefix(e.URL, "http")
	h := http.Header{"Authorization": {"Bearer " + alice}}
	echo(t, wsURL+base+"/ws", h)
	_, resp, err = websocket.DefaultDialer.Dial(wsURL+base+"/ws", http.Header{"Authorization": {"Bearer " + bob}})
	require.Error(t, err)
	assert.Equal(t, 404, resp.StatusCode, "another principal's preview is not found")

	// A share link works without a token until it expires.
	requireProblem(t, e.do(bob, "POST", base+"/links", nil), 404, "not-found")
	r = e.do(alice, "POST", base+"/links", map[string]any{"ttl_s": 120})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	link := r.JSON(t)
	url := link["url"].(string)
	require.True(t, strings.HasPrefix(url, e.URL+"/preview/v3.s."+sid+"."), url)
	require.True(t, strings.HasSuffix(url, "/"), url)
	path := strings.TrimPrefix(url, e.URL)
	r = e.do("", "GET", path+"index.html", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, "<h1>hello preview</h1>\n", string(r.Body))
	assert.Equal(t, strings.TrimSuffix(path, "/"), e.do("", "GET", path+"headers", nil).JSON(t)["x-forwarded-prefix"])
	echo(t, wsURL+path+"ws", nil)
	tampered := strings.Replace(path, "."+fmt.Sprint(port)+".", "."+fmt.Sprint(port+1)+".", 1)
	requireProblem(t, e.do("", "GET", tampered+"index.html", nil), 404, "not-found")
	requireProblem(t, e.do(alice, "POST", base+"/links", map[string]any{"ttl_s": 10}), 400, "validation")

	clock.Advance(121 * time.Second)
	requireProblem(t, e.do("", "GET", path+"index.html", nil), 404, "not-found")
}

// echo sends two messages over a WebSocket at url and expects them echoed.
func echo(t *testing.T, url string, h http.Header) {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(url, h)
	if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("websocket %s: status %d", url, resp.StatusCode)
	}
	require.NoError(t, err)
	defer conn.Close()
	for _, msg := range []string{"ping", strings.Repeat("x", 300)} {
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(msg)))
		_, got, err := conn.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, "echo:"+msg, string(got))
	}
	require.NoError(t, conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")))
}
