package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// testEnv is one gateway replica (gatewaytest: built as `gateway serve` builds it, over real
// HTTP, on a real Postgres database, with the development issuer mounted on the same
// listener and verified through go-oidc).
type testEnv struct {
	t       *testing.T
	URL     string
	issuer  *devissuer.Issuer
	store   *postgres.Store
	svc     *sandbox.Service
	workdir string
	dbURL   string
	env     *gatewaytest.Env
}

type envOpts struct {
	dbURL   string // share a database with another replica
	trust   string // also trust this issuer (another replica's dev issuer)
	workdir string // share a sandboxes folder with another replica
	conns   int32  // query pool size (default 20)
	config  func(*config.Config)
	now     func() time.Time // the domain's clock (a sandboxtest.Clock); default time.Now
	// keepalive is the event streams' keepalive interval (default the gateway's).
	keepalive time.Duration
	// registry lists the provider types served (default the built-ins).
	registry *providers.Registry
	// logger receives the gateway's logs (default discarded); getenv is its environment.
	logger *slog.Logger
	getenv func(string) string
}

func newEnv(t *testing.T, o envOpts) *testEnv {
	t.Helper()
	gt := gatewaytest.Options{DBURL: o.dbURL, Workdir: o.workdir, MaxConns: o.conns, Now: o.now, StreamKeepalive: o.keepalive, Registry: o.registry, Logger: o.logger, Getenv: o.getenv}
	if o.trust != "" {
		gt.Trust = []string{o.trust}
	}
	if gt.Workdir == "" {
		gt.Workdir = t.TempDir()
	}
	workdir := gt.Workdir
	gt.Config = func(cfg *config.Config) {
		lb := func() config.Blocks {
			return config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		}
		cfg.Sandbox.MaxFileBytes = 1 << 20
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"default":    {Type: local.TypeName, Blocks: lb()},
			"oneshot":    {Type: local.TypeName, Scope: sandbox.ScopePerCall, Blocks: lb()},
			"shared":     {Type: local.TypeName, Scope: sandbox.ScopePerRuntime, Blocks: lb()},
			"restricted": {Type: local.TypeName, AllowedGroups: []string{"ml"}, Blocks: lb()},
			"nonet":      {Type: local.TypeName, Policy: config.Policy{NetworkEgress: "deny"}, Blocks: lb()},
			"nonet-lax":  {Type: local.TypeName, Policy: config.Policy{NetworkEgress: "deny", Strict: ptr(false)}, Blocks: lb()},
			"short-idle": {Type: local.TypeName, IdleTimeout: 1, Blocks: lb()},
			"stateful":   {Type: local.TypeName, Stateful: true, Blocks: lb()},
		}
		if o.config != nil {
			o.config(cfg)
		}
		if cfg.Sandbox.Broker.Flavor == config.FlavorQueue {
			delete(cfg.Sandbox.Profiles, "stateful") // refused: workers would not share its contexts
		}
	}
	e := gatewaytest.Start(t, gt)
	return &testEnv{t: t, URL: e.URL, issuer: e.Issuer, store: e.Store(), svc: e.Service(), workdir: e.Workdir, dbURL: e.DBURL, env: e}
}

func ptr[T any](v T) *T { return &v }

func (e *testEnv) token(sub string, groups ...string) string {
	e.t.Helper()
	tok, err := e.issuer.Mint(devissuer.Claims{Subject: sub, Groups: groups, Email: sub + "@example.test"})
	require.NoError(e.t, err)
	return tok
}

type reply = gatewaytest.Reply

// do sends method path with body (JSON-encoded unless []byte) as the bearer of tok.
func (e *testEnv) do(tok, method, path string, body any) reply {
	e.t.Helper()
	switch b := body.(type) {
	case nil:
		return e.send(tok, method, path, "", nil, 0, nil)
	case []byte:
		return e.send(tok, method, path, "application/octet-stream", bytes.NewReader(b), int64(len(b)), nil)
	default:
		buf, err := json.Marshal(b)
		require.NoError(e.t, err)
		return e.send(tok, method, path, "application/json", bytes.NewReader(buf), int64(len(buf)), nil)
	}
}

// send sends body as is: of content type ctype ("" sets none), declaring size bytes (-1:
// chunked), with the extra header fields.
func (e *testEnv) send(tok, method, path, ctype string, body io.Reader, size int64, header map[string]string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.URL+path, body)
	require.NoError(e.t, err)
	if body != nil {
		req.ContentLength = size
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	// Every answer these tests see must be one the contract declares (status, media type,
	// schema): an undeclared status fails the test that provoked it.
	gatewaytest.LoadContract(e.t).Check(e.t, req, resp.StatusCode, resp.Header, b)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// requireProblem asserts an RFC 9457 problem of type suffix kind and status.
func requireProblem(t *testing.T, r reply, status int, kind string) map[string]any {
	t.Helper()
	return r.RequireProblem(t, status, kind)
}

// newSession creates a session on profile as tok and returns its id.
func (e *testEnv) newSession(tok, profile string) string {
	e.t.Helper()
	r := e.do(tok, "POST", "/v1/sessions", map[string]any{"profile": profile})
	require.Equal(e.t, 201, r.Status, "body: %s", r.Body)
	return r.JSON(e.t)["id"].(string)
}

// waitTask polls task id until it finishes.
func (e *testEnv) waitTask(tok, id string) map[string]any {
	e.t.Helper()
	return e.env.WaitTask(tok, id)
}
