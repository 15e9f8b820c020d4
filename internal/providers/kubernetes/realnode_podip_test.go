package kubernetes

// The pod_ip transport on the real node: the gateway (this test process, in the host's
// network namespace) dials sandboxd at the pod's IP, which the kubenode harness routes from
// the host into the cluster's own network namespace. The node's CNI (bridge) does not enforce
// NetworkPolicies: what is checked is the policy objects as written — Sandgate's per-pod
// egress policy and the agent-sandbox controller's managed one — and that the transport
// reaches sandboxd with them in place. Enforcement needs a CNI that enforces (README,
// "Kubernetes").

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/providertest"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/testutil/kubenode"
)

func podIPProvider(t *testing.T, c *kubenode.Cluster, ns string, block func(*Config)) *Provider {
	t.Helper()
	return nodeProvider(t, c, ns, func(k *Config) {
		k.Sandboxd.Transport = TransportPodIP
		if block != nil {
			block(k)
		}
	})
}

// assertOverTCP runs a few commands in sb and checks they went over TCP to the pod IP, in
// the cluster's pod subnet: at most one exec tunnel (the one giving sandboxd its token).
func assertOverTCP(t *testing.T, c *kubenode.Cluster, p *Provider, sb providers.Sandbox) {
	t.Helper()
	ip := net.ParseIP(sb.(*Sandbox).podIP)
	_, subnet, err := net.ParseCIDR(c.PodCIDR)
	require.NoError(t, err)
	require.True(t, ip != nil && subnet.Contains(ip), "pod IP %q is in the pod subnet %s", sb.(*Sandbox).podIP, c.PodCIDR)
	before := p.tunnels.Load()
	for i := range 3 {
		var out bytes.Buffer
		st, err := sb.Exec(context.Background(), providers.ExecSpec{Command: fmt.Sprintf("echo %d", i), Timeout: time.Minute, Output: providers.Output{Stdout: &out}})
		require.NoError(t, err)
		assert.Equal(t, 0, st.ExitCode)
		assert.Equal(t, fmt.Sprintf("%d\n", i), out.String())
	}
	assert.LessOrEqual(t, p.tunnels.Load()-before, int64(1), "one exec tunnel gives the token; the calls go over TCP")
}

// The whole contract over TCP to real pod IPs.
func TestNodeContractPodIP(t *testing.T) {
	c := requireNode(t)
	p := podIPProvider(t, c, nodeNamespace(t, c), nil)
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   sandboxd.DefaultKillGrace,
		RichResults: true,
	})
	sb, err := p.Create(context.Background(), agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	assertOverTCP(t, c, p, sb)
}

// pod_ip with kubernetes.network_policy: the provider's own egress policy selects exactly the
// pod, allows no egress and leaves ingress alone (sandboxd's port stays reachable under a CNI
// that enforces it), and the gateway reaches sandboxd over TCP with it in place.
func TestNodePodIPWithNetworkPolicy(t *testing.T) {
	c := requireNode(t)
	ns := nodeNamespace(t, c)
	p := podIPProvider(t, c, ns, func(k *Config) { k.NetworkPolicy = true })
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	_, pod := sb.(*Sandbox).Pod()

	cs, err := k8s.NewForConfig(c.Config)
	require.NoError(t, err)
	netpol, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, netpol.Spec.PolicyTypes, "egress only: ingress to sandboxd's port is not the provider's to close")
	assert.Empty(t, netpol.Spec.Egress, "deny: no egress rule")
	assert.Equal(t, []string{pod}, selectedPods(t, cs, ns, netpol.Spec.PodSelector))
	assertOverTCP(t, c, p, sb)
}

// pod_ip on a warm pool whose SandboxTemplate runs sandboxd with --listen and declares the
// ingress Sandgate needs: the agent-sandbox controller writes its managed NetworkPolicy from
// the template (spec.networkPolicy: ingress from the gateway's pods on 8888), selecting the
// claimed pod, and the gateway reaches the claimed pod's sandboxd over TCP. Without
// spec.networkPolicy the controller's default policy admits only its own sandbox-router, which
// a CNI that enforces would apply to the gateway too: checked here on the default template.
func TestNodePodIPWarmPoolManagedPolicy(t *testing.T) {
	c := requireNode(t)
	cs, err := k8s.NewForConfig(c.Config)
	require.NoError(t, err)
	ctx := context.Background()
	const managed = "python-sandbox-network-policy" // <template>-network-policy
	gateway := map[string]any{
		"from": []any{map[string]any{
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "sandgate"}},
			"podSelector":       map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "sandgate"}},
		}},
		"ports": []any{map[string]any{"protocol": "TCP", "port": int64(SandboxdPort)}},
	}

	t.Run("template_policy", func(t *testing.T) {
		ns := nodeNamespace(t, c)
		waitReady := nodeWarmPool(t, c, ns, func(spec map[string]any) {
			ctr := spec["podTemplate"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			ctr["command"] = append(ctr["command"].([]any), "--listen", fmt.Sprintf(":%d", SandboxdPort))
			ctr["ports"] = []any{map[string]any{"name": "sandboxd", "containerPort": int64(SandboxdPort), "protocol": "TCP"}}
			spec["networkPolicy"] = map[string]any{"ingress": []any{gateway}, "egress": []any{}}
		})
		p := podIPProvider(t, c, ns, func(k *Config) {
			k.AgentSandbox = &AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"}
			k.Workspace = "/mnt/data"
		})
		sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
		require.NoError(t, err)
		_, pod := sb.(*Sandbox).Pod()

		var np *networkingv1.NetworkPolicy
		require.Eventually(t, func() bool {
			np, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, managed, metav1.GetOptions{})
			return err == nil
		}, time.Minute, 250*time.Millisecond, "the controller wrote its managed NetworkPolicy")
		assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
		require.Len(t, np.Spec.Ingress, 1)
		require.Len(t, np.Spec.Ingress[0].Ports, 1)
		assert.Equal(t, int32(SandboxdPort), np.Spec.Ingress[0].Ports[0].Port.IntVal, "sandboxd's port is admitted")
		require.Len(t, np.Spec.Ingress[0].From, 1)
		assert.Equal(t, "sandgate", np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"])
		assert.Empty(t, np.Spec.Egress, "the template's empty egress: none allowed")
		assert.Contains(t, selectedPods(t, cs, ns, np.Spec.PodSelector), pod, "the managed policy selects the claimed pod")

		assertOverTCP(t, c, p, sb)
		require.NoError(t, p.Destroy(ctx, sb.ID()))
		waitReady()
	})

	t.Run("default_policy", func(t *testing.T) {
		ns := nodeNamespace(t, c)
		nodeWarmPool(t, c, ns, nil)
		var np *networkingv1.NetworkPolicy
		require.Eventually(t, func() bool {
			np, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, managed, metav1.GetOptions{})
			return err == nil
		}, time.Minute, 250*time.Millisecond, "the controller wrote its managed NetworkPolicy")
		// One ingress rule, from the controller's sandbox-router, on every port: a gateway
		// outside agent-sandbox-system is not admitted.
		require.Len(t, np.Spec.Ingress, 1)
		for _, from := range np.Spec.Ingress[0].From {
			require.NotNil(t, from.NamespaceSelector)
			assert.Equal(t, "agent-sandbox-system", from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, pods.Items)
		assert.Contains(t, selectedPods(t, cs, ns, np.Spec.PodSelector), pods.Items[0].Name, "the managed policy selects the warm pods")
	})
}

// selectedPods lists the names of the pods in ns that sel selects.
func selectedPods(t *testing.T, cs k8s.Interface, ns string, sel metav1.LabelSelector) []string {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sel)
	require.NoError(t, err)
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: s.String()})
	require.NoError(t, err)
	var names []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			names = append(names, p.Name)
		}
	}
	return names
}
