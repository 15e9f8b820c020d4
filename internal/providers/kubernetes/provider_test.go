package kubernetes

// Tests that need no API server: configuration, the objects the provider builds, and the
// checks that must fail before any API call.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// fillDefaults is a kubernetes block with the defaults spelled out.
func fillDefaults() Config {
	return Config{Namespace: DefaultNamespace, Image: DefaultImage, CreateTimeout: DefaultCreateTimeout, Workspace: DefaultWorkspace}
}

// countingServer is an API server stand-in that counts requests and answers 500.
func countingServer(t *testing.T) (*rest.Config, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, &n
}

func TestFactoryNeedsItsBlock(t *testing.T) {
	_, err := Factory(providers.BuildContext{Type: TypeName, Profile: "p"})
	require.True(t, fault.IsKind(err, fault.Config), "%v", err)
	assert.Contains(t, err.Error(), "no kubernetes block")
}

func TestFactoryTakesTheProfileFromTheContext(t *testing.T) {
	cfg, _ := countingServer(t)
	_, err := Factory(providers.BuildContext{
		Type: TypeName, Profile: "p", Options: Options{Config: Config{Namespace: "sbx"}, RESTConfig: cfg},
	})
	require.True(t, fault.IsKind(err, fault.Config), "no installation id: %v", err)
	prov, err := Factory(providers.BuildContext{
		Type: TypeName, Profile: "p", IdleTimeout: time.Minute, Installation: testInstallation,
		Options: Options{Config: Config{Namespace: "sbx"}, AttachTo: "ns/pod", RESTConfig: cfg},
	})
	require.NoError(t, err)
	p := prov.(*Provider)
	assert.Equal(t, "p", p.profile)
	assert.Equal(t, testInstallation, p.installation)
	assert.Equal(t, time.Minute, p.idle)
	assert.Equal(t, "ns/pod", p.attachTo)
	assert.Equal(t, "sbx", p.cfg.Namespace)
	assert.Equal(t, DefaultCreateTimeout, p.createTimeout(), "zero fields take their defaults")
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	cfg, _ := countingServer(t)
	for name, mutate := range map[string]func(*Options){
		"unknown security_context key":    func(o *Options) { o.Config.SecurityContext = map[string]any{"runAsRoot": true} },
		"unknown container context key":   func(o *Options) { o.Config.ContainerSecurityContext = map[string]any{"readOnlyRoot": true} },
		"wrongly typed context value":     func(o *Options) { o.Config.SecurityContext = map[string]any{"runAsUser": "me"} },
		"reserved label":                  func(o *Options) { o.Config.Labels = map[string]string{LabelManagedBy: "me"} },
		"invalid label value":             func(o *Options) { o.Config.Labels = map[string]string{"team": "a b"} },
		"invalid env name":                func(o *Options) { o.Config.Env = map[string]string{"A-B": "x"} },
		"agent_sandbox without warm_pool": func(o *Options) { o.Config.AgentSandbox = &AgentSandboxConfig{} },
		"relative sandboxd path":          func(o *Options) { o.Config.Sandboxd.Path = "bin/sandboxd" },
		"unknown sandboxd transport":      func(o *Options) { o.Config.Sandboxd.Transport = "carrier-pigeon" },
		"sandboxd image on attached profile": func(o *Options) {
			o.Config.Sandboxd.Image = "sandgate/sandbox-python"
			o.AttachTo = "ns/pod"
		},
		"agent_sandbox on attached profile": func(o *Options) {
			o.Config.AgentSandbox = &AgentSandboxConfig{WarmPool: "w"}
			o.AttachTo = "ns/pod"
		},
	} {
		t.Run(name, func(t *testing.T) {
			opts := Options{Installation: testInstallation, Config: fillDefaults(), RESTConfig: cfg, Logger: quietLog}
			mutate(&opts)
			_, err := New(opts)
			require.Error(t, err)
			assert.True(t, fault.IsKind(err, fault.Config), "want a config fault, got %v", err)
		})
	}
}

func TestCapabilities(t *testing.T) {
	cfg, calls := countingServer(t)
	p, err := New(Options{Installation: testInstallation, Config: fillDefaults(), RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	c := p.Capabilities()
	assert.Equal(t, providers.Capabilities{
		Isolation: providers.IsolationContainer, Shell: true, Languages: []string{"python", "bash"}, Files: true,
		PackageInstall: true, Stateful: true, Interactive: true, Background: true, Attach: true, Provisions: true,
		AttachesExternal: true, PrincipalUser: true, PolicyFilesystem: true, PolicyResources: true, PolicyDisk: true, PreviewPorts: true,
	}, c)
	assert.Equal(t, TypeName, p.Type())

	k := fillDefaults()
	k.NetworkPolicy = true
	p, err = New(Options{Installation: testInstallation, Config: k, RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	assert.True(t, p.Capabilities().PolicyNetwork, "network_policy: true declares policy_network")

	k.AgentSandbox = &AgentSandboxConfig{WarmPool: "pool"}
	p, err = New(Options{Installation: testInstallation, Config: k, RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	c = p.Capabilities()
	assert.False(t, c.PolicyResources || c.PolicyFilesystem || c.PolicyDisk, "the SandboxTemplate decides pod shape in agent-sandbox mode")

	// Snapshots only with a snapshot folder, on managed profiles; never pause.
	none, err := New(Options{Installation: testInstallation, Config: fillDefaults(), RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	_, err = none.Snapshot(t.Context(), "default/sandgate-000000000000", providers.SnapshotMeta{ID: "0123456789abcdef"})
	assert.True(t, fault.IsKind(err, fault.Capability), "%v", err)
	_, err = none.Restore(t.Context(), SnapshotPrefix+"0123456789abcdef"+SnapshotSuffix, providers.Principal{}, providers.Policy{})
	assert.True(t, fault.IsKind(err, fault.Capability), "%v", err)
	k = fillDefaults()
	k.SnapshotDir = t.TempDir()
	p, err = New(Options{Installation: testInstallation, Config: k, RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	c = p.Capabilities()
	assert.True(t, c.Snapshots, "snapshot_dir declares snapshots")
	assert.False(t, c.Pause)
	p, err = New(Options{Installation: testInstallation, Config: k, RESTConfig: cfg, Logger: quietLog, AttachTo: "default/target"})
	require.NoError(t, err)
	assert.False(t, p.Capabilities().Snapshots, "an attached pod is someone else's: never captured")
	k.SnapshotDir = "relative/snapshots"
	_, err = New(Options{Installation: testInstallation, Config: k, RESTConfig: cfg, Logger: quietLog})
	assert.True(t, fault.IsKind(err, fault.Config), "%v", err)
	assert.Equal(t, int64(0), calls.Load(), "no API call")
}

// TestFailsClosedBeforeAnyCall checks that identity and policy problems are fault.Policy
// errors raised before the provider talks to the API server.
func TestFailsClosedBeforeAnyCall(t *testing.T) {
	cfg, calls := countingServer(t)
	k := fillDefaults()
	k.NetworkPolicy = true
	withNP, err := New(Options{Installation: testInstallation, Config: k, RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	withoutNP, err := New(Options{Installation: testInstallation, Config: fillDefaults(), RESTConfig: cfg, Logger: quietLog})
	require.NoError(t, err)
	agent := providers.Principal{Mode: "agent", Subject: "sandgate"}
	allow := providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
	ctx := context.Background()

	for name, tc := range map[string]struct {
		p   *Provider
		pr  providers.Principal
		pol providers.Policy
	}{
		"user mode without a user": {withNP, providers.Principal{Mode: "user"}, allow},
		"user mode, blank user":    {withNP, providers.Principal{Mode: "user", Subject: " ", Groups: []string{"g"}}, allow},
		"strict domain in allowlist": {withNP, agent, providers.Policy{
			NetworkEgress: providers.EgressAllowlist, NetworkAllow: []string{"10.0.0.0/8", "pypi.org"}, Strict: true, Timeout: time.Minute,
		}},
		"strict deny without network_policy": {withoutNP, agent, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tc.p.Create(ctx, tc.pr, tc.pol)
			require.Error(t, err)
			assert.True(t, fault.IsKind(err, fault.Policy), "want a policy fault, got %v", err)
			if tc.pr.Mode == "user" {
				_, err = tc.p.Attach(ctx, "ns/pod", tc.pr, tc.pol)
				assert.True(t, fault.IsKind(err, fault.Policy), "attach: want a policy fault, got %v", err)
			}
		})
	}
	assert.Zero(t, calls.Load(), "no API call may happen before the checks")
}

func TestSplitAllowlist(t *testing.T) {
	cidrs, domains := splitAllowlist([]string{"10.0.0.0/8", "192.168.1.7", "2001:db8::1", "10.1.2.3/16", "pypi.org", " example.com "})
	assert.Equal(t, []string{"10.0.0.0/8", "192.168.1.7/32", "2001:db8::1/128", "10.1.0.0/16"}, cidrs)
	assert.Equal(t, []string{"pypi.org", "example.com"}, domains)
}

func TestSecurityContextOverlays(t *testing.T) {
	k := fillDefaults()
	k.SecurityContext = map[string]any{"runAsUser": 1000, "supplementalGroups": []any{5000}}
	k.ContainerSecurityContext = map[string]any{"capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE"}}}
	pod, ctr, err := securityContexts(k)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), *pod.RunAsUser, "the overlay replaces a default")
	assert.Equal(t, defaultUID, *pod.RunAsGroup, "defaults the overlay does not name stay")
	assert.Equal(t, []int64{5000}, pod.SupplementalGroups)
	assert.True(t, *pod.RunAsNonRoot)
	assert.Equal(t, []corev1.Capability{"ALL"}, ctr.Capabilities.Drop, "objects merge key by key")
	assert.Equal(t, []corev1.Capability{"NET_BIND_SERVICE"}, ctr.Capabilities.Add)
	assert.True(t, *ctr.ReadOnlyRootFilesystem)
}

// TestBuildPod pins the pod the provider asks for, field by field (TestPodAsCreated checks
// the API server's copy).
func TestBuildPod(t *testing.T) {
	cfg, _ := countingServer(t)
	k := fillDefaults()
	k.Namespace = "sbx"
	k.Image = "python:3.12-slim"
	k.Labels = map[string]string{"team": "data", "app.kubernetes.io/part-of": "agents"}
	k.NodeSelector = map[string]string{"pool": "sandboxes"}
	k.Env = map[string]string{"B": "2", "A": "1"}
	k.ImagePullSecrets = []string{"regcred"}
	k.ServiceAccount = "runner"
	k.RuntimeClassName = "gvisor"
	k.ContainerSecurityContext = map[string]any{"readOnlyRootFilesystem": false}
	p, err := New(Options{Installation: testInstallation, Profile: "web", Config: k, RESTConfig: cfg, IdleTimeout: 10 * time.Minute, Logger: quietLog})
	require.NoError(t, err)

	pod := p.buildPod("sandgate-0123456789ab", providers.Principal{Mode: "user", Subject: "alice"},
		providers.Policy{CPU: 0.5, MemoryMB: 256, FSAllowRead: []string{"/data"}}, "tok")
	got, err := json.Marshal(pod)
	require.NoError(t, err)
	assert.JSONEq(t, `{
	  "metadata": {
	    "name": "sandgate-0123456789ab", "namespace": "sbx",
	    "labels": {"app.kubernetes.io/managed-by": "sandgate", "sandgate.io/installation": "`+testInstallation+`", "sandgate.io/sandbox": "true", "team": "data",
	               "app.kubernetes.io/part-of": "agents", "sandgate.io/sandbox-name": "sandgate-0123456789ab"},
	    "annotations": {"sandgate.io/profile": "web", "sandgate.io/owner": "alice", "sandgate.io/sandboxd-token": "tok"}
	  },
	  "spec": {
	    "volumes": [{"name": "workspace", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}, {"name": "sandgate-run", "emptyDir": {"medium": "Memory"}}],
	    "containers": [{
	      "name": "sandbox", "image": "python:3.12-slim", "workingDir": "/workspace",
	      "command": ["/usr/local/bin/sandboxd", "serve", "--socket", "/.sandgate/run/sd.sock", "--workspace", "/workspace",
	                  "--state-file", "/.sandgate/run/contexts.json", "--await-token"],
	      "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "HOME", "value": "/workspace"}],
	      "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "500m", "memory": "256Mi"}},
	      "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}, {"name": "tmp", "mountPath": "/tmp"}, {"name": "sandgate-run", "mountPath": "/.sandgate/run"}],
	      "securityContext": {
	        "capabilities": {"drop": ["ALL"]}, "privileged": false, "runAsNonRoot": true,
	        "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
	        "seccompProfile": {"type": "RuntimeDefault"}
	      }
	    }],
	    "restartPolicy": "Never",
	    "terminationGracePeriodSeconds": 5,
	    "activeDeadlineSeconds": 1200,
	    "nodeSelector": {"pool": "sandboxes"},
	    "serviceAccountName": "runner",
	    "automountServiceAccountToken": false,
	    "shareProcessNamespace": true,
	    "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true, "fsGroup": 65532,
	                        "seccompProfile": {"type": "RuntimeDefault"}},
	    "imagePullSecrets": [{"name": "regcred"}],
	    "runtimeClassName": "gvisor",
	    "enableServiceLinks": false
	  },
	  "status": {}
	}`, string(got))

	// Without file-system lists the overlay's readOnlyRootFilesystem: false stands.
	pod = p.buildPod("sandgate-0123456789ab", providers.Principal{Mode: "agent"}, providers.Policy{}, "tok")
	assert.False(t, *pod.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem)
	assert.Empty(t, pod.Spec.Containers[0].Resources.Limits)
	assert.NotContains(t, pod.Annotations, AnnotationOwner, "agent mode records no owner")
}

func TestNewName(t *testing.T) {
	assert.Regexp(t, `^sandgate-[0-9a-f]{12}$`, newName())
	assert.NotEqual(t, newName(), newName())
}

// TestBlockValidation checks the kubernetes keys the block refuses at start-up.
func TestBlockValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		attached bool
		block    Block
		key      string
	}{
		"relative workspace": {false, Block{Workspace: "work"}, "kubernetes.workspace"},
		"root workspace":     {false, Block{Workspace: "/"}, "kubernetes.workspace"},
		"no warm pool":       {false, Block{AgentSandbox: &AgentSandboxBlock{Template: "t"}}, "kubernetes.agent_sandbox.warm_pool"},
		"claims on attached": {true, Block{AttachTo: "ns/p", AgentSandbox: &AgentSandboxBlock{WarmPool: "w"}}, "kubernetes.agent_sandbox"},
		"negative timeout":   {false, Block{CreateTimeout: -1}, "kubernetes.create_timeout"},
		"sandboxd transport": {false, Block{Sandboxd: SandboxdBlock{Transport: "proxy"}}, "kubernetes.sandboxd.transport"},
		"sandboxd path":      {false, Block{Sandboxd: SandboxdBlock{Path: "bin/sandboxd"}}, "kubernetes.sandboxd.path"},
		"sandboxd image with agent_sandbox": {false, Block{
			Sandboxd: SandboxdBlock{Image: "sandgate/sandbox-python"}, AgentSandbox: &AgentSandboxBlock{WarmPool: "w"},
		}, "kubernetes.sandboxd.image"},
		"relative snapshot_dir": {false, Block{SnapshotDir: "snapshots"}, "kubernetes.snapshot_dir"},
		"snapshot_dir attached": {true, Block{AttachTo: "tools/shell-0", SnapshotDir: "/var/lib/sandgate/snapshots"}, "kubernetes.snapshot_dir"},
	} {
		t.Run(name, func(t *testing.T) {
			block := tc.block
			block.ApplyDefaults()
			var keys []string
			for _, p := range block.Validate(providers.Profile{Name: "default", Attached: tc.attached}) {
				keys = append(keys, p.Key)
			}
			assert.Contains(t, keys, tc.key)
		})
	}
	ok := Block{Workspace: "/mnt/data", RuntimeClassName: "kata", AgentSandbox: &AgentSandboxBlock{WarmPool: "w", Template: "t"}}
	ok.ApplyDefaults()
	assert.Empty(t, ok.Validate(providers.Profile{Name: "default"}))
	var defaults Block
	defaults.ApplyDefaults()
	assert.Equal(t, DefaultWorkspace, defaults.Workspace, "the block's default is the provider's")
	assert.Equal(t, DefaultCreateTimeout, defaults.Options(providers.Profile{}).(Options).Config.CreateTimeout)
}
