package kubernetes

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// The agent-sandbox resources (kubernetes-sigs/agent-sandbox, API v1beta1). The Go module of
// that project is not a dependency: the few fields used are declared below, after the
// published CRD schema (deploy/kubernetes/crds/ holds the manifests the tests run against).
var (
	gvrSandboxClaim    = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	gvrSandboxWarmPool = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	gvrSandbox         = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
)

// AnnotationPodName is set by agent-sandbox on a Sandbox adopted from a warm pool: the name of
// its pod (without it, the pod has the Sandbox's name).
const AnnotationPodName = "agents.x-k8s.io/pod-name"

// LabelClaimUID is set by agent-sandbox on the pod of a claimed Sandbox: the SandboxClaim's
// UID (the NetworkPolicy of a claimed sandbox selects its pod by it).
const LabelClaimUID = "agents.x-k8s.io/claim-uid"

// Claim Ready reasons that agent-sandbox reports for failures it will not retry.
var terminalClaimReasons = map[string]bool{
	"TemplateNotFound": true, "WarmPoolNotFound": true, "InvalidMetadata": true,
	"EnvVarsInjectionRejected": true, "VolumeClaimTemplatesError": true,
	"ClaimExpired": true, "SandboxExpired": true,
}

// sandboxClaim is the part of a SandboxClaim the provider writes and reads.
type sandboxClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              sandboxClaimSpec   `json:"spec"`
	Status            sandboxClaimStatus `json:"status,omitempty"`
}

type sandboxClaimSpec struct {
	WarmPoolRef           nameRef      `json:"warmPoolRef"`
	AdditionalPodMetadata *podMetadata `json:"additionalPodMetadata,omitempty"`
}

type nameRef struct {
	Name string `json:"name"`
}

type podMetadata struct {
	Labels map[string]string `json:"labels,omitempty"`
}

type sandboxClaimStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Sandbox    struct {
		Name   string   `json:"name,omitempty"`
		PodIPs []string `json:"podIPs,omitempty"`
	} `json:"sandbox,omitempty"`
}

// sandboxWarmPool is the part of a SandboxWarmPool the provider reads.
type sandboxWarmPool struct {
	Spec struct {
		SandboxTemplateRef nameRef `json:"sandboxTemplateRef"`
	} `json:"spec"`
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

// claim acquires a sandbox from the warm pool: it makes a SandboxClaim, waits (create_timeout)
// until it is Ready and bound, and connects to the bound sandbox's pod. On failure the claim
// and its NetworkPolicy are deleted.
func (p *Provider) claim(ctx context.Context, c *clients, pr providers.Principal, pol providers.Policy, np bool) (providers.Sandbox, error) {
	as := p.cfg.AgentSandbox
	ns := p.cfg.Namespace
	if err := p.checkTemplate(ctx, c); err != nil {
		return nil, err
	}
	name := newName()
	id := ns + "/" + name
	claim := &sandboxClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: gvrSandboxClaim.GroupVersion().String(), Kind: "SandboxClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      p.labels(name),
			Annotations: p.annotations(pr),
		},
		Spec: sandboxClaimSpec{WarmPoolRef: nameRef{Name: as.WarmPool}},
	}
	u, err := toUnstructured(claim)
	if err != nil {
		return nil, err
	}
	claims := c.dyn.Resource(gvrSandboxClaim).Namespace(ns)
	created, err := claims.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, provisionErr(err, "creating SandboxClaim %s", id)
	}
	if np {
		// The NetworkPolicy selects the claimed pod by the label agent-sandbox itself puts on
		// it (also on a pod adopted from the warm pool): the claim's UID. Labels of Sandgate's
		// in the claim's additionalPodMetadata would be refused by the controller's default
		// allowed label domains (InvalidMetadata). The policy exists before the sandbox is
		// handed out, so no program runs without it.
		netpol, err := p.buildNetworkPolicy(name, map[string]string{LabelClaimUID: string(created.GetUID())}, pol)
		if err == nil {
			if _, err = c.core.NetworkingV1().NetworkPolicies(ns).Create(ctx, netpol, metav1.CreateOptions{}); err != nil {
				err = provisionErr(err, "creating NetworkPolicy %s", id)
			}
		}
		if err != nil {
			p.cleanupClaim(ns, name, false, true)
			return nil, err
		}
	}
	p.log.Debug("sandbox claim created", "sandbox_id", id, "warm_pool", as.WarmPool)

	wctx, cancel := context.WithTimeout(ctx, p.createTimeout())
	defer cancel()
	sandboxName, err := p.waitClaim(wctx, c, ns, name, created)
	if err == nil {
		var pod *corev1.Pod
		if pod, err = p.claimPod(wctx, c, ns, sandboxName); err == nil {
			if pod, err = p.waitPod(wctx, c, ns, pod.Name, pod); err == nil {
				// A warm pod has no token yet: it gets one now, before its sandboxd does.
				var token string
				if token, err = p.ensureToken(wctx, c, pod); err == nil {
					return p.open(c, id, pod, token), nil
				}
			}
		}
	}
	p.cleanupClaim(ns, name, np, true)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, fault.New(fault.Provision, "%s: SandboxClaim %s was not ready within %s (create_timeout)", TypeName, id, p.createTimeout())
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if fault.IsKind(err, fault.Provision) {
		return nil, err
	}
	return nil, provisionErr(err, "acquiring a sandbox from SandboxClaim %s", id)
}

// checkTemplate checks, once per warm pool, that the warm pool is made from the configured
// template (when one is configured). A mismatch is a fault.Config error.
func (p *Provider) checkTemplate(ctx context.Context, c *clients) error {
	as := p.cfg.AgentSandbox
	if as.Template == "" {
		return nil
	}
	p.mu.Lock()
	done := p.checked[as.WarmPool]
	p.mu.Unlock()
	if done {
		return nil
	}
	u, err := c.dyn.Resource(gvrSandboxWarmPool).Namespace(p.cfg.Namespace).Get(ctx, as.WarmPool, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fault.New(fault.Provision, "%s: SandboxWarmPool %s/%s does not exist", TypeName, p.cfg.Namespace, as.WarmPool)
	}
	if err != nil {
		return provisionErr(err, "reading SandboxWarmPool %s/%s", p.cfg.Namespace, as.WarmPool)
	}
	var wp sandboxWarmPool
	if err := fromUnstructured(u, &wp); err != nil {
		return provisionErr(err, "reading SandboxWarmPool %s/%s", p.cfg.Namespace, as.WarmPool)
	}
	if got := wp.Spec.SandboxTemplateRef.Name; got != as.Template {
		return fault.New(fault.Config, "%s: SandboxWarmPool %s/%s is made from SandboxTemplate %q, not %q (agent_sandbox.template)", TypeName, p.cfg.Namespace, as.WarmPool, got, as.Template)
	}
	p.mu.Lock()
	p.checked[as.WarmPool] = true
	p.mu.Unlock()
	return nil
}

// waitClaim waits (ctx bounds it) until claim ns/name is Ready and bound to a Sandbox, and
// returns the Sandbox's name. A terminal Ready reason, or the claim's deletion, is a
// fault.Provision error.
func (p *Provider) waitClaim(ctx context.Context, c *clients, ns, name string, u *unstructured.Unstructured) (string, error) {
	claims := c.dyn.Resource(gvrSandboxClaim).Namespace(ns)
	id := ns + "/" + name
	var bound string
	check := func(u *unstructured.Unstructured) error {
		var cl sandboxClaim
		if err := fromUnstructured(u, &cl); err != nil {
			return err
		}
		if cl.DeletionTimestamp != nil {
			return fault.New(fault.Provision, "%s: SandboxClaim %s is being deleted", TypeName, id)
		}
		ready := meta.FindStatusCondition(cl.Status.Conditions, "Ready")
		if ready != nil && ready.Status == metav1.ConditionFalse && terminalClaimReasons[ready.Reason] {
			return fault.New(fault.Provision, "%s: SandboxClaim %s failed: %s: %s", TypeName, id, ready.Reason, ready.Message)
		}
		if ready != nil && ready.Status == metav1.ConditionTrue && cl.Status.Sandbox.Name != "" {
			bound = cl.Status.Sandbox.Name
			return nil
		}
		return errNotReady
	}
	if err := check(u); !errors.Is(err, errNotReady) {
		return bound, err
	}
	_, err := watchFor(ctx,
		func(ctx context.Context) (*unstructured.Unstructured, string, error) {
			u, err := claims.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, "", err
			}
			return u, u.GetResourceVersion(), nil
		},
		claims.Watch, name, check,
		func() error {
			return fault.New(fault.Provision, "%s: SandboxClaim %s was deleted before it was ready", TypeName, id)
		},
	)
	return bound, err
}

// claimPod returns the pod of Sandbox ns/sandboxName: the one its agents.x-k8s.io/pod-name
// annotation names, else the one with its own name.
func (p *Provider) claimPod(ctx context.Context, c *clients, ns, sandboxName string) (*corev1.Pod, error) {
	u, err := c.dyn.Resource(gvrSandbox).Namespace(ns).Get(ctx, sandboxName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fault.New(fault.Gone, "%s: Sandbox %s/%s no longer exists", TypeName, ns, sandboxName)
	}
	if err != nil {
		return nil, provisionErr(err, "reading Sandbox %s/%s", ns, sandboxName)
	}
	podName := sandboxName
	if a := u.GetAnnotations()[AnnotationPodName]; a != "" {
		podName = a
	}
	pod, err := c.core.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fault.New(fault.Gone, "%s: pod %s/%s of Sandbox %s no longer exists", TypeName, ns, podName, sandboxName)
	}
	if err != nil {
		return nil, provisionErr(err, "reading pod %s/%s", ns, podName)
	}
	return pod, goneErr(pod)
}

// attachClaim reconnects to the sandbox of claim id. A missing or deleted claim, an unbound
// or failed one, and a missing or ended pod are fault.Gone.
func (p *Provider) attachClaim(ctx context.Context, c *clients, id string) (providers.Sandbox, error) {
	ns, name, err := p.splitID(id)
	if err != nil {
		return nil, err
	}
	u, err := c.dyn.Resource(gvrSandboxClaim).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fault.New(fault.Gone, "%s: SandboxClaim %s/%s no longer exists", TypeName, ns, name)
	}
	if err != nil {
		return nil, provisionErr(err, "reading SandboxClaim %s/%s", ns, name)
	}
	var cl sandboxClaim
	if err := fromUnstructured(u, &cl); err != nil {
		return nil, provisionErr(err, "reading SandboxClaim %s/%s", ns, name)
	}
	ready := meta.FindStatusCondition(cl.Status.Conditions, "Ready")
	switch {
	case !p.mine(cl.Labels):
		return nil, fault.New(fault.Gone, "%s: SandboxClaim %s/%s belongs to another Sandgate installation", TypeName, ns, name)
	case cl.DeletionTimestamp != nil:
		return nil, fault.New(fault.Gone, "%s: SandboxClaim %s/%s is being deleted", TypeName, ns, name)
	case cl.Status.Sandbox.Name == "":
		return nil, fault.New(fault.Gone, "%s: SandboxClaim %s/%s is not bound to a sandbox", TypeName, ns, name)
	case ready != nil && ready.Status == metav1.ConditionFalse && terminalClaimReasons[ready.Reason]:
		return nil, fault.New(fault.Gone, "%s: SandboxClaim %s/%s has ended: %s: %s", TypeName, ns, name, ready.Reason, ready.Message)
	}
	pod, err := p.claimPod(ctx, c, ns, cl.Status.Sandbox.Name)
	if err != nil {
		return nil, err
	}
	if pod, err = p.waitPod(ctx, c, ns, pod.Name, pod); err != nil {
		return nil, err
	}
	token, err := p.ensureToken(ctx, c, pod)
	if err != nil {
		return nil, err
	}
	return p.open(c, ns+"/"+name, pod, token), nil
}

// deleteClaim deletes claim ns/name as the gateway when it carries the managed-by label, and
// returns the name of the pod it was bound to, when it can tell ("" otherwise).
func (p *Provider) deleteClaim(ctx context.Context, ns, name string) (pod string, err error) {
	claims := p.gateway.dyn.Resource(gvrSandboxClaim).Namespace(ns)
	u, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if u.GetLabels()[LabelManagedBy] != ManagedBy || !p.mine(u.GetLabels()) {
		p.log.Warn("not deleting a SandboxClaim this installation did not create", "claim", ns+"/"+name, "installation", u.GetLabels()[LabelInstallation])
		return "", nil
	}
	var cl sandboxClaim
	if fromUnstructured(u, &cl) == nil && cl.Status.Sandbox.Name != "" {
		pod = cl.Status.Sandbox.Name
		if sb, err := p.gateway.dyn.Resource(gvrSandbox).Namespace(ns).Get(ctx, pod, metav1.GetOptions{}); err == nil {
			if a := sb.GetAnnotations()[AnnotationPodName]; a != "" {
				pod = a
			}
		}
	}
	uid := u.GetUID()
	err = claims.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return pod, nil
	}
	return pod, err
}

// cleanupClaim removes what a failed claim made, as the gateway, with a context of its own.
func (p *Provider) cleanupClaim(ns, name string, netpol, claim bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if claim {
		if _, err := p.deleteClaim(ctx, ns, name); err != nil {
			p.log.Warn("cleaning up a failed SandboxClaim", "claim", ns+"/"+name, "error", err)
		}
	}
	if netpol {
		if err := p.deleteNetworkPolicy(ctx, ns, name); err != nil {
			p.log.Warn("cleaning up a failed sandbox's NetworkPolicy", "networkpolicy", ns+"/"+name, "error", err)
		}
	}
}
