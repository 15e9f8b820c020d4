package kubernetes

// User mode on the real node: the gateway is a user of the API server with no rights but to
// impersonate alice (and bob, whom no Role lets create pods), to read, watch and delete pods
// and to delete NetworkPolicies; the pods are created by the impersonated users, for real.

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

func TestNodeImpersonation(t *testing.T) {
	c := requireNode(t)
	ns := nodeNamespace(t, c)
	cs, err := k8s.NewForConfig(c.Config)
	require.NoError(t, err)
	ctx := context.Background()

	gwName := "sandgate-gateway-" + ns
	gwConfig, err := c.AddUser(gwName, "sandgate:gateways")
	require.NoError(t, err)
	crName := "impersonate-" + ns
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"alice", "bob", "carol"}},
			{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"team-a"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(context.Background(), crName, metav1.DeleteOptions{}) })
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: crName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: gwName}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: crName},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crName, metav1.DeleteOptions{})
	})
	nodeRole(t, cs, ns, "gateway", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: gwName},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "delete"}},
	)
	// team-a may create and exec; carol may create but not exec; bob has nothing.
	nodeRole(t, cs, ns, "sandbox-user", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-a"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
	)
	nodeRole(t, cs, ns, "no-exec", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch"}},
	)

	p := nodeProvider(t, c, ns, nil, gwConfig)
	alice := providers.Principal{Mode: "user", Subject: "alice-oidc", Credentials: providers.Credentials{User: "alice", Groups: []string{"team-a"}}}

	// Allowed: alice's pod is created as alice, runs, and executes code through her exec.
	var sb providers.Sandbox
	require.Eventually(t, func() bool { // the RBAC above reaches the authorizer's cache
		sb, err = p.Create(ctx, alice, allowPolicy)
		return err == nil || !apierrors.IsForbidden(err)
	}, 20*time.Second, 200*time.Millisecond)
	require.NoError(t, err)
	_, pod := sb.(*Sandbox).Pod()
	created, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "alice-oidc", created.Annotations[AnnotationOwner])
	assert.NotEmpty(t, created.Spec.NodeName, "scheduled on the real node")
	var out bytes.Buffer
	st, err := sb.Exec(ctx, providers.ExecSpec{Code: "import os; print(os.getuid())", Language: "python", Timeout: time.Minute, Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	assert.Equal(t, "65532\n", out.String())
	require.NoError(t, p.Destroy(ctx, sb.ID()), "the gateway deletes as itself")

	// Denied: bob may be impersonated but may not create pods. His session fails closed,
	// naming the RBAC to check, and nothing is left behind.
	bob := providers.Principal{Mode: "user", Subject: "bob"}
	_, err = p.Create(ctx, bob, allowPolicy)
	require.Error(t, err)
	assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `User "bob" cannot create resource "pods"`)
	assert.Contains(t, err.Error(), "check the RBAC of the identity the profile acts as")

	// Not impersonable: mallory is outside the gateway's grant.
	_, err = p.Create(ctx, providers.Principal{Mode: "user", Subject: "mallory"}, allowPolicy)
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), "impersonate")

	// carol's pod is created, but she may not exec: her first call fails closed as
	// fault.Forbidden, saying which verbs pods/exec needs.
	sb, err = p.Create(ctx, providers.Principal{Mode: "user", Subject: "carol"}, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	_, err = sb.Exec(ctx, providers.ExecSpec{Command: "echo should-not-run", Timeout: time.Minute, Output: providers.Output{Stdout: &out}})
	require.Error(t, err)
	assert.True(t, fault.IsKind(err, fault.Forbidden), "%v", err)
	assert.Contains(t, err.Error(), "pods/exec needs both the create and the get verbs")

	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			assert.Equal(t, "carol", p.Annotations[AnnotationOwner], "only carol's pod is left: %s", p.Name)
		}
	}
}

// nodeRole makes a Role in ns with rules and binds it to subject, on the real cluster.
func nodeRole(t *testing.T, cs k8s.Interface, ns, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   []rbacv1.Subject{subject},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}
