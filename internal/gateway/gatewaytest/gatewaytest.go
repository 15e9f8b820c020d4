// Package gatewaytest starts real gateways for tests: built by internal/gateway exactly as
// `gateway serve` builds them, served over HTTP on 127.0.0.1, on a real Postgres database of
// the test's own (internal/testutil/pgtest), with the development issuer mounted at /dev/oidc
// and verified through go-oidc like any issuer.
//
// It is the one test harness; packages add their own request helpers on top of Env. For
// programs that share a gateway's database without being one (bench/), it also seeds and
// reads that database through the Postgres store's own statements: SeedListing,
// Installation, Sandboxes.
//
// A gateway with a docker profile leaves nothing on the engine: when the test ends, after the
// gateway is closed, everything its installation made there — sandboxes of sessions the test
// did not destroy, warm pools, snapshot images — is removed, and the installation is recorded
// for the package's leftover check (dockertest.CheckAfter in its TestMain).
package gatewaytest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// Options shape one gateway. The zero value is a gateway with profiles "default" (local,
// per_session) and "oneshot" (local, per_call) on a fresh database.
type Options struct {
	// DBURL shares a database with another replica; default a fresh database.
	DBURL string
	// Trust lists more issuer URLs to trust (other replicas' development issuers).
	Trust []string
	// Workdir is the local_subprocess folder of the default profiles, and what Env.Workdir
	// reports; default a temporary folder. Share it to let two replicas see one workspace.
	Workdir string
	// SpoolDir is the completion spool's folder (sandbox.broker.spool.dir), and what
	// Env.SpoolDir reports; default a temporary folder. Give a gateway that stands for a
	// restarted one the spool of the one it replaces.
	SpoolDir string
	// MaxConns is the query pool size; default 20.
	MaxConns int32
	// Config adjusts the configuration before defaults are applied and it is validated.
	// Profiles it leaves empty are the two defaults above.
	Config func(c *config.Config)
	// Registry lists the provider types served; default gateway.Builtin().
	Registry *providers.Registry
	// Logger; default discards (warnings go to stderr under -v).
	Logger *slog.Logger
	// Now is the domain's clock; default time.Now.
	Now func() time.Time
	// StreamKeepalive is the event streams' keepalive interval; default the gateway's.
	StreamKeepalive time.Duration
	// Getenv is the environment the gateway's trace exporter reads (OTEL_*); default an
	// empty one, so the developer's own variables do not reach the tests.
	Getenv func(string) string
}

// Env is one running gateway.
type Env struct {
	// URL is the base URL, http://127.0.0.1:port.
	URL string
	// Issuer is the development issuer the gateway trusts.
	Issuer *devissuer.Issuer
	// Gateway is the assembled gateway (its Service and Store are there for white-box checks).
	Gateway *gateway.Gateway
	// Config is the effective configuration.
	Config *config.Config
	// Workdir is the local profiles' folder; DBURL the database; SpoolDir the completion
	// spool's folder.
	Workdir, DBURL, SpoolDir string

	t    testing.TB
	stop func()
}

// Start builds and serves a gateway; it is shut down (drained, then closed) when the test
// ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	if o.DBURL == "" {
		o.DBURL = pgtest.URL(t)
	}
	if o.Workdir == "" {
		o.Workdir = t.TempDir()
	}
	if o.SpoolDir == "" {
		o.SpoolDir = t.TempDir()
	}
	if o.MaxConns == 0 {
		o.MaxConns = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	iss, err := devissuer.Open(base+"/dev/oidc", filepath.Join(t.TempDir(), "key.pem"))
	if err != nil {
		_ = ln.Close()
		require.NoError(t, err)
	}

	cfg := &config.Config{}
	cfg.Server.PublicURL = base
	cfg.Server.ShutdownTimeout = config.Duration(5 * time.Second)
	cfg.Database.URL = o.DBURL
	cfg.Database.MaxConns = o.MaxConns
	cfg.Auth.Issuers = []config.Issuer{{URL: iss.URL(), Audiences: []string{devissuer.Audience}}}
	for _, u := range o.Trust {
		cfg.Auth.Issuers = append(cfg.Auth.Issuers, config.Issuer{URL: u, Audiences: []string{devissuer.Audience}})
	}
	cfg.Auth.AdminGroups = []string{"admins"}
	cfg.Sandbox.Broker.Spool.Dir = o.SpoolDir
	if o.Config != nil {
		o.Config(cfg)
	}
	if len(cfg.Sandbox.Profiles) == 0 {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: o.Workdir}}
		cfg.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: local.TypeName, Blocks: lb},
			"oneshot": {Type: local.TypeName, Scope: sandbox.ScopePerCall, Blocks: lb},
		}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		_ = ln.Close()
		require.NoError(t, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: o.Logger, DevIssuer: iss, Registry: o.Registry, Now: o.Now, StreamKeepalive: o.StreamKeepalive, Getenv: o.Getenv})
	if err != nil {
		cancel()
		_ = ln.Close()
		require.NoError(t, err)
	}
	onDocker := false
	for _, p := range cfg.Sandbox.Profiles {
		onDocker = onDocker || p.Type == docker.TypeName
	}
	if onDocker {
		dockertest.Register(g.Installation())
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	e := &Env{URL: base, Issuer: iss, Gateway: g, Config: cfg, Workdir: o.Workdir, DBURL: o.DBURL, SpoolDir: cfg.Sandbox.Broker.Spool.Dir, t: t}
	e.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("gateway: serve: %v", err)
		}
		g.Close()
		if onDocker {
			dockertest.Remove(t, g.Installation())
		}
	})
	t.Cleanup(e.stop)
	return e
}

// Stop shuts the gateway down as `gateway serve` does on SIGTERM (drained, then closed), now
// rather than when the test ends: a test then starts another in its place. Idempotent.
func (e *Env) Stop() { e.stop() }

// Token mints a development token for subject sub in groups.
func (e *Env) Token(sub string, groups ...string) string {
	e.t.Helper()
	tok, err := e.Issuer.Mint(devissuer.Claims{Subject: sub, Groups: groups, Email: sub + "@example.test"})
	require.NoError(e.t, err)
	return tok
}

// MetricsURL is the URL of the gateway's /metrics (server.metrics_addr must be set, e.g. to
// "127.0.0.1:0").
func (e *Env) MetricsURL() string {
	e.t.Helper()
	addr := e.Gateway.MetricsAddr()
	require.NotEmpty(e.t, addr, "server.metrics_addr is not set")
	return "http://" + addr + "/metrics"
}

// Store is the gateway's store.
func (e *Env) Store() *postgres.Store { return e.Gateway.Store() }

// Service is the gateway's domain service.
func (e *Env) Service() *sandbox.Service { return e.Gateway.Service() }

// Do sends method path as the bearer of tok ("" sends none) with body (nil for none) and the
// header fields, and returns the status, the header and the whole answer.
func (e *Env) Do(method, path, tok string, body io.Reader, header map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.URL+path, body)
	require.NoError(e.t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, resp.Header, b
}

// WaitTask polls GET /v1/tasks/{id} as tok until the task has finished (at most a minute)
// and returns it.
func (e *Env) WaitTask(tok, id string) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		status, _, body := e.Do("GET", "/v1/tasks/"+id, tok, nil, nil)
		require.Equal(e.t, http.StatusOK, status, "body: %s", body)
		var task map[string]any
		require.NoError(e.t, json.Unmarshal(body, &task), "body: %s", body)
		if task["finished_at"] != nil {
			return task
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("task %s did not finish within a minute", id)
	return nil
}

// Reply is one answer: its status, header and whole body.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object.
func (r Reply) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body: %s", r.Body)
	return m
}

// RequireProblem asserts an RFC 9457 answer: status, the problem+json media type, the stable
// type api.ProblemTypeBase+kind and a detail; it returns the problem's members.
func (r Reply) RequireProblem(t testing.TB, status int, kind string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "body: %s", r.Body)
	m := r.JSON(t)
	require.Equal(t, api.ProblemTypeBase+kind, m["type"], "body: %s", r.Body)
	require.NotEmpty(t, m["detail"], "body: %s", r.Body)
	return m
}
