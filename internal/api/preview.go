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
// whoever holds a share link at /preview/{token}/….

// PreviewPrefix starts the path of every share link: PreviewPrefix + token + "/".
const PreviewPrefix = "/preview/"

// previewCSP is added to every proxied answer: the sandbox's pages run in an opaque origin,
// never the gateway's, so they can read neither the console's token (web storage) nor
// register a service worker over the gateway's pages; scripts, forms, pop-ups and WebSockets
// still work.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-modals allow-downloads"

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
	sid := chi.URLParam(r, "session_id")
	port, err := strconv.Atoi(chi.URLParam(r, "port"))
	if err != nil {
		port = -1 // refused by the domain with its message
	}
	prefix := "/v1/sessions/" + url.PathEscape(sid) + "/ports/" + chi.URLParam(r, "port")
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

// linkProxy is /preview/{token}/…: a share link, no bearer token.
func (s *Server) linkProxy(w http.ResponseWriter, r *http.Request) {
	token := chi.URLParam(r, "token")
	prefix := PreviewPrefix + token
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

// proxy passes r to target: the path after prefix, the query, the body and the headers but
// the caller's Authorization, with X-Forwarded-Host, -Proto and -Prefix set; an upgrade
// (WebSocket) is passed through and the connection then carries it both ways. Each request
// opens a tunnel of its own.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, target *sandbox.PortTarget, prefix string) {
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
			pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			pr.Out.Header.Del("Authorization") // the gateway's credential, never the sandbox's business
		},
		Transport: &http.Transport{
			Proxy:             nil,
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return target.Dial(ctx) },
			DisableKeepAlives: true, // one tunnel per request: nothing idles in the sandbox
			// The sandbox's server takes its time as it likes: the caller bounds the request.
			ResponseHeaderTimeout: 0,
			ExpectContinueTimeout: time.Second,
		},
		FlushInterval: -1, // event streams and chunked answers reach the caller as they come
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Add("Content-Security-Policy", previewCSP)
			resp.Header.Del("Service-Worker-Allowed")
			return nil
		},
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

// redactPreview hides a share link's token in a path written to the access log.
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
