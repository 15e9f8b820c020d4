package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	gw "github.com/sandgate/sandgate/internal/gateway"
)

// startInProcess builds a gateway through internal/gateway (as `gateway dev` does) in this
// process and serves it on 127.0.0.1. Only the CPU profile uses it (the child has no
// profiling endpoint); no row measures it.
func startInProcess(parent context.Context, o gwOpts) (*gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "sandgate-bench-inproc-")
	if err != nil {
		return nil, err
	}
	work := filepath.Join(tmp, "work")
	cfg := benchConfig(o, benchDB, ln.Addr().String(), work)
	g := &gateway{name: o.name, URL: cfg.Server.PublicURL, dbURL: benchDB, conns: o.conns, client: newHTTPClient(), pid: os.Getpid(), dir: tmp}
	if g.iss, err = devissuer.Open(g.URL+"/dev/oidc", filepath.Join(tmp, "key.pem")); err != nil {
		return nil, err
	}
	cfg.Auth.Issuers = []config.Issuer{{URL: g.iss.URL(), Audiences: []string{devissuer.Audience}}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("BENCH_VERBOSE") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	g.inproc, err = gw.New(parent, cfg, gw.Options{Logger: log, DevIssuer: g.iss})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	g.cancel = cancel
	g.served = make(chan error, 1)
	go func() { g.served <- g.inproc.Serve(ctx, ln) }()
	return g, nil
}

// profileLocalExec writes a CPU profile of 16 clients running `true` on the local provider
// through an in-process gateway (the same configuration as the children) to path.
func profileLocalExec(ctx context.Context, path string) error {
	g, err := startInProcess(ctx, gwOpts{name: "profile"})
	if err != nil {
		return err
	}
	defer g.close()
	tok := g.token("bench-profile")
	const c = 16
	sessions := make([]string, c)
	for i := range sessions {
		sessions[i] = g.newSession(tok, "local")
		g.exec(tok, sessions[i], "true")
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	_, rate, _ := load(c, n(5, 1)*int(time.Second), n(20000, 2000), func(i int) bool { return g.tryExec(tok, sessions[i], "true") })
	pprof.StopCPUProfile()
	fmt.Printf("  (CPU profile of 16 clients through an in-process gateway, %.0f exec/s incl. the profiler, written to %s)\n", rate, path)
	g.destroy(tok, sessions, 8)
	return nil
}
