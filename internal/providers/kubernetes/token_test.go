package kubernetes

// The sandboxd token: kept in the pod's annotation, given to sandboxd by the gateway's first
// tunnel before anything else, never in the pod spec; sandboxd refuses everything before
// it, keeps the first one, and a restarted gateway reattaches with the stored one. The node
// is played with Docker (nodesim_test.go).

import (
	"bytes"
	"os"

	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

func TestSandboxdToken(t *testing.T) {
	p, ns := dataPathProvider(t, nil)
	cs := adminClient(t)
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	ksb := sb.(*Sandbox)

	pod, err := cs.CoreV1().Pods(ns).Get(ctx, ksb.pod, metav1.GetOptions{})
	require.NoError(t, err)
	token := pod.Annotations[AnnotationSandboxdToken]
	assert.Regexp(t, `^[0-9a-f]{64}$`, token, "the token is in the annotation")
	assert.Equal(t, token, ksb.token)
	spec, err := pod.Spec.Marshal()
	require.NoError(t, err)
	assert.NotContains(t, string(spec), token, "the token is nowhere in the pod spec")

	// A tunnel that does not give the token first: sandboxd refuses everything before it.
	raw := func(ctx context.Context) (net.Conn, error) {
		tn, err := p.openTunnel(p.gateway, ns, ksb.pod, ksb.container, []string{DefaultSandboxdPath, "proxy", "--socket", SandboxdSocket})
		if err != nil {
			return nil, err
		}
		return tn.conn, nil
	}
	direct := remote.NewDialClient("test", raw, token)
	t.Cleanup(func() { _ = direct.Close() })
	var before error
	require.Eventually(t, func() bool {
		_, before = direct.Exec(ctx, sandboxd.ExecRequest{Command: "touch ran"}, sandboxd.Streams{})
		return errorsIsAwaiting(before)
	}, 20*time.Second, 100*time.Millisecond, "before the token: %v", before)
	_, err = direct.ListContexts(ctx)
	assert.ErrorIs(t, err, remote.ErrAwaitingToken)

	// The gateway's first tunnel gives it; then the same token again is fine, another one a
	// conflict.
	var out bytes.Buffer
	_, err = sb.Exec(ctx, providers.ExecSpec{Command: "ls ran 2>&1; echo $SANDBOXD_TOKEN; cat /proc/1/environ | tr '\\0' '\\n' | grep -c SANDBOXD || true", Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Contains(t, out.String(), "No such file", "nothing ran before the token")
	assert.NotContains(t, out.String(), token)
	require.NoError(t, direct.SetToken(ctx, token))
	err = direct.SetToken(ctx, strings.Repeat("f", 64))
	assert.True(t, fault.IsKind(err, fault.Conflict), "another token: %v", err)

	// State lives in the pod: a restarted gateway reattaches with the stored token and finds
	// the context's variable.
	_, err = sb.Exec(ctx, providers.ExecSpec{Code: "answer = 6 * 7", Language: "python", Context: providers.DefaultContext})
	require.NoError(t, err)
	restarted := newTestProvider(t, p.gateway.cfg, func(o *Options) { o.Config = p.cfg })
	again, err := restarted.Attach(ctx, sb.ID(), agentPrincipal, allowPolicy)
	require.NoError(t, err)
	out.Reset()
	_, err = again.Exec(ctx, providers.ExecSpec{Code: "print(answer)", Language: "python", Context: providers.DefaultContext, Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Equal(t, "42\n", out.String())
	assert.True(t, restarted.Capabilities().Stateful)
}

func errorsIsAwaiting(err error) bool {
	return err != nil && strings.Contains(err.Error(), remote.ErrAwaitingToken.Error())
}

// TestTokenAnnotationRace: two gateways giving a pod without a token one at once agree on the
// stored one (optimistic concurrency on the pod's resourceVersion).
func TestTokenAnnotationRace(t *testing.T) {
	cfg := requireAPIServer(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, nil)
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "warm"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName, Image: "img"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var (
		wg     sync.WaitGroup
		tokens [4]string
		errs   [4]error
	)
	for i := range tokens {
		gw := newTestProvider(t, cfg, func(o *Options) { o.Config.Namespace = ns })
		wg.Add(1)
		go func() {
			defer wg.Done()
			tokens[i], errs[i] = gw.ensureToken(ctx, gw.gateway, pod.DeepCopy())
		}()
	}
	wg.Wait()
	stored, err := cs.CoreV1().Pods(ns).Get(ctx, "warm", metav1.GetOptions{})
	require.NoError(t, err)
	want := stored.Annotations[AnnotationSandboxdToken]
	assert.Regexp(t, `^[0-9a-f]{64}$`, want)
	for i := range tokens {
		require.NoError(t, errs[i])
		assert.Equal(t, want, tokens[i], "gateway %d", i)
	}
}

// TestAttachedPodMustRunSandboxd: an attached pod that does not run sandboxd fails with a
// fault.Provision error saying what it must run.
func TestAttachedPodMustRunSandboxd(t *testing.T) {
	cfg := requireAPIServer(t)
	cli := requireDocker(t)
	cs := adminClient(t)
	ctx := context.Background()
	ns := testNamespace(t, nil)
	playNode(t, ns, cli)
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "workbench"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532)},
			Containers:      []corev1.Container{{Name: ContainerName, Image: testImage, Command: []string{"sleep", "infinity"}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	for name, path := range map[string]string{"no sandboxd binary": "/nowhere/sandboxd", "sandboxd not serving": DefaultSandboxdPath} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			p := newTestProvider(t, cfg, func(o *Options) {
				o.Config.Namespace = ns
				o.Config.Image = testImage
				o.Config.Sandboxd.Path = path
				o.AttachTo = ns + "/workbench"
			})
			p.readyTimeout = 2 * time.Second
			sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
			require.NoError(t, err, "binding writes the token annotation")
			_, err = sb.Exec(ctx, providers.ExecSpec{Command: "true"})
			require.Error(t, err)
			assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
			assert.Contains(t, err.Error(), "serve --await-token --socket "+SandboxdSocket, "the message says what the pod must run")
		})
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "workbench", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Regexp(t, `^[0-9a-f]{64}$`, pod.Annotations[AnnotationSandboxdToken])
}

// TestSandboxdFromInitContainer: with kubernetes.sandboxd.image, an init container copies
// sandboxd (`sandboxd install`) from that image into an emptyDir, and the sandbox container,
// made from an image without sandboxd, runs it from there.
func TestSandboxdFromInitContainer(t *testing.T) {
	base := baseImage(t)
	p, ns := dataPathProvider(t, func(o *Options) {
		o.Config.Image = base
		o.Config.Sandboxd.Image = testImage
	})
	ctx := context.Background()
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	_, name := sb.(*Sandbox).Pod()
	pod, err := adminClient(t).CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, pod.Spec.InitContainers, 1)
	assert.Equal(t, []string{DefaultSandboxdPath, "install", SandboxdBin}, pod.Spec.InitContainers[0].Command)
	assert.Equal(t, SandboxdBin+"/sandboxd", pod.Spec.Containers[0].Command[0])

	var out bytes.Buffer
	_, err = sb.Exec(ctx, providers.ExecSpec{Command: "test -e /usr/local/bin/sandboxd && echo image-has-it || echo image-lacks-it", Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Equal(t, "image-lacks-it\n", out.String())
	_, err = sb.Exec(ctx, providers.ExecSpec{Code: "x = 1", Language: "python", Context: "c"})
	require.NoError(t, err)
	out.Reset()
	_, err = sb.Exec(ctx, providers.ExecSpec{Code: "print(x + 41)", Language: "python", Context: "c", Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Equal(t, "42\n", out.String())

	_, err = New(Options{Installation: testInstallation, Config: Config{Sandboxd: SandboxdConfig{Image: testImage}, AgentSandbox: &AgentSandboxConfig{WarmPool: "w"}}, RESTConfig: p.gateway.cfg})
	assert.True(t, fault.IsKind(err, fault.Config), "sandboxd.image is for created pods: %v", err)
}

// baseImage is an image without sandboxd (scripts/docker-setup.sh builds sandgate/sandbox-base).
func baseImage(t *testing.T) string {
	t.Helper()
	cli := requireDocker(t)
	list, err := cli.ImageList(context.Background(), image.ListOptions{})
	require.NoError(t, err)
	for _, img := range list {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, "sandgate/sandbox-base:") {
				return tag
			}
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no sandgate/sandbox-base image: scripts/docker-setup.sh builds it")
	}
	t.Skip("no sandgate/sandbox-base image (scripts/docker-setup.sh builds it)")
	return ""
}
