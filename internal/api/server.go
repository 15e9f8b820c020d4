// Package api is Sandgate's HTTP edge: the chi router, the oapi-codegen strict server
// generated from openapi.yaml (package apigen), thin handlers over internal/sandbox, request
// validation against the contract, and the one place where domain errors become RFC 9457
// problem+json responses.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/swaggest/swgui/v5emb"

	sandgate "github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Options wires the HTTP edge.
type Options struct {
	Auth *auth.Authenticator
	// Readiness backs GET /ready (the response store: the gateway hands the Postgres store).
	Readiness Readiness
	Sandbox   *sandbox.Service
	Logger    *slog.Logger
	Now       func() time.Time
	MaxBody   int64 // JSON body limit in bytes
	// Extra mounts additional handlers (the dev issuer) before the API routes.
	Extra map[string]http.Handler
	// Console, when set, serves the web console for GET and HEAD at exactly "/" and under
	// /console/; every other route keeps precedence.
	Console http.Handler
	// Mounts are more handlers (the MCP endpoint and its metadata), each at exactly its Path;
	// authenticated ones share the principal's request rate with REST.
	Mounts []Mount
	// AgentTools, when set, backs GET /v1/agent/tools (the MCP server's tools).
	AgentTools AgentTools
	// RateLimit bounds each principal's request rate on the REST API (zero: none).
	RateLimit RateLimit
	// OpenRequests bounds each principal's requests in progress (zero: none).
	OpenRequests OpenRequests
	// StreamIdle cuts a request body, an answer or an upgraded connection that moves no bytes
	// for this long (idle.go); zero means DefaultStreamIdle.
	StreamIdle time.Duration
	// StreamKeepalive is the longest an event stream stays silent before a keepalive
	// comment; zero means DefaultStreamKeepalive.
	StreamKeepalive time.Duration
	// Version is the gateway's build version, shown by /healthz and /readyz; default "dev".
	Version string
	// CORS names the origins browsers may call the gateway from (server.cors); none by default.
	CORS CORS
	// PublicURL is the gateway's URL as clients reach it (server.public_url): links to
	// preview ports start with it, or take its scheme on a preview domain.
	PublicURL string
	// PreviewDomain, when set (server.preview_domain, "name[:port]"), serves preview ports on
	// origins of their own, "port-session.<name>", and only them there; the gateway's preview
	// paths then redirect there (preview.go, previewhost.go).
	PreviewDomain string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the client
	// (server.trusted_proxies): links are rate-limited per client address as well as per
	// link.
	TrustedProxies []netip.Prefix
	// LinkRateLimit bounds the requests through one link to a preview port, and those
	// through links from one client address (each its own bucket; zero: none).
	LinkRateLimit RateLimit
}

// Mount serves Handler at exactly Path. Authenticated puts it behind the same bearer-token
// check as /v1; ResourceMetadata is then the RFC 9728 metadata URL its 401 answers name.
// Methods, when set, are the only methods routed to Handler (HEAD reaches it as GET when GET
// is listed); others answer 405 with Allow. Empty: Handler gets every method.
type Mount struct {
	Path             string
	Handler          http.Handler
	Authenticated    bool
	ResourceMetadata string
	Methods          []string
	// JSONText refuses (400 validation) a POST body that encoding/json would change or cut
	// silently (internal/jsontext) before Handler reads it; BinaryHint is the next step its
	// message names for binary data.
	JSONText   bool
	BinaryHint string
	// Calls, when set, counts the calls a POST body carries (the messages of a JSON-RPC
	// batch) before Handler reads it: each call beyond the first costs one more request of
	// the principal's rate (RateLimit). An error refuses the request with its problem
	// (ProblemFor: a fault.TooLarge batch is 413).
	Calls func(r *http.Request, body []byte) (int, error)
	// Credential, for an Authenticated mount, reads the request's credential in place of
	// `Authorization: Bearer` (auth.WithCredential): the E2B door's X-API-KEY.
	Credential func(r *http.Request) (string, error)
	// ProblemMembers makes every problem answered for this mount's requests — refused
	// credentials, rates and open requests included — also carry `code` (the status) and
	// `message` (the detail), for clients that read such error bodies (E2B's SDKs).
	ProblemMembers bool
}

// AgentTools describes the agent-facing tools (internal/mcp serves them), for
// GET /v1/agent/tools.
type AgentTools interface {
	// ToolDefinitions renders the tools p may use in format ("mcp", "openai", …); an unknown
	// format is an error.
	ToolDefinitions(p principal.Principal, format string) ([]map[string]any, error)
	// Guidance is the usage text for p (the profiles it may use).
	Guidance(p principal.Principal) string
	// MaxChars is the bound on a tool's output, in characters.
	MaxChars() int
}

// Readiness is what GET /ready checks: the response store answers, and its schema is the one
// this binary needs.
type Readiness interface {
	Ping(ctx context.Context) error
	// SchemaVersion returns the applied and the required migration versions.
	SchemaVersion(ctx context.Context) (current, target int64, err error)
}

// Server implements the generated strict server interface.
type Server struct {
	ready   Readiness
	sandbox *sandbox.Service
	now     func() time.Time
	log     *slog.Logger
	tools   AgentTools
	version string
	// streamKeepalive is Options.StreamKeepalive.
	streamKeepalive time.Duration
	publicURL       string // Options.PublicURL
	open            *openLimiter
	preview         previewSite
	// links rate-limits requests through links, per link and per client address.
	links   *rateLimiter
	clients clientAddrs
	// bearer authenticates a request by its bearer token and spends the principal's request
	// rate (a preview host's requests that carry no preview cookie).
	bearer func(http.Handler) http.Handler
}

var _ apigen.StrictServerInterface = (*Server)(nil)

// NewHandler returns the gateway's root handler.
func NewHandler(o Options) (http.Handler, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 8 << 20
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	doc, err := apigen.GetSpec()
	if err != nil {
		return nil, fmt.Errorf("api: load embedded spec: %w", err)
	}
	resolved := func(ctx context.Context, p principal.Principal) (principal.Principal, error) {
		p, err := o.Sandbox.Identify(ctx, p)
		if err != nil {
			return p, err
		}
		if h, ok := ctx.Value(logKey).(*logHolder); ok {
			h.subject = p.Key()
		}
		return p, nil
	}
	limiter := newRateLimiter(o.RateLimit, o.Now)
	open := newOpenLimiter(o.OpenRequests)
	// admit lets an authenticated request in: within its principal's rate, then holding one
	// of its places for requests in progress until it is answered.
	admit := func(h http.Handler) http.Handler { return limiter.middleware(open.middleware(h)) }
	authenticate := o.Auth.Middleware(resolved, WriteProblem)
	g, err := newGate(doc, func(h http.Handler) http.Handler { return authenticate(admit(h)) }, o.MaxBody)
	if err != nil {
		return nil, fmt.Errorf("api: build request validator: %w", err)
	}
	bearer := func(h http.Handler) http.Handler {
		return o.Auth.Middleware(resolved, WriteProblem)(admit(h))
	}
	srv := &Server{ready: o.Readiness, sandbox: o.Sandbox, now: o.Now, log: o.Logger, tools: o.AgentTools, streamKeepalive: o.StreamKeepalive, version: o.Version, publicURL: o.PublicURL,
		open: open, preview: newPreviewSite(o.PreviewDomain, o.PublicURL), links: newRateLimiter(o.LinkRateLimit, o.Now),
		clients: clientAddrs{trusted: o.TrustedProxies}, bearer: bearer}

	specJSONBytes, err := specJSON(sandgate.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("api: render openapi.yaml as JSON: %w", err)
	}

	r := chi.NewRouter()
	// rawFilePath rewrites the path before GetHead looks up the GET route a HEAD request takes.
	// idleStreams comes first: it needs the server's own writer, and every answer is watched.
	r.Use(idleStreams(o.StreamIdle), requestID, srv.previewHosts(o.Logger), corsMiddleware(o.CORS), accessLog(o.Logger), recoverer(o.Logger), compressJSON(), rawFilePath, middleware.GetHead)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, http.StatusNotFound, "not-found", "Not found", "no route for "+r.URL.Path+"; see /docs for the API")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// RFC 9110 §15.5.6: a 405 names the methods the resource supports.
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			if r.Match(chi.NewRouteContext(), m, req.URL.Path) ||
				m == http.MethodHead && r.Match(chi.NewRouteContext(), http.MethodGet, req.URL.Path) { // middleware.GetHead
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
		}
		WriteProblem(w, req, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
			req.Method+" is not allowed on "+req.URL.Path+" (allowed: "+strings.Join(allowed, ", ")+"); see /docs for the API")
	})
	// One document in two syntaxes: /openapi.json is openapi.yaml converted, not the parsed
	// model (which the validator adjusts and the code generator renames).
	r.Get("/openapi.yaml", serveBytes("application/yaml", sandgate.OpenAPI))
	r.Get("/openapi.json", serveBytes("application/json", specJSONBytes))
	docs := v5emb.New("Sandgate API", "/openapi.json", "/docs/")
	r.Get("/docs", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/docs/", http.StatusMovedPermanently)
	})
	r.Get("/docs/*", docs.ServeHTTP) // GET (and HEAD) only: other methods answer 405
	for prefix, h := range o.Extra {
		r.Mount(prefix, http.StripPrefix(prefix, h))
	}
	for _, m := range o.Mounts {
		h := plainErrors(m.Handler)
		if m.JSONText || m.Calls != nil {
			h = postGuard{maxBody: o.MaxBody, jsonText: m.JSONText, binaryHint: m.BinaryHint, calls: m.Calls, spend: limiter.spend}.wrap(h)
		}
		if m.Authenticated {
			var opts []auth.MiddlewareOption
			if m.ResourceMetadata != "" {
				opts = append(opts, auth.WithResourceMetadata(m.ResourceMetadata))
			}
			if m.Credential != nil {
				opts = append(opts, auth.WithCredential(m.Credential))
			}
			h = o.Auth.Middleware(resolved, WriteProblem, opts...)(admit(h))
		}
		if m.ProblemMembers {
			h = withProblemMembers(h)
		}
		if len(m.Methods) == 0 {
			r.Handle(m.Path, h)
			continue
		}
		for _, method := range m.Methods {
			r.Method(method, m.Path, headAsGet(h))
		}
	}
	// Preview ports take any method and path under their prefixes (preview.go).
	srv.mountPreview(r, bearer)
	if o.Console != nil {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			r.Method(m, "/", o.Console)
			r.Method(m, "/console/*", o.Console)
		}
	}

	strict := apigen.NewStrictHandlerWithOptions(srv, []apigen.StrictMiddlewareFunc{keepRequest}, apigen.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, r, Problem{Type: ProblemTypeBase + "validation", Title: "Invalid request", Status: http.StatusBadRequest, Detail: err.Error()})
		},
		ResponseErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			p := ProblemFor(err)
			switch {
			case r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
				// The client went away: nothing failed on our side.
				o.Logger.Debug("client gone before the answer", "request_id", middleware.GetReqID(r.Context()), "err", err)
			case p.Status >= 500:
				o.Logger.Error("request failed", "request_id", middleware.GetReqID(r.Context()), "err", err)
			}
			writeProblem(w, r, p)
		},
	})
	apigen.HandlerWithOptions(strict, apigen.ChiServerOptions{
		BaseRouter:  r,
		Middlewares: []apigen.MiddlewareFunc{g.middleware},
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			g.afterAuthentication(w, r, func(w http.ResponseWriter, r *http.Request) {
				writeProblem(w, r, g.bindingProblem(r, err))
			})
		},
	})
	return r, nil
}

// previewHosts hands the requests for hosts of the preview domain to the previews, which are
// all that is served there (previewhost.go); every other request goes on to the gateway's
// routes.
func (s *Server) previewHosts(log *slog.Logger) func(http.Handler) http.Handler {
	if !s.preview.on() {
		return func(next http.Handler) http.Handler { return next }
	}
	previews := accessLog(log)(recoverer(log)(http.HandlerFunc(s.servePreviewHost)))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.preview.serves(r.Host) {
				previews.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// headAsGet hands a HEAD request to h as a GET (for handlers that know only GET); the server
// still sends no body, since the request it answers is HEAD.
func headAsGet(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
		}
		h.ServeHTTP(w, r)
	})
}

func keepRequest(f apigen.StrictHandlerFunc, _ string) apigen.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, req any) (any, error) {
		return f(withRequest(ctx, r), w, r, req)
	}
}

type logCtxKey struct{}

var logKey = logCtxKey{}

type logHolder struct{ subject string }

// accessLog logs one line per request with its request id and principal.
func accessLog(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			h := &logHolder{}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), logKey, h)))
			log.Info("request", "request_id", middleware.GetReqID(r.Context()), "method", r.Method, "path", redactPreview(r.URL.Path),
				"status", ww.Status(), "bytes", ww.BytesWritten(), "duration_ms", time.Since(start).Milliseconds(), "principal", h.subject)
		})
	}
}

// recoverer turns a handler panic into a 500 problem.
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if rec := recover(); rec != nil {
					if rec == http.ErrAbortHandler {
						panic(rec)
					}
					log.Error("handler panicked", "request_id", middleware.GetReqID(r.Context()), "panic", rec)
					WriteProblem(w, r, http.StatusInternalServerError, "internal", "Internal error", "an internal error occurred; report the request_id to the operator")
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}
