package e2bdoor

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/apikey"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// Path is where the gateway mounts the door: E2B_API_URL and E2B_SANDBOX_URL are both
// <public_url>/e2b.
const Path = "/e2b"

// EnvdVersion is the envd version the door reports for every sandbox. E2B's SDKs decide by it
// which envd features they may use, so it is the last version whose features the door
// serves: later ones (file metadata 0.6.2, watch events with entries 0.6.3, network mounts
// 0.6.4) are refused by the SDKs themselves, with an error naming the version they need.
const EnvdVersion = "0.5.7"

// ClientID is the clientID the door reports for every sandbox.
const ClientID = "sandgate"

// DefaultTimeout is a sandbox's lifetime when its create request gives none: E2B's default
// (e2b-dev/infra spec/openapi.yml, NewSandbox.timeout).
const DefaultTimeout = 15 * time.Second

// DefaultKeepalive is the interval of keepalive events on streams whose client asks for none.
const DefaultKeepalive = 15 * time.Second

// Options build a Handler.
type Options struct {
	// Sandbox is the domain (required).
	Sandbox *sandbox.Service
	// Templates maps E2B template names to the profiles that serve them (config
	// server.e2b.templates); any other template name is taken as a profile's name. E2B's
	// SDKs ask for "base" (e2b) and "code-interpreter-v1" (@e2b/code-interpreter) unless told
	// otherwise.
	Templates map[string]string
	// ProblemTypeBase prefixes the `type` of the problem members of every error body
	// (internal/api's ProblemTypeBase).
	ProblemTypeBase string
	// WatchInterval is how often a directory watch lists what it watches; default 250 ms.
	WatchInterval time.Duration
	Logger        *slog.Logger
}

// Handler serves the door: E2B's control plane, and its sandbox plane (envd and the code
// interpreter) for the requests that carry E2b-Sandbox-Id. It expects the principal of the
// request's API key in its context (principal.FromContext): the gateway mounts it behind the
// same authentication as /v1 with Credential reading the key.
type Handler struct {
	svc       *sandbox.Service
	templates map[string]string
	typeBase  string
	watchPoll time.Duration
	log       *slog.Logger
	control   *http.ServeMux
	envd      *http.ServeMux
	interp    *http.ServeMux
}

// New builds the door. Sandbox is required.
func New(o Options) *Handler {
	if o.Sandbox == nil {
		panic("e2bdoor.New: Sandbox is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.WatchInterval <= 0 {
		o.WatchInterval = 250 * time.Millisecond
	}
	h := &Handler{svc: o.Sandbox, templates: o.Templates, typeBase: o.ProblemTypeBase, watchPoll: o.WatchInterval, log: o.Logger}
	h.control = h.controlMux()
	h.envd = h.envdMux()
	h.interp = h.interpMux()
	return h
}

// ServeHTTP routes r: to the sandbox plane when it names a sandbox (E2b-Sandbox-Id, as E2B's
// SDKs send it when E2B_SANDBOX_URL is set), to the control plane otherwise.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := principal.FromContext(r.Context()); !ok {
		// Mounted without authentication: a wiring error, never served.
		h.apiError(w, r, http.StatusInternalServerError, "internal", "the E2B door is mounted without authentication")
		return
	}
	if r.Header.Get(wire.SandboxIDHeader) == "" {
		h.control.ServeHTTP(w, r)
		return
	}
	h.serveSandbox(w, r)
}

// Credential reads the Sandgate API key of an E2B request: X-API-KEY (the control plane),
// else X-Access-Token (envd) or E2B-Traffic-Access-Token (the code interpreter's context
// routes), which carry the same key — the door hands each caller its own key as the
// sandbox's envd and traffic access tokens. It never reads Authorization, which E2B's SDKs
// use for envd's user (Basic). Errors: *auth.Error, for a request without a key or whose
// credential is no API key.
func Credential(r *http.Request) (string, error) {
	raw := ""
	for _, name := range []string{wire.APIKeyHeader, wire.AccessTokenHeader, wire.TrafficTokenHeader} {
		if v := strings.TrimSpace(r.Header.Get(name)); v != "" {
			raw = v
			break
		}
	}
	if raw == "" {
		return "", &auth.Error{Code: "invalid_request", Reason: auth.ReasonMissing,
			Description: "missing API key: set E2B_API_KEY to a Sandgate API key (sgk_…; POST /v1/api-keys or `sandgate keys create`); the SDK sends it as X-API-KEY"}
	}
	if _, err := apikey.Parse(raw); err != nil {
		return "", &auth.Error{Code: "invalid_token", Reason: auth.ReasonMalformed,
			Description: "E2B_API_KEY must be a Sandgate API key (sgk_…; POST /v1/api-keys or `sandgate keys create`): " + err.Error()}
	}
	return raw, nil
}

// callerKey is the API key r was authenticated with (Credential; the mount checked it).
func callerKey(r *http.Request) string {
	k, _ := Credential(r)
	return k
}

// envdUser is the user an envd request asks to act as: its Authorization Basic user, else
// its username query parameter, else "" (the default).
func envdUser(r *http.Request) string {
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	return basicUser(r.Header.Get("Authorization"))
}

// basicUser is the user of Authorization header h when it is Basic ("" otherwise).
func basicUser(h string) string {
	scheme, val, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(val))
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(b), ":")
	return user
}

// DefaultUser is E2B's default user: the only one the door acts as, standing for the
// sandbox's own user.
const DefaultUser = "user"
