package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/store"
)

// cmdWorker runs a queue-flavor worker: it consumes operations, runs them against providers,
// and records completions in Postgres. SIGTERM stops taking work and lets running operations
// finish within server.shutdown_timeout; what is still running then is interrupted and will be
// redelivered to another worker.
func cmdWorker(ctx context.Context, args, environ []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	path := configFlag(fs, environ)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path, environ)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	if cfg.Sandbox.Broker.Flavor != config.FlavorQueue {
		return errors.New("gateway worker needs sandbox.broker.flavor 'queue' (with sandbox.broker.queue and sandbox.broker.response_store)")
	}
	if cfg.Sandbox.Broker.Queue.Type == config.InMemory {
		return errors.New("the in_memory queue lives inside one gateway process and has no separate workers; use postgres or nats")
	}
	if cfg.Database.URL == "" {
		return errors.New("database.url is required: workers record completions in Postgres")
	}
	st, err := store.Open(ctx, cfg.Database.URL, cfg.Database.MaxConns)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.Database.AutoMigrate == nil || *cfg.Database.AutoMigrate {
		if _, err := st.Migrate(ctx); err != nil {
			return err
		}
	}
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	svc, transport, err := buildService(ctx, cfg, st, log, true)
	if err != nil {
		return err
	}
	defer transport.Close()
	maintained := make(chan struct{})
	go func() { defer close(maintained); svc.Maintain(bgCtx) }()

	log.Info("worker consuming", "transport", cfg.Sandbox.Broker.Queue.Type, "consumers", cfg.Sandbox.Broker.Queue.Consumers, "runner_id", svc.RunnerID())
	consumed := make(chan error, 1)
	go func() { consumed <- transport.Consume(ctx, cfg.Sandbox.Broker.Queue.Consumers, svc.HandleDelivery) }()
	select {
	case err := <-consumed: // the transport failed on its own
		stopBG()
		<-maintained
		return err
	case <-ctx.Done():
	}
	grace := cfg.Server.ShutdownTimeout.D()
	log.Info("worker draining: no new operations; running ones may finish", "grace", grace.String())
	drainCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		<-drainCtx.Done() // grace over: interrupt what still runs (it will be redelivered)
		_ = svc.Close(drainCtx)
	}()
	err = <-consumed
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	_ = svc.Close(closeCtx)
	stopBG()
	<-maintained
	return err
}
