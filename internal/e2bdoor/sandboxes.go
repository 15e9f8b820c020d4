package e2bdoor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// The control plane (E2B's REST API, e2b-dev/infra spec/openapi.yml): a sandbox is a session
// of the caller's, its id the session's. Template → profile (Options.Templates), metadata →
// labels, envVars → the session's environment, timeout → its lifetime (autoPause: paused, not
// destroyed, when it ends), kill → destroy, pause and connect (resume) → pause and resume.

// maxControlBody bounds a control-plane request body.
const maxControlBody = 1 << 20

func (h *Handler) controlMux() *http.ServeMux {
	m := http.NewServeMux()
	for _, prefix := range []string{"", "/v2"} {
		m.HandleFunc("POST "+prefix+"/sandboxes", h.create)
		m.HandleFunc("GET "+prefix+"/sandboxes", h.list)
		m.HandleFunc("POST "+prefix+"/sandboxes/{id}/connect", h.connect)
	}
	m.HandleFunc("GET /sandboxes/{id}", h.info)
	m.HandleFunc("DELETE /sandboxes/{id}", h.kill)
	m.HandleFunc("POST /sandboxes/{id}/timeout", h.setTimeout)
	m.HandleFunc("POST /sandboxes/{id}/refreshes", h.refresh)
	m.HandleFunc("POST /sandboxes/{id}/pause", h.pause)
	m.HandleFunc("POST /sandboxes/{id}/resume", h.resume)
	m.HandleFunc("/sandboxes/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		// What E2B serves beside these (metrics, logs, network, snapshots, fork, …) is not
		// offered: said plainly (400: the SDKs show the message), never a 404 the SDKs would
		// report as a missing sandbox.
		h.apiError(w, r, http.StatusBadRequest, "validation", fmt.Sprintf("Sandgate's E2B door does not offer %s /sandboxes/{id}/%s (docs/e2b-door.md lists what it serves)", r.Method, r.PathValue("op")))
	})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.apiError(w, r, http.StatusNotFound, "not-found", fmt.Sprintf("Sandgate's E2B door does not serve %s %s: it serves sandboxes only — no templates, snapshots, volumes or secrets (docs/e2b-door.md)", r.Method, r.URL.Path))
	})
	return m
}

// decodeStrict reads r's JSON body into v, refusing what v does not describe (E2B validates
// bodies against its schema; the door refuses what it does not serve rather than drop it).
// An empty body leaves v as it is. Errors: fault.Validation.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxControlBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fault.New(fault.TooLarge, "request body is over %d bytes", maxControlBody)
		}
		return fault.Wrap(fault.Validation, err, "reading the request body")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.New(fault.Validation, "request body has an error: %s (Sandgate's E2B door refuses what it does not serve; docs/e2b-door.md)", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// given reports whether raw holds a value (not absent, not null).
func given(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// createBody is E2B's NewSandbox as the SDKs send it.
type createBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *createNetwork    `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
}

type autoResume struct {
	Enabled *bool `json:"enabled"`
}

type createNetwork struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    json.RawMessage `json:"maskRequestHost"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
}

// unsupported refuses a field the door does not serve.
func unsupported(field, why string) error {
	return fault.New(fault.Validation, "Sandgate's E2B door does not offer %s: %s (docs/e2b-door.md)", field, why)
}

// check refuses what the door cannot honour, given prof (nil: unknown to the caller; the
// domain then says why).
func (b *createBody) check(prof *sandbox.Profile) error {
	switch {
	case b.TemplateID == "":
		return fault.New(fault.Validation, "templateID is required: a template name the gateway maps to a profile, or a profile's name")
	case given(b.MCP):
		return unsupported("mcp", "Sandgate runs no MCP gateway in sandboxes")
	case given(b.IAM):
		return unsupported("iam", "workload identity tokens come from the profile's identity settings")
	case given(b.VolumeMounts):
		return unsupported("volumeMounts", "sandboxes mount no volumes")
	case b.AutoPauseMemory != nil && !*b.AutoPauseMemory:
		return unsupported("autoPauseMemory: false", "a paused sandbox keeps its memory")
	case b.AutoResume != nil && b.AutoResume.Enabled != nil && *b.AutoResume.Enabled:
		return unsupported("autoResume", "a paused sandbox is resumed by connect (Sandbox.connect); profiles with auto_resume resume on any use")
	case b.Timeout != nil && (*b.Timeout < 1 || time.Duration(*b.Timeout)*time.Second > sandbox.MaxLifetime):
		return fault.New(fault.Validation, "timeout must be from 1 to %d seconds, not %d", int64(sandbox.MaxLifetime/time.Second), *b.Timeout)
	}
	if n := b.Network; n != nil {
		switch {
		case len(n.AllowOut) > 0 || len(n.DenyOut) > 0 || given(n.Rules) || given(n.EgressProxy):
			return unsupported("network egress rules", "egress is the profile's policy; use a template (profile) whose network_egress allows what the sandbox needs")
		case n.AllowPublicTraffic != nil && *n.AllowPublicTraffic:
			return unsupported("network.allowPublicTraffic: true", "every request to a sandbox carries its access token")
		case given(n.MaskRequestHost) || given(n.HTTPSPorts):
			return unsupported("network.maskRequestHost and network.httpsPorts", "the sandbox's ports are reached through preview links (POST /v1/sessions/{id}/ports/{port}/links)")
		}
	}
	if b.AllowInternetAccess != nil && prof != nil {
		egress := prof.Policy.NetworkEgress
		if *b.AllowInternetAccess && egress != egressAllow || !*b.AllowInternetAccess && egress != egressDeny {
			return fault.New(fault.Validation, "allow_internet_access: %t does not match template '%s': its profile's network_egress is '%s'; use a template (profile) whose policy allows what the sandbox needs",
				*b.AllowInternetAccess, b.TemplateID, egress)
		}
	}
	return nil
}

// A profile's network egress modes (its policy's network_egress).
const (
	egressAllow = "allow"
	egressDeny  = "deny"
)

// profileFor is the profile serving template ("" for the default profile).
func (h *Handler) profileFor(template string) string {
	if p, ok := h.templates[template]; ok {
		return p
	}
	return template
}

// profileNamed is the profile name p may use, or nil (unknown, or not the caller's to use:
// the domain refuses those with their own reason). "" is the default profile.
func (h *Handler) profileNamed(p principal.Principal, name string) *sandbox.Profile {
	for _, prof := range h.svc.Profiles(p) {
		if prof.Name == name || name == "" && prof.Default {
			return prof
		}
	}
	return nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	p, _ := principal.FromContext(r.Context())
	var b createBody
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	profile := h.profileFor(b.TemplateID)
	if err := b.check(h.profileNamed(p, profile)); err != nil {
		h.fail(w, r, err)
		return
	}
	in := sandbox.CreateSessionInput{Profile: profile, Labels: b.Metadata, Env: b.EnvVars, Lifetime: DefaultTimeout, OnExpiry: sandbox.ExpireDestroy}
	if b.Timeout != nil {
		in.Lifetime = time.Duration(*b.Timeout) * time.Second
	}
	if b.AutoPause != nil && *b.AutoPause {
		in.OnExpiry = sandbox.ExpirePause
	}
	sess, err := h.svc.CreateSession(r.Context(), p, in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxOf(r, sess))
}

// sandboxOf is the Sandbox answer of create and connect for sess: the caller's own API key
// as its envd and traffic access tokens (the SDKs send them to every sandbox request).
func (h *Handler) sandboxOf(r *http.Request, sess sandbox.Session) wire.Sandbox {
	key := callerKey(r)
	return wire.Sandbox{TemplateID: sess.Profile, SandboxID: sess.ID, ClientID: ClientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: key, TrafficAccessToken: &key}
}

// listed is sess as E2B lists it.
func (h *Handler) listed(p principal.Principal, sess sandbox.Session) wire.ListedSandbox {
	l := wire.ListedSandbox{
		TemplateID: sess.Profile, SandboxID: sess.ID, ClientID: ClientID, StartedAt: sess.CreatedAt.UTC(), EndAt: sess.ExpiresAt.UTC(),
		Metadata: sess.Labels, State: stateOf(sess), EnvdVersion: EnvdVersion,
	}
	if prof := h.profileNamed(p, sess.Profile); prof != nil {
		l.CPUCount = int32(math.Ceil(prof.Policy.CPU))
		l.MemoryMB = int32(prof.Policy.MemoryMB)
		l.DiskSizeMB = int32(prof.Policy.DiskMB)
	}
	return l
}

// stateOf is sess's E2B state: paused while its sandbox is paused or parked, running
// otherwise (also before its first use made its sandbox).
func stateOf(sess sandbox.Session) string {
	if sess.State == sandbox.StatePaused || sess.State == sandbox.StateParked {
		return "paused"
	}
	return "running"
}

// lifecycle is SandboxDetail.lifecycle: what ends the sandbox at its timeout.
type lifecycle struct {
	OnTimeout  string `json:"onTimeout"` // kill | pause
	AutoResume bool   `json:"autoResume"`
}

type sandboxDetail struct {
	wire.SandboxDetail
	Lifecycle *lifecycle `json:"lifecycle,omitempty"`
}

// session reads sandbox id of the caller's; one being destroyed (or the ids the domain takes
// for the default session) is not found, as E2B answers for a killed sandbox.
func (h *Handler) session(r *http.Request, id string) (sandbox.Session, error) {
	p, _ := principal.FromContext(r.Context())
	if id == "" || id == sandbox.DefaultSessionID {
		return sandbox.Session{}, notFound(id)
	}
	sess, err := h.svc.GetSession(r.Context(), p, id, "")
	if fault.KindOf(err) == fault.NotFound || err == nil && sess.State == sandbox.StateDestroyFailed {
		return sandbox.Session{}, notFound(id)
	}
	return sess, err
}

func notFound(id string) error {
	return fault.New(fault.NotFound, "sandbox \"%s\" doesn't exist or you don't have access to it", id)
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	p, _ := principal.FromContext(r.Context())
	sess, err := h.session(r, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := sandboxDetail{SandboxDetail: wire.SandboxDetail{ListedSandbox: h.listed(p, sess), EnvdAccessToken: callerKey(r)}}
	if prof := h.profileNamed(p, sess.Profile); prof != nil {
		allow := prof.Policy.NetworkEgress == egressAllow
		d.AllowInternetAccess = &allow
		d.Lifecycle = &lifecycle{OnTimeout: "kill", AutoResume: prof.AutoResume}
		if sess.OnExpiry == sandbox.ExpirePause {
			d.Lifecycle.OnTimeout = "pause"
		}
	}
	writeJSON(w, http.StatusOK, d)
}

// maxListLimit is the largest page of a list (E2B's).
const maxListLimit = 100

// list serves GET /v2/sandboxes (and /sandboxes): the caller's sandboxes, newest first, with
// metadata=<url-encoded k=v&…> (every pair must match), state=running,paused,
// template=<name>, startedAfter=<RFC 3339>, limit (1–100, default 100) and nextToken (the
// X-Next-Token of the previous page). A page may hold fewer sandboxes than limit when state
// or startedAfter leave some out; X-Next-Token says whether more follow.
func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	p, _ := principal.FromContext(r.Context())
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"metadata", "state", "template", "startedAfter", "limit", "nextToken", "order", "query"}, k) {
			h.fail(w, r, fault.New(fault.Validation, "unknown query parameter %q", k))
			return
		}
	}
	f := sandbox.ListFilter{Limit: maxListLimit, Cursor: q.Get("nextToken")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			h.fail(w, r, fault.New(fault.Validation, "limit must be from 1 to %d, not %q", maxListLimit, v))
			return
		}
		f.Limit = n
	}
	if v := q.Get("order"); v != "" && v != "desc" {
		h.fail(w, r, fault.New(fault.Validation, "order '%s' is not offered: sandboxes are listed newest first (desc)", v))
		return
	}
	if q.Get("query") != "" {
		h.fail(w, r, unsupported("query", "filter with metadata and state"))
		return
	}
	if v := q.Get("metadata"); v != "" {
		labels, err := metadataFilter(v)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		f.Labels = labels
	}
	if v := q.Get("template"); v != "" {
		f.Profile = h.profileFor(v)
		if f.Profile == "" {
			if prof := h.profileNamed(p, ""); prof != nil {
				f.Profile = prof.Name
			}
		}
	}
	states := []string{"running", "paused"}
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
		for _, s := range states {
			if s != "running" && s != "paused" {
				h.fail(w, r, fault.New(fault.Validation, "state must be running, paused or both (comma-separated), not %q", s))
				return
			}
		}
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			h.fail(w, r, fault.New(fault.Validation, "startedAfter must be an RFC 3339 time, not %q", v))
			return
		}
		after = t
	}
	sessions, next, err := h.svc.ListSessions(r.Context(), p, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := []wire.ListedSandbox{}
	for _, s := range sessions {
		if s.State == sandbox.StateDestroyFailed || !slices.Contains(states, stateOf(s)) || !after.IsZero() && !s.CreatedAt.After(after) {
			continue
		}
		out = append(out, h.listed(p, s))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// metadataFilter decodes E2B's metadata query parameter: key=value pairs, url-encoded as a
// query string whose keys and values the SDKs url-encode once more (decoded again when they
// decode).
func metadataFilter(v string) (map[string]string, error) {
	pairs, err := url.ParseQuery(v)
	if err != nil {
		return nil, fault.New(fault.Validation, "metadata must be url-encoded key=value pairs: %v", err)
	}
	unescape := func(s string) string {
		if u, err := url.QueryUnescape(s); err == nil {
			return u
		}
		return s
	}
	out := map[string]string{}
	for k, vs := range pairs {
		out[unescape(k)] = unescape(vs[len(vs)-1])
	}
	return out, nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	p, _ := principal.FromContext(r.Context())
	sess, err := h.session(r, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if _, err := h.svc.DestroySession(r.Context(), p, sess.ID, ""); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// timeoutBody is E2B's SandboxTimeoutRequest.
type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// lifetime is secs as a lifetime. Errors: fault.Validation outside 1 s to MaxLifetime.
func lifetime(secs int64) (time.Duration, error) {
	if secs < 1 || time.Duration(secs)*time.Second > sandbox.MaxLifetime {
		return 0, fault.New(fault.Validation, "timeout must be from 1 to %d seconds, not %d", int64(sandbox.MaxLifetime/time.Second), secs)
	}
	return time.Duration(secs) * time.Second, nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	var b timeoutBody
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	if b.Timeout == nil {
		h.fail(w, r, fault.New(fault.Validation, "timeout is required (seconds from now)"))
		return
	}
	h.setLifetime(w, r, *b.Timeout, false)
}

// refresh serves POST /sandboxes/{id}/refreshes {duration}: the sandbox lives at least that
// many seconds more (default 60; E2B's keep-alive of earlier SDKs).
func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Duration *int64 `json:"duration"`
	}
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	secs := int64(60)
	if b.Duration != nil {
		secs = *b.Duration
	}
	h.setLifetime(w, r, secs, true)
}

// setLifetime makes sandbox {id} end secs from now — only if that is later than it would,
// with extendOnly — and answers 204. Errors: lifetime's, the session's, the domain's.
func (h *Handler) setLifetime(w http.ResponseWriter, r *http.Request, secs int64, extendOnly bool) {
	p, _ := principal.FromContext(r.Context())
	d, err := lifetime(secs)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sess, err := h.session(r, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if _, err := h.svc.SetSessionLifetime(r.Context(), p, sess.ID, "", d, extendOnly); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connectBody is E2B's ConnectSandbox.
type connectBody struct {
	Timeout *int64 `json:"timeout"`
	Memory  *bool  `json:"memory"`
}

// connect serves POST /v2/sandboxes/{id}/connect: a running sandbox answers 200, a paused one
// is resumed (201); timeout only ever extends its lifetime. A resumed sandbox made with
// autoPause that has no lifetime left gets DefaultTimeout.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) {
	var b connectBody
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	if b.Memory != nil && !*b.Memory {
		h.fail(w, r, unsupported("memory: false (onResume 'reboot')", "a paused sandbox resumes with its memory"))
		return
	}
	h.wake(w, r, b.Timeout, http.StatusOK)
}

// resume serves POST /sandboxes/{id}/resume (earlier SDKs): 409 unless paused.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	h.wake(w, r, b.Timeout, 0)
}

// wake resumes sandbox {id} when paused and sets its lifetime from timeout (extending
// only); running is the status for a sandbox that was running, 0 to refuse it (409).
func (h *Handler) wake(w http.ResponseWriter, r *http.Request, timeout *int64, running int) {
	p, _ := principal.FromContext(r.Context())
	var d time.Duration
	if timeout != nil {
		var err error
		if d, err = lifetime(*timeout); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	sess, err := h.session(r, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	status := running
	if stateOf(sess) == "paused" {
		if sess, err = h.svc.ResumeSession(r.Context(), p, sess.ID, ""); err != nil {
			h.fail(w, r, err)
			return
		}
		status = http.StatusCreated
		if d == 0 && sess.ExpiresAt.IsZero() && sess.OnExpiry == sandbox.ExpirePause {
			d = DefaultTimeout
		}
	} else if running == 0 {
		h.fail(w, r, fault.New(fault.Conflict, "sandbox %s is already running", sess.ID))
		return
	}
	if d > 0 {
		if sess, err = h.svc.SetSessionLifetime(r.Context(), p, sess.ID, "", d, true); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	writeJSON(w, status, h.sandboxOf(r, sess))
}

// pause serves POST /sandboxes/{id}/pause: 204, or 409 when already paused (the SDKs then
// answer false).
func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	p, _ := principal.FromContext(r.Context())
	var b struct {
		Memory *bool `json:"memory"`
	}
	if err := decodeStrict(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	if b.Memory != nil && !*b.Memory {
		h.fail(w, r, unsupported("keepMemory: false", "a paused sandbox keeps its memory"))
		return
	}
	sess, err := h.session(r, r.PathValue("id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if stateOf(sess) == "paused" {
		h.apiError(w, r, http.StatusConflict, "conflict", fmt.Sprintf("sandbox %s is already paused", sess.ID))
		return
	}
	if _, _, err := h.svc.PauseSession(r.Context(), p, sess.ID, ""); err != nil {
		if fault.KindOf(err) == fault.Conflict {
			// Not "already paused" (409 to the SDKs): the session is busy, or has no sandbox.
			err = fault.New(fault.Validation, "%s", messageOf(err))
		}
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
