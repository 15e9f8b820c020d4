package kubernetes

// deploy/kubernetes against the API server: the manifests apply, and the gateway's
// ServiceAccount, with exactly the rights they grant, runs sandboxes in the hardened namespace
// (Pod Security restricted, quota, limit range), in agent mode, in user mode and from an
// agent-sandbox warm pool. The node is played for status only and the agent-sandbox controller
// by claim_test.go's playedController.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// applyManifests creates every object of deploy/kubernetes/<file>.
func applyManifests(t *testing.T, cfg *rest.Config, files ...string) {
	t.Helper()
	cs := adminClient(t)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	for _, f := range files {
		for _, u := range manifests(t, f) {
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			require.NoError(t, err, "%s: %s", f, gvk)
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if u.GetNamespace() != "" {
				ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
			}
			_, err = ri.Create(context.Background(), u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			require.NoError(t, err, "%s: %s %s", f, gvk.Kind, u.GetName())
		}
	}
}

func TestDeployManifests(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	const ns = "sandboxes" // the namespace the manifests make
	applyManifests(t, cfg, "namespace.yaml", "rbac.yaml", "agent-sandbox.yaml")

	// The gateway authenticates as its ServiceAccount, with a token the API server issues.
	tok, err := cs.CoreV1().ServiceAccounts("sandgate").CreateToken(ctx, "sandgate-gateway",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	gwCfg := rest.AnonymousClientConfig(cfg)
	gwCfg.BearerToken = tok.Status.Token
	gw, err := k8s.NewForConfig(gwCfg)
	require.NoError(t, err)
	review, err := gw.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "system:serviceaccount:sandgate:sandgate-gateway", review.Status.UserInfo.Username)

	// pods/exec needs both verbs; the gateway has them in the sandbox namespace only.
	for _, verb := range []string{"create", "get"} {
		for space, want := range map[string]bool{ns: true, "default": false} {
			r, err := gw.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: space, Verb: verb, Resource: "pods", Subresource: "exec",
				}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			assert.Equal(t, want, r.Status.Allowed, "pods/exec %s in %s", verb, space)
		}
	}

	playNode(t, ns, nil)
	playController(t, ns)
	block := Config{Namespace: ns, CreateTimeout: 30 * time.Second, NetworkPolicy: true}

	t.Run("agent mode", func(t *testing.T) {
		p := newTestProvider(t, gwCfg, func(o *Options) { o.Config = block })
		sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
		require.NoError(t, err, "Pod Security restricted, the quota and the gateway's Role admit the pod")
		_, name := sb.(*Sandbox).Pod()
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		limits := pod.Spec.Containers[0].Resources.Limits
		assert.True(t, limits.Memory().Equal(resource.MustParse("1Gi")), "the LimitRange filled in defaults: %v", limits)
		require.NoError(t, p.Destroy(ctx, sb.ID()))
		waitPodGone(t, cs, ns, name)
	})

	t.Run("user mode", func(t *testing.T) {
		p := newTestProvider(t, gwCfg, func(o *Options) { o.Config = block })
		alice := providers.Principal{Mode: "user", Subject: "alice@example.com", Groups: []string{"sandbox-users"}}
		sb, err := p.Create(ctx, alice, providers.Policy{NetworkEgress: providers.EgressAllowlist, NetworkAllow: []string{"10.0.0.0/8"}, Strict: true, Timeout: time.Minute})
		require.NoError(t, err)
		require.NoError(t, p.Destroy(ctx, sb.ID()), "the gateway deletes what alice (no delete right) created")
		_, name := sb.(*Sandbox).Pod()
		waitPodGone(t, cs, ns, name)

		for _, pr := range []providers.Principal{
			{Mode: "user", Subject: "mallory@example.com", Groups: []string{"sandbox-users"}},
			{Mode: "user", Subject: "alice@example.com", Groups: []string{"cluster-admins"}},
		} {
			_, err := p.Create(ctx, pr, allowPolicy)
			assert.True(t, apierrors.IsForbidden(err), "%+v: %v", pr, err)
		}
		// Bob may be impersonated but is in no group with sandbox rights.
		_, err = p.Create(ctx, providers.Principal{Mode: "user", Subject: "bob@example.com"}, allowPolicy)
		assert.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.True(t, fault.IsKind(err, fault.Provision))
	})

	t.Run("agent-sandbox", func(t *testing.T) {
		p := newTestProvider(t, gwCfg, func(o *Options) {
			o.Config = block
			o.Config.Workspace = "/mnt/data"
			o.Config.AgentSandbox = &AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"}
		})
		sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
		require.NoError(t, err)
		require.NoError(t, p.Destroy(ctx, sb.ID()))
	})
}
