package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sandgate/sandgate/internal/telemetry"
)

// observe builds the process's metrics and tracer provider (docs/semantics.md §14) and opens
// the metrics listener when server.metrics_addr is set; serveMetrics serves it once the rest
// is built.
func (g *Gateway) observe(ctx context.Context) error {
	role := "gateway"
	if g.opts.Role == RoleWorker {
		role = "worker"
	}
	names := make([]string, 0, len(g.cfg.Sandbox.Profiles))
	var types []string
	for n, p := range g.cfg.Sandbox.Profiles {
		names = append(names, n)
		types = append(types, p.Type)
	}
	g.metrics = telemetry.New(telemetry.Options{Version: g.opts.Version, Role: role, Profiles: names, Providers: types,
		Counts: g.store.Counts, Logger: g.log})
	getenv := g.opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var err error
	g.tracing, err = telemetry.NewTracing(ctx, telemetry.TracingOptions{
		Endpoint: g.cfg.Telemetry.OTLPEndpoint, ServiceName: g.cfg.Telemetry.ServiceName,
		Version: g.opts.Version, Role: role, Instance: g.opts.RunnerID, Getenv: getenv,
	})
	if err != nil {
		return err
	}
	if g.tracing.Enabled() {
		g.log.Info("exporting traces over OTLP/HTTP", "endpoint", g.cfg.Telemetry.OTLPEndpoint)
	}
	if addr := g.cfg.Server.MetricsAddr; addr != "" {
		if g.metricsLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen on %s (server.metrics_addr): %w", addr, err)
		}
	}
	return nil
}

// serveMetrics answers GET /metrics on the metrics listener until Close. The listener has no
// authentication: bind it where only the scraper reaches (docs/semantics.md §14).
func (g *Gateway) serveMetrics() {
	if g.metricsLn == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.metrics.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}
	ln := g.metricsLn
	g.log.Info("metrics listening", "addr", ln.Addr().String(), "path", "/metrics")
	g.goBG(func(ctx context.Context) {
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				g.log.Error("metrics listener failed", "err", err)
			}
			return
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	})
}

// MetricsAddr is the metrics listener's address ("" without server.metrics_addr).
func (g *Gateway) MetricsAddr() string {
	if g.metricsLn == nil {
		return ""
	}
	return g.metricsLn.Addr().String()
}

// Metrics are the process's metrics (for tests).
func (g *Gateway) Metrics() *telemetry.Metrics { return g.metrics }

// FlushTraces exports the spans ended so far (tests; Close does it too).
func (g *Gateway) FlushTraces(ctx context.Context) error { return g.tracing.ForceFlush(ctx) }
