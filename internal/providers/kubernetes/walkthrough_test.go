package kubernetes_test

// The README's walkthrough, verbatim but for the address, through a whole gateway (HTTP API,
// OIDC, Postgres, the domain) whose default profile is a stateful kubernetes profile on the
// played node: the pod runs sandboxd, and the variable set by one code call is there in the
// next.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
)

// writeKubeconfig writes cfg as a kubeconfig file (the gateway reads kubernetes.kubeconfig).
func writeKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, p))
	return p
}

func TestReadmeWalkthroughOnKubernetes(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required")
		}
		t.Skip("curl is not installed")
	}
	cfg, ns := kubernetes.PlayedNamespace(t)
	kubeconfig := writeKubeconfig(t, cfg)
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) {
		c.Sandbox.Profiles = map[string]config.Profile{
			"pods": {Type: kubernetes.TypeName, Stateful: true, Blocks: config.Blocks{
				kubernetes.TypeName: &kubernetes.Block{Kubeconfig: kubeconfig, Namespace: ns, Image: kubernetes.TestImage},
			}},
		}
		c.Sandbox.DefaultProfile = "pods"
	}})

	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- walkthrough:start -->\\s*```sh\n(.*?)```\\s*<!-- walkthrough:end -->").FindSubmatch(readme)
	require.NotNil(t, m, "README has no walkthrough block")
	script := strings.ReplaceAll(string(m[1]), "http://localhost:8080", e.URL)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "TOKEN="+e.Token("dev"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "walkthrough failed:\n%s", out)
	for _, want := range []string{`"subject":"dev"`, `"stdout":"42\n"`, `"stdout":"still here: 42\n"`, "byte-exact", `"status":"succeeded"`, "finished", `"destroyed":true`} {
		require.Contains(t, string(out), want)
	}
}
