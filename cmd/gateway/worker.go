package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/sandgate/sandgate/internal/gateway"
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
	cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
	if err != nil {
		return err
	}
	if err := gateway.Check(cfg, gateway.Builtin()); err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	setMemoryLimit(log, environ, memlimit.FromCgroup)
	g, err := gateway.New(ctx, cfg, gateway.Options{Role: gateway.RoleWorker, Logger: log, Version: version})
	if err != nil {
		return err
	}
	defer g.Close()
	return g.RunWorker(ctx)
}
