package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// originFields are the answer header fields a preview never passes on the gateway's origin
// (each acts on the whole origin: the console's).
var originFields = []string{
	"Set-Cookie", "Set-Cookie2", "Strict-Transport-Security", "Clear-Site-Data", "Alt-Svc", "Refresh",
	"NEL", "Report-To", "Reporting-Endpoints", "Accept-CH", "Critical-CH", "Expect-CT", "Public-Key-Pins",
	"Service-Worker-Allowed",
}

// serve starts previewServer in session sid (owned by tok) on a free port of this host and
// waits until the owner's route answers.
func (e *testEnv) serve(tok, sid string) int {
	e.t.Helper()
	port := freePort(e.t)
	e.run(tok, sid, "cat > server.py <<'EOF'\n"+previewServer+"EOF\necho '<h1>hello preview</h1>' > index.html")
	r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("exec python3 server.py %d", port), "background": true})
	require.Equal(e.t, 201, r.Status, "body: %s", r.Body)
	require.Eventually(e.t, func() bool {
		return e.send(tok, "GET", fmt.Sprintf("/v1/sessions/%s/ports/%d/index.html", sid, port), "", nil, 0, nil).Status == 200
	}, 30*time.Second, 100*time.Millisecond)
	return port
}

// link makes a link to port of session sid as tok (body: the request) and returns its URL.
func (e *testEnv) link(tok, sid string, port int, body map[string]any) string {
	e.t.Helper()
	var r reply
	if body == nil {
		r = e.do(tok, "POST", fmt.Sprintf("/v1/sessions/%s/ports/%d/links", sid, port), nil)
	} else {
		r = e.do(tok, "POST", fmt.Sprintf("/v1/sessions/%s/ports/%d/links", sid, port), body)
	}
	require.Equal(e.t, 201, r.Status, "body: %s", r.Body)
	return r.JSON(e.t)["url"].(string)
}

// raw sends method url as it is (any host) with the header fields, through client (nil: one
// that follows no redirect, reaching the gateway whatever host the URL names).
func (e *testEnv) raw(client *http.Client, method, u string, header map[string]string) reply {
	e.t.Helper()
	if client == nil {
		client = e.hostClient()
	}
	req, err := http.NewRequest(method, u, nil)
	require.NoError(e.t, err)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// hostClient is a browser-like client of the gateway: whatever host a URL names (a preview
// domain's hosts resolve nowhere), it connects to the gateway; it keeps cookies and follows
// no redirect.
func (e *testEnv) hostClient() *http.Client {
	e.t.Helper()
	gw, err := url.Parse(e.URL)
	require.NoError(e.t, err)
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", gw.Host)
	}}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// On the gateway's origin a preview's answers cannot act on the origin: the header fields
// that would (cookies, HSTS, Clear-Site-Data, …) are removed, the page is sandboxed, the
// gateway origin's cookies never reach the sandbox, and redirects stay within the preview.
func TestPreviewOnTheGatewayOrigin(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, nil)
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	port := e.serve(alice, sid)
	base := fmt.Sprintf("/v1/sessions/%s/ports/%d", sid, port)
	share := strings.TrimSuffix(strings.TrimPrefix(e.link(alice, sid, port, nil), e.URL), "/")
	bearer := map[string]string{"Authorization": "Bearer " + alice}

	for name, route := range map[string]struct {
		prefix string
		header map[string]string
	}{"owner": {base, bearer}, "share link": {share, nil}} {
		r := e.raw(nil, "GET", e.URL+route.prefix+"/hostile", route.header)
		require.Equal(t, 200, r.Status, "%s: %s", name, r.Body)
		for _, f := range originFields {
			assert.Empty(t, r.Header.Values(f), "%s: %s reaches the browser", name, f)
		}
		assert.Equal(t, "yes", r.Header.Get("X-Kept"), "%s: other fields pass", name)
		assert.Contains(t, r.Header.Get("Content-Security-Policy"), "sandbox allow-scripts", name)
		assert.NotContains(t, r.Header.Get("Content-Security-Policy"), "allow-same-origin", name)
	}

	// The request: the gateway origin's cookies and the caller's token stay; Via names the
	// preview proxy.
	seen := e.raw(nil, "GET", e.URL+base+"/headers", map[string]string{"Authorization": "Bearer " + alice, "Cookie": "oauth2_proxy=secret; other=1"}).JSON(t)
	assert.Nil(t, seen["cookie"], "the gateway origin's cookies never reach the sandbox")
	assert.Nil(t, seen["authorization"])
	assert.Equal(t, "1.1 sandgate-preview", seen["via"])

	// Redirects are put under the preview's path, or refused when they leave it.
	host := strings.TrimPrefix(e.URL, "http://")
	for _, tc := range []struct{ to, want string }{
		{"/login", base + "/login"},
		{"/login?next=%2Fa#top", base + "/login?next=%2Fa#top"},
		{fmt.Sprintf("http://localhost:%d/x?y=1", port), base + "/x?y=1"},
		{fmt.Sprintf("http://127.0.0.1:%d/x", port), base + "/x"},
		{base + "/already/under", base + "/already/under"},
		{"http://" + host + base + "/absolute", base + "/absolute"},
		{"sub/page", base + "/sub/page"},
		{"?page=2", base + "/redirect?page=2"},
		{"../../../../v1/me", ""},
		{"/../../../../v1/me", base + "/v1/me"},
		{"https://evil.example/", ""},
		{"//evil.example/x", ""},
		{`/\evil.example`, ""},
		{"/%2e%2e/%2e%2e/%2e%2e/%2e%2e/v1/me", ""},
		{"http://" + host + "/v1/me", ""},
		{fmt.Sprintf("http://localhost:%d/", port+1), ""},
		{"javascript:alert(1)", ""},
	} {
		r := e.raw(nil, "GET", e.URL+base+"/redirect?to="+url.QueryEscape(tc.to), bearer)
		if tc.want == "" {
			p := r.RequireProblem(t, 403, "policy")
			assert.Contains(t, p["detail"], "leaves the preview", tc.to)
			continue
		}
		require.Equal(t, 302, r.Status, "%s: %s", tc.to, r.Body)
		assert.Equal(t, tc.want, r.Header.Get("Location"), tc.to)
	}
	r := e.raw(nil, "GET", e.URL+share+"/redirect?to=%2Fnext", nil)
	require.Equal(t, 302, r.Status, "%s", r.Body)
	assert.Equal(t, share+"/next", r.Header.Get("Location"), "a share link's redirects stay under the link")
	p := e.raw(nil, "GET", e.URL+share+"/redirect?to="+url.QueryEscape("https://evil.example/"), nil).RequireProblem(t, 403, "policy")
	assert.NotContains(t, p["detail"], strings.TrimPrefix(share, "/preview/"), "the problem does not repeat the link's token")
}

// A preview cannot reach the gateway itself: a local sandbox's port that is the gateway's
// listener is refused, and so is a request that went round through previews too often —
// here a server in the sandbox that forwards every request to its own share link.
func TestPreviewLoops(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, nil)
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	port := e.serve(alice, sid)
	bearer := map[string]string{"Authorization": "Bearer " + alice}

	// The gateway's own port, through the owner's route and a link.
	gw, err := url.Parse(e.URL)
	require.NoError(t, err)
	own, err := strconv.Atoi(gw.Port())
	require.NoError(t, err)
	p := e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/v1/me", e.URL, sid, own), bearer).RequireProblem(t, 403, "policy")
	assert.Contains(t, p["detail"], "gateway's own")
	self := e.link(alice, sid, own, nil)
	e.raw(nil, "GET", self+"v1/me", nil).RequireProblem(t, 403, "policy")

	// Via entries of the preview proxy: three pass, four are a loop.
	via := func(n int) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + alice, "Via": strings.TrimSuffix(strings.Repeat("1.1 sandgate-preview, ", n), ", ")}
		return h
	}
	r := e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/headers", e.URL, sid, port), via(3))
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "1.1 sandgate-preview, 1.1 sandgate-preview, 1.1 sandgate-preview, 1.1 sandgate-preview", r.JSON(t)["via"])
	p = e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/", e.URL, sid, port), via(4)).RequireProblem(t, 403, "policy")
	assert.Contains(t, p["detail"], "passed through 4 previews")

	// A forwarder to its own share link: the loop ends at the fifth pass, and its refusal
	// comes back through every level.
	fport := freePort(t)
	loop := e.link(alice, sid, fport, nil)
	e.run(alice, sid, "cat > forward.py <<'EOF'\n"+forwarder+"EOF")
	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("exec python3 forward.py %d %s", fport, loop), "background": true})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	require.Eventually(t, func() bool {
		return e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/health", e.URL, sid, fport), bearer).Status == 200
	}, 30*time.Second, 100*time.Millisecond)
	r = e.raw(nil, "GET", loop+"anything", nil)
	require.Equal(t, 403, r.Status, "%s", r.Body)
	assert.Contains(t, string(r.Body), "passed through 4 previews")
}

// forwarder is a server (python3 forwarder PORT TARGET) that answers GET /health itself and
// passes every other GET on to TARGET + path with its Via header, answering what came back.
const forwarder = `import http.server, sys, urllib.error, urllib.request

TARGET = sys.argv[2]
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            status, body = 200, b"ok"
        else:
            req = urllib.request.Request(TARGET + self.path.lstrip("/"), headers={"Via": self.headers.get("Via", "")})
            try:
                with DIRECT.open(req, timeout=60) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as err:
                status, body = err.code, err.read()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// Links are rate-limited per link and per client address (behind trusted proxies, the
// address X-Forwarded-For names), each at sandbox.quotas.link_requests_per_second.
func TestShareLinkRateLimit(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, func(c *config.Config) {
		c.Sandbox.Quotas.LinkRequestsPerSecond = 0.001 // one more request every ~17 minutes: none during the test
		c.Sandbox.Quotas.LinkRequestsBurst = 3
		c.Server.TrustedProxies = []string{"127.0.0.1", "::1"}
	})
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	port := e.serve(alice, sid)
	a, b := e.link(alice, sid, port, nil), e.link(alice, sid, port, nil)
	from := func(addr string) map[string]string {
		return map[string]string{"X-Forwarded-For": "198.51.100.9, " + addr}
	}

	for i := range 3 {
		r := e.raw(nil, "GET", a+"index.html", from("192.0.2.1"))
		require.Equal(t, 200, r.Status, "request %d: %s", i+1, r.Body)
	}
	r := e.raw(nil, "GET", a+"index.html", from("192.0.2.1"))
	p := r.RequireProblem(t, 429, "quota")
	assert.Contains(t, p["detail"], "through this link")
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	p = e.raw(nil, "GET", a+"index.html", from("192.0.2.2")).RequireProblem(t, 429, "quota")
	assert.Contains(t, p["detail"], "through this link", "another client of the same link")
	p = e.raw(nil, "GET", b+"index.html", from("192.0.2.1")).RequireProblem(t, 429, "quota")
	assert.Contains(t, p["detail"], "from this address", "the same client through another link")
	r = e.raw(nil, "GET", b+"index.html", from("192.0.2.3"))
	assert.Equal(t, 200, r.Status, "another link from another client: %s", r.Body)
	// The owner's own route is not a link's: the principal's rate.
	r = e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/index.html", e.URL, sid, port), map[string]string{"Authorization": "Bearer " + alice})
	assert.Equal(t, 200, r.Status, "%s", r.Body)
}

// A link made with an API key works while the key is live: revoked, or deleted, the key takes
// its links with it; a link does not outlive its key's expiry either.
func TestShareLinkEndsWithItsKey(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, nil)
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	port := e.serve(alice, sid)
	signedIn := e.link(alice, sid, port, nil)

	made := e.newKey(alice, map[string]any{"name": "preview", "ttl_s": 1800})
	secret, keyID := made["secret"].(string), made["id"].(string)
	r := e.do(secret, "POST", fmt.Sprintf("/v1/sessions/%s/ports/%d/links", sid, port), map[string]any{"ttl_s": 7200})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	link := r.JSON(t)
	keyEnds, err := time.Parse(time.RFC3339Nano, made["expires_at"].(string))
	require.NoError(t, err)
	linkEnds, err := time.Parse(time.RFC3339Nano, link["expires_at"].(string))
	require.NoError(t, err)
	assert.Equal(t, keyEnds.Truncate(time.Second), linkEnds, "the link expires with its key at the latest (whole seconds)")
	viaKey := link["url"].(string)
	require.Equal(t, 200, e.raw(nil, "GET", viaKey+"index.html", nil).Status)

	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/api-keys/"+keyID, nil).Status)
	p := e.raw(nil, "GET", viaKey+"index.html", nil).RequireProblem(t, 404, "not-found")
	assert.Contains(t, p["detail"], "unknown or has expired")
	assert.Equal(t, 200, e.raw(nil, "GET", signedIn+"index.html", nil).Status, "the sign-in's link is unaffected")

	// A key deleted (as ended keys are, after a while) takes its links too.
	other := e.newKey(alice, map[string]any{"name": "preview-2"})
	viaOther := e.link(other["secret"].(string), sid, port, nil)
	require.Equal(t, 200, e.raw(nil, "GET", viaOther+"index.html", nil).Status)
	_, err = e.store.Pool().Exec(t.Context(), `DELETE FROM api_keys WHERE id = $1`, other["id"])
	require.NoError(t, err)
	e.raw(nil, "GET", viaOther+"index.html", nil).RequireProblem(t, 404, "not-found")
}

// Every request through a link checks its maker again: still in the profile's allowed
// groups (as of their latest token), still able to see the session (an administrator who
// is no longer one is not), still recorded.
func TestShareLinkRechecksItsMaker(t *testing.T) {
	t.Parallel()
	e, clock := parkEnv(t, nil)
	// relog records tok's claims as its principal's: the row is written at most once a
	// minute per subject, so a minute passes first.
	relog := func(tok string) {
		t.Helper()
		clock.Advance(time.Minute + time.Second)
		require.Equal(t, 200, e.do(tok, "GET", "/v1/me", nil).Status)
	}

	// Groups: alice loses "ml", which the profile requires, and gets it back.
	aliceML, alice := e.token("alice", "ml"), e.token("alice")
	sid := e.newSession(aliceML, "restricted")
	port := e.serve(aliceML, sid)
	link := e.link(aliceML, sid, port, nil)
	require.Equal(t, 200, e.raw(nil, "GET", link+"index.html", nil).Status)
	relog(alice) // her latest token: no "ml"
	p := e.raw(nil, "GET", link+"index.html", nil).RequireProblem(t, 404, "not-found")
	assert.Contains(t, p["detail"], "unknown or has expired")
	relog(aliceML)
	assert.Equal(t, 200, e.raw(nil, "GET", link+"index.html", nil).Status, "back in the group")

	// An administrator's link to someone else's session lasts while they are one.
	bobAdmin, bob := e.token("bob", "admins"), e.token("bob")
	admin := e.link(bobAdmin, sid, port, nil)
	require.Equal(t, 200, e.raw(nil, "GET", admin+"index.html", nil).Status)
	relog(bob)
	e.raw(nil, "GET", admin+"index.html", nil).RequireProblem(t, 404, "not-found")
	assert.Equal(t, 200, e.raw(nil, "GET", link+"index.html", nil).Status, "the owner's link is unaffected")

	// A maker no longer recorded: carol's link to the shared session of profile "shared"
	// (which her principal's removal does not take with it).
	carol := e.token("carol")
	r := e.do(carol, "GET", "/v1/sessions/default?profile=shared", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	ssid := r.JSON(t)["id"].(string)
	sport := e.serve(carol, ssid)
	shared := e.link(carol, ssid, sport, nil)
	require.Equal(t, 200, e.raw(nil, "GET", shared+"index.html", nil).Status)
	me := e.do(carol, "GET", "/v1/me", nil).JSON(t)
	_, err := e.store.Pool().Exec(t.Context(), `DELETE FROM principals WHERE issuer = $1 AND subject = $2`, me["issuer"], me["subject"])
	require.NoError(t, err)
	e.raw(nil, "GET", shared+"index.html", nil).RequireProblem(t, 404, "not-found")
}

// With a preview domain, previews have origins of their own, "port-session.<domain>", and
// are served only there: the gateway's preview paths redirect, links sign a browser in with
// a cookie of that host alone, the sandbox's answers act on its own origin (but for
// cookies' Domain and Alt-Svc), and nothing but previews is served on the domain.
func TestPreviewDomain(t *testing.T) {
	t.Parallel()
	e, clock := parkEnv(t, func(c *config.Config) { c.Server.PreviewDomain = "preview.localhost" })
	alice, bob := e.token("alice"), e.token("bob")
	sid := e.newSession(alice, "default")
	gw, err := url.Parse(e.URL)
	require.NoError(t, err)
	port := freePort(t)
	origin := fmt.Sprintf("http://%d-%s.preview.localhost:%s", port, sid, gw.Port())

	// The owner's route redirects to the preview's origin, path and query kept.
	e.run(alice, sid, "cat > server.py <<'EOF'\n"+previewServer+"EOF\necho '<h1>hello preview</h1>' > index.html")
	r := e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": fmt.Sprintf("exec python3 server.py %d", port), "background": true})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	bearer := map[string]string{"Authorization": "Bearer " + alice}
	r = e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/some/page?q=1", e.URL, sid, port), bearer)
	require.Equal(t, http.StatusTemporaryRedirect, r.Status, "%s", r.Body)
	assert.Equal(t, origin+"/some/page?q=1", r.Header.Get("Location"))
	r = e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/default/ports/%d", e.URL, port), bearer)
	assert.Regexp(t, fmt.Sprintf(`^http://%d-[0-9a-f]{32}\.preview\.localhost:%s/$`, port, gw.Port()), r.Header.Get("Location"), "the default session is named by its id")
	e.raw(nil, "GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/", e.URL, sid, port), map[string]string{"Authorization": "Bearer " + bob}).RequireProblem(t, 404, "not-found")

	// A client that is no browser sends its bearer token to the preview's host.
	require.Eventually(t, func() bool { return e.raw(nil, "GET", origin+"/index.html", bearer).Status == 200 }, 30*time.Second, 100*time.Millisecond)
	seen := e.raw(nil, "GET", origin+"/headers", bearer).JSON(t)
	assert.Nil(t, seen["authorization"])
	assert.Nil(t, seen["x-forwarded-prefix"], "the preview is at the root of its origin")
	assert.Equal(t, fmt.Sprintf("%d-%s.preview.localhost:%s", port, sid, gw.Port()), seen["x-forwarded-host"])
	e.raw(nil, "GET", origin+"/index.html", map[string]string{"Authorization": "Bearer " + bob}).RequireProblem(t, 404, "not-found")
	e.raw(nil, "GET", origin+"/index.html", nil).RequireProblem(t, 401, "unauthenticated")

	// A share link names the preview's origin; opening it sets the cookie and goes to "/".
	link := e.link(alice, sid, port, map[string]any{"ttl_s": 600})
	require.True(t, strings.HasPrefix(link, origin+"/__sandgate/open?token=v3.s."+sid+"."), link)
	browser := e.hostClient()
	r = e.raw(browser, "GET", link, nil)
	require.Equal(t, http.StatusSeeOther, r.Status, "%s", r.Body)
	assert.Equal(t, "/", r.Header.Get("Location"))
	assert.Equal(t, "no-referrer", r.Header.Get("Referrer-Policy"))
	cookie := r.Header.Get("Set-Cookie")
	for _, attr := range []string{"sandgate_preview=v3.s.", "Path=/", "HttpOnly", "SameSite=Lax"} {
		assert.Contains(t, cookie, attr)
	}
	assert.NotContains(t, strings.ToLower(cookie), "domain=", "a cookie of this host alone")
	r = e.raw(browser, "GET", origin+"/", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "<h1>hello preview</h1>\n", string(r.Body))
	seen = e.raw(browser, "GET", origin+"/headers", map[string]string{"Cookie": "mine=1"}).JSON(t)
	assert.NotContains(t, seen["cookie"], "sandgate_preview", "the gateway's cookie never reaches the sandbox")

	// On its own origin the answer acts on that origin alone: it passes, but for Alt-Svc,
	// cookies' Domain attribute, an attempt at the gateway's cookie and Clear-Site-Data's
	// cookies; no sandbox CSP.
	r = e.raw(browser, "GET", origin+"/hostile", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, []string{"planted=1; Path=/", "app=ok; Path=/; HttpOnly"}, r.Header.Values("Set-Cookie"))
	assert.Equal(t, `"cache", "storage", "executionContexts"`, r.Header.Get("Clear-Site-Data"), "browsers clear cookies for the whole site: every preview's")
	assert.Empty(t, r.Header.Get("Alt-Svc"))
	assert.Empty(t, r.Header.Get("Content-Security-Policy"))
	assert.Equal(t, 200, e.raw(browser, "GET", origin+"/index.html", nil).Status, "the gateway's cookie was not replaced")

	// Fetch metadata: another origin's page may navigate here, not send requests with the
	// cookie (another preview is same-site).
	e.raw(browser, "POST", origin+"/x", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}).RequireProblem(t, 403, "forbidden")
	e.raw(browser, "GET", origin+"/", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}).RequireProblem(t, 403, "forbidden")
	assert.Equal(t, 200, e.raw(browser, "GET", origin+"/", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}).Status)
	assert.Equal(t, 200, e.raw(browser, "GET", origin+"/", map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}).Status)

	// The gateway's link path sends a browser to the opening URL, path kept; only GET.
	share := strings.TrimPrefix(link, origin+"/__sandgate/open?token=")
	r = e.raw(nil, "GET", e.URL+"/preview/"+share+"/deep/page?x=1", nil)
	require.Equal(t, http.StatusTemporaryRedirect, r.Status, "%s", r.Body)
	to := r.Header.Get("Location")
	require.True(t, strings.HasPrefix(to, origin+"/__sandgate/open?"), to)
	r = e.raw(e.hostClient(), "GET", to, nil)
	require.Equal(t, http.StatusSeeOther, r.Status, "%s", r.Body)
	assert.Equal(t, "/deep/page?x=1", r.Header.Get("Location"))
	e.raw(nil, "POST", e.URL+"/preview/"+share+"/", nil).RequireProblem(t, 404, "not-found")
	// A path that would lead off the origin goes to "/" instead.
	r = e.raw(e.hostClient(), "GET", origin+"/__sandgate/open?token="+share+"&path="+url.QueryEscape("//evil.example/"), nil)
	assert.Equal(t, "/", r.Header.Get("Location"))

	// A link opens its own preview only; another preview's cookie is passed over.
	other := fmt.Sprintf("http://%d-%s.preview.localhost:%s", port+1, sid, gw.Port())
	e.raw(e.hostClient(), "GET", other+"/__sandgate/open?token="+share, nil).RequireProblem(t, 404, "not-found")
	e.raw(nil, "GET", other+"/", map[string]string{"Cookie": "sandgate_preview=" + share}).RequireProblem(t, 401, "unauthenticated")

	// Nothing else is served on the domain: not the API, not the console.
	e.raw(nil, "GET", "http://preview.localhost:"+gw.Port()+"/v1/me", bearer).RequireProblem(t, 404, "not-found")
	e.raw(nil, "GET", "http://console.preview.localhost:"+gw.Port()+"/", nil).RequireProblem(t, 404, "not-found")
	r = e.raw(nil, "GET", origin+"/v1/me", bearer)
	assert.Equal(t, 404, r.Status, "the sandbox's own answer for its path /v1/me")
	assert.NotContains(t, string(r.Body), "alice", "never the gateway's /v1/me")

	// A personal link must be opened within a minute; what it opened lasts until it expires.
	r = e.do(alice, "POST", fmt.Sprintf("/v1/sessions/%s/ports/%d/links", sid, port), map[string]any{"personal": true})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	personal := r.JSON(t)
	assert.Equal(t, true, personal["personal"])
	require.NotEmpty(t, personal["open_by"])
	opened := e.hostClient()
	require.Equal(t, http.StatusSeeOther, e.raw(opened, "GET", personal["url"].(string), nil).Status)
	clock.Advance(2 * time.Minute)
	p := e.raw(e.hostClient(), "GET", personal["url"].(string), nil).RequireProblem(t, 404, "not-found")
	assert.Contains(t, p["detail"], "had to be opened by")
	assert.Equal(t, 200, e.raw(opened, "GET", origin+"/index.html", nil).Status, "the browser that opened it in time stays in")

	// An expired link's cookie opens nothing, and the browser is told to forget it.
	clock.Advance(time.Hour)
	r = e.raw(browser, "GET", origin+"/index.html", nil)
	r.RequireProblem(t, 401, "unauthenticated")
	assert.Contains(t, r.Header.Get("Set-Cookie"), "sandgate_preview=;")
	assert.Contains(t, r.Header.Get("Set-Cookie"), "Max-Age=0")
}

// The gateway's own port cannot be previewed through the preview domain either.
func TestPreviewDomainRefusesTheGateway(t *testing.T) {
	t.Parallel()
	e, _ := parkEnv(t, func(c *config.Config) { c.Server.PreviewDomain = "preview.localhost" })
	alice := e.token("alice")
	sid := e.newSession(alice, "default")
	e.run(alice, sid, "true") // a sandbox to reach into
	gw, err := url.Parse(e.URL)
	require.NoError(t, err)
	origin := fmt.Sprintf("http://%s-%s.preview.localhost:%s", gw.Port(), sid, gw.Port())
	p := e.raw(nil, "GET", origin+"/v1/me", map[string]string{"Authorization": "Bearer " + alice}).RequireProblem(t, 403, "policy")
	assert.Contains(t, p["detail"], "gateway's own")
	own, err := strconv.Atoi(gw.Port())
	require.NoError(t, err)
	link := e.link(alice, sid, own, nil)
	browser := e.hostClient()
	require.Equal(t, http.StatusSeeOther, e.raw(browser, "GET", link, nil).Status)
	e.raw(browser, "GET", origin+"/", nil).RequireProblem(t, 403, "policy")
}
