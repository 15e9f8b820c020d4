package api

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Previews on origins of their own (server.preview_domain, docs/semantics.md §8): port P of
// session S is served at the host "P-S.<domain>", and nothing else is served on the domain —
// no API, no console. A browser there is signed in by a cookie of that host alone, which a
// link sets when opened at OpenPath; a client that is no browser may send its bearer token
// instead.

// OpenPath is where a link is opened on a preview's host: OpenPath?token=<link token>
// [&path=<where to go next>] sets the preview cookie and redirects to path ("/" by default).
// The sandbox's own server is never asked for it.
const OpenPath = "/__sandgate/open"

// previewSite is where previews are served.
type previewSite struct {
	domain string // lower-case name of server.preview_domain; "" serves previews on the gateway's origin
	scheme string // public_url's
	port   string // ":port" of the preview domain, else of public_url; "" for the scheme's default
	cookie string // the preview cookie's name ("" without a domain)
}

// newPreviewSite reads the preview domain ("name[:port]", validated by config) against the
// gateway's public URL.
func newPreviewSite(domain, publicURL string) previewSite {
	if domain == "" {
		return previewSite{}
	}
	s := previewSite{scheme: "http"}
	if u, err := url.Parse(publicURL); err == nil && u.Scheme != "" {
		s.scheme = u.Scheme
		if p := u.Port(); p != "" {
			s.port = ":" + p
		}
	}
	s.domain = domain
	if h, p, err := net.SplitHostPort(domain); err == nil {
		s.domain, s.port = h, ":"+p
	}
	s.domain = strings.ToLower(strings.TrimSuffix(s.domain, "."))
	if s.scheme == "https" && s.port == ":443" || s.scheme == "http" && s.port == ":80" {
		s.port = ""
	}
	// __Host-: a cookie the browser keeps for this very host, set over HTTPS with Path=/.
	s.cookie = "sandgate_preview"
	if s.scheme == "https" {
		s.cookie = "__Host-sandgate_preview"
	}
	return s
}

// on reports whether previews have origins of their own.
func (p previewSite) on() bool { return p.domain != "" }

// origin is the origin of port of session sid: scheme://port-sid.domain[:port].
func (p previewSite) origin(sid string, port int) string {
	return p.scheme + "://" + strconv.Itoa(port) + "-" + sid + "." + p.domain + p.port
}

// openURL is the URL that opens link on its preview's origin, then goes to path.
func (p previewSite) openURL(link sandbox.PortLink, path string) string {
	q := url.Values{"token": {link.Token}}
	if path != "" && path != "/" {
		q.Set("path", path)
	}
	return p.origin(link.SessionID, link.Port) + OpenPath + "?" + q.Encode()
}

// serves reports whether hostport (a request's Host) is on the preview domain.
func (p previewSite) serves(hostport string) bool {
	if !p.on() {
		return false
	}
	h := hostOnly(hostport)
	return h == p.domain || strings.HasSuffix(h, "."+p.domain)
}

// parseHost reads a preview host, "port-sid.domain": ok is false for anything else.
func (p previewSite) parseHost(hostport string) (sid string, port int, ok bool) {
	label, found := strings.CutSuffix(hostOnly(hostport), "."+p.domain)
	if !found {
		return "", 0, false
	}
	ps, sid, found := strings.Cut(label, "-")
	if !found || len(sid) != 32 || strings.Trim(sid, "0123456789abcdef") != "" || ps == "" || ps[0] == '0' || len(ps) > 5 {
		return "", 0, false
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return sid, port, true
}

// hostOnly is hostport's host, lower case, without a port or a final dot.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// servePreviewHost answers every request for a host on the preview domain.
func (s *Server) servePreviewHost(w http.ResponseWriter, r *http.Request) {
	sid, port, ok := s.preview.parseHost(r.Host)
	if !ok {
		WriteProblem(w, r, http.StatusNotFound, string(fault.NotFound), "Not found",
			"nothing is served at "+hostOnly(r.Host)+": previews are at <port>-<session id>."+s.preview.domain+", the API and the console at "+s.publicURL)
		return
	}
	if r.URL.Path == OpenPath {
		s.openLink(w, r, sid, port)
		return
	}
	if hops := previewHops(r.Header); hops >= maxPreviewHops {
		s.previewFailed(w, r, loopErr(hops))
		return
	}
	link, found, stale, err := s.previewCookie(r, sid, port)
	switch {
	case err != nil:
		s.previewFailed(w, r, err)
	case found:
		s.viaCookie(w, r, link)
	case r.Header.Get("Authorization") != "":
		s.bearer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := caller(r.Context())
			if err != nil {
				writeProblem(w, r, ProblemFor(err))
				return
			}
			target, err := s.sandbox.Port(r.Context(), p, sid, "", port)
			if err != nil {
				s.previewFailed(w, r, err)
				return
			}
			s.passOwnOrigin(w, r, target)
		})).ServeHTTP(w, r)
	default:
		if stale {
			s.clearCookie(w) // an expired link's: the browser forgets it
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandgate"`)
		WriteProblem(w, r, http.StatusUnauthorized, "unauthenticated", "Unauthenticated",
			"this preview opens with a link: open the port from the console, or ask its owner for a share link (POST /v1/sessions/{id}/ports/{port}/links); a client may send its bearer token instead")
	}
}

// viaCookie serves a request the preview cookie (a link) authenticates.
func (s *Server) viaCookie(w http.ResponseWriter, r *http.Request, link sandbox.PortLink) {
	if !fetchAllowed(r) {
		WriteProblem(w, r, http.StatusForbidden, string(fault.Forbidden), "Forbidden",
			"a page of another origin ("+r.Header.Get("Sec-Fetch-Site")+") may only navigate to this preview, not send it requests with its sign-in")
		return
	}
	if !s.limitLink(w, r, link) {
		return
	}
	target, err := s.sandbox.PortByLink(r.Context(), link.Token)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			s.clearCookie(w) // the link no longer opens anything: the browser forgets it
		}
		s.previewFailed(w, r, err)
		return
	}
	s.passOwnOrigin(w, r, target)
}

// fetchAllowed is the Fetch Metadata check of a request a preview cookie authenticates: the
// preview's own pages (same-origin), what a user typed or bookmarked (none), a top-level
// navigation from elsewhere, and clients that send no metadata pass. Requests that a page of
// another origin makes — including another preview's, to which the browser would attach the
// cookie since previews share a site — do not: scripts' requests, forms posted, frames,
// WebSockets.
func fetchAllowed(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" &&
		(r.Method == http.MethodGet || r.Method == http.MethodHead)
}

// previewCookie finds a preview cookie of r that opens port of session sid: one a link of
// this very preview set (another, tossed in by a page of a parent domain, is passed over).
// stale reports a preview cookie that opens nothing (an expired link's, say).
func (s *Server) previewCookie(r *http.Request, sid string, port int) (link sandbox.PortLink, found, stale bool, err error) {
	for _, c := range r.CookiesNamed(s.preview.cookie) {
		link, err := s.sandbox.VerifyLink(r.Context(), c.Value)
		if err == nil && link.SessionID == sid && link.Port == port {
			return link, true, false, nil
		}
		if err != nil && fault.KindOf(err) != fault.NotFound {
			return sandbox.PortLink{}, false, false, err
		}
		stale = true
	}
	return sandbox.PortLink{}, false, stale, nil
}

// openLink is OpenPath on a preview's host: the link in the query must be this preview's, and
// a personal one still within its time to be opened; its maker's access is checked at once
// (sandbox.Service.OpenLink).
// The answer sets the preview cookie (the link's token, until the link expires) and sends the
// browser on to path, without a Referer.
func (s *Server) openLink(w http.ResponseWriter, r *http.Request, sid string, port int) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		WriteProblem(w, r, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
			r.Method+" is not allowed on "+OpenPath+" (allowed: GET, HEAD): a link is opened by following it")
		return
	}
	q := r.URL.Query()
	link, err := s.sandbox.VerifyLink(r.Context(), q.Get("token"))
	if err != nil {
		s.previewFailed(w, r, err)
		return
	}
	if link.SessionID != sid || link.Port != port {
		WriteProblem(w, r, http.StatusNotFound, string(fault.NotFound), "Not found",
			"this link opens another preview: "+s.preview.origin(link.SessionID, link.Port)+"/")
		return
	}
	if !s.limitLink(w, r, link) {
		return
	}
	if _, err := s.sandbox.OpenLink(r.Context(), link.Token); err != nil {
		s.previewFailed(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: s.preview.cookie, Value: link.Token, Path: "/",
		Expires: link.ExpiresAt, MaxAge: max(1, int(link.ExpiresAt.Sub(s.now()).Seconds())),
		HttpOnly: true, Secure: s.preview.scheme == "https", SameSite: http.SameSiteLaxMode,
	})
	h := w.Header()
	h.Set("Location", localPath(q.Get("path")))
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusSeeOther)
}

// localPath is path when it names a path of this origin ("/…", never "//…" or with a
// backslash or control character, which browsers read as another host), else "/".
func localPath(path string) string {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return "/"
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c < ' ' || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	return path
}

// clearCookie makes the browser forget the preview cookie.
func (s *Server) clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: s.preview.cookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.preview.scheme == "https", SameSite: http.SameSiteLaxMode})
}

// passOwnOrigin passes r to target on the preview's own origin: the sandbox's answer keeps
// its header fields — cookies, storage and transport rules act on that origin alone — but for
// Alt-Svc (the gateway's front decides how the host is reached), the gateway's own cookie,
// cookies' Domain attribute (each cookie stays with its preview's host), and the cookies of
// Clear-Site-Data (which browsers clear for the whole site, every preview's).
func (s *Server) passOwnOrigin(w http.ResponseWriter, r *http.Request, target *sandbox.PortTarget) {
	s.pass(w, r, target, "", func(resp *http.Response) error {
		resp.Header.Del("Alt-Svc")
		filterOwnOriginCookies(resp.Header, s.preview.cookie)
		filterClearSiteData(resp.Header)
		return nil
	})
}
