package kubernetes

// Identity against the API server's real authentication and RBAC. The gateway is a non-admin
// user (envtest AddUser) that may impersonate one user and two groups (resourceNames). The
// node is played for status only (nodesim_test.go), so pods become Ready without running.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

func TestImpersonationWithRBAC(t *testing.T) {
	requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, restricted)
	playNode(t, ns, nil)

	gwName := "sandgate-gateway-" + ns
	gw, err := testEnv.AddUser(envtest.User{Name: gwName, Groups: []string{"sandgate:gateways"}}, nil)
	require.NoError(t, err)
	gwUser := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: gwName}

	// The gateway may impersonate alice and the groups team-a and team-b, nothing else.
	crName := "impersonate-" + ns
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"alice"}},
			{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"team-a", "team-b"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		Subjects:   []rbacv1.Subject{gwUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: crName},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The gateway's own rights in the namespace: read and delete, for clean-up. Creating is
	// left to the users it impersonates.
	bindRole(t, ns, "gateway", gwUser,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "delete"}},
	)

	p := newTestProvider(t, gw.Config(), func(o *Options) {
		o.Config.Namespace = ns
		o.Config.NetworkPolicy = true
		o.Config.CreateTimeout = 30 * time.Second
	})
	alice := providers.Principal{Mode: "user", Subject: "alice-oidc-subject", Groups: []string{"oidc-group"},
		Credentials: providers.Credentials{User: "alice", Groups: []string{"team-a", "team-b"}}}
	deny := providers.Policy{NetworkEgress: providers.EgressDeny, Timeout: time.Minute, Strict: true}

	// The impersonating client presents alice with both groups (one Impersonate-Group header
	// each), which the API server confirms.
	c, err := p.clientsFor(alice)
	require.NoError(t, err)
	review, err := c.core.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "alice", review.Status.UserInfo.Username)
	assert.Subset(t, review.Status.UserInfo.Groups, []string{"team-a", "team-b"})
	again, err := p.clientsFor(alice)
	require.NoError(t, err)
	assert.Same(t, c, again, "impersonating clients are cached per identity")

	// 403 while alice has no rights in the namespace.
	_, err = p.Create(ctx, alice, deny)
	require.Error(t, err)
	assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `User "alice"`)

	// Bound: alice may create pods, NetworkPolicies and exec, but not delete.
	bindRole(t, ns, "sandbox-user", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"create"}},
	)
	var sb providers.Sandbox
	require.Eventually(t, func() bool { // RBAC changes reach the authorizer's cache quickly
		sb, err = p.Create(ctx, alice, deny)
		return err == nil || !apierrors.IsForbidden(err)
	}, 20*time.Second, 200*time.Millisecond)
	require.NoError(t, err)
	_, pod := sb.(*Sandbox).Pod()
	created, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "alice-oidc-subject", created.Annotations[AnnotationOwner])
	_, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "the NetworkPolicy was created as alice")

	// Attach as alice works; alice may not delete, the gateway deletes as itself.
	_, err = p.Attach(ctx, sb.ID(), alice, deny)
	require.NoError(t, err)
	err = c.core.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
	require.True(t, apierrors.IsForbidden(err), "alice cannot delete: %v", err)
	require.NoError(t, p.Destroy(ctx, sb.ID()))
	waitPodGone(t, cs, ns, pod)
	_, err = cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, pod, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "%v", err)

	// Outside the grant: another user, or alice with a group the gateway may not impersonate.
	for name, pr := range map[string]providers.Principal{
		"user":                         {Mode: "user", Subject: "bob", Credentials: providers.Credentials{Groups: []string{"team-a"}}},
		"group":                        {Mode: "user", Subject: "x", Credentials: providers.Credentials{User: "alice", Groups: []string{"team-a", "admins"}}},
		"subject and principal groups": {Mode: "user", Subject: "alice", Groups: []string{"team-z"}},
	} {
		_, err := p.Create(ctx, pr, allowPolicy)
		require.Error(t, err, name)
		assert.True(t, apierrors.IsForbidden(err), "%s: %v", name, err)
		assert.Contains(t, err.Error(), "impersonate", name)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "refused impersonation creates nothing")

	// Without the credentials' user, the subject is impersonated (and principal groups).
	_, err = p.Create(ctx, providers.Principal{Mode: "user", Subject: "alice", Groups: []string{"team-b"}}, allowPolicy)
	require.NoError(t, err)
}
