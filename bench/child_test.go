package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	gw "github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
)

// The child's YAML file loads back into a valid configuration with the same profiles.
func TestBenchConfigRoundTrips(t *testing.T) {
	for _, o := range []gwOpts{{}, {docker: true}, {warm: true}, {queued: true, conns: 40}, {quotas: true},
		{kube: &kubeTarget{kubeconfig: "/tmp/admin.kubeconfig", namespace: "bench", image: "sandgate/sandbox-python:kubenode-x", warmPool: "python-sandbox"}}} {
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
		if o.kube != nil {
			b := got.Sandbox.Profiles["kube-warm"].Blocks[kubernetes.TypeName].(*kubernetes.Block)
			if b.AgentSandbox == nil || b.AgentSandbox.WarmPool != "python-sandbox" || b.Workspace != "/mnt/data" || b.Kubeconfig != o.kube.kubeconfig {
				t.Fatalf("kube-warm block %+v", b)
			}
			if b := got.Sandbox.Profiles["kube"].Blocks[kubernetes.TypeName].(*kubernetes.Block); b.Image != o.kube.image || b.Namespace != "bench" {
				t.Fatalf("kube block %+v", b)
			}
		}
	}
}

// The bench's warm pool is deploy/kubernetes/agent-sandbox.yaml's, fitted to the node: the
// image, no Kata, small requests, the pool's size; the rest as deployed.
func TestBenchPoolFromTheDeployedManifest(t *testing.T) {
	objs, err := readManifests(filepath.Join("..", "deploy", "kubernetes", "agent-sandbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := benchPool(objs, "bench", "img:tag", 7)
	if err != nil {
		t.Fatal(err)
	}
	if pool != "python-sandbox" {
		t.Fatalf("pool %q", pool)
	}
	for _, u := range objs {
		if u.GetNamespace() != "bench" {
			t.Fatalf("%s in namespace %q", u.GetKind(), u.GetNamespace())
		}
		switch u.GetKind() {
		case "SandboxTemplate":
			spec, _, _ := unstructured.NestedMap(u.Object, "spec", "podTemplate", "spec")
			if _, ok := spec["runtimeClassName"]; ok {
				t.Fatal("runtimeClassName kept")
			}
			if spec["automountServiceAccountToken"] != false {
				t.Fatalf("the rest of the spec changed: %v", spec)
			}
			c := spec["containers"].([]any)[0].(map[string]any)
			if c["image"] != "img:tag" {
				t.Fatalf("image %v", c["image"])
			}
			res := c["resources"].(map[string]any)
			if req := res["requests"].(map[string]any); req["cpu"] != "10m" || req["memory"] != "64Mi" {
				t.Fatalf("requests %v", req)
			}
			if lim := res["limits"].(map[string]any); lim["memory"] != "1536Mi" {
				t.Fatalf("limits %v", lim)
			}
		case "SandboxWarmPool":
			if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 7 {
				t.Fatalf("replicas %d", r)
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
