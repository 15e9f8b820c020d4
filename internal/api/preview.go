package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Preview ports: HTTP and WebSocket proxied to a server inside a session's sandbox
// (docs/semantics.md §8 "Preview ports"). Any method, path and body passes, so these routes are
// served here beside the generated ones (openapi.yaml documents them, tag preview): by the
// session's owner under the bearer token at /v1/sessions/{session_id}/ports/{port}/…, and by
// whoever holds a link at /preview/{token}/…. With a preview domain (server.preview_domain)
// those paths redirect to the port's own origin, served by previewhost.go.

// PreviewPrefix starts the path of every link on the gateway's origin: PreviewPrefix + token +
// "/".
const PreviewPrefix = "/preview/"

// mountPreview adds the preview routes to r; authenticated wraps the bearer-token route.
func (s *Server) mountPreview(r chi.Router, authenticated func(http.Handler) http.Handler) {
	owner := authenticated(http.HandlerFunc(s.portProxy))
	r.Handle("/v1/sessions/{session_id}/ports/{port}", owner)
	r.Handle("/v1/sessions/{session_id}/ports/{port}/*", owner)
	r.Handle(PreviewPrefix+"{token}", http.HandlerFunc(s.linkProxy))
	r.Handle(PreviewPrefix+"{token}/*", http.HandlerFunc(s.linkProxy))
}

// portProxy is /v1/sessions/{session_id}/ports/{port}/…: the caller's own session.
func (s *Server) portProxy(w http.ResponseWriter, r *http.Request) {
	p, err := caller(r.Context())
	if err != nil {
		writeProblem(w, r, ProblemFor(err))
		return
	}
	if hops := previewHops(r.Header); hops >= maxPreviewHops {
		s.previewFailed(w, r, loopErr(hops))
		return
	}
	sid := chi.URLParam(r, "session_id")
	port, err := strconv.Atoi(chi.URLParam(r, "port"))
	if err != nil {
		port = -1 // refused by the domain with its message
	}
	prefix := "/v1/sessions/" + url.PathEscape(sid) + "/ports/" + chi.URLParam(r, "port")
	if s.preview.on() {
		// The port has an origin of its own: the same request goes there, where the bearer
		// token is taken too.
		id, err := s.sandbox.PortSession(r.Context(), p, sid, "", port)
		if err != nil {
			s.previewFailed(w, r, err)
			return
		}
		redirectTemporary(w, s.preview.origin(id, port)+restOf(r, prefix))
		return
	}
	if redirectToSlash(w, r, prefix) {
		return
	}
	target, err := s.sandbox.Port(r.Context(), p, sid, "", port)
	if err != nil {
		s.previewFailed(w, r, err)
		return
	}
	s.proxy(w, r, target, prefix)
}

// linkProxy is /preview/{token}/…: a link, no bearer token.
func (s *Server) linkProxy(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	prefix := PreviewPrefix + token
	if hops := previewHops(r.Header); hops >= maxPreviewHops {
		s.previewFailed(w, r, loopErr(hops))
		return
	}
	link, err := s.sandbox.VerifyLink(r.Context(), token)
	if err != nil {
		s.previewFailed(w, r, err)
		return
	}
	if !s.limitLink(w, r, link) {
		return
	}
	if s.preview.on() {
		// Opened in a browser, the link signs it in to the port's own origin.
		origin := s.preview.origin(link.SessionID, link.Port)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			WriteProblem(w, r, http.StatusNotFound, string(fault.NotFound), "Not found",
				"this preview is served on its own origin, "+origin+"/: open the link in a browser (GET) to be sent there")
			return
		}
		redirectTemporary(w, s.preview.openURL(link, restOf(r, prefix)))
		return
	}
	if redirectToSlash(w, r, prefix) {
		return
	}
	target, err := s.sandbox.PortByLink(r.Context(), token)
	if err != nil {
		s.previewFailed(w, r, err)
		return
	}
	s.proxy(w, r, target, prefix)
}

// limitLink spends one request of the link's bucket and one of the client address's
// (server.trusted_proxies tells it), each at Options.LinkRateLimit; over either it answers
// 429 and reports false.
func (s *Server) limitLink(w http.ResponseWriter, r *http.Request, link sandbox.PortLink) bool {
	refuse := func(retry time.Duration, whose string) bool {
		writeProblem(w, r, Problem{Type: ProblemTypeBase + string(fault.Quota), Title: "Quota exceeded", Status: http.StatusTooManyRequests,
			Detail: "too many requests " + whose + ": " + strconv.FormatFloat(s.links.cfg.PerSecond, 'g', -1, 64) +
				" per second are allowed (bursts of " + strconv.Itoa(s.links.cfg.Burst) + "; sandbox.quotas.link_requests_per_second); wait Retry-After seconds",
			retryAfter: retry})
		return false
	}
	if ok, retry := s.links.allow("link\x00" + linkID(link.Token)); !ok {
		return refuse(retry, "through this link")
	}
	if ok, retry := s.links.allow("addr\x00" + addrBucket(s.clients.of(r))); !ok {
		return refuse(retry, "through links from this address")
	}
	return true
}

// linkID names a link for its rate bucket: its signature, unique per link.
func linkID(token string) string {
	return token[strings.LastIndexByte(token, '.')+1:]
}

// restOf is the part of r's path after prefix ("/" when none) with its query.
func restOf(r *http.Request, prefix string) string {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), prefix)
	if rest == "" {
		rest = "/"
	}
	if r.URL.RawQuery != "" {
		rest += "?" + r.URL.RawQuery
	}
	return rest
}

// redirectTemporary sends the caller to (an absolute URL) with 307, which keeps the method
// and body, and no body of its own.
func redirectTemporary(w http.ResponseWriter, to string) {
	h := w.Header()
	h.Set("Location", to)
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusTemporaryRedirect)
}

// redirectToSlash sends a request for exactly prefix to prefix + "/" (308 keeps the method and
// body), so that the sandbox's relative links resolve under the prefix; it reports whether it
// did.
func redirectToSlash(w http.ResponseWriter, r *http.Request, prefix string) bool {
	if r.URL.EscapedPath() != prefix {
		return false
	}
	to := prefix + "/"
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, to, http.StatusPermanentRedirect)
	return true
}

func (s *Server) previewFailed(w http.ResponseWriter, r *http.Request, err error) {
	p := ProblemFor(err)
	if p.Status >= 500 && r.Context().Err() == nil {
		s.log.Error("preview request failed", "request_id", middleware.GetReqID(r.Context()), "err", err)
	}
	writeProblem(w, r, p)
}

// proxy passes r to target on the gateway's origin, under prefix (the escaped path up to the
// port): sandboxed, without the header fields that would act on the gateway's origin, and
// with its redirects kept within the preview (previewsafe.go).
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, target *sandbox.PortTarget, prefix string) {
	s.pass(w, r, target, prefix, func(resp *http.Response) error {
		for _, h := range originHeaders {
			resp.Header.Del(h)
		}
		resp.Header.Add("Content-Security-Policy", previewCSP)
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
			to, ok := confineLocation(loc, r.URL.EscapedPath(), prefix, r.Host, target.Port)
			if !ok {
				return fault.New(fault.Policy, "the server on port %d redirected to %q, which leaves the preview: on the gateway's origin a preview redirects only within %s/ (a preview domain, server.preview_domain, serves previews on origins of their own)",
					target.Port, loc, redactPreview(prefix))
			}
			resp.Header.Set("Location", to)
		}
		return nil
	})
}

// pass passes r to target: the path after prefix ("" on a preview's own origin: all of it),
// the query, the body and the headers but the caller's Authorization and the gateway's
// cookies (under a prefix all of them, on a preview's origin the gateway's own), with X-Forwarded-Host, -Proto (and -Prefix under a prefix) and Via set; an upgrade
// (WebSocket) is passed through and the connection then carries it both ways. Each request
// opens a tunnel of its own; one that reaches the gateway's own listener is refused. answer
// adjusts the sandbox's answer (an error refuses it).
func (s *Server) pass(w http.ResponseWriter, r *http.Request, target *sandbox.PortTarget, prefix string, answer func(*http.Response) error) {
	// The server's read and write deadlines would cut a long download or a WebSocket; this
	// request is bounded by its two ends instead.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	host := net.JoinHostPort("localhost", strconv.Itoa(target.Port))
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rest := strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
			u := *pr.In.URL
			u.Scheme, u.Host, u.User = "http", host, nil
			u.RawPath = rest
			if p, err := url.PathUnescape(rest); err == nil {
				u.Path = p
			} else {
				u.Path, u.RawPath = rest, ""
			}
			pr.Out.URL = &u
			pr.Out.Host = host
			pr.SetXForwarded()
			if prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			}
			pr.Out.Header.Del("Authorization") // the gateway's credential, never the sandbox's business
			if prefix != "" {
				// The gateway origin's cookies (an authenticating proxy's, say): a preview
				// there never set any, since its Set-Cookie never reaches the browser.
				pr.Out.Header.Del("Cookie")
			} else {
				dropCookie(pr.Out.Header, s.preview.cookie)
			}
			// One Via field, the earlier hops first (RFC 9110 §7.6.3).
			via := append(pr.Out.Header.Values("Via"), pr.In.Proto[strings.IndexByte(pr.In.Proto, '/')+1:]+" "+viaPseudonym)
			pr.Out.Header.Set("Via", strings.Join(via, ", "))
		},
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				conn, err := target.Dial(ctx)
				if err == nil && isServerAddr(r.Context(), conn.RemoteAddr()) {
					_ = conn.Close()
					return nil, selfErr(target.Port)
				}
				return conn, err
			},
			DisableKeepAlives: true, // one tunnel per request: nothing idles in the sandbox
			// The sandbox's server takes its time as it likes: the caller bounds the request.
			ResponseHeaderTimeout: 0,
			ExpectContinueTimeout: time.Second,
		},
		FlushInterval:  -1, // event streams and chunked answers reach the caller as they come
		ModifyResponse: answer,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			// The problem is of the caller's request (r), not of the one sent to the sandbox.
			if r.Context().Err() != nil {
				return // the caller went away
			}
			err = unwrapTransport(err)
			var fe *fault.Error
			if !errors.As(err, &fe) {
				err = fault.Wrap(fault.Provision, err, "the server on port %d in the sandbox did not answer", target.Port)
			}
			s.previewFailed(w, r, err)
		},
		ErrorLog: nil,
	}
	rp.ServeHTTP(w, r)
}

// unwrapTransport returns the domain's error inside a transport error (a tunnel that could
// not be opened), or err as it is.
func unwrapTransport(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return unwrapTransport(oe.Err)
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return unwrapTransport(ue.Err)
	}
	return err
}

// redactPreview hides a link's token in a path written to the access log (or a problem).
func redactPreview(path string) string {
	rest, ok := strings.CutPrefix(path, PreviewPrefix)
	if !ok {
		return path
	}
	_, after, found := strings.Cut(rest, "/")
	if !found {
		return PreviewPrefix + "…"
	}
	return fmt.Sprintf("%s…/%s", PreviewPrefix, after)
}
