package kubernetes

// The tests run against a real kube-apiserver and etcd, started by controller-runtime's envtest
// from binaries built by scripts/kube-setup.sh (see docs in that script). Without them the
// tests that need an API server are skipped, except under CI=true, where they fail.
//
// There is no kubelet, scheduler or controller manager: pods are accepted, admitted (RBAC,
// Pod Security, RuntimeClass, quota) and stored, and stay Pending unless a test plays the
// node's part (see nodesim_test.go) — each test says which part it plays.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandgate/sandgate/internal/providers"
)

// repoRoot is the repository's root, relative to this package.
var repoRoot = filepath.Join("..", "..", "..")

var (
	envOnce   sync.Once
	testEnv   *envtest.Environment
	envCfg    *rest.Config // admin (system:masters)
	envReason string       // why there is no API server; "" when there is one
)

// testInstallation is the installation of the providers the tests build.
var testInstallation = providers.NewInstallationID()

func TestMain(m *testing.M) {
	code := m.Run()
	stopNode()
	if testEnv != nil {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test API server:", err)
		}
	}
	os.Exit(code)
}

// kubeAssets finds kube-apiserver and etcd: TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD,
// else KUBEBUILDER_ASSETS, else the cache folder scripts/kube-setup.sh fills,
// ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube/<kubernetes>-etcd<etcd> with the versions
// pinned in tools/kube/go.mod.
func kubeAssets() (apiserver, etcd, reason string) {
	exists := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
	}
	if a, e := os.Getenv("TEST_ASSET_KUBE_APISERVER"), os.Getenv("TEST_ASSET_ETCD"); a != "" && e != "" {
		if exists(a) && exists(e) {
			return a, e, ""
		}
		return "", "", fmt.Sprintf("TEST_ASSET_KUBE_APISERVER=%s or TEST_ASSET_ETCD=%s is not an executable file", a, e)
	}
	var dirs []string
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		dirs = append(dirs, d)
	}
	cache, err := kubeCacheDir()
	if err != nil {
		return "", "", err.Error()
	}
	dirs = append(dirs, cache)
	for _, d := range dirs {
		a, e := filepath.Join(d, "kube-apiserver"), filepath.Join(d, "etcd")
		if exists(a) && exists(e) {
			return a, e, ""
		}
	}
	return "", "", fmt.Sprintf("kube-apiserver and etcd are not in %s: run scripts/kube-setup.sh (builds them from the Go module proxy, about 20 CPU-minutes once)", strings.Join(dirs, " or "))
}

// kubeCacheDir is the folder scripts/kube-setup.sh builds the binaries into.
func kubeCacheDir() (string, error) {
	root := os.Getenv("SANDGATE_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no SANDGATE_CACHE and no home folder: %w", err)
		}
		root = filepath.Join(home, ".cache", "sandgate")
	}
	kube, etcd, err := pinnedVersions()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "kube", kube+"-etcd"+etcd), nil
}

// pinnedVersions reads the kubernetes and etcd versions tools/kube/go.mod requires.
func pinnedVersions() (kube, etcd string, err error) {
	f, err := os.Open(filepath.Join(repoRoot, "tools", "kube", "go.mod"))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.HasPrefix(fields[1], "v") {
			continue
		}
		switch fields[0] {
		case "k8s.io/kubernetes":
			kube = fields[1]
		case "go.etcd.io/etcd/server/v3":
			etcd = fields[1]
		}
	}
	if kube == "" || etcd == "" {
		return "", "", fmt.Errorf("tools/kube/go.mod pins no k8s.io/kubernetes or etcd server version")
	}
	return kube, etcd, sc.Err()
}

// requireAPIServer returns the admin configuration of the shared test API server, starting it
// on first use. It skips the test when the binaries are missing, and fails it under CI=true.
func requireAPIServer(t testing.TB) *rest.Config {
	t.Helper()
	envOnce.Do(func() {
		apiserver, etcd, reason := kubeAssets()
		if reason != "" {
			envReason = reason
			return
		}
		env := &envtest.Environment{
			CRDDirectoryPaths:        []string{filepath.Join(repoRoot, "deploy", "kubernetes", "crds")},
			ErrorIfCRDPathMissing:    true,
			ControlPlaneStartTimeout: 3 * time.Minute,
			ControlPlaneStopTimeout:  time.Minute,
		}
		env.ControlPlane.APIServer = &envtest.APIServer{Path: apiserver}
		env.ControlPlane.Etcd = &envtest.Etcd{Path: etcd}
		cfg, err := env.Start()
		if err != nil {
			_ = env.Stop()
			envReason = "starting kube-apiserver and etcd: " + err.Error()
			return
		}
		testEnv, envCfg = env, cfg
	})
	if envReason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no test API server: %s", envReason)
		}
		t.Skip(envReason)
	}
	return rest.CopyConfig(envCfg)
}

// adminClient is the API server's system:masters client.
func adminClient(t testing.TB) k8s.Interface {
	t.Helper()
	cs, err := k8s.NewForConfig(requireAPIServer(t))
	require.NoError(t, err)
	return cs
}

// testNamespace creates a fresh namespace (there is no namespace controller, so it is never
// deleted) with the given labels.
func testNamespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	cs := adminClient(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t-" + strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + hex.EncodeToString(b[:])
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// quietLog discards the provider's logs; verboseLog shows them with -v.
var quietLog = slog.New(slog.DiscardHandler)

// newTestProvider builds a provider acting as cfg (the admin by default) in namespace ns.
func newTestProvider(t testing.TB, cfg *rest.Config, block func(*Options)) *Provider {
	t.Helper()
	opts := Options{
		Profile:      "test",
		Installation: testInstallation,
		Config:       fillDefaults(),
		IdleTimeout:  30 * time.Minute,
		RESTConfig:   cfg,
		Logger:       quietLog,
	}
	if block != nil {
		block(&opts)
	}
	p, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// bindRole creates a Role with rules in ns and binds it to subject.
func bindRole(t *testing.T, ns, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	t.Helper()
	cs := adminClient(t)
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
