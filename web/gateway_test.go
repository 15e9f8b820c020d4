package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
	"github.com/sandgate/sandgate/web"
)

// gateway is one real gateway served over HTTP on 127.0.0.1: a real Postgres database, the
// development issuer mounted at /dev/oidc (verified through go-oidc like any issuer), local
// profiles in a temporary folder, and the console wired as `gateway dev` wires it.
type gateway struct {
	URL    string
	issuer *devissuer.Issuer
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := store.Open(ctx, dbURL, 10)
	require.NoError(t, err)
	t.Cleanup(st.Close)

	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	iss, err := devissuer.Open(base+"/dev/oidc", filepath.Join(t.TempDir(), "key.pem"))
	require.NoError(t, err)

	workdir := t.TempDir()
	lb := config.ProviderBlocks{LocalSubprocess: &config.LocalSubprocess{Workdir: workdir}}
	cfg := &config.Config{}
	cfg.Auth.Issuers = []config.Issuer{{URL: iss.URL(), Audiences: []string{devissuer.Audience}}}
	cfg.Sandbox.MaxFileBytes = 4 << 20
	cfg.Sandbox.Profiles = map[string]config.Profile{
		"default": {Type: local.TypeName, ProviderBlocks: lb},
		"oneshot": {Type: local.TypeName, Scope: sandbox.ScopePerCall, ProviderBlocks: lb},
	}
	cfg.ApplyDefaults()
	require.NoError(t, cfg.Validate())

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	authn, err := auth.New(ctx, cfg.Auth, auth.WithLogger(log))
	require.NoError(t, err)
	brk, err := broker.New(cfg.Sandbox.Broker.Flavor)
	require.NoError(t, err)
	reg := providers.NewRegistry()
	reg.Register(local.TypeName, local.Factory)
	svc, err := sandbox.New(sandbox.Options{Config: cfg.Sandbox, Store: st, Registry: reg, Broker: brk, Logger: log})
	require.NoError(t, err)
	require.NoError(t, svc.Heartbeat(ctx))
	maintained := make(chan struct{})
	go func() { defer close(maintained); svc.Maintain(ctx) }()

	console := web.Handler(web.Config{Issuer: iss.URL(), ClientID: devissuer.ClientID, Scopes: []string{"openid", "profile", "email", "groups"}})
	h, err := api.NewHandler(api.Options{Auth: authn, Store: st, Sandbox: svc, Logger: log,
		Extra: map[string]http.Handler{"/dev/oidc": iss.Handler()}, Console: console})
	require.NoError(t, err)
	ts.Config.Handler = h
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		cctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = svc.Close(cctx)
		cancel()
		<-maintained
	})
	return &gateway{URL: base, issuer: iss}
}

// token mints a dev token for sub, for checks made beside the browser.
func (g *gateway) token(t *testing.T, sub string, groups ...string) string {
	t.Helper()
	tok, err := g.issuer.Mint(devissuer.Claims{Subject: sub, Groups: groups})
	require.NoError(t, err)
	return tok
}

// get fetches path with an optional bearer token.
func (g *gateway) get(t *testing.T, method, path, tok string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}
