package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway"
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

func cmdServe(ctx context.Context, args, environ []string, stdout, stderr io.Writer, dev bool) error {
	name := "serve"
	if dev {
		name = "dev"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	path := configFlag(fs, environ)
	dataDir := fs.String("data-dir", defaultDataDir, "dev only: `folder` for the throwaway Postgres, issuer key and sandboxes")
	allowAdmin := fs.Bool("allow-admin", false, "dev only: let the development issuer's sign-in form grant the admin groups (auth.admin_groups)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := gateway.LoadConfig(*path, environ, gateway.Builtin())
	if err != nil {
		return err
	}
	// What `config validate` checks, before anything (dev's throwaway Postgres included) starts.
	if err := gateway.Check(cfg, gateway.Builtin()); err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	setMemoryLimit(log, environ, memlimit.FromCgroup)

	var iss *devissuer.Issuer
	ownDB := cfg.Database.URL == "" // dev starts its own Postgres
	if dev {
		var stopDB func()
		iss, stopDB, err = gateway.DevSetup(ctx, cfg, *dataDir, log)
		defer stopDB()
		if err != nil {
			return err
		}
		if !*allowAdmin {
			iss.RefuseGroups(cfg.Auth.AdminGroups)
		}
	} else {
		if len(cfg.Auth.Issuers) == 0 {
			return errors.New("auth.issuers is empty: serve refuses to start without an OIDC issuer; for a local try-out use `gateway dev`")
		}
	}

	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: log, Version: version, DevIssuer: iss})
	if err != nil {
		return err
	}
	defer g.Close()
	ln, err := g.Listen()
	if err != nil {
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.Server.PublicURL, "runner_id", g.RunnerID(),
		"installation", g.Installation(), "dev", dev)
	neighbours := reportNeighbours(ctx, g, log, dev)
	if iss != nil {
		abs, err := filepath.Abs(*dataDir)
		if err != nil {
			return err
		}
		// What `gateway token` reads to mint for this gateway from any folder.
		if err := recordDevState(environ, devState{DataDir: abs, PublicURL: cfg.Server.PublicURL, Issuer: iss.URL(), PID: os.Getpid(),
			AdminGroups: cfg.Auth.AdminGroups, StartedAt: time.Now().UTC()}); err != nil {
			log.Warn("cannot record this dev gateway for `gateway token`; pass it --data-dir", "data_dir", abs, "err", err)
		}
		tok, err := iss.Mint(devissuer.Claims{Subject: "dev", Groups: []string{"dev"}, Email: "dev@example.test"})
		if err != nil {
			return err
		}
		printDevBanner(stdout, cfg.Server.PublicURL, tok, *dataDir, ownDB, g.Installation(), neighbours)
	}
	return g.Serve(ctx, ln)
}

// printDevBanner tells the developer where the gateway serves, what its data folder holds,
// its installation id and what else shares its Docker engine (neighbours, lines of
// reportNeighbours), and how to get tokens; dataDir is --data-dir as given, ownDB whether dev
// started Postgres.
func printDevBanner(w io.Writer, base, tok, dataDir string, ownDB bool, installation string, neighbours []string) {
	db := "the Postgres of database.url"
	if ownDB {
		db = "a local Postgres under " + filepath.Join(dataDir, "pg")
	}
	mint := "gateway token --sub alice --groups dev"
	if filepath.Clean(dataDir) != defaultDataDir {
		mint = "gateway token --data-dir " + dataDir + " --sub alice --groups dev"
	}
	shared := ""
	for _, n := range neighbours {
		shared += "  " + n + "\n"
	}
	fmt.Fprintf(w, `
Sandgate is running in development mode at %[1]s
  data folder: %[4]s (the development issuer's key, the local sandboxes)
  database:    %[3]s
  installation: %[6]s (label sandgate.installation on its containers, volumes and images)
  OIDC issuer: %[1]s/dev/oidc
%[7]sThe default profile runs code on this machine WITHOUT isolation.

A token for subject "dev" (mint others, from any folder, with: %[5]s):

  export TOKEN=%[2]s

Try it:

  curl -s -H "Authorization: Bearer $TOKEN" %[1]s/v1/me

Web console: %[1]s/    API docs: %[1]s/docs

`, base, tok, db, dataDir, mint, installation, shared)
}
