package kubernetes

// Real pods: the provider on a real single-node cluster (internal/testutil/kubenode: kubelet
// with cri-dockerd on the Docker engine, scheduler, controller manager, the real
// agent-sandbox controller). Nothing is played. Opt-in, because the cluster needs root and
// the node's binaries (scripts/kube-setup.sh --node, about 25 CPU-minutes cold):
//
//	TEST_KUBE_NODE=1 go test ./internal/providers/kubernetes -run TestNode   (make kube-e2e)
//
// With TEST_KUBE_NODE=1 a cluster that cannot start fails the tests (it never skips). The
// variable does not start with SANDGATE_: the gateway reads every SANDGATE_* variable as a
// configuration key and refuses the ones it does not know, and tests start gateways with
// this process's environment.
// The sandbox image is $SANDGATE_DOCKER_TEST_IMAGE or sandgate/sandbox-python:latest, given a
// tag of the cluster's own (the kubelet would try to pull :latest). One cluster serves every
// test of the package run; TestMain tears it down.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/providertest"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/testutil/kubenode"
)

var (
	nodeOnce  sync.Once
	realNode  *kubenode.Cluster
	nodeImage string
	nodeErr   error
)

// requireNode returns the package's real cluster, starting it on first use; it skips the test
// unless TEST_KUBE_NODE=1.
func requireNode(t *testing.T) *kubenode.Cluster {
	t.Helper()
	if os.Getenv("TEST_KUBE_NODE") != "1" {
		t.Skip("set TEST_KUBE_NODE=1 (as root, after scripts/kube-setup.sh --node) to run on a real single-node cluster")
	}
	nodeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		realNode, nodeErr = kubenode.Start(ctx, kubenode.Options{RepoRoot: repoRoot, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		if nodeErr != nil {
			return
		}
		fmt.Fprintf(os.Stderr, "kubenode: cluster %s Ready in %s\n", realNode.ID, time.Since(start).Round(time.Millisecond))
		img := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE")
		if img == "" {
			img = "sandgate/sandbox-python:latest"
		}
		nodeImage, nodeErr = realNode.LocalImage(img)
	})
	if nodeErr != nil {
		t.Fatalf("TEST_KUBE_NODE=1 and the cluster did not start: %v", nodeErr)
	}
	return realNode
}

// stopNode tears the package's cluster down (TestMain).
func stopNode() {
	if realNode != nil {
		if err := realNode.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the kubenode cluster:", err)
		}
	}
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// nodeNamespace creates a fresh namespace on the real cluster.
func nodeNamespace(t *testing.T, c *kubenode.Cluster) string {
	t.Helper()
	cs, err := k8s.NewForConfig(c.Config)
	require.NoError(t, err)
	name := "n-" + nonDNS.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-")
	_, err = cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// nodeProvider is a provider on the real cluster for namespace ns whose gateway identity is
// the cluster's administrator or, when given, identity; block edits its configuration.
func nodeProvider(t *testing.T, c *kubenode.Cluster, ns string, block func(*Config), identity ...*rest.Config) *Provider {
	t.Helper()
	rc := c.Config
	if len(identity) > 0 {
		rc = identity[0]
	}
	k := fillDefaults()
	k.Namespace = ns
	k.Image = nodeImage
	k.CreateTimeout = 2 * time.Minute
	if block != nil {
		block(&k)
	}
	p, err := New(Options{Installation: testInstallation, Profile: "node", Config: k, IdleTimeout: 30 * time.Minute, RESTConfig: rc, Logger: quietLog})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestNodeContract(t *testing.T) {
	c := requireNode(t)
	p := nodeProvider(t, c, nodeNamespace(t, c), nil)
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   sandboxd.DefaultKillGrace,
		RichResults: true,
	})
}

// The kubelet enforces the policy's memory limit: the kernel kills the program (137) and the
// provider says so.
func TestNodeMemoryLimit(t *testing.T) {
	c := requireNode(t)
	p := nodeProvider(t, c, nodeNamespace(t, c), nil)
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, providers.Policy{MemoryMB: 256, Strict: true, Timeout: 2 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	var out bytes.Buffer
	st, err := sb.Exec(ctx, providers.ExecSpec{
		Code:     "b = bytearray(600 * 1024 * 1024)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('survived')\n",
		Language: "python", Timeout: time.Minute,
		Output: providers.Output{Stdout: &out, Stderr: &out},
	})
	require.NoError(t, err)
	assert.Equal(t, 137, st.ExitCode, "output: %s", out.String())
	assert.True(t, st.OOMKilled, "oom_killed")
	assert.NotContains(t, out.String(), "survived")
}

// A warm-pool claim through the real agent-sandbox controller: claim, exec, release, and the
// pool refills. With network_policy the claim carries no pod labels of Sandgate's (the real
// controller refuses domains outside its allowlist); the NetworkPolicy selects the claimed pod
// by the controller's own claim-uid label.
func TestNodeWarmPoolClaim(t *testing.T) {
	for _, np := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "network_policy"}[np], func(t *testing.T) {
			c := requireNode(t)
			ns := nodeNamespace(t, c)
			waitReady := nodeWarmPool(t, c, ns, nil)
			ctx := context.Background()

			p := nodeProvider(t, c, ns, func(k *Config) {
				k.AgentSandbox = &AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"}
				k.Workspace = "/mnt/data"
				k.NetworkPolicy = np
			})
			start := time.Now()
			pol := allowPolicy
			if np {
				pol = providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute}
			}
			sb, err := p.Create(ctx, agentPrincipal, pol)
			require.NoError(t, err)
			claimed := time.Since(start)
			var out bytes.Buffer
			st, err := sb.Exec(ctx, providers.ExecSpec{Code: "print(6 * 7)", Language: "python", Timeout: time.Minute, Output: providers.Output{Stdout: &out}})
			require.NoError(t, err)
			assert.Equal(t, 0, st.ExitCode)
			assert.Equal(t, "42\n", out.String())
			t.Logf("claimed in %s, first exec after %s", claimed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

			if np {
				cs, err := k8s.NewForConfig(c.Config)
				require.NoError(t, err)
				// The sandbox's own policy (the controller adds one of its own for the template).
				netpol, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, strings.TrimPrefix(sb.ID(), ns+"/"), metav1.GetOptions{})
				require.NoError(t, err)
				sel, err := metav1.LabelSelectorAsSelector(&netpol.Spec.PodSelector)
				require.NoError(t, err)
				pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
				require.NoError(t, err)
				require.Len(t, pods.Items, 1, "the NetworkPolicy selects exactly the claimed pod")
				_, pod := sb.(*Sandbox).Pod()
				assert.Equal(t, pod, pods.Items[0].Name)
			}

			require.NoError(t, p.Destroy(ctx, sb.ID()))
			waitReady()
		})
	}
}

// The hardened pod spec as the kubelet and the runtime apply it: non-root 65532, no
// capabilities, no privilege escalation, seccomp filtering, a read-only root file system.
func TestNodeSecurityContext(t *testing.T) {
	c := requireNode(t)
	p := nodeProvider(t, c, nodeNamespace(t, c), nil)
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	var out bytes.Buffer
	st, err := sb.Exec(ctx, providers.ExecSpec{
		Code: "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '\n" +
			"touch /probe 2>/dev/null && echo rootfs-writable || echo rootfs-read-only\n",
		Language: "bash", Timeout: time.Minute, Output: providers.Output{Stdout: &out},
	})
	require.NoError(t, err)
	require.Equal(t, 0, st.ExitCode, out.String())
	assert.Equal(t, "65532\n65532\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\nrootfs-read-only\n", out.String())
}

// nodeWarmPool installs deploy/kubernetes/agent-sandbox.yaml's SandboxTemplate (no Kata, the
// test image; edit, when set, changes its spec further) and a one-replica SandboxWarmPool in
// ns, waits for a Ready warm sandbox, and returns that wait (for the refill).
func nodeWarmPool(t *testing.T, c *kubenode.Cluster, ns string, edit func(spec map[string]any)) (waitReady func()) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	ctx := context.Background()
	for _, u := range manifests(t, "agent-sandbox.yaml") {
		u.SetNamespace(ns)
		gvr := gvrSandboxWarmPool
		if u.GetKind() == "SandboxTemplate" {
			gvr = gvrSandboxTemplate
			spec, _, _ := unstructured.NestedMap(u.Object, "spec", "podTemplate", "spec")
			delete(spec, "runtimeClassName") // no Kata here
			containers, _, _ := unstructured.NestedSlice(spec, "containers")
			containers[0].(map[string]any)["image"] = nodeImage
			require.NoError(t, unstructured.SetNestedSlice(spec, containers, "containers"))
			require.NoError(t, unstructured.SetNestedMap(u.Object, spec, "spec", "podTemplate", "spec"))
			if edit != nil {
				edit(u.Object["spec"].(map[string]any))
			}
		} else {
			require.NoError(t, unstructured.SetNestedField(u.Object, int64(1), "spec", "replicas"))
		}
		_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		require.NoError(t, err, "%s %s", u.GetKind(), u.GetName())
	}
	pool := dyn.Resource(gvrSandboxWarmPool).Namespace(ns)
	waitReady = func() {
		t.Helper()
		require.Eventually(t, func() bool {
			u, err := pool.Get(ctx, "python-sandbox", metav1.GetOptions{})
			if err != nil {
				return false
			}
			n, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
			return n == 1
		}, 3*time.Minute, 250*time.Millisecond, "the warm pool has no Ready sandbox")
	}
	waitReady()
	return waitReady
}
