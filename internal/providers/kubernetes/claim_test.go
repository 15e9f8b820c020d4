package kubernetes

// agent-sandbox mode against the API server with the CRDs of deploy/kubernetes/crds
// installed. The agent-sandbox controller is not running: playedController below plays its
// part for claims (bind a claim to a Sandbox and its pod, report Ready, or report a failure),
// and the node is played for status only (nodesim_test.go).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

var gvrSandboxTemplate = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}

// manifests reads the YAML documents of a file under deploy/kubernetes.
func manifests(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", name))
	require.NoError(t, err)
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// playedController plays the agent-sandbox controller for the claims of one namespace: a
// claim on warm pool "python-sandbox" gets a pod (as if taken from the pool), a Sandbox
// annotated with that pod's name, and Ready=True with status.sandbox.name; a claim on an
// unknown pool gets Ready=False WarmPoolNotFound; a claim on pool "stalled" is left alone.
// Deleting a claim deletes its Sandbox and pod (the controller's cascade).
//
// The pod is made from the SandboxTemplate python-sandbox of the namespace (applyExamples
// creates it from deploy/kubernetes/agent-sandbox.yaml), as the controller makes warm pods,
// without its runtimeClassName (no RuntimeClass exists here) and, when image is set, with
// that image instead of the template's.
type playedController struct {
	t     *testing.T
	dyn   dynamic.Interface
	ns    string
	image string
}

func playController(t *testing.T, ns string) { playControllerWith(t, ns, "") }

// playControllerWith plays the controller, running the warm pods with image ("" keeps the
// template's).
func playControllerWith(t *testing.T, ns, image string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(requireAPIServer(t))
	require.NoError(t, err)
	c := &playedController{t: t, dyn: dyn, ns: ns, image: image}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := dyn.Resource(gvrSandboxClaim).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			switch ev.Type {
			case watch.Added:
				c.bind(ctx, u)
			case watch.Deleted:
				c.release(ctx, u)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
}

func (c *playedController) bind(ctx context.Context, u *unstructured.Unstructured) {
	var claim sandboxClaim
	require.NoError(c.t, fromUnstructured(u, &claim))
	setStatus := func(status map[string]any) {
		u.Object["status"] = status
		if _, err := c.dyn.Resource(gvrSandboxClaim).Namespace(c.ns).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			c.t.Errorf("played controller: claim status: %v", err)
		}
	}
	cond := func(status, reason, msg string) map[string]any {
		return map[string]any{"type": "Ready", "status": status, "reason": reason, "message": msg,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
	}
	switch claim.Spec.WarmPoolRef.Name {
	case "python-sandbox":
	case "stalled":
		return
	default:
		setStatus(map[string]any{"conditions": []any{cond("False", "WarmPoolNotFound", "SandboxWarmPool "+claim.Spec.WarmPoolRef.Name+" not found")}})
		return
	}
	// The "warm" pod: its name differs from the Sandbox's, as after adoption from a pool.
	sandboxName := "python-sandbox-" + claim.Name[len(NamePrefix):]
	podName := "python-sandbox-warm-" + claim.Name[len(NamePrefix):]
	labels := map[string]string{"agents.x-k8s.io/warm-pool-sandbox": "python-sandbox", LabelClaimUID: string(claim.UID)}
	if claim.Spec.AdditionalPodMetadata != nil {
		for k, v := range claim.Spec.AdditionalPodMetadata.Labels {
			labels[k] = v
		}
	}
	tmpl, err := c.dyn.Resource(gvrSandboxTemplate).Namespace(c.ns).Get(ctx, "python-sandbox", metav1.GetOptions{})
	if err != nil {
		c.t.Errorf("played controller: template: %v", err)
		return
	}
	rawSpec, _, _ := unstructured.NestedMap(tmpl.Object, "spec", "podTemplate", "spec")
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(rawSpec, &spec); err != nil {
		c.t.Errorf("played controller: template pod spec: %v", err)
		return
	}
	spec.RuntimeClassName = nil
	if c.image != "" {
		for i := range spec.Containers {
			spec.Containers[i].Image = c.image
		}
	}
	cs := adminClient(c.t)
	_, err = cs.CoreV1().Pods(c.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Labels: labels},
		Spec:       spec,
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Errorf("played controller: pod: %v", err)
		return
	}
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{"name": sandboxName, "annotations": map[string]any{AnnotationPodName: podName}},
		"spec":     map[string]any{"podTemplate": map[string]any{"spec": map[string]any{}}},
	}}
	if _, err := c.dyn.Resource(gvrSandbox).Namespace(c.ns).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		c.t.Errorf("played controller: sandbox: %v", err)
		return
	}
	setStatus(map[string]any{
		"conditions": []any{cond("True", "DependenciesReady", "the sandbox is ready")},
		"sandbox":    map[string]any{"name": sandboxName},
	})
}

func (c *playedController) release(ctx context.Context, u *unstructured.Unstructured) {
	suffix := strings.TrimPrefix(u.GetName(), NamePrefix)
	_ = c.dyn.Resource(gvrSandbox).Namespace(c.ns).Delete(ctx, "python-sandbox-"+suffix, metav1.DeleteOptions{})
	_ = adminClient(c.t).CoreV1().Pods(c.ns).Delete(ctx, "python-sandbox-warm-"+suffix, metav1.DeleteOptions{})
}

// applyExamples creates deploy/kubernetes/agent-sandbox.yaml's template and warm pool in ns,
// which also checks them against the CRDs.
func applyExamples(t *testing.T, ns string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(requireAPIServer(t))
	require.NoError(t, err)
	for _, u := range manifests(t, "agent-sandbox.yaml") {
		u.SetNamespace(ns)
		gvr := gvrSandboxWarmPool
		if u.GetKind() == "SandboxTemplate" {
			gvr = gvrSandboxTemplate
		}
		_, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
		require.NoError(t, err, "%s %s", u.GetKind(), u.GetName())
	}
}

func TestSandboxClaimLifecycle(t *testing.T) {
	cfg := requireAPIServer(t)
	ctx := context.Background()
	ns := testNamespace(t, nil)
	applyExamples(t, ns)
	playController(t, ns)
	playNode(t, ns, nil)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	claims := dyn.Resource(gvrSandboxClaim).Namespace(ns)

	p := newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.Config.Workspace = "/mnt/data"
		o.Config.NetworkPolicy = true
		o.Config.AgentSandbox = &AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"}
		o.Config.CreateTimeout = 20 * time.Second
	})
	sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
	require.NoError(t, err)
	ksb := sb.(*Sandbox)
	claimName := strings.TrimPrefix(sb.ID(), ns+"/")
	assert.Regexp(t, `^sandgate-[0-9a-f]{12}$`, claimName, "the id is <namespace>/<claim>")
	podNS, pod := ksb.Pod()
	assert.Equal(t, ns, podNS)
	assert.Equal(t, "python-sandbox-warm-"+claimName[len(NamePrefix):], pod, "the pod the Sandbox's pod-name annotation names")
	warm, err := adminClient(t).CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{64}$`, warm.Annotations[AnnotationSandboxdToken], "the claimed warm pod got its sandboxd token")
	assert.Equal(t, warm.Annotations[AnnotationSandboxdToken], ksb.token)

	u, err := claims.Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	assert.Equal(t, map[string]any{"warmPoolRef": map[string]any{"name": "python-sandbox"}}, spec,
		"the claim as created: no additionalPodMetadata (agent-sandbox allows no label domain of Sandgate's by default)")
	assert.Equal(t, ManagedBy, u.GetLabels()[LabelManagedBy])
	assert.Equal(t, testInstallation, u.GetLabels()[LabelInstallation], "the claim names its installation")
	np, err := adminClient(t).NetworkingV1().NetworkPolicies(ns).Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{LabelClaimUID: string(u.GetUID())}, np.Spec.PodSelector.MatchLabels,
		"the policy selects the claimed pod by the claim-uid label agent-sandbox puts on it")
	assert.Equal(t, string(u.GetUID()), warm.Labels[LabelClaimUID])

	again, err := p.Attach(ctx, sb.ID(), agentPrincipal, allowPolicy)
	require.NoError(t, err)
	_, againPod := again.(*Sandbox).Pod()
	assert.Equal(t, pod, againPod)

	require.NoError(t, p.Destroy(ctx, sb.ID()))
	_, err = claims.Get(ctx, claimName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "Destroy deletes the claim: %v", err)
	_, err = adminClient(t).NetworkingV1().NetworkPolicies(ns).Get(ctx, claimName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "and its NetworkPolicy: %v", err)
	waitPodGone(t, adminClient(t), ns, pod)
	_, err = p.Attach(ctx, sb.ID(), agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	require.NoError(t, p.Destroy(ctx, sb.ID()), "idempotent")
}

func TestSandboxClaimFailures(t *testing.T) {
	cfg := requireAPIServer(t)
	ctx := context.Background()
	ns := testNamespace(t, nil)
	applyExamples(t, ns)
	playController(t, ns)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	claims := dyn.Resource(gvrSandboxClaim).Namespace(ns)
	noClaims := func() {
		t.Helper()
		list, err := claims.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		assert.Empty(t, list.Items, "a failed Create deletes its claim")
	}
	withPool := func(pool, template string, timeout time.Duration) *Provider {
		return newTestProvider(t, cfg, func(o *Options) {
			o.Config.Namespace = ns
			o.Config.AgentSandbox = &AgentSandboxConfig{WarmPool: pool, Template: template}
			o.Config.CreateTimeout = timeout
		})
	}

	start := time.Now()
	_, err = withPool("missing-pool", "", 30*time.Second).Create(ctx, agentPrincipal, allowPolicy)
	require.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.Contains(t, err.Error(), "WarmPoolNotFound")
	assert.Less(t, time.Since(start), 15*time.Second, "a terminal reason ends the wait at once")
	noClaims()

	_, err = withPool("stalled", "", 2*time.Second).Create(ctx, agentPrincipal, allowPolicy)
	require.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.Contains(t, err.Error(), "not ready within")
	noClaims()

	_, err = withPool("python-sandbox", "another-template", 10*time.Second).Create(ctx, agentPrincipal, allowPolicy)
	require.True(t, fault.IsKind(err, fault.Config), "the warm pool is made from another template: %v", err)
	noClaims()

	// Attach of a claim that is not bound is gone.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "sandgate-unbound00000"},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": "stalled"}},
	}}
	_, err = claims.Create(ctx, u, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = withPool("stalled", "", 2*time.Second).Attach(ctx, ns+"/sandgate-unbound00000", agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)

	// The CRD enforces the published schema: warmPoolRef is required.
	u = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "no-ref"}, "spec": map[string]any{},
	}}
	_, err = claims.Create(ctx, u, metav1.CreateOptions{})
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
}

// TestSandboxClaimIsStateful runs a claimed warm pod of deploy/kubernetes/agent-sandbox.yaml's
// template on the node played with Docker: its container runs sandboxd as the template says,
// the claim gives it its token, and a context keeps its state between executions.
func TestSandboxClaimIsStateful(t *testing.T) {
	cfg := requireAPIServer(t)
	cli := requireDocker(t)
	ctx := context.Background()
	ns := testNamespace(t, restricted)
	applyExamples(t, ns)
	playControllerWith(t, ns, testImage)
	playNode(t, ns, cli)
	p := newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.Config.Workspace = "/mnt/data"
		o.Config.AgentSandbox = &AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"}
		o.Config.CreateTimeout = 30 * time.Second
	})
	require.True(t, p.Capabilities().Stateful, "claimed sandboxes are stateful")
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })

	run := func(spec providers.ExecSpec) string {
		t.Helper()
		var out, errOut strings.Builder
		spec.Output = providers.Output{Stdout: &out, Stderr: &errOut}
		spec.Timeout = time.Minute
		st, err := sb.Exec(ctx, spec)
		require.NoError(t, err)
		require.Zero(t, st.ExitCode, "stderr: %s", errOut.String())
		return out.String()
	}
	assert.Equal(t, "/mnt/data\n", run(providers.ExecSpec{Command: "pwd"}), "sandboxd's workspace is the template's")
	run(providers.ExecSpec{Code: "answer = 6 * 7", Language: "python", Context: providers.DefaultContext})
	assert.Equal(t, "still here: 42\n", run(providers.ExecSpec{Code: `print(f"still here: {answer}")`, Language: "python", Context: providers.DefaultContext}))

	_, podName := sb.(*Sandbox).Pod()
	pod, err := adminClient(t).CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{64}$`, pod.Annotations[AnnotationSandboxdToken])
}
