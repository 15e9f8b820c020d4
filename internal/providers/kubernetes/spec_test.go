package kubernetes

// The objects as the API server stores them. No node is played here: the pods stay Pending,
// so Create runs into its create_timeout, which also checks the clean-up.

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// restricted labels a namespace so that Pod Security admission enforces "restricted".
var restricted = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
}

// capture records the first ADDED event of pods and NetworkPolicies in ns, as stored.
type capture struct {
	mu     sync.Mutex
	pods   []*corev1.Pod
	netpol []*networkingv1.NetworkPolicy
}

func captureObjects(t *testing.T, cs k8s.Interface, ns string) *capture {
	t.Helper()
	c := &capture{}
	ctx, cancel := context.WithCancel(context.Background())
	pw, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	nw, err := cs.NetworkingV1().NetworkPolicies(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				c.mu.Lock()
				c.pods = append(c.pods, p)
				c.mu.Unlock()
			}
		}
	})
	wg.Go(func() {
		for ev := range nw.ResultChan() {
			if n, ok := ev.Object.(*networkingv1.NetworkPolicy); ok && ev.Type == watch.Added {
				c.mu.Lock()
				c.netpol = append(c.netpol, n)
				c.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		pw.Stop()
		nw.Stop()
		wg.Wait()
	})
	return c
}

func (c *capture) get(t *testing.T) ([]*corev1.Pod, []*networkingv1.NetworkPolicy) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pods) > 0
	}, 10*time.Second, 20*time.Millisecond, "no pod was created")
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*corev1.Pod(nil), c.pods...), append([]*networkingv1.NetworkPolicy(nil), c.netpol...)
}

// TestPodAndNetworkPolicyAsCreated creates a sandbox with every configuration overlay in a
// namespace that enforces Pod Security "restricted", and checks the pod and NetworkPolicy
// exactly as the API server stored them (defaults it adds included), that the policy came
// first, that Create gives up after create_timeout with the reason, and that it cleans up.
func TestPodAndNetworkPolicyAsCreated(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, restricted)
	// RuntimeClass admission refuses a pod whose RuntimeClass does not exist.
	_, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor-" + ns}, Handler: "runsc"}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.NodeV1().RuntimeClasses().Delete(context.Background(), "gvisor-"+ns, metav1.DeleteOptions{})
	})

	p := newTestProvider(t, cfg, func(o *Options) {
		o.Profile = "data-science"
		o.IdleTimeout = 15 * time.Minute
		k := &o.Config
		k.Namespace = ns
		k.Image = "registry.example.com/python:3.12-slim"
		k.Labels = map[string]string{"team": "data"}
		k.NodeSelector = map[string]string{"sandgate.io/pool": "sandboxes"}
		k.Env = map[string]string{"PIP_INDEX_URL": "https://pypi.internal/simple", "A": "1"}
		k.ImagePullSecrets = []string{"regcred"}
		k.ServiceAccount = "sandbox-runner"
		k.RuntimeClassName = "gvisor-" + ns
		k.SecurityContext = map[string]any{"supplementalGroups": []any{4000}}
		k.ContainerSecurityContext = map[string]any{"capabilities": map[string]any{"drop": []any{"ALL"}}}
		k.NetworkPolicy = true
		k.CreateTimeout = 3 * time.Second
	})
	c := captureObjects(t, cs, ns)
	pol := providers.Policy{
		NetworkEgress: providers.EgressAllowlist, NetworkAllow: []string{"10.20.0.0/16", "192.0.2.7", "pypi.org"},
		CPU: 1.5, MemoryMB: 512, DiskMB: 64, Timeout: time.Minute, Strict: false,
	}
	start := time.Now()
	_, err = p.Create(ctx, providers.Principal{Mode: "agent", Subject: "sandgate"}, pol)
	require.Error(t, err, "no node runs the pod")
	assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.Contains(t, err.Error(), "was not ready within 3s")
	assert.Contains(t, err.Error(), "not scheduled to a node")
	assert.Less(t, time.Since(start), 30*time.Second)

	pods, nps := c.get(t)
	require.Len(t, pods, 1)
	require.Len(t, nps, 1)
	pod, np := pods[0], nps[0]
	name := pod.Name
	assert.Regexp(t, `^sandgate-[0-9a-f]{12}$`, name)

	// The NetworkPolicy was created before the pod (resource versions are etcd revisions).
	npRV, err := strconv.ParseInt(np.ResourceVersion, 10, 64)
	require.NoError(t, err)
	podRV, err := strconv.ParseInt(pod.ResourceVersion, 10, 64)
	require.NoError(t, err)
	assert.Less(t, npRV, podRV, "the NetworkPolicy must exist before the pod")

	assert.Equal(t, map[string]string{
		LabelManagedBy: ManagedBy, LabelInstallation: testInstallation, LabelSandbox: "true", "team": "data", LabelSandboxName: name,
	}, pod.Labels)
	assert.Regexp(t, `^[0-9a-f]{64}$`, pod.Annotations[AnnotationSandboxdToken], "the pod carries its sandboxd token")
	delete(pod.Annotations, AnnotationSandboxdToken)
	assert.Equal(t, map[string]string{AnnotationProfile: "data-science"}, pod.Annotations)

	spec, err := json.Marshal(pod.Spec)
	require.NoError(t, err)
	// As stored: the API server's defaults (dnsPolicy, schedulerName, imagePullPolicy,
	// termination message, toleration seconds, enableServiceLinks, priority) included.
	assert.JSONEq(t, `{
	  "volumes": [{"name": "workspace", "emptyDir": {"sizeLimit": "64Mi"}}, {"name": "tmp", "emptyDir": {}}, {"name": "sandgate-run", "emptyDir": {"medium": "Memory"}}],
	  "containers": [{
	    "name": "sandbox",
	    "image": "registry.example.com/python:3.12-slim",
	    "command": ["/usr/local/bin/sandboxd", "serve", "--socket", "/.sandgate/run/sd.sock", "--workspace", "/workspace",
	                "--state-file", "/.sandgate/run/contexts.json", "--await-token"],
	    "workingDir": "/workspace",
	    "env": [{"name": "A", "value": "1"}, {"name": "HOME", "value": "/workspace"}, {"name": "PIP_INDEX_URL", "value": "https://pypi.internal/simple"}],
	    "resources": {"limits": {"cpu": "1500m", "memory": "512Mi"}, "requests": {"cpu": "1500m", "memory": "512Mi"}},
	    "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}, {"name": "tmp", "mountPath": "/tmp"}, {"name": "sandgate-run", "mountPath": "/.sandgate/run"}],
	    "terminationMessagePath": "/dev/termination-log",
	    "terminationMessagePolicy": "File",
	    "imagePullPolicy": "IfNotPresent",
	    "securityContext": {
	      "capabilities": {"drop": ["ALL"]}, "privileged": false, "runAsNonRoot": true,
	      "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
	      "seccompProfile": {"type": "RuntimeDefault"}
	    }
	  }],
	  "restartPolicy": "Never",
	  "terminationGracePeriodSeconds": 5,
	  "activeDeadlineSeconds": 1800,
	  "dnsPolicy": "ClusterFirst",
	  "nodeSelector": {"sandgate.io/pool": "sandboxes"},
	  "serviceAccountName": "sandbox-runner",
	  "serviceAccount": "sandbox-runner",
	  "automountServiceAccountToken": false,
	  "shareProcessNamespace": true,
	  "securityContext": {
	    "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true, "fsGroup": 65532,
	    "supplementalGroups": [4000], "seccompProfile": {"type": "RuntimeDefault"}
	  },
	  "imagePullSecrets": [{"name": "regcred"}],
	  "schedulerName": "default-scheduler",
	  "tolerations": [
	    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
	    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
	  ],
	  "priority": 0,
	  "runtimeClassName": "gvisor-`+ns+`",
	  "enableServiceLinks": false,
	  "preemptionPolicy": "PreemptLowerPriority"
	}`, string(spec))

	npJSON, err := json.Marshal(struct {
		Labels map[string]string              `json:"labels"`
		Spec   networkingv1.NetworkPolicySpec `json:"spec"`
	}{np.Labels, np.Spec})
	require.NoError(t, err)
	// The domain (non-strict) is dropped; the bare IP became a /32.
	assert.JSONEq(t, `{
	  "labels": {"app.kubernetes.io/managed-by": "sandgate", "sandgate.io/installation": "`+testInstallation+`", "sandgate.io/sandbox": "true", "sandgate.io/sandbox-name": "`+name+`"},
	  "spec": {
	    "podSelector": {"matchLabels": {"sandgate.io/sandbox-name": "`+name+`"}},
	    "egress": [{"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "192.0.2.7/32"}}]}],
	    "policyTypes": ["Egress"]
	  }
	}`, string(npJSON))
	assert.Equal(t, name, np.Name)

	// Create cleaned up after itself.
	_, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pod is removed: %v", err)
	_, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the NetworkPolicy is removed: %v", err)
}

// TestDenyNetworkPolicy checks the NetworkPolicy of network_egress deny: no egress rule.
func TestDenyNetworkPolicy(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ns := testNamespace(t, nil)
	p := newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.Config.NetworkPolicy = true
		o.Config.CreateTimeout = time.Second
	})
	c := captureObjects(t, cs, ns)
	_, err := p.Create(context.Background(), providers.Principal{Mode: "agent"}, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
	require.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	_, nps := c.get(t)
	require.Len(t, nps, 1)
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nps[0].Spec.PolicyTypes)
	assert.Empty(t, nps[0].Spec.Egress, "deny allows no egress at all")
	assert.Empty(t, nps[0].Spec.Ingress)

	// egress allow needs no NetworkPolicy.
	c2 := captureObjects(t, cs, ns)
	_, err = p.Create(context.Background(), providers.Principal{Mode: "agent"}, providers.Policy{NetworkEgress: providers.EgressAllow, Strict: true, Timeout: time.Minute})
	require.Error(t, err)
	pods, nps := c2.get(t)
	require.NotEmpty(t, pods)
	assert.Empty(t, nps)
}

// TestPodSecurityRestricted: overlays that weaken the hardened defaults are refused by the
// API server's Pod Security admission in a restricted namespace; the provider reports it as
// a provision failure carrying the API's Forbidden error.
func TestPodSecurityRestricted(t *testing.T) {
	cfg := requireAPIServer(t)
	ns := testNamespace(t, restricted)
	for name, ctrSec := range map[string]map[string]any{
		"privilege escalation": {"allowPrivilegeEscalation": true},
		"added capability":     {"capabilities": map[string]any{"add": []any{"NET_ADMIN"}}},
	} {
		t.Run(name, func(t *testing.T) {
			p := newTestProvider(t, cfg, func(o *Options) {
				o.Config.Namespace = ns
				o.Config.ContainerSecurityContext = ctrSec
			})
			_, err := p.Create(context.Background(), providers.Principal{Mode: "agent"}, providers.Policy{Timeout: time.Minute})
			require.Error(t, err)
			assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
			assert.True(t, apierrors.IsForbidden(err), "the cause is the API's Forbidden: %v", err)
			assert.Contains(t, err.Error(), "violates PodSecurity")
		})
	}
}
