// Package gateway is Sandgate's one composition root: from a validated *config.Config it
// builds the store, authentication, providers, broker (and queue transport), the domain
// service and the HTTP surface (REST, MCP and the console mounted side by side), and it owns
// every goroutine they need — the HTTP server, the heartbeat and sweeper (Maintain), the
// in-process queue consumer, a worker's consumer — from start to drained shutdown.
//
// cmd/gateway keeps flags and output; tests build gateways through gatewaytest; bench/ builds
// through New as well, migrates through Migrate and seeds and reads its database through
// gatewaytest. Nothing else wires these packages together, and nothing else under internal/
// opens the Postgres store (internal/store/postgres).
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/mcp"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/spool"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/telemetry"
	"github.com/sandgate/sandgate/web"
)

// Role selects which side of the broker a process is.
type Role int

const (
	// RoleGateway serves HTTP. With the queue flavor it enqueues executions for workers; an
	// in_memory queue is worked in the same process.
	RoleGateway Role = iota
	// RoleWorker consumes a queue (any transport but in_memory) and runs the operations; no
	// HTTP.
	RoleWorker
)

// Options are the parts of a gateway that are not configuration.
type Options struct {
	Role Role
	// Logger is every component's logger; default slog.Default().
	Logger *slog.Logger
	// Version is reported by MCP's server info, /healthz and /readyz; default "dev".
	Version string
	// Registry lists the provider types this process serves; default Builtin().
	Registry *providers.Registry
	// DevIssuer, when set (`gateway dev`, tests), is mounted at /dev/oidc and signs the
	// console in when auth.console is unset.
	DevIssuer *devissuer.Issuer
	// RunnerID names this process in task rows and heartbeats; default a random id.
	RunnerID string
	// Now is the domain's clock; default time.Now.
	Now func() time.Time
	// StreamKeepalive is the longest an event stream stays silent; default
	// api.DefaultStreamKeepalive (tests shorten it).
	StreamKeepalive time.Duration
	// Getenv reads the OTEL_* variables of the trace exporter's set-up; default os.Getenv.
	Getenv func(string) string
}

// Gateway is one assembled process. Build it with New, then Serve (RoleGateway) or
// RunWorker (RoleWorker); Close releases everything.
type Gateway struct {
	cfg       *config.Config
	opts      Options
	log       *slog.Logger
	store     *postgres.Store
	svc       *sandbox.Service
	transport queue.Transport
	queued    *broker.Queued // the queue flavor, when configured
	handler   http.Handler
	agent     *mcp.Handler // nil for RoleWorker
	metrics   *telemetry.Metrics
	tracing   *telemetry.Tracing
	metricsLn net.Listener // server.metrics_addr, when set

	installation string        // the database's installation id, handed to every provider
	engines      []censusTaker // the docker profiles' providers, for EngineCensus
	egress       *egress.Proxy // the egress proxy of docker sandboxes (nil without docker profiles)

	bg     context.Context // background work: lives until Close
	stopBG context.CancelFunc
	wg     sync.WaitGroup

	svcOnce   sync.Once
	closeOnce sync.Once
}

// closeService drains the domain's broker within ctx and closes the providers, once.
func (g *Gateway) closeService(ctx context.Context) error {
	var err error
	g.svcOnce.Do(func() { err = g.svc.Close(ctx) })
	return err
}

// New builds a gateway from cfg (defaults applied and validated by LoadConfig, or by the
// caller). Before anything connects it refuses a profile whose provider type the registry
// does not serve, a provider block its backend refuses, or a queue transport this binary does
// not serve (Check: fault.Config naming the served ones or the keys). It then opens the store, applies
// pending migrations when database.auto_migrate is on, reads the database's installation id
// (recording a new one on a fresh database; see providers.NewInstallationID) and hands it to
// every provider, builds every component and starts the background work (heartbeat, sweeper,
// an in_memory queue's consumer).
//
// Errors: configuration errors (fault.Config), a database that does not answer or migrate,
// a provider that cannot be built.
func New(ctx context.Context, cfg *config.Config, opts Options) (_ *Gateway, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = Builtin()
	}
	log := opts.Logger
	blocks, err := check(cfg, opts.Registry)
	if err != nil {
		return nil, err
	}
	queued := cfg.Sandbox.Broker.Flavor == config.FlavorQueue
	if opts.Role == RoleWorker {
		switch {
		case !queued:
			return nil, errors.New("gateway worker needs sandbox.broker.flavor 'queue' (with sandbox.broker.queue and sandbox.broker.response_store)")
		case cfg.Sandbox.Broker.Queue.Type == config.InMemory:
			return nil, fmt.Errorf("the in_memory queue lives inside one gateway process and has no separate workers; use one of: %s",
				strings.Join(slices.DeleteFunc(Transports(), func(n string) bool { return n == config.InMemory }), ", "))
		}
	}
	if cfg.Database.URL == "" {
		return nil, errors.New("database.url is required (or SANDGATE_DATABASE__URL); for a local try-out use `gateway dev`")
	}

	g := &Gateway{cfg: cfg, opts: opts, log: log}
	g.bg, g.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.store, err = postgres.Open(ctx, cfg.Database.URL, cfg.Database.MaxConns); err != nil {
		return nil, err
	}
	if opts.RunnerID == "" {
		opts.RunnerID = newRunnerID()
	}
	if err := g.observe(ctx); err != nil {
		return nil, err
	}
	if cfg.Database.AutoMigrate == nil || *cfg.Database.AutoMigrate {
		applied, err := g.store.Migrate(ctx)
		if err != nil {
			return nil, err
		}
		if len(applied) > 0 {
			log.Info("database migrated", "versions", applied)
		}
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	if g.installation, err = g.store.Installation(ctx, providers.NewInstallationID(), now()); err != nil {
		return nil, fmt.Errorf("%w (is the schema current? `gateway migrate` applies it)", err)
	}

	// The queue flavor: the gateway side hands executions to the transport through a thread
	// broker; a worker runs each delivery inline (embedded).
	flavor := cfg.Sandbox.Broker.Flavor
	if queued {
		if g.transport, err = newTransport(ctx, cfg, g.store, log); err != nil {
			return nil, err
		}
		flavor = broker.FlavorThread
		if opts.Role == RoleWorker {
			flavor = broker.FlavorEmbedded
		}
	}
	set := settings(cfg.Sandbox)
	set.AuditRetention = cfg.Audit.Retention.D()
	set.AdminGroups = cfg.Auth.AdminGroups
	set.APIKeys = apiKeySettings(cfg.Auth.APIKeys)
	var port sandbox.Queue
	if queued {
		g.queued = broker.NewQueued(broker.QueuedOptions{
			Store: g.store, Transport: g.transport, RunnerID: opts.RunnerID, InlinePayloadMaxBytes: set.Queue.InlinePayloadMaxBytes,
			WaitPoll: set.Queue.WaitPoll, MaxReceiveCount: set.Queue.MaxReceiveCount, LostAfter: set.LostAfter, ResponseTTL: set.ResponseTTL,
			Now: opts.Now, Logger: log, Observe: g.metrics.Delivery,
		})
		port = g.queued
		g.goBG(g.queued.Run)
	}
	// Authentication (gateways only): tokens of the configured issuers, and API keys read
	// from the store and judged by the domain's clock, which set their expiry. A key revoked
	// here is forgotten here at once; other replicas read it again within auth.KeyRecheck. A
	// key made here is never refused here as one remembered unknown.
	var authn *auth.Authenticator
	var keyRevoked func(id string)
	var keyCreated func(hash [32]byte)
	if opts.Role != RoleWorker {
		if authn, err = auth.New(g.bg, cfg.Auth, auth.WithLogger(log), auth.WithFailureObserver(g.metrics.AuthFailed),
			auth.WithTracerProvider(g.tracing.Provider()), auth.WithAPIKeys(keyLookup(g.store), now)); err != nil {
			return nil, err
		}
		keyRevoked, keyCreated = authn.ForgetAPIKey, authn.ForgetUnknownAPIKey
	}
	host, _ := os.Hostname()
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	keys, err := secretKeyring(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	if !keys.Enabled() {
		log.Info("secrets are off: no key in secrets.keys (SANDGATE_SECRETS__KEYS); setting or binding a secret is refused")
	}
	if g.egress, err = g.newEgress(cfg, now); err != nil {
		return nil, err
	}
	profiles, err := buildProfiles(cfg, blocks, opts.Registry, g.installation, g.egress, getenv, log)
	if err != nil {
		return nil, err
	}
	var pools []telemetry.WarmPool
	for _, p := range profiles {
		if wp, ok := p.Provider.(providers.WarmPooler); ok {
			pools = append(pools, telemetry.WarmPool{Profile: p.Name, Pooler: wp})
		}
		if ct, ok := p.Provider.(censusTaker); ok {
			g.engines = append(g.engines, ct)
		}
	}
	g.metrics.WatchWarmPools(pools)
	var clock sandbox.Clock
	if opts.Now != nil {
		clock = sandbox.ClockFunc(opts.Now)
	}
	sp, err := openSpool(cfg.Sandbox.Broker.Spool)
	if err != nil {
		closeProviders(profiles, log)
		return nil, err
	}
	g.svc, err = sandbox.New(sandbox.Options{Settings: set, Profiles: profiles, Store: g.store, Spool: sp, Broker: flavor, Queue: port,
		RunnerID: opts.RunnerID, Hostname: host, Clock: clock, Logger: log, Observer: g.metrics, Tracer: g.tracing.Provider(), KeyRevoked: keyRevoked, KeyCreated: keyCreated,
		SecretKeys: keys, SecretLimit: cfg.Secrets.MaxPerPrincipal})
	if err != nil {
		closeProviders(profiles, log)
		return nil, err
	}
	if err := g.svc.Heartbeat(ctx); err != nil {
		return nil, err
	}
	g.goBG(g.svc.Maintain)
	g.serveMetrics()
	if opts.Role == RoleWorker {
		return g, nil
	}

	if queued && cfg.Sandbox.Broker.Queue.Type == config.InMemory {
		// An in-process queue has no other consumers: this process works it too.
		g.goBG(func(ctx context.Context) {
			_ = g.transport.Consume(ctx, cfg.Sandbox.Broker.Queue.Consumers, g.queued.Handler(g.svc.Broker()))
		})
	}
	extra := map[string]http.Handler{}
	if opts.DevIssuer != nil {
		extra["/dev/oidc"] = opts.DevIssuer.Handler()
	}
	// MCP beside REST: /mcp behind the same bearer-token check as /v1, its RFC 9728 metadata
	// public; its tools also back GET /v1/agent/tools.
	agent := mcp.New(mcpOptions(cfg, g.svc, log, opts.Version))
	g.agent = agent
	meta := agent.MetadataHandler()
	routes, err := api.NewHandler(api.Options{Auth: authn, Readiness: g.store, Sandbox: g.svc, Logger: log, MaxBody: cfg.Server.MaxBodyBytes, Extra: extra,
		Console: web.Handler(consoleConfig(cfg, opts.DevIssuer, log)),
		Mounts: []api.Mount{
			{Path: mcp.MetadataPath, Handler: meta, Methods: []string{http.MethodGet, http.MethodOptions}},
			{Path: mcp.MetadataPath + mcp.Path, Handler: meta, Methods: []string{http.MethodGet, http.MethodOptions}},
			{Path: mcp.Path, Handler: agent, Authenticated: true, ResourceMetadata: agent.ResourceMetadataURL(),
				JSONText: true, BinaryHint: mcp.BinaryHint, Calls: agent.Calls},
			e2bMount(cfg, g.svc, log),
		},
		AgentTools:      agent,
		RateLimit:       rateLimit(cfg.Sandbox.Quotas),
		OpenRequests:    api.OpenRequests{Limit: cfg.Sandbox.Quotas.OpenRequests, AdminsExempt: adminsExempt(cfg.Sandbox.Quotas)},
		StreamIdle:      cfg.Server.StreamIdleTimeout.D(),
		LinkRateLimit:   linkRateLimit(cfg.Sandbox.Quotas),
		StreamKeepalive: opts.StreamKeepalive,
		Version:         opts.Version,
		CORS:            api.CORS{AllowedOrigins: cfg.Server.CORS.AllowedOrigins, MaxAge: cfg.Server.CORS.MaxAge.D()},
		PublicURL:       cfg.Server.PublicURL,
		PreviewDomain:   cfg.Server.PreviewDomain,
		TrustedProxies:  trustedProxies(cfg.Server.TrustedProxies)})
	if err != nil {
		return nil, err
	}
	g.handler = telemetry.ServerHandler(routes, g.metrics, g.tracing)
	return g, nil
}

// DefaultSpoolDir is sandbox.broker.spool.dir's default for `gateway serve` and `gateway
// worker` (`gateway dev` keeps its spool in its data folder).
const DefaultSpoolDir = "/var/lib/sandgate/spool"

// openSpool opens the completion spool c names (docs/semantics.md §9 Completion).
//
// Errors: the folder cannot be made or written, naming the key that sets it.
func openSpool(c config.Spool) (*spool.Spool, error) {
	dir := c.Dir
	if dir == "" {
		dir = DefaultSpoolDir
	}
	sp, err := spool.Open(dir, c.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("sandbox.broker.spool.dir: %w; set it (SANDGATE_SANDBOX__BROKER__SPOOL__DIR) to a folder this process may write that outlives it: completions of runs that finish while Postgres is down wait there", err)
	}
	return sp, nil
}

// trustedProxies parses server.trusted_proxies (validated by config).
func trustedProxies(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range list {
		if p, err := config.ParsePrefix(v); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// goBG runs f in the background until Close.
func (g *Gateway) goBG(f func(ctx context.Context)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f(g.bg)
	}()
}

// Handler is the HTTP surface: REST under /v1, /mcp, the console, /docs, /openapi.*, and
// /dev/oidc with a DevIssuer. Nil for RoleWorker.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Service is the domain service (for tests and the benchmark harness).
func (g *Gateway) Service() *sandbox.Service { return g.svc }

// Store is the Postgres store (for tests and the benchmark harness).
func (g *Gateway) Store() *postgres.Store { return g.store }

// RunnerID is this process's runner id.
func (g *Gateway) RunnerID() string { return g.svc.RunnerID() }

// Installation is the id of the installation this gateway belongs to: its database's, the
// same on every replica and worker, on every object its providers make.
func (g *Gateway) Installation() string { return g.installation }

// Serve answers HTTP on ln until ctx ends or the server fails, then drains: no new
// requests, in-flight ones and running executions get server.shutdown_timeout, and what is
// still running then is interrupted (its tasks end lost). It does not Close the gateway.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	if g.handler == nil {
		return errors.New("gateway: Serve on a worker")
	}
	s := g.cfg.Server
	// A preview port that turns out to be one of these listeners is refused (a local
	// sandbox shares this host: its port 8080 may be the gateway's own).
	own := []net.Addr{ln.Addr()}
	if g.metricsLn != nil {
		own = append(own, g.metricsLn.Addr())
	}
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: s.ReadHeaderTimeout.D(), ReadTimeout: s.ReadTimeout.D(),
		WriteTimeout: s.WriteTimeout.D(), IdleTimeout: s.IdleTimeout.D(),
		ErrorLog:    slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return api.WithServerAddrs(context.Background(), own...) },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	g.log.Info("shutting down: draining requests and running tasks", "timeout", s.ShutdownTimeout.D().String())
	shCtx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout.D())
	defer cancel()
	if serr := srv.Shutdown(shCtx); serr != nil {
		// Drain time is over: cut what is still connected (long polls, event streams).
		g.log.Warn("http shutdown: closing the connections still open", "err", serr)
		_ = srv.Close()
	}
	g.agent.Close() // MCP sessions end with this replica
	if serr := g.closeService(shCtx); serr != nil {
		g.log.Warn("broker shutdown", "err", serr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Listen opens server.addr.
func (g *Gateway) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", g.cfg.Server.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (server.addr): %w", g.cfg.Server.Addr, err)
	}
	return ln, nil
}

// RunWorker consumes the queue until ctx ends or the transport fails. Then it takes no new
// operations and lets running ones finish within server.shutdown_timeout; what still runs is
// interrupted and will be redelivered to another worker. It does not Close the gateway.
func (g *Gateway) RunWorker(ctx context.Context) error {
	if g.opts.Role != RoleWorker {
		return errors.New("gateway: RunWorker on a gateway built without RoleWorker")
	}
	q := g.cfg.Sandbox.Broker.Queue
	g.log.Info("worker consuming", "transport", q.Type, "consumers", q.Consumers, "runner_id", g.svc.RunnerID(), "installation", g.installation)
	consumed := make(chan error, 1)
	go func() { consumed <- g.transport.Consume(ctx, q.Consumers, g.queued.Handler(g.svc.Broker())) }()
	select {
	case err := <-consumed: // the transport failed on its own
		return err
	case <-ctx.Done():
	}
	grace := g.cfg.Server.ShutdownTimeout.D()
	g.log.Info("worker draining: no new operations; running ones may finish", "grace", grace.String())
	drainCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		<-drainCtx.Done() // grace over: interrupt what still runs (it will be redelivered)
		_ = g.closeService(drainCtx)
	}()
	err := <-consumed
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	_ = g.closeService(closeCtx)
	return err
}

// Close ends the MCP sessions, stops the background work (the metrics listener among it)
// and waits for it, then closes the domain (interrupting what still runs), the transport and
// the store, and exports the spans not yet sent. Idempotent.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		if g.agent != nil {
			g.agent.Close()
		}
		if g.svc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = g.closeService(ctx)
			cancel()
		}
		g.stopBG()
		g.wg.Wait()
		if g.egress != nil {
			g.egress.Close()
		}
		if g.transport != nil {
			_ = g.transport.Close()
		}
		if g.store != nil {
			g.store.Close()
		}
		if g.metricsLn != nil {
			_ = g.metricsLn.Close() // when New failed before serving it
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := g.tracing.Shutdown(ctx); err != nil {
			g.log.Warn("exporting the last spans failed", "err", err)
		}
		cancel()
	})
}

// consoleConfig is what the web console signs in with: auth.console when set, else the
// development issuer and its public client, else nothing (the console then says sign-in is
// not configured).
func consoleConfig(cfg *config.Config, iss *devissuer.Issuer, log *slog.Logger) web.Config {
	if c := cfg.Auth.Console; c != nil {
		trusted := false
		for _, i := range cfg.Auth.Issuers {
			trusted = trusted || strings.TrimSuffix(i.URL, "/") == strings.TrimSuffix(c.Issuer, "/")
		}
		switch {
		case c.Issuer == "" || c.ClientID == "":
			log.Warn("auth.console needs both issuer and client_id: the web console says sign-in is not configured")
		case !trusted:
			log.Warn("auth.console.issuer is not one of auth.issuers: the console's tokens will be refused", "issuer", c.Issuer)
		}
		return web.Config{Issuer: c.Issuer, ClientID: c.ClientID, Scopes: c.Scopes}
	}
	if iss != nil {
		return web.Config{Issuer: iss.URL(), ClientID: devissuer.ClientID, Scopes: []string{"openid", "profile", "email", "groups"}}
	}
	return web.Config{}
}

// rateLimit maps sandbox.quotas to the REST edge's request rate (negative: none).
func rateLimit(q config.Quotas) api.RateLimit {
	if q.RequestsPerSecond < 0 {
		return api.RateLimit{}
	}
	return api.RateLimit{PerSecond: q.RequestsPerSecond, Burst: q.RequestsBurst, AdminsExempt: adminsExempt(q)}
}

// linkRateLimit maps sandbox.quotas to the rate of requests through preview links, per link
// and per client address (negative: none).
func linkRateLimit(q config.Quotas) api.RateLimit {
	if q.LinkRequestsPerSecond < 0 {
		return api.RateLimit{}
	}
	return api.RateLimit{PerSecond: q.LinkRequestsPerSecond, Burst: q.LinkRequestsBurst}
}

func newRunnerID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "runner-" + hex.EncodeToString(b[:])
}
