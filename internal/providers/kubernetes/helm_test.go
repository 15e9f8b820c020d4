package kubernetes

// The Helm chart deploy/helm/sandgate, rendered with the Helm SDK exactly as `helm template`
// renders it (action.Install, client only) and linted as `helm lint --strict` does, then
// applied (server-side apply) to the test API server: every object must be accepted — the
// ScaledObject and TriggerAuthentication against KEDA's own CRDs (testdata/keda-crds) — and
// the chart's ServiceAccount, authenticated with a token the API server issues, must be able
// to do what the provider does with exactly the RBAC the chart grants: create, wait for and
// delete pods and their NetworkPolicies, open the exec tunnel (pods/exec create and get,
// checked with access reviews: there is no kubelet), impersonate the listed users and groups
// and nobody else, claim from an agent-sandbox warm pool. The node and the agent-sandbox
// controller are played for status only (nodesim_test.go, claim_test.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

var chartDir = filepath.Join(repoRoot, "deploy", "helm", "sandgate")

// chartKubeVersion is the Kubernetes version the chart is rendered for: the test API
// server's (tools/kube/go.mod).
const chartKubeVersion = "v1.37.2"

// rendered is the output of one `helm template`.
type rendered struct {
	manifest string
	objects  []*unstructured.Unstructured
	notes    string
}

// renderChart renders the chart as `helm template RELEASE deploy/helm/sandgate --namespace NS
// --kube-version chartKubeVersion` with vals (nil: the chart's defaults), after `helm lint
// --strict` with the same values found nothing.
func renderChart(t *testing.T, release, ns string, vals map[string]any) rendered {
	t.Helper()
	r, err := tryRenderChart(release, ns, vals)
	require.NoError(t, err)

	lint := action.NewLint()
	lint.Strict = true
	lint.Namespace = ns
	lint.KubeVersion, err = chartutil.ParseKubeVersion(chartKubeVersion)
	require.NoError(t, err)
	res := lint.Run([]string{chartDir}, vals)
	for _, m := range res.Messages {
		assert.Less(t, m.Severity, support.WarningSev, "helm lint --strict: %s", m)
	}
	require.Empty(t, res.Errors, "helm lint --strict")
	return r
}

// tryRenderChart is renderChart without lint, returning the error `helm template` reports.
func tryRenderChart(release, ns string, vals map[string]any) (rendered, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return rendered{}, err
	}
	kv, err := chartutil.ParseKubeVersion(chartKubeVersion)
	if err != nil {
		return rendered{}, err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.DryRunOption = true, "true"
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = release
	inst.Namespace = ns
	inst.KubeVersion = kv
	if vals == nil {
		vals = map[string]any{}
	}
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return rendered{}, err
	}
	out := rendered{manifest: rel.Manifest, notes: rel.Info.Notes}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rel.Manifest), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return rendered{}, err
		}
		if s := strings.TrimSpace(string(raw)); s == "" || s == "null" || s == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil { // integers stay int64, as the API machinery has them
			return rendered{}, err
		}
		out.objects = append(out.objects, u)
	}
	return out, nil
}

// find returns the rendered object of kind in namespace ns (or cluster-scoped, ns "") named
// name, failing the test when there is none.
func (r rendered) find(t *testing.T, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range r.objects {
		if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
			return u
		}
	}
	require.Failf(t, "object not rendered", "%s %s/%s; rendered: %v", kind, ns, name, r.names())
	return nil
}

// names lists the rendered objects as "Kind ns/name".
func (r rendered) names() []string {
	var out []string
	for _, u := range r.objects {
		out = append(out, u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName())
	}
	return out
}

// kinds counts the rendered objects by kind.
func (r rendered) kinds() map[string]int {
	out := map[string]int{}
	for _, u := range r.objects {
		out[u.GetKind()]++
	}
	return out
}

// typed converts a rendered object into its Go type.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true), "%s %s", u.GetKind(), u.GetName())
	return &out
}

// applyRendered server-side applies every rendered object, namespaces first, as Helm
// installs them.
func applyRendered(t *testing.T, cfg *rest.Config, r rendered) {
	t.Helper()
	cs, err := k8s.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	objs := slices.Clone(r.objects)
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		rank := func(u *unstructured.Unstructured) int {
			if u.GetKind() == "Namespace" {
				return 0
			}
			return 1
		}
		return rank(a) - rank(b)
	})
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s", gvk)
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		_, err = ri.Apply(context.Background(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "helm-chart-test", Force: true})
		require.NoError(t, err, "apply %s %s/%s", gvk.Kind, u.GetNamespace(), u.GetName())
	}
}

// serviceAccountConfig authenticates as ServiceAccount ns/name with a token the API server
// issues, as the gateway's pod would.
func serviceAccountConfig(t *testing.T, cfg *rest.Config, ns, name string) *rest.Config {
	t.Helper()
	tok, err := adminClient(t).CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sa := rest.AnonymousClientConfig(cfg)
	sa.BearerToken = tok.Status.Token
	return sa
}

// canI asks the API server whether the client cfg may do verb on resource[/subresource] in ns.
func canI(t *testing.T, cfg *rest.Config, ns, verb, resource, subresource string) bool {
	t.Helper()
	cs, err := k8s.NewForConfig(cfg)
	require.NoError(t, err)
	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Resource: resource, Subresource: subresource,
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r.Status.Allowed
}

// impersonating is cfg acting as user with groups (what the provider does in user mode).
func impersonating(cfg *rest.Config, user string, groups ...string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return c
}

// loadRenderedConfig loads the rendered sandgate.yaml with the gateway's own loader and
// validation, with the database URL in the environment as the pods get it.
func loadRenderedConfig(t *testing.T, r rendered, release, ns string) *config.Config {
	t.Helper()
	cm := typed[corev1.ConfigMap](t, r.find(t, "ConfigMap", ns, release+"-sandgate"))
	path := filepath.Join(t.TempDir(), "sandgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cm.Data["sandgate.yaml"]), 0o600))
	cfg, err := LoadGatewayConfig(path, []string{"SANDGATE_DATABASE__URL=postgres://sandgate@db:5432/sandgate"})
	require.NoError(t, err, "the rendered configuration:\n%s", cm.Data["sandgate.yaml"])
	return cfg
}

// checkGatewayPod asserts what the gateway and worker pods share: the service account, the
// hardened security contexts, the configuration mount, the database URL from the Secret.
func checkGatewayPod(t *testing.T, spec corev1.PodSpec, sa string) corev1.Container {
	t.Helper()
	assert.Equal(t, sa, spec.ServiceAccountName)
	psc := spec.SecurityContext
	require.NotNil(t, psc)
	assert.Equal(t, ptr.To(true), psc.RunAsNonRoot)
	assert.Equal(t, ptr.To[int64](10001), psc.RunAsUser, "the image's user")
	require.NotNil(t, psc.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.Equal(t, ptr.To(true), sc.ReadOnlyRootFilesystem)
	assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation)
	assert.Equal(t, ptr.To(false), sc.Privileged)
	require.NotNil(t, sc.Capabilities)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.NotEmpty(t, c.Resources.Requests, "resources")

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	assert.Equal(t, "/etc/sandgate/sandgate.yaml", env["SANDGATE_CONFIG"].Value)
	db := env["SANDGATE_DATABASE__URL"]
	assert.Empty(t, db.Value, "the database URL is never inlined")
	require.NotNil(t, db.ValueFrom)
	require.NotNil(t, db.ValueFrom.SecretKeyRef)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	assert.Equal(t, "config", mounts["/etc/sandgate"])
	assert.Equal(t, "tmp", mounts["/tmp"], "a writable /tmp on the read-only root")
	assert.Equal(t, "spool", mounts["/var/lib/sandgate/spool"], "a writable completion spool at its default folder")
	return c
}

// probe returns the HTTP path and port of p.
func probe(t *testing.T, p *corev1.Probe) string {
	t.Helper()
	require.NotNil(t, p)
	require.NotNil(t, p.HTTPGet)
	return p.HTTPGet.Path + " " + p.HTTPGet.Port.String()
}

// randomSuffix is 8 hex digits, for names of objects that outlive a test (nothing deletes
// namespaces in the test API server).
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// createNamespace creates namespace name in the test API server.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := adminClient(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func TestHelmChartDefaults(t *testing.T) {
	const release = "sg-default"
	ns := "sandgate-" + randomSuffix()
	r := renderChart(t, release, ns, nil)
	full := release + "-sandgate"
	const sandboxes = "sandboxes" // the default profile's namespace

	assert.Equal(t, map[string]int{
		"ConfigMap": 1, "ServiceAccount": 1, "Service": 1, "Deployment": 1,
		"Role": 1, "RoleBinding": 1, "NetworkPolicy": 1,
	}, r.kinds(), "by default: no impersonation, no worker, no KEDA, no ingress, no namespaces (%v)", r.names())

	dep := typed[appsv1.Deployment](t, r.find(t, "Deployment", ns, full))
	c := checkGatewayPod(t, dep.Spec.Template.Spec, full)
	assert.Equal(t, ptr.To[int32](1), dep.Spec.Replicas)
	assert.Equal(t, "sandgate/gateway:0.1.0", c.Image, "the chart's appVersion")
	assert.Equal(t, []string{"serve"}, c.Args)
	assert.Equal(t, "/healthz http", probe(t, c.LivenessProbe))
	assert.Equal(t, "/readyz http", probe(t, c.ReadinessProbe))
	assert.Equal(t, "/healthz http", probe(t, c.StartupProbe))
	require.Len(t, c.Ports, 1)
	assert.Equal(t, int32(8080), c.Ports[0].ContainerPort)
	assert.NotEmpty(t, dep.Spec.Template.Annotations["checksum/config"])
	for _, e := range c.Env {
		if e.Name == "SANDGATE_DATABASE__URL" {
			assert.Equal(t, "sandgate-database", e.ValueFrom.SecretKeyRef.Name)
			assert.Equal(t, "url", e.ValueFrom.SecretKeyRef.Key)
		}
	}

	svc := typed[corev1.Service](t, r.find(t, "Service", ns, full))
	assert.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())
	assert.Equal(t, "gateway", svc.Spec.Selector["app.kubernetes.io/component"])

	cfg := loadRenderedConfig(t, r, release, ns)
	assert.Equal(t, ":8080", cfg.Server.Addr)
	assert.Equal(t, "kubernetes", cfg.Sandbox.Profiles["default"].Type)
	assert.NotEmpty(t, cfg.Auth.Issuers, "gateway serve needs an issuer")

	role := typed[rbacv1.Role](t, r.find(t, "Role", sandboxes, full+"-gateway"))
	assert.Contains(t, role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}})
	for _, rule := range role.Rules {
		assert.NotContains(t, rule.APIGroups, "extensions.agents.x-k8s.io", "no agent-sandbox profile, no agent-sandbox rights")
	}
	rb := typed[rbacv1.RoleBinding](t, r.find(t, "RoleBinding", sandboxes, full+"-gateway"))
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: full, Namespace: ns}}, rb.Subjects)

	deny := typed[networkingv1.NetworkPolicy](t, r.find(t, "NetworkPolicy", sandboxes, full+"-sandboxes-deny"))
	assert.Empty(t, deny.Spec.PodSelector.MatchLabels, "every pod of the namespace")
	assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, deny.Spec.PolicyTypes)
	assert.Empty(t, deny.Spec.Ingress)
	assert.Empty(t, deny.Spec.Egress)
	assert.Contains(t, r.notes, "create secret generic sandgate-database")

	// Applied to the API server: the release namespace exists; the sandbox namespace is
	// deploy/kubernetes/namespace.yaml's (the chart does not create it by default).
	kcfg := requireAPIServer(t)
	applyManifests(t, kcfg, "namespace.yaml")
	createNamespace(t, ns)
	applyRendered(t, kcfg, r)

	gw := serviceAccountConfig(t, kcfg, ns, full)
	for _, verb := range []string{"create", "get"} {
		assert.True(t, canI(t, gw, sandboxes, verb, "pods", "exec"), "pods/exec %s in %s", verb, sandboxes)
		assert.False(t, canI(t, gw, "default", verb, "pods", "exec"), "pods/exec %s outside the sandbox namespace", verb)
	}
	assert.False(t, canI(t, gw, "", "impersonate", "users", ""), "no impersonation by default")

	playNode(t, sandboxes, nil)
	ctx := context.Background()
	p := newTestProvider(t, gw, func(o *Options) {
		o.Config.Namespace = sandboxes
		o.Config.NetworkPolicy = true
		o.Config.CreateTimeout = 30 * time.Second
	})
	sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
	require.NoError(t, err, "the chart's Role lets the gateway create the pod and its NetworkPolicy")
	require.NoError(t, p.Destroy(ctx, sb.ID()))
	_, name := sb.(*Sandbox).Pod()
	waitPodGone(t, adminClient(t), sandboxes, name)

	_, err = p.Create(ctx, providers.Principal{Mode: "user", Subject: "alice@example.com", Groups: []string{"sandbox-users"}}, allowPolicy)
	assert.True(t, apierrors.IsForbidden(err), "user mode without the impersonation value: %v", err)
}

// fullValues turns everything on: two sandbox namespaces the chart creates, profiles of every
// kind the chart reads (deny, allow, allowlist, user mode, pod_ip transport, an agent-sandbox
// warm pool), impersonation, DNS, the queue flavor with workers scaled by KEDA, an ingress, a
// PodDisruptionBudget and extra environment from a Secret.
func fullValues(nsA, nsB string) map[string]any {
	var v map[string]any
	doc := `
replicaCount: 2
image: {repository: registry.example.com/sandgate/gateway, tag: "1.2.3"}
imagePullSecrets: [regcred]
ingress:
  enabled: true
  className: nginx
  hosts: [{host: sandgate.example.com, paths: [{path: /, pathType: Prefix}]}]
  tls: [{secretName: sandgate-tls, hosts: [sandgate.example.com]}, {secretName: preview-tls, hosts: ["*.preview.example.com"]}]
podDisruptionBudget: {enabled: true, minAvailable: 1}
extraEnv:
  - name: E2B_API_KEY
    valueFrom: {secretKeyRef: {name: sandgate-e2b, key: api-key}}
extraVolumes:
  - name: issuer-ca
    secret: {secretName: issuer-ca}
extraVolumeMounts:
  - {name: issuer-ca, mountPath: /etc/sandgate-ca, readOnly: true}
spool: {volume: {persistentVolumeClaim: {claimName: sandgate-spool}}}
database: {existingSecret: pg, secretKey: dsn}
sandboxNamespaces: {create: true}
rbac:
  impersonation:
    enabled: true
    users: [alice@example.com]
    groups: [sandbox-users]
networkPolicy:
  sandboxes: {allowDNS: true}
worker:
  enabled: true
  keda: {enabled: true, maxReplicaCount: 20}
config:
  server: {public_url: https://sandgate.example.com, preview_domain: "preview.example.com:443", trusted_proxies: [10.0.0.0/8]}
  auth:
    admin_groups: [ops]
    issuers:
      - url: https://login.example.com
        audiences: [sandgate]
        ca_file: /etc/sandgate-ca/ca.crt
  sandbox:
    default_profile: locked
    broker:
      flavor: queue
      queue: {type: postgres, consumers: 4}
      response_store: {type: postgres}
    profiles:
      default: null # drops the chart's default profile
      locked:
        type: kubernetes
        policy: {network_egress: deny}
        kubernetes: {namespace: NS_A, network_policy: true, labels: {sandgate.example/tier: locked}}
      open:
        type: kubernetes
        identity: {mode: user}
        policy: {network_egress: allow}
        kubernetes: {namespace: NS_A, labels: {sandgate.example/tier: open}}
      listed:
        type: kubernetes
        policy: {network_egress: allowlist, network_allow: [10.0.0.0/8]}
        kubernetes: {namespace: NS_A, network_policy: true, labels: {sandgate.example/tier: listed}}
      direct:
        type: kubernetes
        policy: {network_egress: deny}
        kubernetes: {namespace: NS_B, network_policy: true, sandboxd: {transport: pod_ip}}
      warm:
        type: kubernetes
        kubernetes:
          namespace: NS_B
          workspace: /mnt/data
          agent_sandbox: {warm_pool: python-sandbox, template: python-sandbox}
`
	doc = strings.NewReplacer("NS_A", nsA, "NS_B", nsB).Replace(doc)
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		panic(err)
	}
	return v
}

func TestHelmChartEverythingOn(t *testing.T) {
	const release = "sg-full"
	full := release + "-sandgate"
	suffix := randomSuffix()
	ns, nsA, nsB := "sandgate-"+suffix, "sbx-a-"+suffix, "sbx-b-"+suffix
	r := renderChart(t, release, ns, fullValues(nsA, nsB))

	assert.Equal(t, map[string]int{
		"ConfigMap": 1, "ServiceAccount": 1, "Service": 1, "Deployment": 2, "Ingress": 1, "PodDisruptionBudget": 1,
		"Namespace": 2, "Role": 4, "RoleBinding": 4, "ClusterRole": 1, "ClusterRoleBinding": 1,
		// deny ×2, DNS ×2, the pod_ip ingress in B, the open profile's egress in A
		"NetworkPolicy":         6,
		"ScaledObject":          1,
		"TriggerAuthentication": 1,
	}, r.kinds(), "%v", r.names())

	// The ingress serves the console's host and every preview host.
	ing := typed[networkingv1.Ingress](t, r.find(t, "Ingress", ns, full))
	var hosts []string
	for _, rule := range ing.Spec.Rules {
		hosts = append(hosts, rule.Host)
		require.Len(t, rule.HTTP.Paths, 1)
		assert.Equal(t, full, rule.HTTP.Paths[0].Backend.Service.Name)
	}
	assert.Equal(t, []string{"sandgate.example.com", "*.preview.example.com"}, hosts)

	// The gateway and its workers.
	dep := typed[appsv1.Deployment](t, r.find(t, "Deployment", ns, full))
	c := checkGatewayPod(t, dep.Spec.Template.Spec, full)
	assert.Equal(t, ptr.To[int32](2), dep.Spec.Replicas)
	assert.Equal(t, "registry.example.com/sandgate/gateway:1.2.3", c.Image)
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, dep.Spec.Template.Spec.ImagePullSecrets)
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "spool" {
			require.NotNil(t, v.PersistentVolumeClaim, "the spool on the volume given")
			assert.Equal(t, "sandgate-spool", v.PersistentVolumeClaim.ClaimName)
			assert.Nil(t, v.EmptyDir)
		}
	}
	worker := typed[appsv1.Deployment](t, r.find(t, "Deployment", ns, full+"-worker"))
	wc := checkGatewayPod(t, worker.Spec.Template.Spec, full)
	assert.Equal(t, []string{"worker"}, wc.Args)
	assert.Nil(t, worker.Spec.Replicas, "KEDA owns the workers' replica count")
	assert.Nil(t, wc.LivenessProbe, "workers serve no HTTP")
	assert.Equal(t, "worker", worker.Spec.Template.Labels["app.kubernetes.io/component"])
	assert.NotEqual(t, dep.Spec.Selector.MatchLabels, worker.Spec.Selector.MatchLabels)
	for _, cont := range []corev1.Container{c, wc} {
		var names []string
		for _, e := range cont.Env {
			names = append(names, e.Name)
			if e.Name == "SANDGATE_DATABASE__URL" {
				assert.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "pg"}, Key: "dsn"}, *e.ValueFrom.SecretKeyRef)
			}
		}
		assert.Contains(t, names, "E2B_API_KEY")
		assert.Contains(t, cont.VolumeMounts, corev1.VolumeMount{Name: "issuer-ca", MountPath: "/etc/sandgate-ca", ReadOnly: true})
	}
	cfg := loadRenderedConfig(t, r, release, ns)
	assert.Equal(t, "queue", cfg.Sandbox.Broker.Flavor)
	assert.Len(t, cfg.Sandbox.Profiles, 5)

	// KEDA: River's jobs of the sandgate queue, 4 (the consumers) per worker, with the
	// database URL from the same Secret.
	so := r.find(t, "ScaledObject", ns, full+"-worker")
	target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	assert.Equal(t, full+"-worker", target)
	maxReplicas, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	assert.Equal(t, int64(20), maxReplicas)
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	require.Len(t, triggers, 1)
	trig := triggers[0].(map[string]any)
	assert.Equal(t, "postgresql", trig["type"])
	meta := trig["metadata"].(map[string]any)
	assert.Equal(t, "4", meta["targetQueryValue"])
	assert.Contains(t, meta["query"], "river_job")
	assert.Equal(t, map[string]any{"name": full + "-worker-postgres"}, trig["authenticationRef"])
	ta := r.find(t, "TriggerAuthentication", ns, full+"-worker-postgres")
	refs, _, _ := unstructured.NestedSlice(ta.Object, "spec", "secretTargetRef")
	assert.Equal(t, []any{map[string]any{"parameter": "connection", "name": "pg", "key": "dsn"}}, refs)

	// Namespaces, RBAC.
	for _, sbx := range []string{nsA, nsB} {
		nsObj := typed[corev1.Namespace](t, r.find(t, "Namespace", "", sbx))
		assert.Equal(t, "restricted", nsObj.Labels["pod-security.kubernetes.io/enforce"])
		role := typed[rbacv1.Role](t, r.find(t, "Role", sbx, full+"-gateway"))
		assert.Contains(t, role.Rules, rbacv1.PolicyRule{APIGroups: []string{"extensions.agents.x-k8s.io"}, Resources: []string{"sandboxclaims"}, Verbs: []string{"create", "get", "list", "watch", "delete"}})
		ub := typed[rbacv1.RoleBinding](t, r.find(t, "RoleBinding", sbx, full+"-sandbox-user"))
		assert.Equal(t, []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "sandbox-users"}}, ub.Subjects)
	}
	imp := typed[rbacv1.ClusterRole](t, r.find(t, "ClusterRole", "", full+"-"+ns+"-impersonate"))
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"alice@example.com"}},
		{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"sandbox-users"}},
	}, imp.Rules)

	// NetworkPolicies: what each profile's policy allows, nothing more.
	openEgress := typed[networkingv1.NetworkPolicy](t, r.find(t, "NetworkPolicy", nsA, full+"-egress-open"))
	assert.Equal(t, map[string]string{"sandgate.io/sandbox": "true", "sandgate.example/tier": "open"}, openEgress.Spec.PodSelector.MatchLabels)
	assert.Equal(t, []networkingv1.NetworkPolicyEgressRule{{}}, openEgress.Spec.Egress, "all egress")
	for _, name := range []string{"locked", "listed", "direct", "warm"} {
		for _, sbx := range []string{nsA, nsB} {
			for _, u := range r.objects {
				assert.False(t, u.GetKind() == "NetworkPolicy" && u.GetNamespace() == sbx && u.GetName() == full+"-egress-"+name,
					"profile %s does not allow egress", name)
			}
		}
	}
	ingress := typed[networkingv1.NetworkPolicy](t, r.find(t, "NetworkPolicy", nsB, full+"-sandboxd-ingress"))
	require.Len(t, ingress.Spec.Ingress, 1)
	assert.Equal(t, 8888, ingress.Spec.Ingress[0].Ports[0].Port.IntValue())
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": ns}, ingress.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels)
	assert.Equal(t, release, ingress.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/instance"])
	dns := typed[networkingv1.NetworkPolicy](t, r.find(t, "NetworkPolicy", nsA, full+"-sandboxes-dns"))
	assert.Equal(t, 53, dns.Spec.Egress[0].Ports[0].Port.IntValue())

	// Applied to the API server, with KEDA's CRDs.
	kcfg := requireAPIServer(t)
	_, err := envtest.InstallCRDs(kcfg, envtest.CRDInstallOptions{Paths: []string{"testdata/keda-crds"}, ErrorIfPathMissing: true})
	require.NoError(t, err)
	createNamespace(t, ns)
	applyRendered(t, kcfg, r)

	// The gateway's ServiceAccount does what the provider does, with what the chart grants.
	gw := serviceAccountConfig(t, kcfg, ns, full)
	ctx := context.Background()
	cs := adminClient(t)
	for _, sbx := range []string{nsA, nsB} {
		for _, verb := range []string{"create", "get"} {
			assert.True(t, canI(t, gw, sbx, verb, "pods", "exec"), "gateway: pods/exec %s in %s", verb, sbx)
			assert.True(t, canI(t, impersonating(gw, "alice@example.com", "sandbox-users"), sbx, verb, "pods", "exec"), "alice: pods/exec %s in %s", verb, sbx)
		}
		assert.False(t, canI(t, impersonating(gw, "alice@example.com", "sandbox-users"), sbx, "delete", "pods", ""), "users never delete: the gateway does")
	}
	assert.False(t, canI(t, gw, "default", "create", "pods", ""))

	t.Run("agent mode", func(t *testing.T) {
		playNode(t, nsA, nil)
		p := newTestProvider(t, gw, func(o *Options) {
			o.Config = Config{Namespace: nsA, NetworkPolicy: true, CreateTimeout: 30 * time.Second, Labels: map[string]string{"sandgate.example/tier": "locked"}}
		})
		sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
		require.NoError(t, err, "Pod Security restricted on the chart's namespace and the chart's Role admit the pod")
		require.NoError(t, p.Destroy(ctx, sb.ID()))
		_, name := sb.(*Sandbox).Pod()
		waitPodGone(t, cs, nsA, name)
	})

	t.Run("user mode", func(t *testing.T) {
		playNode(t, nsA, nil)
		p := newTestProvider(t, gw, func(o *Options) {
			o.Config = Config{Namespace: nsA, NetworkPolicy: true, CreateTimeout: 30 * time.Second, Labels: map[string]string{"sandgate.example/tier": "open"}}
		})
		alice := providers.Principal{Mode: "user", Subject: "alice@example.com", Groups: []string{"sandbox-users"}}
		sb, err := p.Create(ctx, alice, providers.Policy{NetworkEgress: providers.EgressAllowlist, NetworkAllow: []string{"10.0.0.0/8"}, Strict: true, Timeout: time.Minute})
		require.NoError(t, err, "alice creates the pod and its NetworkPolicy through impersonation")
		pod, err := cs.CoreV1().Pods(nsA).Get(ctx, func() string { _, n := sb.(*Sandbox).Pod(); return n }(), metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, p.Destroy(ctx, sb.ID()), "the gateway deletes what alice (no delete right) created")
		waitPodGone(t, cs, nsA, pod.Name)

		for _, pr := range []providers.Principal{
			{Mode: "user", Subject: "mallory@example.com", Groups: []string{"sandbox-users"}}, // not a listed user
			{Mode: "user", Subject: "alice@example.com", Groups: []string{"system:masters"}},  // not a listed group
		} {
			_, err := p.Create(ctx, pr, allowPolicy)
			assert.True(t, apierrors.IsForbidden(err), "%+v: %v", pr, err)
		}
	})

	t.Run("agent-sandbox", func(t *testing.T) {
		applyExamples(t, nsB)
		playNode(t, nsB, nil)
		playController(t, nsB)
		p := newTestProvider(t, gw, func(o *Options) {
			o.Config = Config{Namespace: nsB, CreateTimeout: 30 * time.Second, Workspace: "/mnt/data",
				AgentSandbox: &AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"}}
		})
		sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
		require.NoError(t, err, "the chart grants the agent-sandbox rules when a profile claims from a warm pool")
		require.NoError(t, p.Destroy(ctx, sb.ID()))
	})
}

// TestHelmChartRefuses: values that would leak a secret, leave executions unrun, or open more
// than a profile allows make `helm template` fail with a message naming the fix.
func TestHelmChartRefuses(t *testing.T) {
	base := func(extra string) map[string]any {
		var v map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(extra), &v))
		return v
	}
	for name, c := range map[string]struct {
		values string
		want   string
	}{
		"a misspelt value (values.schema.json)": {`workers: {enabled: true}`, "workers"},
		"database URL in values":                {`config: {database: {url: "postgres://u:secret@db/sandgate"}}`, "database.existingSecret"},
		"kafka password in values": {`
worker: {enabled: true}
config: {sandbox: {broker: {flavor: queue, queue: {type: kafka, kafka: {sasl: {mechanism: PLAIN, username: u, password: secret}}}}}}`,
			"SANDGATE_SANDBOX__BROKER__QUEUE__KAFKA__SASL__PASSWORD"},
		"user mode without impersonation": {`
config: {sandbox: {profiles: {mine: {type: kubernetes, identity: {mode: user}, kubernetes: {namespace: sbx}}}}}`,
			"rbac.impersonation.enabled=true"},
		"impersonation of nobody":      {`rbac: {impersonation: {enabled: true, groups: [g]}}`, "rbac.impersonation.users"},
		"queue flavor without workers": {`config: {sandbox: {broker: {flavor: queue}}}`, "worker.enabled=true"},
		"workers without the queue":    {`worker: {enabled: true}`, "flavor: queue"},
		"workers on an in-memory queue": {`
worker: {enabled: true}
config: {sandbox: {broker: {flavor: queue, queue: {type: in_memory}}}}`, "in_memory"},
		"KEDA without workers": {`worker: {keda: {enabled: true}}`, "worker.enabled=true"},
		"KEDA on nats without its monitoring endpoint": {`
worker: {enabled: true, keda: {enabled: true}}
config: {sandbox: {broker: {flavor: queue, queue: {type: nats, nats: {url: "nats://nats:4222"}}}}}`, "monitoringEndpoint"},
		"an allow profile whose selector covers a deny profile": {`
config:
  sandbox:
    profiles:
      default: {type: kubernetes, policy: {network_egress: deny}, kubernetes: {namespace: sbx, labels: {team: a, tier: locked}}}
      open: {type: kubernetes, policy: {network_egress: allow}, kubernetes: {namespace: sbx, labels: {team: a}}}`,
			"also select default's pods"},
		"an allow profile without labels next to a deny profile": {`
config:
  sandbox:
    profiles:
      default: {type: kubernetes, policy: {network_egress: deny}, kubernetes: {namespace: sbx}}
      open: {type: kubernetes, kubernetes: {namespace: sbx}}`,
			"profile open allows egress"},
		"a deny-all policy in a shared namespace": {`
config: {sandbox: {profiles: {default: {kubernetes: {namespace: default}}}}}`, "not one of its own"},
		"a deny-all policy in the release namespace": {`
config: {sandbox: {profiles: {default: {kubernetes: {namespace: sandgate}}}}}`, "not one of its own"},
		"sandboxes in the release namespace": {`
networkPolicy: {sandboxes: {enabled: false}}
sandboxNamespaces: {create: true}
config: {sandbox: {profiles: {default: {type: kubernetes, policy: {network_egress: deny}, kubernetes: {namespace: sandgate}}}}}`,
			"namespace of their own"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tryRenderChart("sg", "sandgate", base(c.values))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}

	// The same allow profile with a label of its own renders.
	_, err := tryRenderChart("sg", "sandgate", base(`
config:
  sandbox:
    profiles:
      default: {type: kubernetes, policy: {network_egress: deny}, kubernetes: {namespace: sbx, labels: {tier: locked}}}
      open: {type: kubernetes, policy: {network_egress: allow}, kubernetes: {namespace: sbx, labels: {tier: open}}}`))
	require.NoError(t, err)
}

// TestHelmKEDATriggers: the trigger of every queue transport names what the workers consume.
func TestHelmKEDATriggers(t *testing.T) {
	trigger := func(t *testing.T, values string) map[string]any {
		t.Helper()
		var v map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(values), &v))
		r, err := tryRenderChart("sg", "sandgate", v)
		require.NoError(t, err)
		so := r.find(t, "ScaledObject", "sandgate", "sg-sandgate-worker")
		triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
		require.Len(t, triggers, 1)
		return triggers[0].(map[string]any)
	}
	t.Run("nats", func(t *testing.T) {
		trig := trigger(t, `
worker: {enabled: true, keda: {enabled: true, authenticationRef: nats-auth, nats: {monitoringEndpoint: "nats.nats:8222"}}}
config: {sandbox: {broker: {flavor: queue, queue: {type: nats, consumers: 3, nats: {url: "nats://nats:4222"}}}}}`)
		assert.Equal(t, "nats-jetstream", trig["type"])
		assert.Equal(t, map[string]any{
			"natsServerMonitoringEndpoint": "nats.nats:8222", "account": "$G", "stream": "SANDGATE_TASKS",
			"consumer": "sandgate-workers", "lagThreshold": "3", "useHttps": "false",
		}, trig["metadata"])
		assert.Equal(t, map[string]any{"name": "nats-auth"}, trig["authenticationRef"])
	})
	t.Run("kafka", func(t *testing.T) {
		trig := trigger(t, `
worker: {enabled: true, keda: {enabled: true, targetPerReplica: 7}}
config: {sandbox: {broker: {flavor: queue, queue: {type: kafka, kafka: {brokers: ["k1:9092", "k2:9092"], input_topic: jobs, group_id: wk}}}}}`)
		assert.Equal(t, "kafka", trig["type"])
		assert.Equal(t, map[string]any{"bootstrapServers": "k1:9092,k2:9092", "consumerGroup": "wk", "topic": "jobs", "lagThreshold": "7"}, trig["metadata"])
		assert.NotContains(t, trig, "authenticationRef")
	})
	t.Run("sqs", func(t *testing.T) {
		trig := trigger(t, `
worker: {enabled: true, keda: {enabled: true, sqs: {identityOwner: operator}}}
config: {sandbox: {broker: {flavor: queue, queue: {type: sqs, sqs: {input_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate.fifo", dead_letter_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/dead.fifo"}}}}}`)
		assert.Equal(t, "aws-sqs-queue", trig["type"])
		assert.Equal(t, map[string]any{
			"queueURL": "https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate.fifo", "queueLength": "5",
			"awsRegion": "eu-west-1", "identityOwner": "operator",
		}, trig["metadata"])
	})
}

// TestHelmKEDAQueryCountsRiverJobs runs the postgres trigger's query against River's real
// schema: a queued execution counts, a finished one does not.
func TestHelmKEDAQueryCountsRiverJobs(t *testing.T) {
	var v map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(`
worker: {enabled: true, keda: {enabled: true}}
config: {sandbox: {broker: {flavor: queue}}}`), &v))
	r, err := tryRenderChart("sg", "sandgate", v)
	require.NoError(t, err)
	so := r.find(t, "ScaledObject", "sandgate", "sg-sandgate-worker")
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	query := triggers[0].(map[string]any)["metadata"].(map[string]any)["query"].(string)

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	q, err := queue.NewPostgres(ctx, pool, time.Minute, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, query).Scan(&n))
		return n
	}
	assert.Equal(t, 0, count())
	for _, id := range []string{"task-1", "task-2"} {
		require.NoError(t, q.Enqueue(ctx, nil, queue.Message{TaskID: id, GroupID: "session-1", Body: []byte("{}")}))
	}
	assert.Equal(t, 2, count())
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>'task_id' = 'task-1'`)
	require.NoError(t, err)
	assert.Equal(t, 1, count(), "finished jobs are not demand")
}
