package kubernetes_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
)

// BenchmarkExecOnPlayedNode measures `true` in one pod on the played node two ways, in one
// run: through a whole gateway (REST, token, Postgres, the domain, the provider), and through
// the provider alone (the exec tunnel to the pod's sandboxd, no gateway). The difference is
// the gateway's cost (issue 16: ≤ +1 ms p50). Run: go test -run '^$' -bench ExecOnPlayedNode
// ./internal/providers/kubernetes/.
func BenchmarkExecOnPlayedNode(b *testing.B) {
	cfg, ns := kubernetes.PlayedNamespace(b)
	e := gatewaytest.Start(b, gatewaytest.Options{Config: func(c *config.Config) {
		c.Sandbox.Profiles = map[string]config.Profile{
			"pods": {Type: kubernetes.TypeName, Blocks: config.Blocks{
				kubernetes.TypeName: &kubernetes.Block{Namespace: ns, Image: kubernetes.TestImage, Kubeconfig: writeKubeconfig(b, cfg)},
			}},
		}
		c.Sandbox.DefaultProfile = "pods"
		c.Sandbox.Quotas = config.Quotas{Sessions: -1, ConcurrentExecutions: -1, RequestsPerSecond: -1}
	}})
	tok := e.Token("bench")
	run := func() {
		st, _, body := e.Do("POST", "/v1/sessions/default/commands", tok, strings.NewReader(`{"command":"true"}`), map[string]string{"Content-Type": "application/json"})
		if st != 200 {
			b.Fatalf("exec: %d %s", st, body)
		}
	}
	run() // the pod
	st, _, body := e.Do("GET", "/v1/sessions/default", tok, nil, nil)
	require.Equal(b, 200, st, "%s", body)
	var sess struct {
		SandboxID string `json:"sandbox_id"`
	}
	require.NoError(b, json.Unmarshal(body, &sess))

	b.Run("gateway", func(b *testing.B) {
		for b.Loop() {
			run()
		}
	})
	p, err := kubernetes.New(kubernetes.Options{Profile: "bench", RESTConfig: cfg, Config: kubernetes.Config{Namespace: ns, Image: kubernetes.TestImage}})
	require.NoError(b, err)
	defer p.Close()
	agent := providers.Principal{Mode: "agent", Subject: "sandgate"}
	allow := providers.Policy{NetworkEgress: providers.EgressAllow}
	b.Run("provider", func(b *testing.B) { // one handle: the tunnel and sandboxd alone
		sb, err := p.Attach(b.Context(), sess.SandboxID, agent, allow)
		require.NoError(b, err)
		defer sb.Close()
		for b.Loop() {
			if _, err := sb.Exec(b.Context(), providers.ExecSpec{Command: "true"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("provider_attach_each", func(b *testing.B) { // what the gateway does per execution
		i := 0
		for b.Loop() {
			i++
			sb, err := p.Attach(b.Context(), sess.SandboxID, agent, allow)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(b.Context(), providers.ExecSpec{Command: "true", ID: "bench-" + strconv.Itoa(i)}); err != nil {
				b.Fatal(err)
			}
			_ = sb.Close()
		}
	})
}
