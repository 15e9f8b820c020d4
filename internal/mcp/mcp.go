// Package mcp is Sandgate's Model Context Protocol edge: the eight sandbox tools of the seed
// (run_code, run_command, write_sandbox_file, read_sandbox_file, check_sandbox_task,
// list_sandbox_sessions, new_sandbox_session, destroy_sandbox_session; docs/semantics.md §7)
// and two more (cancel_sandbox_task, list_sandbox_files), served over MCP streamable HTTP with the official Go SDK, plus the usage guidance and tool
// definitions that GET /v1/agent/tools publishes.
//
// Every tool calls internal/sandbox directly, exactly as the REST handlers do; nothing here
// calls the gateway's own HTTP API. Results keep the seed's JSON shapes and its
// `{"error": …, "sandbox_session_id": …}` convention: a sandbox failure is a tool result
// (isError set), never an MCP protocol error.
//
// Identity: the Handler must sit behind the same bearer-token middleware as /v1 (api.NewHandler
// mounts it so). The principal is read from each HTTP request and handed to the SDK as that
// request's TokenInfo; tool handlers take it from the call's request, never from the MCP
// session, and the SDK refuses a request whose principal differs from the one that opened
// the MCP session (403). MCP sessions live in the memory of the replica that opened them.
package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Path is where the MCP endpoint is mounted.
const Path = "/mcp"

// MetadataPath is the RFC 9728 protected resource metadata document; MetadataPath+Path (the
// RFC's path-suffixed form for the /mcp resource) serves the same document.
const MetadataPath = "/.well-known/oauth-protected-resource"

// BinaryHint is the next step a refused message with bytes that are no UTF-8 text names
// (the gateway checks message bodies before the SDK decodes them, which would replace the
// bytes with U+FFFD): tool arguments are JSON text.
const BinaryHint = "tool arguments are text: encode binary data (e.g. base64) and decode it in the sandbox (run_command with base64 -d)"

// sessionIdle closes an MCP session (not a sandbox session) after this long without requests.
const sessionIdle = 2 * time.Hour

// Options builds a Handler.
type Options struct {
	// PublicURL is the gateway's external base URL (config server.public_url); the MCP
	// resource is PublicURL + Path.
	PublicURL string
	// Issuers are the OIDC issuer URLs advertised as authorization servers (RFC 9728).
	Issuers []string
	// Disabled answers every tool call with a "sandboxes are disabled" error (config
	// sandbox.enabled: false).
	Disabled bool
	// ToolOutputMaxChars bounds the text of one tool result; default 8000.
	ToolOutputMaxChars int
	// DefaultProfile is the profile used when a tool call names none; default "default".
	DefaultProfile string
	// MaxBodyBytes bounds one request body; 0 = the SDK's default.
	MaxBodyBytes int64
	// MaxBatch bounds the messages of one JSON-RPC batch (Calls); default DefaultMaxBatch.
	MaxBatch int
	// MaxToolWait bounds how long run_code and run_command wait for their execution before
	// answering with a task to poll: the broker's wait_timeout, but never longer than this,
	// so the answer comes before the clients' request timeout (the official SDKs' default is
	// 60 s). Default DefaultMaxToolWait.
	MaxToolWait time.Duration
	// ProgressInterval is how often a waiting run_code or run_command sends a progress
	// notification, when the call asked for them (a progressToken); default 5 s.
	ProgressInterval time.Duration
	Sandbox          *sandbox.Service
	Logger           *slog.Logger
	// Version is reported to MCP clients; default "dev".
	Version string
}

// Handler serves /mcp. It expects the authenticated principal in the request context
// (principal.FromContext).
type Handler struct {
	svc            *sandbox.Service
	log            *slog.Logger
	version        string
	enabled        bool
	maxChars       int
	defaultProfile string
	maxWait        time.Duration
	progressEvery  time.Duration
	maxBatch       int
	resource       string // the /mcp URL
	metadataURL    string
	metadata       *oauthex.ProtectedResourceMetadata
	http           http.Handler

	mu      sync.Mutex
	servers map[string]*sdk.Server // keyed by the caller's usable profiles
}

// DefaultToolOutputMaxChars is Options.ToolOutputMaxChars's default.
const DefaultToolOutputMaxChars = 8000

// DefaultMaxToolWait is Options.MaxToolWait's default: under the 60 s request timeout of the
// official MCP SDKs, with room for the answer to travel.
const DefaultMaxToolWait = 45 * time.Second

// New builds the MCP handler. Sandbox is required.
func New(o Options) *Handler {
	if o.Sandbox == nil {
		panic("mcp.New: Sandbox is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	base := strings.TrimSuffix(o.PublicURL, "/")
	h := &Handler{
		svc: o.Sandbox, log: o.Logger, version: o.Version,
		enabled:        !o.Disabled,
		maxChars:       o.ToolOutputMaxChars,
		defaultProfile: o.DefaultProfile,
		resource:       base + Path,
		metadataURL:    base + MetadataPath + Path,
		servers:        map[string]*sdk.Server{},
	}
	h.maxWait, h.progressEvery = o.MaxToolWait, o.ProgressInterval
	if h.maxWait <= 0 {
		h.maxWait = DefaultMaxToolWait
	}
	if h.progressEvery <= 0 {
		h.progressEvery = 5 * time.Second
	}
	if h.maxChars <= 0 {
		h.maxChars = DefaultToolOutputMaxChars
	}
	if h.maxBatch = o.MaxBatch; h.maxBatch <= 0 {
		h.maxBatch = DefaultMaxBatch
	}
	if h.defaultProfile == "" {
		h.defaultProfile = "default"
	}
	h.metadata = &oauthex.ProtectedResourceMetadata{
		Resource:               h.resource,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Sandgate",
		AuthorizationServers:   append([]string{}, o.Issuers...),
	}

	streamable := sdk.NewStreamableHTTPHandler(h.server, &sdk.StreamableHTTPOptions{
		Logger:              o.Logger,
		SessionTimeout:      sessionIdle,
		MaxRequestBodyBytes: o.MaxBodyBytes, // 0: the SDK's default
		// The SDK's DNS-rebinding guard refuses a non-loopback Host on a loopback listener,
		// which is every gateway behind a reverse proxy on the same host. Rebinding cannot
		// reach a tool here: every request needs a bearer token, which browsers never add.
		DisableLocalhostProtection: true,
	})
	// RequireBearerToken does not verify anything here (the auth middleware in front already
	// did): it hands the SDK this request's principal as TokenInfo, which binds each MCP
	// session to the principal that opened it and reaches tool handlers per request.
	h.http = sdkauth.RequireBearerToken(bindPrincipal, &sdkauth.RequireBearerTokenOptions{
		ResourceMetadataURL:    h.metadataURL,
		AllowMissingExpiration: true, // expiry was checked by the auth middleware
	})(streamable)
	return h
}

const principalKey = "sandgate.principal"

func bindPrincipal(_ context.Context, _ string, r *http.Request) (*sdkauth.TokenInfo, error) {
	p, ok := principal.FromContext(r.Context())
	if !ok || p.Subject == "" {
		return nil, fmt.Errorf("%w: no authenticated principal on this request", sdkauth.ErrInvalidToken)
	}
	return &sdkauth.TokenInfo{UserID: p.Key(), Extra: map[string]any{principalKey: p}}, nil
}

// callerOf returns the principal of the HTTP request that carried req.
func callerOf(req *sdk.CallToolRequest) (principal.Principal, bool) {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return principal.Principal{}, false
	}
	p, ok := req.Extra.TokenInfo.Extra[principalKey].(principal.Principal)
	return p, ok && p.Key() == req.Extra.TokenInfo.UserID
}

// Close ends every MCP session this replica holds (their clients must initialize again):
// the gateway calls it when it stops.
func (h *Handler) Close() {
	h.mu.Lock()
	servers := make([]*sdk.Server, 0, len(h.servers))
	for _, srv := range h.servers {
		servers = append(servers, srv)
	}
	h.mu.Unlock()
	for _, srv := range servers {
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	}
}

// ServeHTTP serves the MCP streamable HTTP transport.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.http.ServeHTTP(w, r) }

// ResourceMetadataURL is the URL named by the 401 challenge's resource_metadata parameter.
func (h *Handler) ResourceMetadataURL() string { return h.metadataURL }

// MetadataHandler serves the RFC 9728 protected resource metadata (unauthenticated).
func (h *Handler) MetadataHandler() http.Handler {
	return sdkauth.ProtectedResourceMetadataHandler(h.metadata)
}

// server returns the MCP server for the request's caller. Servers differ only in their
// guidance (the profiles the caller may use), so one is kept per set of usable profiles; no
// principal is stored in them.
func (h *Handler) server(r *http.Request) *sdk.Server {
	p, ok := principal.FromContext(r.Context())
	if !ok {
		return nil
	}
	var names []string
	for _, prof := range h.svc.Profiles(p) {
		names = append(names, prof.Name)
	}
	key := strings.Join(names, "\x00")
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.servers[key]; ok {
		return s
	}
	guidance := h.Guidance(p)
	s := sdk.NewServer(&sdk.Implementation{Name: "sandgate", Title: "Sandgate sandboxes", Version: h.version},
		&sdk.ServerOptions{Instructions: guidance, Logger: h.log})
	for _, t := range h.tools() {
		tool := &sdk.Tool{Name: t.name, Title: t.title, Description: t.describe(h, p), InputSchema: t.schema,
			OutputSchema: t.output, Annotations: t.annotations()}
		s.AddTool(tool, h.toolHandler(t))
	}
	s.AddReceivingMiddleware(seedOrder, h.holdSessions(s))
	if len(h.servers) < 256 { // bound the cache; more combinations are simply rebuilt
		h.servers[key] = s
	}
	return s
}

// seedOrder lists the tools in the seed's registration order (the SDK sorts them by name).
func seedOrder(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if lt, ok := res.(*sdk.ListToolsResult); ok && err == nil {
			rank := func(name string) int {
				for i, t := range toolTable {
					if t.name == name {
						return i
					}
				}
				return len(toolTable)
			}
			slices.SortStableFunc(lt.Tools, func(a, b *sdk.Tool) int { return rank(a.Name) - rank(b.Name) })
		}
		return res, err
	}
}

// ToolNames lists the tools in the seed's registration order.
func ToolNames() []string {
	var out []string
	for _, t := range toolTable {
		out = append(out, t.name)
	}
	return slices.Clip(out)
}
