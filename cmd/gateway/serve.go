package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/mcp"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/web"
)

func newLogger(cfg config.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// registry lists the providers this binary ships.
func registry() *providers.Registry {
	r := providers.NewRegistry()
	r.Register(local.TypeName, local.Factory)
	r.Register(docker.TypeName, docker.Factory)
	r.Register(ec2ssm.TypeName, ec2ssm.Factory)
	r.Register(kubernetes.TypeName, kubernetes.Factory)
	return r
}

func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "8080"
	}
	return port
}

// buildService builds the sandbox service and, for the queue flavor, its transport. worker
// selects the executing side of the queue (an embedded broker runs deliveries inline).
func buildService(ctx context.Context, cfg *config.Config, st *store.Store, log *slog.Logger, worker bool) (*sandbox.Service, queue.Transport, error) {
	flavor := cfg.Sandbox.Broker.Flavor
	var transport queue.Transport
	if flavor == config.FlavorQueue {
		var err error
		if transport, err = newTransport(ctx, cfg, st, log); err != nil {
			return nil, nil, err
		}
		flavor = broker.FlavorThread
		if worker {
			flavor = broker.FlavorEmbedded
		}
	}
	brk, err := broker.New(flavor)
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	svc, err := sandbox.New(sandbox.Options{Config: cfg.Sandbox, Store: st, Registry: registry(), Broker: brk, Queue: transport, Hostname: host, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	if err := svc.Heartbeat(ctx); err != nil {
		return nil, nil, err
	}
	return svc, transport, nil
}

// newTransport builds the queue transport named by sandbox.broker.queue.type.
func newTransport(ctx context.Context, cfg *config.Config, st *store.Store, log *slog.Logger) (queue.Transport, error) {
	q := cfg.Sandbox.Broker.Queue
	switch q.Type {
	case config.QueuePostgres:
		return queue.NewPostgres(ctx, st.Pool(), q.RescueAfter.D(), log)
	case config.QueueNATS:
		return queue.NewNATS(ctx, queue.NATSConfig{URL: q.NATS.URL, Stream: q.NATS.Stream, SubjectPrefix: q.NATS.SubjectPrefix, AckWait: q.NATS.AckWait.D()}, log)
	case config.InMemory:
		return queue.NewInMemory(), nil
	}
	return nil, fmt.Errorf("sandbox.broker.queue.type: unknown transport %q", q.Type)
}

// devDockerImage is the sandbox image scripts/docker-setup.sh builds without a registry.
const devDockerImage = "sandgate/sandbox-python:latest"

// devSetup fills what `gateway dev` provides: a throwaway Postgres, the development issuer and
// a local profile when none is configured.
func devSetup(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (*devissuer.Issuer, func(), error) {
	stop := func() {}
	if cfg.Database.URL == "" {
		log.Info("starting a development Postgres", "dir", filepath.Join(dataDir, "pg"))
		inst, err := devdb.Start(ctx, filepath.Join(dataDir, "pg"))
		if err != nil {
			return nil, stop, err
		}
		cfg.Database.URL = inst.URL("sandgate")
		stop = func() {
			if err := inst.Stop(); err != nil {
				log.Warn("stopping the development Postgres failed", "err", err)
			}
		}
	}
	iss, err := devissuer.Open(strings.TrimSuffix(cfg.Server.PublicURL, "/")+"/dev/oidc", filepath.Join(dataDir, "issuer-key.pem"))
	if err != nil {
		return nil, stop, err
	}
	cfg.Auth.Issuers = append(cfg.Auth.Issuers, config.Issuer{URL: iss.URL(), Audiences: []string{devissuer.Audience}})
	if len(cfg.Auth.AdminGroups) == 0 {
		cfg.Auth.AdminGroups = []string{"admins"}
	}
	if len(cfg.Sandbox.Profiles) == 0 {
		workdir, err := filepath.Abs(filepath.Join(dataDir, "sandboxes"))
		if err != nil {
			return nil, stop, err
		}
		if err := os.MkdirAll(workdir, 0o755); err != nil {
			return nil, stop, err
		}
		localName := cfg.Sandbox.DefaultProfile // "default" unless the caller picked docker or oneshot
		if localName == "docker" || localName == "oneshot" {
			localName = "local"
		}
		cfg.Sandbox.Profiles = map[string]config.Profile{
			localName: {Type: local.TypeName, Stateful: true, ProviderBlocks: config.ProviderBlocks{LocalSubprocess: &config.LocalSubprocess{Workdir: workdir}}},
			"oneshot": {Type: local.TypeName, Scope: sandbox.ScopePerCall, ProviderBlocks: config.ProviderBlocks{LocalSubprocess: &config.LocalSubprocess{Workdir: workdir}}},
		}
		// Offer container isolation whenever a Docker engine answers.
		if docker.Available(ctx, "") {
			cfg.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Stateful: true, ProviderBlocks: config.ProviderBlocks{
				Docker: &config.Docker{Image: devDockerImage, Pull: "never"},
			}}
			log.Info("Docker engine found: profile 'docker' runs sandboxes in containers", "image", devDockerImage)
		}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, stop, err
	}
	return iss, stop, nil
}

func cmdServe(ctx context.Context, args, environ []string, stdout, stderr io.Writer, dev bool) error {
	name := "serve"
	if dev {
		name = "dev"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := configFlag(fs, environ)
	dataDir := fs.String("data-dir", ".sandgate/dev", "dev only: `folder` for the throwaway Postgres, issuer key and sandboxes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path, environ)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)

	var iss *devissuer.Issuer
	if dev {
		var stopDB func()
		iss, stopDB, err = devSetup(ctx, cfg, *dataDir, log)
		defer stopDB()
		if err != nil {
			return err
		}
	} else {
		if cfg.Database.URL == "" {
			return errors.New("database.url is required (or SANDGATE_DATABASE__URL); for a local try-out use `gateway dev`")
		}
		if len(cfg.Auth.Issuers) == 0 {
			return errors.New("auth.issuers is empty: serve refuses to start without an OIDC issuer; for a local try-out use `gateway dev`")
		}
	}

	st, err := store.Open(ctx, cfg.Database.URL, cfg.Database.MaxConns)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.Database.AutoMigrate == nil || *cfg.Database.AutoMigrate {
		applied, err := st.Migrate(ctx)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			log.Info("database migrated", "versions", applied)
		}
	}

	// Background work (key refreshes, sweeper) lives until shutdown completes.
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	authn, err := auth.New(bgCtx, cfg.Auth, auth.WithLogger(log))
	if err != nil {
		return err
	}
	svc, transport, err := buildService(ctx, cfg, st, log, false)
	if err != nil {
		return err
	}
	if transport != nil {
		defer transport.Close()
	}
	maintained := make(chan struct{})
	go func() { defer close(maintained); svc.Maintain(bgCtx) }()
	if transport != nil && cfg.Sandbox.Broker.Queue.Type == config.InMemory {
		// An in-process queue has no other consumers: this process works it too.
		consumed := make(chan struct{})
		go func() {
			defer close(consumed)
			_ = transport.Consume(bgCtx, cfg.Sandbox.Broker.Queue.Consumers, svc.HandleDelivery)
		}()
		defer func() { stopBG(); <-consumed }()
	}

	extra := map[string]http.Handler{}
	if iss != nil {
		extra["/dev/oidc"] = iss.Handler()
	}
	handler, err := api.NewHandler(api.Options{Auth: authn, Store: st, Sandbox: svc, Logger: log, MaxBody: cfg.Server.MaxBodyBytes, Extra: extra,
		Console: web.Handler(consoleConfig(cfg, iss, log)),
		MCP:     mcp.New(mcp.Options{Config: cfg, Sandbox: svc, Logger: log, Version: version})})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr: cfg.Server.Addr, Handler: handler,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout.D(), ReadTimeout: cfg.Server.ReadTimeout.D(),
		WriteTimeout: cfg.Server.WriteTimeout.D(), IdleTimeout: cfg.Server.IdleTimeout.D(),
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Server.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s (server.addr): %w", cfg.Server.Addr, err)
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.Server.PublicURL, "runner_id", svc.RunnerID(), "dev", dev)
	if iss != nil {
		tok, err := iss.Mint(devissuer.Claims{Subject: "dev", Groups: []string{"dev"}, Email: "dev@example.test"})
		if err != nil {
			return err
		}
		printDevBanner(stdout, cfg.Server.PublicURL, tok)
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining requests and running tasks", "timeout", cfg.Server.ShutdownTimeout.D().String())
	shCtx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout.D())
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if err := svc.Close(shCtx); err != nil {
		log.Warn("broker shutdown", "err", err)
	}
	stopBG()
	<-maintained
	return nil
}

// consoleConfig is what the web console signs in with: auth.console when set, else under
// `gateway dev` the development issuer and its public client, else nothing (the console then
// says sign-in is not configured).
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

func printDevBanner(w io.Writer, base, tok string) {
	fmt.Fprintf(w, `
Sandgate is running in development mode at %[1]s
(a local Postgres under .sandgate/dev and a development OIDC issuer at %[1]s/dev/oidc;
the default profile runs code on this machine WITHOUT isolation).

A token for subject "dev" (mint others with: gateway token --sub alice --groups dev):

  export TOKEN=%[2]s

Try it:

  curl -s -H "Authorization: Bearer $TOKEN" %[1]s/v1/me

Web console: %[1]s/    API docs: %[1]s/docs

`, base, tok)
}
