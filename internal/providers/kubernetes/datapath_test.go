package kubernetes

// The data path: executions and files through pods/exec, with the node played by the test
// with Docker (nodesim_test.go says exactly which parts are played). The exec streams are
// real: the provider speaks WebSocket (or SPDY) to the real API server, which authorizes
// pods/exec and proxies the stream to the played kubelet, which runs the kubelet's own
// streaming code and executes in the pod's container through the Docker exec API.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/providertest"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// testImage is the sandbox image the played node runs; scripts/docker-setup.sh builds it.
var testImage = func() string {
	if v := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE"); v != "" {
		return v
	}
	return "sandgate/sandbox-python:latest"
}()

var (
	dockerOnce   sync.Once
	dockerCli    *client.Client
	dockerReason string
)

// requireDocker returns a client of the local Docker engine, skipping the test when there is
// none or the test image is missing, and failing it under CI=true.
func requireDocker(t testing.TB) *client.Client {
	t.Helper()
	dockerOnce.Do(func() {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			dockerReason = "no Docker client: " + err.Error()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Ping(ctx); err != nil {
			dockerReason = "no Docker engine is reachable (run scripts/docker-setup.sh): " + err.Error()
			return
		}
		if _, err := cli.ImageInspect(ctx, testImage); err != nil {
			dockerReason = "the test image " + testImage + " is missing (run scripts/docker-setup.sh): " + err.Error()
			return
		}
		dockerCli = cli
	})
	if dockerReason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s", dockerReason)
		}
		t.Skip(dockerReason + "; the data path needs a played node")
	}
	return dockerCli
}

// dataPathProvider is a provider whose pods run on a node played with Docker.
func dataPathProvider(t testing.TB, block func(*Options)) (*Provider, string) {
	t.Helper()
	cfg := requireAPIServer(t)
	cli := requireDocker(t)
	ns := testNamespace(t, restricted)
	playNode(t, ns, cli)
	return newTestProvider(t, cfg, func(o *Options) {
		o.Config.Namespace = ns
		o.Config.Image = testImage
		if block != nil {
			block(o)
		}
	}), ns
}

// TestContract runs the provider contract suite over the real API server and the played
// node, with a snapshot folder so that its snapshot group runs too.
func TestContract(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	p, _ := dataPathProvider(t, func(o *Options) { o.Config.SnapshotDir = dir })
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   sandboxd.DefaultKillGrace,
		RichResults: true,
	})
}

// TestDataPathDetails covers what the contract suite does not: the pod's hardening as
// programs see it, SPDY (the fallback), package installation and exec authorization.
func TestDataPathDetails(t *testing.T) {
	p, ns := dataPathProvider(t, nil)
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	run := func(sb providers.Sandbox, cmd string) (string, string, providers.ExitStatus) {
		t.Helper()
		var out, errOut bytes.Buffer
		st, err := sb.Exec(ctx, providers.ExecSpec{Command: cmd, Timeout: time.Minute, Output: providers.Output{Stdout: &out, Stderr: &errOut}})
		require.NoError(t, err, cmd)
		return out.String(), errOut.String(), st
	}

	t.Run("hardening", func(t *testing.T) {
		out, _, _ := run(sb, "id -u; id -g; pwd; echo $HOME; touch /etc/x 2>/dev/null && echo rw-root || echo ro-root; "+
			"touch /tmp/x && echo tmp-ok; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status")
		assert.Equal(t, "65532\n65532\n/workspace\n/workspace\nro-root\ntmp-ok\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n", out)
	})

	t.Run("spdy_fallback", func(t *testing.T) {
		spdy := newTestProvider(t, p.gateway.cfg, func(o *Options) { o.Config = p.cfg })
		spdy.spdyOnly = true
		again, err := spdy.Attach(ctx, sb.ID(), agentPrincipal, allowPolicy)
		require.NoError(t, err)
		out, errOut, st := run(again, "echo via spdy; echo err >&2; exit 3")
		assert.Equal(t, "via spdy\n", out)
		assert.Equal(t, "err\n", errOut)
		assert.Equal(t, 3, st.ExitCode)
	})

	t.Run("install_packages_fails_as_a_status", func(t *testing.T) {
		var out, errOut bytes.Buffer
		st, err := sb.InstallPackages(ctx, []string{"sandgate-no-such-package-xyz"}, providers.Output{Stdout: &out, Stderr: &errOut})
		require.NoError(t, err, "a failed installation is a status")
		assert.NotZero(t, st.ExitCode, "stdout %q stderr %q", out.String(), errOut.String())
		_, err = sb.InstallPackages(ctx, []string{"--index-url=http://evil"}, providers.Output{})
		assert.True(t, fault.IsKind(err, fault.Validation), "%v", err)
	})

	t.Run("exec_needs_rbac", func(t *testing.T) {
		// A user who may read pods but not exec is refused by the API server.
		gwName := "gw-exec-" + ns
		gw, err := testEnv.AddUser(envtest.User{Name: gwName}, nil)
		require.NoError(t, err)
		bindRole(t, ns, "reader", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: gwName},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}})
		reader := newTestProvider(t, gw.Config(), func(o *Options) { o.Config = p.cfg })
		again, err := reader.Attach(ctx, sb.ID(), agentPrincipal, allowPolicy)
		require.NoError(t, err)
		_, err = again.Exec(ctx, providers.ExecSpec{Command: "true"})
		require.Error(t, err)
		assert.True(t, fault.IsKind(err, fault.Forbidden), "%v", err)
		assert.Contains(t, err.Error(), "create and the get verbs")

		// With both verbs it works.
		cs := adminClient(t)
		role, err := cs.RbacV1().Roles(ns).Get(ctx, "reader", metav1.GetOptions{})
		require.NoError(t, err)
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}})
		_, err = cs.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err := again.Exec(ctx, providers.ExecSpec{Command: "true"})
			return err == nil
		}, 20*time.Second, 200*time.Millisecond)
	})

	t.Run("user_mode", func(t *testing.T) {
		// Create, exec, files and the kill exec as an impersonated user; Destroy as the gateway.
		bindRole(t, ns, "carol", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}})
		carol := providers.Principal{Mode: "user", Subject: "carol", Groups: []string{"sandbox-users"}}
		var usb providers.Sandbox
		require.Eventually(t, func() bool {
			usb, err = p.Create(ctx, carol, allowPolicy)
			return err == nil
		}, 20*time.Second, 200*time.Millisecond, "create as carol: %v", err)
		assert.Equal(t, "user carol", usb.(*Sandbox).c.who)
		_, err = usb.WriteFile(ctx, "in.txt", strings.NewReader("hello"), 1<<20)
		require.NoError(t, err)
		out, _, _ := run(usb, "cat in.txt")
		assert.Equal(t, "hello", out)
		st, err := usb.Exec(ctx, providers.ExecSpec{Command: "sleep 300", Timeout: time.Second})
		require.NoError(t, err)
		assert.True(t, st.TimedOut)
		require.NoError(t, p.Destroy(ctx, usb.ID()))
	})

	t.Run("preview_port", func(t *testing.T) {
		// A server on the pod's loopback, reached through sandboxd's tunnel over the exec stream.
		x := sb.(providers.Executions)
		_, err := x.Start(ctx, providers.ExecSpec{ID: "web-preview", Background: true,
			Command: "mkdir -p site && echo hello-pod > site/index.html && exec python3 -m http.server 8000 --bind 127.0.0.1 --directory site"})
		require.NoError(t, err)
		defer func() { _ = x.Stop(context.Background(), "web-preview") }()
		d := sb.(providers.PortDialer)
		var body string
		require.Eventually(t, func() bool {
			conn, err := d.DialPort(ctx, 8000)
			if err != nil {
				return false
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /index.html HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n"); err != nil {
				return false
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 200*time.Millisecond)
		assert.Equal(t, "hello-pod\n", body)
		_, err = d.DialPort(ctx, 8001)
		assert.True(t, fault.IsKind(err, fault.Conflict), "%v", err)
	})

	t.Run("timeout_reports_and_kills", func(t *testing.T) {
		start := time.Now()
		var out bytes.Buffer
		st, err := sb.Exec(ctx, providers.ExecSpec{Command: "trap '' TERM; echo up; sleep 300", Timeout: 2 * time.Second, Output: providers.Output{Stdout: &out}})
		require.NoError(t, err)
		assert.True(t, st.TimedOut)
		assert.Equal(t, "up\n", out.String())
		assert.Less(t, time.Since(start), 15*time.Second)
		left, _, _ := run(sb, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done 2>/dev/null | grep -c '^sleep 300' || true`)
		assert.Equal(t, "0", strings.TrimSpace(left), "the program ignoring SIGTERM was killed")
	})
}

// TestContractPodIP runs the contract suite with kubernetes.sandboxd.transport pod_ip: the
// gateway reaches sandboxd over TCP at the pod IP (the played node publishes the port on a
// loopback address, its pod IP), after giving it its token through one exec tunnel.
func TestContractPodIP(t *testing.T) {
	p, _ := dataPathProvider(t, func(o *Options) { o.Config.Sandboxd.Transport = TransportPodIP })
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   sandboxd.DefaultKillGrace,
		RichResults: true,
	})

	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	before := p.tunnels.Load()
	for i := range 5 {
		var out bytes.Buffer
		_, err := sb.Exec(ctx, providers.ExecSpec{Command: fmt.Sprintf("echo %d", i), Output: providers.Output{Stdout: &out}})
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("%d\n", i), out.String())
	}
	assert.LessOrEqual(t, p.tunnels.Load()-before, int64(1), "one exec tunnel gives the token; the calls go over TCP")
	assert.True(t, strings.HasPrefix(sb.(*Sandbox).podIP, "127."), "the played pod IP is a loopback address: %s", sb.(*Sandbox).podIP)
}
