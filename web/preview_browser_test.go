package web_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// hostilePage is a server (python3 hostilePage PORT) whose every answer sends the header
// fields that act on a whole origin — wiping its storage and cookies, planting a cookie,
// pinning HTTPS, redirecting — and whose page reports in its title what its script could
// reach: web storage and cookies.
const hostilePage = `import http.server, sys

PAGE = b"""<!doctype html><meta charset=utf-8><title>loading</title><h1>preview</h1><script>
const r = [];
try { localStorage.setItem('k', '1'); r.push('storage'); } catch (e) { r.push('no-storage:' + e.name); }
try { document.cookie = 'js=1; path=/'; r.push('cookie:' + document.cookie); } catch (e) { r.push('no-cookie:' + e.name); }
document.title = 'ran ' + r.join(' ');
</script>"""

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = PAGE if self.path.split("?")[0] in ("/", "/index.html") else b"not here"
        self.send_response(200 if body is PAGE else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Clear-Site-Data", '"*"')
        self.send_header("Set-Cookie", "planted=1; Path=/")
        self.send_header("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
        self.send_header("Refresh", "2; url=https://example.invalid/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// startHostile runs hostilePage in session sid (alice's, as tok) on a free port of this host
// (local sandboxes listen on its loopback) and waits until it answers through the owner's
// route.
func startHostile(t *testing.T, g *gateway, tok, sid string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	req, err := http.NewRequest("PUT", g.URL+"/v1/sessions/"+sid+"/files/hostile.py", strings.NewReader(hostilePage))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "upload hostile.py")
	resp, body := g.call(t, "POST", "/v1/sessions/"+sid+"/commands", tok, fmt.Sprintf(`{"command":"exec python3 hostile.py %d","background":true}`, port))
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	// The owner's route, or with a preview domain where it redirects (resolved to the
	// gateway: the domain's hosts are in no DNS).
	gw, err := url.Parse(g.URL)
	require.NoError(t, err)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", gw.Host)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		req.Header.Set("Authorization", "Bearer "+tok) // the preview's host takes the token too
		return nil
	}}
	require.Eventually(t, func() bool {
		req, err := http.NewRequest("GET", fmt.Sprintf("%s/v1/sessions/%s/ports/%d/", g.URL, sid, port), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 200
	}, 30*time.Second, 100*time.Millisecond)
	return port
}

// responses records the raw answer header fields Chromium receives on a page, by URL.
type responses struct {
	mu    sync.Mutex
	urls  map[network.RequestID]string
	heads map[network.RequestID]network.Headers
}

func (p *page) recordResponses() *responses {
	p.t.Helper()
	r := &responses{urls: map[network.RequestID]string{}, heads: map[network.RequestID]network.Headers{}}
	_, err := chromedp.Call(p.ctx, network.Enable, network.EnableParams{})
	require.NoError(p.t, err)
	require.NoError(p.t, chromedp.Listen(p.ctx, func(ev any) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventResponseReceived:
			r.urls[e.RequestID] = e.Response.URL
		case *network.EventResponseReceivedExtraInfo:
			r.heads[e.RequestID] = e.Headers
		}
	}))
	return r
}

// fields returns the header fields (lower-case names) of the answer for u as they reached
// the browser, waiting for them to be reported.
func (r *responses) fields(t *testing.T, u string) map[string]string {
	t.Helper()
	var out map[string]string
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for id, got := range r.urls {
			if h, ok := r.heads[id]; ok && got == u {
				out = map[string]string{}
				for k, v := range h {
					out[strings.ToLower(k)] = fmt.Sprint(v)
				}
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no answer for %s reached the browser", u)
	return out
}

// A preview served on the gateway's origin cannot act on the console: Chromium never sees
// its Clear-Site-Data, Set-Cookie, HSTS or Refresh, so the console's token (sessionStorage)
// survives it, and no cookie lands on the gateway's origin; the page's script runs in an
// opaque origin, with neither web storage nor cookies.
func TestPreviewCannotTouchTheConsole(t *testing.T) {
	p := newPage(t)
	g := startGateway(t)
	tok := g.token(t, "alice", "dev")
	resp, body := g.call(t, "POST", "/v1/sessions", tok, `{"name":"hostile"}`)
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	sid := jsonField(t, body, "id")
	t.Cleanup(func() { g.get(t, "DELETE", "/v1/sessions/"+sid, tok) })
	port := startHostile(t, g, tok, sid)
	resp, body = g.call(t, "POST", fmt.Sprintf("/v1/sessions/%s/ports/%d/links", sid, port), tok, `{}`)
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	link := jsonField(t, body, "url")

	p.do(chromedp.Navigate(g.URL + "/#/me"))
	p.signIn("alice", "dev")
	p.wait("the me view", `document.querySelector('#me-view')`)
	token := eval[string](p, `sessionStorage.getItem('sandgate.token') ?? ''`)
	require.NotEmpty(t, token)

	seen := p.recordResponses()
	p.do(chromedp.Navigate(link))
	p.wait("the preview's script", `document.title.startsWith('ran ')`)
	assert.Equal(t, "ran no-storage:SecurityError no-cookie:SecurityError", eval[string](p, `document.title`), "an opaque origin")
	fields := seen.fields(t, link)
	for _, f := range []string{"clear-site-data", "set-cookie", "strict-transport-security", "refresh"} {
		assert.NotContains(t, fields, f, "%s reached the browser", f)
	}
	assert.Contains(t, fields["content-security-policy"], "sandbox allow-scripts")
	p.shot("preview-sandboxed")

	// Back on the console: still signed in with the same token, and no cookie.
	p.do(chromedp.Navigate(g.URL + "/#/me"))
	p.wait("the console, still signed in", `!document.querySelector('#nav').hidden && document.querySelector('#me-view')`)
	assert.Equal(t, token, eval[string](p, `sessionStorage.getItem('sandgate.token') ?? ''`), "the console's token survived the preview")
	jar, err := chromedp.Call(p.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{g.URL + "/", link}})
	require.NoError(t, err)
	assert.Empty(t, jar.Cookies, "no cookie on the gateway's origin")
}

// With a preview domain the console's "Open port" opens the port on its own origin
// (port-session.preview.localhost, which Chromium resolves to this host): the page there has
// storage and cookies of its own — but not the gateway's HTTP-only one, which its
// Clear-Site-Data cannot wipe either — and the console's token survives it.
func TestPreviewDomainInBrowser(t *testing.T) {
	p := newPage(t)
	g := startGateway(t, func(c *config.Config) { c.Server.PreviewDomain = "preview.localhost" })
	gw, err := url.Parse(g.URL)
	require.NoError(t, err)
	tok := g.token(t, "alice", "dev")
	resp, body := g.call(t, "POST", "/v1/sessions", tok, `{"name":"own origin"}`)
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	sid := jsonField(t, body, "id")
	t.Cleanup(func() { g.get(t, "DELETE", "/v1/sessions/"+sid, tok) })
	port := startHostile(t, g, tok, sid)
	origin := fmt.Sprintf("http://%d-%s.preview.localhost:%s", port, sid, gw.Port())

	p.do(chromedp.Navigate(g.URL + "/#/sessions/" + sid))
	p.signIn("alice", "dev")
	p.wait("the session page", `document.querySelector('#open-port')`)
	token := eval[string](p, `sessionStorage.getItem('sandgate.token') ?? ''`)
	require.NotEmpty(t, token)
	p.do(setValue("#port", strconv.Itoa(port)), chromedp.Click(chromedp.ID("open-port")))
	p.wait("the port link", `document.querySelector('#port-link')`)
	link := eval[string](p, `document.querySelector('#port-link').href`)
	require.True(t, strings.HasPrefix(link, origin+"/__sandgate/open?token=v3.p."+sid+"."), link)
	p.shot("session-port-domain")

	// This tab follows the personal link too (within its minute): the preview, at "/".
	p.do(chromedp.Navigate(link))
	p.wait("the preview's script", `document.title.startsWith('ran ')`)
	assert.Equal(t, origin+"/", eval[string](p, `location.href`))
	title := eval[string](p, `document.title`)
	assert.True(t, strings.HasPrefix(title, "ran storage cookie:"), "its own origin, with storage and cookies: %s", title)
	assert.Contains(t, title, "js=1")
	assert.NotContains(t, title, "sandgate_preview", "the gateway's cookie is HTTP-only")
	// Its Clear-Site-Data wiped its storage, not the cookie that lets this browser in.
	p.do(chromedp.Reload())
	p.wait("the preview, again", `document.title.startsWith('ran ')`)
	assert.Equal(t, origin+"/", eval[string](p, `location.href`))

	// The console is untouched.
	p.do(chromedp.Navigate(g.URL + "/#/me"))
	p.wait("the console, still signed in", `!document.querySelector('#nav').hidden && document.querySelector('#me-view')`)
	assert.Equal(t, token, eval[string](p, `sessionStorage.getItem('sandgate.token') ?? ''`), "the console's token survived the preview")
	jar, err := chromedp.Call(p.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{g.URL + "/"}})
	require.NoError(t, err)
	assert.Empty(t, jar.Cookies, "no cookie on the gateway's origin")
}
