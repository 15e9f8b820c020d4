package kubernetes

// Create, Attach and Destroy against the API server, with the node played for status only
// (nodesim_test.go: the test binds pods and writes Running/Ready; no container runs, so no
// exec happens here).

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

var (
	agentPrincipal = providers.Principal{Mode: "agent", Subject: "sandgate"}
	allowPolicy    = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
)

func TestLifecycle(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, restricted)
	playNode(t, ns, nil)
	p := newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.Config.NetworkPolicy = true
	})

	sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Timeout: time.Minute, Strict: true})
	require.NoError(t, err)
	id := sb.ID()
	podNS, pod := sb.(*Sandbox).Pod()
	assert.Equal(t, ns+"/"+pod, id, "the id is <namespace>/<pod>")
	assert.Equal(t, ns, podNS)
	require.NoError(t, sb.Close())
	require.NoError(t, sb.Close(), "Close is idempotent")
	_, err = sb.ListFiles(ctx, "")
	assert.True(t, fault.IsKind(err, fault.Conflict), "a closed handle: %v", err)
	_, err = cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "Close keeps the pod")

	for _, target := range []string{id, pod} { // a bare name means the configured namespace
		again, err := p.Attach(ctx, target, agentPrincipal, allowPolicy)
		require.NoError(t, err, target)
		assert.Equal(t, id, again.ID())
	}
	for _, missing := range []string{ns + "/sandgate-000000000000", "sandgate-000000000000", "other-ns/x", "a/b/c", ""} {
		_, err := p.Attach(ctx, missing, agentPrincipal, allowPolicy)
		assert.True(t, fault.IsKind(err, fault.Gone), "%q: %v", missing, err)
		assert.True(t, fault.IsKind(err, fault.Provision), "gone is a provision failure")
	}

	require.NoError(t, p.Destroy(ctx, id))
	waitPodGone(t, cs, ns, pod)
	_, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, pod, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "Destroy removes the NetworkPolicy: %v", err)
	_, err = p.Attach(ctx, id, agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	require.NoError(t, p.Destroy(ctx, id), "Destroy is idempotent")
	require.NoError(t, p.Destroy(ctx, "unknown"))
	require.NoError(t, p.Destroy(ctx, "kube-system/kube-apiserver"))
}

// TestAttachGone: a pod that ended or is being deleted is gone; a pending one is waited for.
func TestAttachGone(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, nil)
	p := newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.Config.CreateTimeout = 2 * time.Second
	})
	mk := func(name string, finalizer bool) *corev1.Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		}
		if finalizer {
			pod.Finalizers = []string{"sandgate.test/hold"}
		}
		created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		return created
	}
	for _, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed} {
		pod := mk("ended-"+strings.ToLower(string(phase)), false)
		pod.Status.Phase = phase
		pod.Status.Reason = "Evicted"
		_, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		require.NoError(t, err)
		_, err = p.Attach(ctx, pod.Name, agentPrincipal, allowPolicy)
		assert.True(t, fault.IsKind(err, fault.Gone), "%s: %v", phase, err)
	}

	held := mk("held", true)
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, held.Name, metav1.DeleteOptions{}))
	_, err := p.Attach(ctx, held.Name, agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Gone), "deletion timestamp: %v", err)
	held, err = cs.CoreV1().Pods(ns).Get(ctx, held.Name, metav1.GetOptions{})
	require.NoError(t, err)
	held.Finalizers = nil
	_, err = cs.CoreV1().Pods(ns).Update(ctx, held, metav1.UpdateOptions{})
	require.NoError(t, err)

	// A pending pod is waited for, at most create_timeout.
	pending := mk("pending", false)
	start := time.Now()
	_, err = p.Attach(ctx, pending.Name, agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
	assert.Contains(t, err.Error(), "not ready within")

	// Destroy never deletes a pod the provider did not label.
	foreign, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: NamePrefix + "foreign00000"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, p.Destroy(ctx, ns+"/"+foreign.Name))
	_, err = cs.CoreV1().Pods(ns).Get(ctx, foreign.Name, metav1.GetOptions{})
	assert.NoError(t, err, "the unlabelled pod is still there")
}

// TestAttachedProfile: attach_to binds to an existing pod, never creates and never deletes.
func TestAttachedProfile(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, nil)
	other := testNamespace(t, nil)
	playNode(t, other, nil)
	target, err := cs.CoreV1().Pods(other).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "workbench"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img"}, {Name: ContainerName, Image: "img"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	p := newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.AttachTo = other + "/workbench"
	})
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	assert.Equal(t, other+"/workbench", sb.ID())
	assert.Equal(t, ContainerName, sb.(*Sandbox).container, "the container named sandbox is used")
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "an attached profile creates nothing")

	require.NoError(t, p.Destroy(ctx, sb.ID()))
	got, err := cs.CoreV1().Pods(other).Get(ctx, "workbench", metav1.GetOptions{})
	require.NoError(t, err, "an attached profile never deletes its target")
	assert.Equal(t, target.UID, got.UID)
	assert.Nil(t, got.DeletionTimestamp)

	require.NoError(t, cs.CoreV1().Pods(other).Delete(ctx, "workbench", metav1.DeleteOptions{}))
	waitPodGone(t, cs, other, "workbench")
	_, err = p.Create(ctx, agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Gone), "a vanished target is gone: %v", err)
}

// TestInstallationsShareANamespace: pods and NetworkPolicies name the installation that made
// them; another installation's provider on the same namespace and profile treats them as
// gone and never deletes them.
func TestInstallationsShareANamespace(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, restricted)
	playNode(t, ns, nil)
	block := func(o *Options) {
		o.Config.Namespace = ns
		o.Config.NetworkPolicy = true
	}
	a := newTestProvider(t, cfg, block)
	other := providers.NewInstallationID()
	b := newTestProvider(t, cfg, func(o *Options) { block(o); o.Installation = other })

	sb, err := a.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Timeout: time.Minute, Strict: true})
	require.NoError(t, err)
	id := sb.ID()
	_, pod := sb.(*Sandbox).Pod()
	got, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, testInstallation, got.Labels[LabelInstallation])
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, testInstallation, np.Labels[LabelInstallation])

	_, err = b.Attach(ctx, id, agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Gone), "another installation's pod: %v", err)
	require.NoError(t, b.Destroy(ctx, id))
	_, err = cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "another installation's destroy leaves the pod")
	_, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "and its NetworkPolicy")

	_, err = a.Attach(ctx, id, agentPrincipal, allowPolicy)
	require.NoError(t, err, "its own installation's")
	require.NoError(t, a.Destroy(ctx, id))
	waitPodGone(t, cs, ns, pod)

	_, err = New(Options{Installation: testInstallation, Config: Config{Labels: map[string]string{LabelInstallation: other}}, RESTConfig: cfg, Logger: quietLog})
	assert.True(t, fault.IsKind(err, fault.Config), "the installation label is the provider's: %v", err)
}
