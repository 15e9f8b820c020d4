package kubernetes

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/sandgate/sandgate/internal/config"
)

// Helpers of this package's tests, for the external tests (package kubernetes_test) that run
// whole gateways on the played node.

// PlayedNamespace returns the admin configuration of the test API server and a fresh
// namespace (Pod Security restricted) whose pods run on a node played with Docker, skipping
// the test without an API server, Docker or the test image.
func PlayedNamespace(t testing.TB) (*rest.Config, string) {
	t.Helper()
	cfg := requireAPIServer(t)
	cli := requireDocker(t)
	ns := testNamespace(t, restricted)
	playNode(t, ns, cli)
	return cfg, ns
}

// TestImage is the sandbox image the played node runs.
var TestImage = testImage

// LoadGatewayConfig reads a configuration file as the gateway does (gateway.LoadConfig: its
// provider blocks decoded and checked by their backends). internal/gateway imports this
// package, so this package's own tests cannot: the external tests set it (gateway_test.go).
var LoadGatewayConfig func(path string, environ []string) (*config.Config, error)

// RealNode returns the real single-node cluster's admin kubeconfig file, a fresh namespace on
// it and the sandbox image tagged for it, skipping the test unless TEST_KUBE_NODE=1 (see
// realnode_test.go).
func RealNode(t *testing.T) (kubeconfig, namespace, image string) {
	t.Helper()
	c := requireNode(t)
	return c.Kubeconfig, nodeNamespace(t, c), nodeImage
}
