package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	gw "github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// The child's YAML file loads back into a valid configuration with the same profiles.
func TestBenchConfigRoundTrips(t *testing.T) {
	for _, o := range []gwOpts{{}, {docker: true}, {warm: true}, {queued: true, conns: 40}, {quotas: true}} {
		cfg := benchConfig(o, "postgres://bench@127.0.0.1:1/bench", "127.0.0.1:18080", t.TempDir())
		y, err := cfg.YAML()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "sandgate.yaml")
		if err := os.WriteFile(path, y, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := gw.LoadConfig(path, nil, gw.Builtin())
		if err != nil {
			t.Fatalf("%+v: %v\n%s", o, err, y)
		}
		// `gateway dev` adds its issuer.
		got.Auth.Issuers = []config.Issuer{{URL: "http://127.0.0.1:18080/dev/oidc", Audiences: []string{devissuer.Audience}}}
		if err := got.Validate(); err != nil {
			t.Fatalf("%+v: %v\n%s", o, err, y)
		}
		if len(got.Sandbox.Profiles) != len(cfg.Sandbox.Profiles) || got.Server.Addr != cfg.Server.Addr || got.Database.URL != cfg.Database.URL {
			t.Fatalf("%+v: loaded %+v", o, got)
		}
		if o.conns != 0 && got.Database.MaxConns != o.conns {
			t.Fatalf("max_conns %d, want %d", got.Database.MaxConns, o.conns)
		}
		if o.warm {
			if b := got.Sandbox.Profiles["docker-burst"].Blocks[docker.TypeName].(*docker.Block); b.WarmPool.Size != burstPool() {
				t.Fatalf("docker-burst pool %+v", b.WarmPool)
			}
		}
	}
}

func TestProcReaders(t *testing.T) {
	pid := os.Getpid()
	// Burn CPU until a tick shows (bounded: the machine may be loaded).
	var self int64
	for start := time.Now(); self == 0 && time.Since(start) < 5*time.Second; self, _ = cpuTicks(pid) {
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
	if self <= 0 {
		t.Fatalf("cpu ticks %d", self)
	}
	if rss, hwm := statusKB(pid, "VmRSS"), statusKB(pid, "VmHWM"); rss <= 0 || hwm < rss {
		t.Fatalf("VmRSS %d VmHWM %d", rss, hwm)
	}
}
