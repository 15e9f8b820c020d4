package kubernetes

// End-to-end against a real cluster, nothing played: skipped unless SANDGATE_KUBE_E2E=1.
//
//	SANDGATE_KUBE_E2E=1                   run (the cluster of KUBECONFIG / ~/.kube/config, or
//	                                      in-cluster)
//	SANDGATE_KUBE_E2E_NAMESPACE           namespace for the sandbox pods (default "default")
//	SANDGATE_KUBE_E2E_IMAGE               image with python3 and sandboxd at
//	                                      /usr/local/bin/sandboxd (an image built by
//	                                      images/sandbox, pushed where the cluster pulls)
//	SANDGATE_KUBE_E2E_SANDBOXD_IMAGE      or: an image shipping sandboxd, copied into pods of
//	                                      SANDGATE_KUBE_E2E_IMAGE by an init container
//	SANDGATE_KUBE_E2E_RUNTIME_CLASS       optional runtimeClassName (kata, gvisor, …)
//	SANDGATE_KUBE_E2E_NETWORK_POLICY=1    also check that a deny policy blocks egress (needs a
//	                                      CNI that enforces NetworkPolicy)
//
// The identity needs the gateway Role of deploy/kubernetes/rbac.yaml in that namespace.

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/providertest"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

func e2eProvider(t *testing.T, networkPolicy bool) *Provider {
	t.Helper()
	if os.Getenv("SANDGATE_KUBE_E2E") != "1" {
		t.Skip("set SANDGATE_KUBE_E2E=1 (and KUBECONFIG) to run against a real cluster")
	}
	k := fillDefaults()
	if ns := os.Getenv("SANDGATE_KUBE_E2E_NAMESPACE"); ns != "" {
		k.Namespace = ns
	}
	if img := os.Getenv("SANDGATE_KUBE_E2E_IMAGE"); img != "" {
		k.Image = img
	}
	k.Sandboxd.Image = os.Getenv("SANDGATE_KUBE_E2E_SANDBOXD_IMAGE")
	k.RuntimeClassName = os.Getenv("SANDGATE_KUBE_E2E_RUNTIME_CLASS")
	k.CreateTimeout = 300 * time.Second // image pulls
	k.NetworkPolicy = networkPolicy
	p, err := New(Options{Installation: testInstallation, Profile: "e2e", Config: k, IdleTimeout: 30 * time.Minute, Logger: quietLog})
	require.NoError(t, err)
	return p
}

func TestE2EContract(t *testing.T) {
	p := e2eProvider(t, false)
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   sandboxd.DefaultKillGrace,
		RichResults: true,
	})
}

func TestE2ENetworkPolicy(t *testing.T) {
	p := e2eProvider(t, true)
	if os.Getenv("SANDGATE_KUBE_E2E_NETWORK_POLICY") != "1" {
		t.Skip("set SANDGATE_KUBE_E2E_NETWORK_POLICY=1 when the cluster's CNI enforces NetworkPolicy")
	}
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true, Timeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	code := "import socket\ns = socket.socket()\ns.settimeout(5)\ntry:\n    s.connect(('1.1.1.1', 443))\n    print('connected')\nexcept OSError:\n    print('blocked')\n"
	var out bytes.Buffer
	_, err = sb.Exec(ctx, providers.ExecSpec{Code: code, Language: "python", Timeout: time.Minute, Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Equal(t, "blocked\n", out.String())
}
