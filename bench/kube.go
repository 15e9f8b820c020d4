package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/testutil/kubenode"
)

// Scenario 11 (issue 38): the kubernetes provider on a real single-node cluster
// (internal/testutil/kubenode: kubelet with cri-dockerd on the Docker engine, scheduler,
// controller manager, the real agent-sandbox controller), brought up once for these rows and
// torn down after them, the host restored as the harness does. A child gateway of its own has
// two kubernetes profiles: kube (a pod per sandbox) and kube-warm (a SandboxClaim on the
// warm pool of deploy/kubernetes/agent-sandbox.yaml). The reference rows are the raw API from
// the same run: a pod created, watched to Ready, one `true` through pods/exec.

const kubeScenario = "11 kubernetes (real node)"

// kubeNamespace holds every object of the rows.
const kubeNamespace = "bench"

// kubePoolSize is the warm pool's size, and the burst's concurrent creates.
func kubePoolSize() int { return n(10, 3) }

// kubeTarget is what a child gateway's kubernetes profiles point at.
type kubeTarget struct {
	kubeconfig string // the cluster's admin kubeconfig
	namespace  string
	image      string // the cluster's own tag of the sandbox image (never pulled)
	warmPool   string // the SandboxWarmPool of profile kube-warm, made from the template of the same name
}

var (
	gvrSandbox         = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	gvrSandboxClaim    = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	gvrSandboxTemplate = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	gvrSandboxWarmPool = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
)

var (
	kubeMu      sync.Mutex
	kubeCluster *kubenode.Cluster // the running cluster, for stopCluster
	// kubeStarting, while kubenode.Start runs: cancel ends the start (Start then tears down
	// what it made) and done is closed once Start returned.
	kubeStarting *struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	// kubeStopped, once a teardown began, is closed when it ended: a second stopCluster (the
	// rows' end while a signal tears down) waits for it, so the bench never exits mid-teardown.
	kubeStopped chan struct{}
)

// stopCluster tears the running cluster down (nil when none runs): from the rows' end, a
// panic or a signal. The cluster's processes die with the bench anyway (Pdeathsig); Stop also
// restores the host (netns, cgroups, mounts, sysctls, containers).
func stopCluster() error {
	kubeMu.Lock()
	if st := kubeStarting; st != nil {
		// Interrupted while the cluster starts: end the start and wait for its teardown,
		// which restores the host as Stop does.
		kubeMu.Unlock()
		st.cancel()
		<-st.done
		kubeMu.Lock()
	}
	c := kubeCluster
	kubeCluster = nil
	if c == nil {
		stopped := kubeStopped
		kubeMu.Unlock()
		if stopped != nil {
			<-stopped
		}
		return nil
	}
	stopped := make(chan struct{})
	kubeStopped = stopped
	kubeMu.Unlock()
	defer close(stopped)
	return c.Stop()
}

// kubeUnavailable says why the rows cannot run here ("" when they can).
func kubeUnavailable(ctx context.Context, root string) string {
	if os.Geteuid() != 0 {
		return "not root (the single-node cluster needs network namespaces, cgroups and mounts)"
	}
	if !docker.Available(ctx, "") {
		return "no Docker engine reachable (the node's runtime is cri-dockerd on it)"
	}
	if _, err := kubenode.FindAssets(root); err != nil {
		return err.Error()
	}
	if err := exec.CommandContext(ctx, "docker", "image", "inspect", *image).Run(); err != nil {
		return "image " + *image + " missing (run scripts/docker-setup.sh)"
	}
	if out, _ := exec.CommandContext(ctx, "pgrep", "-x", "kubelet").Output(); len(out) > 0 {
		return "a kubelet already runs on this machine (pid " + strings.Join(strings.Fields(string(out)), ", ") + "): one cluster at a time"
	}
	return ""
}

// kubeScenarios brings the cluster up, runs the rows and tears it down.
func kubeScenarios(ctx context.Context) {
	if *skipKube {
		skip("kubernetes rows: -skip-kube given")
		return
	}
	root, err := moduleRoot()
	if err != nil {
		skip("kubernetes rows: " + err.Error())
		return
	}
	if why := kubeUnavailable(ctx, root); why != "" {
		skip("kubernetes rows: " + why)
		return
	}
	fmt.Println("kubernetes: starting the single-node cluster (internal/testutil/kubenode)")
	t := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	st := &struct {
		cancel context.CancelFunc
		done   chan struct{}
	}{cancel, make(chan struct{})}
	kubeMu.Lock()
	kubeStarting = st
	kubeMu.Unlock()
	c, err := kubenode.Start(sctx, kubenode.Options{RepoRoot: root, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	cancel()
	kubeMu.Lock()
	kubeStarting = nil
	if err == nil {
		kubeCluster = c
	}
	kubeMu.Unlock()
	close(st.done)
	if err != nil {
		skip("kubernetes rows: the cluster did not start: " + err.Error())
		return
	}
	add(Row{Scenario: kubeScenario, Variant: "cluster Ready (start -> node Ready)", Value: time.Since(t).Round(time.Millisecond).String(),
		Note: "etcd, kube-apiserver, cri-dockerd, kubelet, scheduler, controller manager, agent-sandbox controller, node " + c.NodeName})
	defer func() {
		t := time.Now()
		err := stopCluster()
		r := Row{Scenario: kubeScenario, Variant: "cluster torn down (host restored)", Value: time.Since(t).Round(time.Millisecond).String()}
		if out, lerr := exec.Command("docker", "ps", "-aq", "--filter", "label="+kubenode.LabelCluster+"="+c.ID).Output(); lerr == nil {
			r.Note = fmt.Sprintf("%d containers of the cluster left", len(strings.Fields(string(out))))
		}
		if err != nil {
			r.Value += fmt.Sprintf("; ERRORS: %.300v", err)
		}
		add(r)
	}()
	if err := kubeRows(ctx, c, root); err != nil {
		skip("kubernetes rows: " + err.Error())
	}
}

// kubeRows runs the rows on the running cluster c.
func kubeRows(ctx context.Context, c *kubenode.Cluster, root string) error {
	img, err := c.LocalImage(*image)
	if err != nil {
		return err
	}
	cs, err := k8s.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	ns := kubeNamespace
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The ServiceAccount admission refuses pods until the controller manager made "default".
	if err := poll(ctx, time.Minute, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return fmt.Errorf("no default ServiceAccount in namespace %s: %w", ns, err)
	}
	objs, err := readManifests(filepath.Join(root, "deploy", "kubernetes", "agent-sandbox.yaml"))
	if err != nil {
		return err
	}
	size := kubePoolSize()
	pool, err := benchPool(objs, ns, img, size)
	if err != nil {
		return err
	}
	g, err := startChild(gwOpts{name: "kube", kube: &kubeTarget{kubeconfig: c.Kubeconfig, namespace: ns, image: img, warmPool: pool}})
	if err != nil {
		return err
	}
	defer g.close()
	tok := g.token("bench-kube")
	samples := n(5, 2)
	k := n(20, 5)

	// The raw API: create -> Ready -> one exec, then exec round trips on one pod.
	var rawReady, rawFirst []time.Duration
	for i := 0; i < samples; i++ {
		name := fmt.Sprintf("raw-%d", i)
		t := time.Now()
		if err := rawPod(ctx, cs, ns, name, img); err != nil {
			return err
		}
		ready := time.Since(t)
		if err := podExec(ctx, c.Config, cs, ns, name); err != nil {
			return fmt.Errorf("raw exec in %s: %w", name, err)
		}
		rawFirst = append(rawFirst, time.Since(t))
		rawReady = append(rawReady, ready)
		if i < samples-1 {
			if err := deletePods(ctx, cs, ns, name); err != nil {
				return err
			}
		}
	}
	lastRaw := fmt.Sprintf("raw-%d", samples-1)
	var rawExecErr error
	rawExec := Summarize(timeN(k, func() {
		if err := podExec(ctx, c.Config, cs, ns, lastRaw); err != nil && rawExecErr == nil {
			rawExecErr = err
		}
	}))
	if err := deletePods(ctx, cs, ns, lastRaw); err != nil {
		return err
	}
	if rawExecErr != nil {
		return fmt.Errorf("raw exec: %w", rawExecErr)
	}

	// Cold: a pod per session; the next sample starts once the pod is gone.
	var cold []time.Duration
	var kept string // the last session, for the exec round trips
	for i := 0; i < samples; i++ {
		d, id, err := firstExec(g, tok, "kube")
		if err != nil {
			return fmt.Errorf("cold create -> first exec: %w", err)
		}
		cold = append(cold, d)
		if i == samples-1 {
			kept = id
			break
		}
		g.do(tok, "DELETE", "/v1/sessions/"+id, nil)
		if err := waitNoPods(ctx, cs, ns); err != nil {
			return err
		}
	}
	gwExec := Summarize(timeN(k, func() { g.exec(tok, kept, "true") }))
	g.do(tok, "DELETE", "/v1/sessions/"+kept, nil)
	if err := waitNoPods(ctx, cs, ns); err != nil {
		return err
	}

	rr, rf, cs5 := Summarize(rawReady), Summarize(rawFirst), Summarize(cold)
	add(Row{Scenario: kubeScenario, Variant: "raw API: pod create -> Ready", Summary: &rr, Note: "watch on the pod; BestEffort, sleep infinity"})
	add(Row{Scenario: kubeScenario, Variant: "raw API: pod create -> Ready -> exec", Summary: &rf, Note: "one `sh -c true` through pods/exec (WebSocket, SPDY fallback)"})
	add(Row{Scenario: kubeScenario, Variant: "create -> first exec: cold pod", Summary: &cs5,
		Value: fmt.Sprintf("%.2fx raw create->Ready->exec (p50)", cs5.P50/rf.P50)})
	add(Row{Scenario: kubeScenario, Variant: "exec round trip: through gateway (pods/exec tunnel)", Summary: &gwExec})
	add(Row{Scenario: kubeScenario, Variant: "exec round trip: raw pods/exec per call", Summary: &rawExec,
		Value: fmt.Sprintf("gateway %.2fx raw (p50)", gwExec.P50/rawExec.P50)})

	// The warm pool: filled once (timed), then claims one at a time, each from a full pool.
	pools := dyn.Resource(gvrSandboxWarmPool).Namespace(ns)
	t := time.Now()
	for _, u := range objs {
		gvr := gvrSandboxWarmPool
		if u.GetKind() == "SandboxTemplate" {
			gvr = gvrSandboxTemplate
		}
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	readyIn := func(max time.Duration) int {
		got := 0
		_ = poll(ctx, max, func() bool {
			u, err := pools.Get(ctx, pool, metav1.GetOptions{})
			if err == nil {
				v, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
				got = int(v)
			}
			return got >= size
		})
		return got
	}
	if got := readyIn(4 * time.Minute); got < size {
		return fmt.Errorf("the warm pool has %d of %d sandboxes Ready after 4 minutes", got, size)
	}
	add(Row{Scenario: kubeScenario, Variant: fmt.Sprintf("warm pool of %d filled", size), Value: time.Since(t).Round(time.Millisecond).String(),
		Note: "SandboxTemplate + SandboxWarmPool created -> readyReplicas " + fmt.Sprint(size) + " (the real agent-sandbox controller)"})

	// A claim got a pool pod when its pod existed before the claim (only the pool's pods
	// are in the namespace then).
	claimed := func(before map[string]bool, sid string) bool { return before[sessionPod(ctx, dyn, g, tok, sid)] }
	claims := n(10, 3)
	var warm []time.Duration
	pooled := 0
	for i := 0; i < claims; i++ {
		readyIn(2 * time.Minute)
		before := podNames(ctx, cs, ns)
		d, id, err := firstExec(g, tok, "kube-warm")
		if err != nil {
			return fmt.Errorf("warm create -> first exec: %w", err)
		}
		warm = append(warm, d)
		if claimed(before, id) {
			pooled++
		}
		g.do(tok, "DELETE", "/v1/sessions/"+id, nil)
	}
	ws := Summarize(warm)
	add(Row{Scenario: kubeScenario, Variant: fmt.Sprintf("create -> first exec: warm-pool claim (pool %d)", size), Summary: &ws,
		Value: fmt.Sprintf("%.2fx raw create->Ready->exec (p50); %d of %d claims got a pool pod", ws.P50/rf.P50, pooled, claims),
		Note:  "SandboxClaim bound by the real controller, sandboxd token given, `true` run; each from a full pool"})

	// The burst: size clients at once from a full pool.
	ready := readyIn(2 * time.Minute)
	before := podNames(ctx, cs, ns)
	lat := make([]time.Duration, size)
	ids := make([]string, size)
	var fails atomic.Int64
	var firstErr atomic.Value
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < size; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			t := time.Now()
			id, err := g.trySession(tok, "kube-warm")
			if err == nil {
				ids[i] = id
				if !g.tryExec(tok, id, "true") {
					err = errors.New("first exec failed")
				}
			}
			if err != nil {
				fails.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			lat[i] = time.Since(t)
		}(i)
	}
	t = time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t)
	var ok, created []string
	var okLat []time.Duration
	for i, id := range ids {
		if id != "" {
			created = append(created, id)
		}
		if lat[i] > 0 {
			ok = append(ok, id)
			okLat = append(okLat, lat[i])
		}
	}
	pooled = 0
	for _, id := range ok {
		if claimed(before, id) {
			pooled++
		}
	}
	bs := Summarize(okLat)
	r := Row{Scenario: kubeScenario, Variant: fmt.Sprintf("burst of %d concurrent claims -> first exec (pool %d)", size, size), Summary: &bs,
		Rate:  float64(len(ok)) / wall.Seconds(),
		Value: fmt.Sprintf("whole burst %d ms; pool held %d Ready at the start; %d of %d sessions got a pool pod", wall.Milliseconds(), ready, pooled, size),
		Note:  "per_second: claims reaching their first exec / the whole burst's time"}
	if fails.Load() > 0 {
		r.Value += fmt.Sprintf("; %d FAILED (first: %.200v)", fails.Load(), firstErr.Load())
	}
	add(r)
	g.destroy(tok, created, 8)
	return nil
}

// firstExec creates a session on profile and runs `true` in it (which makes its sandbox):
// the time of both, and the session.
func firstExec(g *gateway, tok, profile string) (time.Duration, string, error) {
	t := time.Now()
	id, err := g.trySession(tok, profile)
	if err != nil {
		return 0, "", err
	}
	code, b, err := g.try(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "true"})
	if err == nil && code != 200 {
		err = fmt.Errorf("exec: %d %.300s", code, b)
	}
	if err != nil {
		g.do(tok, "DELETE", "/v1/sessions/"+id, nil)
		return 0, "", err
	}
	return time.Since(t), id, nil
}

// sessionPod is the pod bound to session sid's sandbox (a SandboxClaim, "<ns>/<claim>"):
// the claim's Sandbox names it in kubernetes.AnnotationPodName, or it has the Sandbox's name
// (as the provider reads it); "" when unknown.
func sessionPod(ctx context.Context, dyn dynamic.Interface, g *gateway, tok, sid string) string {
	var sess struct {
		SandboxID string `json:"sandbox_id"`
	}
	if json.Unmarshal(g.mustGet(tok, "/v1/sessions/"+sid), &sess) != nil {
		return ""
	}
	ns, claim, ok := strings.Cut(sess.SandboxID, "/")
	if !ok {
		return ""
	}
	u, err := dyn.Resource(gvrSandboxClaim).Namespace(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	name, _, _ := unstructured.NestedString(u.Object, "status", "sandbox", "name")
	if name == "" {
		return ""
	}
	sb, err := dyn.Resource(gvrSandbox).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	if a := sb.GetAnnotations()[kubernetes.AnnotationPodName]; a != "" {
		return a
	}
	return name
}

// podNames lists the pods of namespace ns (nil on error).
func podNames(ctx context.Context, cs k8s.Interface, ns string) map[string]bool {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, p := range l.Items {
		out[p.Name] = true
	}
	return out
}

// readManifests reads the YAML documents of a file.
func readManifests(path string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
	return out, nil
}

// benchPool adapts the SandboxTemplate and SandboxWarmPool of deploy/kubernetes/agent-sandbox.yaml
// (in place) to the bench's node and returns the pool's name: namespace ns, the image img,
// no runtimeClassName (no Kata here), requests of 10m CPU and 64 MiB (the template's 250m
// would fit 8 pods on the 2 cores; the limits stay), and size replicas.
func benchPool(objs []*unstructured.Unstructured, ns, img string, size int) (string, error) {
	pool := ""
	var tmpl bool
	for _, u := range objs {
		u.SetNamespace(ns)
		switch u.GetKind() {
		case "SandboxTemplate":
			spec, _, err := unstructured.NestedMap(u.Object, "spec", "podTemplate", "spec")
			if err != nil || spec == nil {
				return "", fmt.Errorf("SandboxTemplate %s has no spec.podTemplate.spec", u.GetName())
			}
			delete(spec, "runtimeClassName")
			containers, _, _ := unstructured.NestedSlice(spec, "containers")
			if len(containers) != 1 {
				return "", fmt.Errorf("SandboxTemplate %s has %d containers, want 1", u.GetName(), len(containers))
			}
			c := containers[0].(map[string]any)
			c["image"] = img
			if err := unstructured.SetNestedMap(c, map[string]any{"cpu": "10m", "memory": "64Mi"}, "resources", "requests"); err != nil {
				return "", err
			}
			if err := unstructured.SetNestedSlice(spec, containers, "containers"); err != nil {
				return "", err
			}
			if err := unstructured.SetNestedMap(u.Object, spec, "spec", "podTemplate", "spec"); err != nil {
				return "", err
			}
			tmpl = true
		case "SandboxWarmPool":
			if err := unstructured.SetNestedField(u.Object, int64(size), "spec", "replicas"); err != nil {
				return "", err
			}
			pool = u.GetName()
		}
	}
	if pool == "" || !tmpl {
		return "", errors.New("deploy/kubernetes/agent-sandbox.yaml: want a SandboxTemplate and a SandboxWarmPool")
	}
	return pool, nil
}

// rawPod creates pod ns/name (img, `sleep infinity`, BestEffort, no service-account token)
// and waits until it is Ready.
func rawPod(ctx context.Context, cs k8s.Interface, ns, name, img string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"sandgate.bench": "raw"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "raw", Image: img, Command: []string{"sleep", "infinity"}}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	w, err := cs.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if p.Status.Phase == corev1.PodFailed {
			return fmt.Errorf("pod %s failed: %s", name, p.Status.Message)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
	}
	return fmt.Errorf("pod %s not Ready within 2 minutes", name)
}

// podExec runs `sh -c true` in pod ns/name through pods/exec: WebSocket, SPDY when the
// upgrade fails (as kubectl and the provider do).
func podExec(ctx context.Context, cfg *rest.Config, cs k8s.Interface, ns, name string) error {
	u := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"/bin/sh", "-c", "true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
}

// deletePods deletes pods of ns (now) and waits until the namespace has none.
func deletePods(ctx context.Context, cs k8s.Interface, ns string, names ...string) error {
	for _, name := range names {
		err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return waitNoPods(ctx, cs, ns)
}

// waitNoPods waits (a minute at most) until namespace ns has no pods.
func waitNoPods(ctx context.Context, cs k8s.Interface, ns string) error {
	left := 0
	if err := poll(ctx, time.Minute, func() bool {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		left = len(l.Items)
		return left == 0
	}); err != nil {
		return fmt.Errorf("%d pods still in namespace %s after a minute", left, ns)
	}
	return nil
}

// poll calls done every 100 ms until it returns true (nil) or max has passed.
func poll(ctx context.Context, max time.Duration, done func() bool) error {
	deadline := time.Now().Add(max)
	for {
		if done() {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %s", max)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
