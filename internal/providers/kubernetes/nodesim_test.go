package kubernetes

// The played node. The test API server has no scheduler and no kubelet, so these tests play
// their parts, and only theirs:
//
//   - the scheduler: a pod of the watched namespace without a node is bound (pods/binding) to
//     the played Node;
//   - the kubelet's status: the pod's phase, conditions, IPs and container status are written
//     through the API server (pods/status) once its container runs;
//   - with Docker (playedNode.docker != nil), the container runtime: the pod's container runs
//     in the local Docker engine, configured from the pod spec as a kubelet would (image,
//     command, working folder, env, user and group, read-only root file system, dropped
//     capabilities, no-new-privileges, emptyDir volumes as tmpfs — or host folders when an
//     init container shares them —, cpu and memory limits, an init as PID 1 for
//     shareProcessNamespace), after its init containers ran to completion, and its IP is the
//     pod IP — or, when the container declares ports, they are published on a loopback
//     address of its own (127.0.1xx.y), which is reported as the pod IP, so the tests reach
//     "the pod network" over loopback only;
//   - with Docker, the kubelet's exec endpoint: the Node's status points the API server at an
//     HTTPS server in the test that serves /exec/<namespace>/<pod>/<container> with the
//     kubelet's own streaming code (k8s.io/cri-streaming, remotecommand.ServeExec) and runs the
//     command with the Docker exec API.
//
// What stays real: the API server (authentication, RBAC on pods and pods/exec, admission,
// storage, watches) and the whole client side of the provider, including the exec streams
// (WebSocket or SPDY from the provider to the API server, which proxies them to the played
// kubelet as it would to a real one). What is not covered: a real kubelet and CNI (no
// NetworkPolicy enforcement, no image pulls, no probes), the real pause container.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/ptr"
)

// playedNode plays a node for the pods of one namespace.
type playedNode struct {
	t      testing.TB
	cs     k8s.Interface // admin
	ns     string
	name   string
	docker *client.Client // nil: status only, no containers

	kubelet *httptest.Server

	mu         sync.Mutex
	containers map[string]string // pod name → container id
	stopped    bool
}

// playNode starts playing a node for namespace ns (see the top of this file). With docker nil
// the pods become Running and Ready without any container (exec then fails).
func playNode(t testing.TB, ns string, docker *client.Client) *playedNode {
	t.Helper()
	n := &playedNode{t: t, cs: adminClient(t), ns: ns, name: "played-" + ns, docker: docker, containers: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())

	port := 10250
	if docker != nil {
		n.kubelet = httptest.NewUnstartedServer(http.HandlerFunc(n.serveKubelet))
		n.kubelet.StartTLS()
		_, p, err := net.SplitHostPort(n.kubelet.Listener.Addr().String())
		require.NoError(t, err)
		port, _ = strconv.Atoi(p)
	}
	node, err := n.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	node.Status = corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	_, err = n.cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)

	done := make(chan struct{})
	go func() {
		defer close(done)
		n.loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		n.mu.Lock()
		n.stopped = true
		ids := make([]string, 0, len(n.containers))
		for _, id := range n.containers {
			ids = append(ids, id)
		}
		n.mu.Unlock()
		for _, id := range ids {
			n.removeContainer(id)
		}
		if n.kubelet != nil {
			n.kubelet.Close()
		}
		_ = n.cs.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{})
	})
	return n
}

// loop watches the namespace's pods and plays scheduler and kubelet for them.
func (n *playedNode) loop(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := n.cs.CoreV1().Pods(n.ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			go n.handle(ctx, ev.Type, pod)
		}
		w.Stop()
	}
}

// handle reacts to one pod event. Events of one pod may be handled concurrently; each step
// is idempotent.
func (n *playedNode) handle(ctx context.Context, typ watch.EventType, pod *corev1.Pod) {
	pods := n.cs.CoreV1().Pods(n.ns)
	switch {
	case typ == watch.Deleted:
		n.forget(pod.Name)
	case pod.DeletionTimestamp != nil:
		// The kubelet stops the containers, then confirms the deletion.
		n.forget(pod.Name)
		_ = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	case pod.Spec.NodeName == "":
		// The scheduler.
		err := pods.Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: n.name},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
			n.t.Logf("played scheduler: binding %s: %v", pod.Name, err)
		}
	case pod.Spec.NodeName == n.name && pod.Status.Phase == corev1.PodPending:
		n.start(ctx, pod)
	}
}

// start runs the pod's container (with Docker) and reports it Running and Ready.
func (n *playedNode) start(ctx context.Context, pod *corev1.Pod) {
	n.mu.Lock()
	if _, running := n.containers[pod.Name]; running || n.stopped {
		n.mu.Unlock()
		return
	}
	n.containers[pod.Name] = "" // starting
	n.mu.Unlock()

	ip, id := "", ""
	if n.docker != nil {
		var err error
		id, ip, err = n.runContainer(ctx, pod)
		if err != nil {
			n.t.Logf("played kubelet: running %s: %v", pod.Name, err)
			n.fail(ctx, pod, err)
			return
		}
		n.mu.Lock()
		stopped := n.stopped
		if !stopped {
			n.containers[pod.Name] = id
		}
		n.mu.Unlock()
		if stopped {
			n.removeContainer(id)
			return
		}
	}
	if ip == "" {
		ip = "10.244.0." + strconv.Itoa(1+len(pod.Name)%250)
	}
	now := metav1.Now()
	cur, err := n.cs.CoreV1().Pods(n.ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
		n.forget(pod.Name) // deleted while it started
		return
	}
	cur.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range cur.Spec.Containers {
		cid := ""
		if id != "" {
			cid = "docker://" + id
		}
		cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: cid, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := n.cs.CoreV1().Pods(n.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		n.t.Logf("played kubelet: status of %s: %v", pod.Name, err)
	}
}

// fail reports the pod Failed, as a kubelet reports a container that cannot run.
func (n *playedNode) fail(ctx context.Context, pod *corev1.Pod, cause error) {
	cur, err := n.cs.CoreV1().Pods(n.ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return
	}
	cur.Status.Phase = corev1.PodFailed
	cur.Status.Reason = "PlayedNodeError"
	cur.Status.Message = cause.Error()
	_, _ = n.cs.CoreV1().Pods(n.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
}

func (n *playedNode) forget(pod string) {
	n.mu.Lock()
	id := n.containers[pod]
	delete(n.containers, pod)
	n.mu.Unlock()
	if id != "" {
		n.removeContainer(id)
	}
}

func (n *playedNode) removeContainer(id string) {
	if n.docker == nil || id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = n.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
}

// runContainer runs the pod's init containers to completion and then its first container
// in Docker, as a kubelet would configure them, and returns the container's id and IP.
// EmptyDirs are tmpfs mounts, except those an init container mounts too: they are host
// folders shared by the pod's containers.
func (n *playedNode) runContainer(ctx context.Context, pod *corev1.Pod) (id, ip string, err error) {
	shared := map[string]string{} // emptyDir name → host folder
	for _, ic := range pod.Spec.InitContainers {
		for _, m := range ic.VolumeMounts {
			if _, ok := shared[m.Name]; ok {
				continue
			}
			dir, err := os.MkdirTemp("", "played-emptydir-")
			if err != nil {
				return "", "", err
			}
			n.t.Cleanup(func() { _ = os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
				return "", "", err
			}
			shared[m.Name] = dir
		}
	}
	for _, ic := range pod.Spec.InitContainers {
		if err := n.runToCompletion(ctx, pod, ic, shared); err != nil {
			return "", "", fmt.Errorf("init container %s: %w", ic.Name, err)
		}
	}
	cfg, hc := n.containerConfig(pod, pod.Spec.Containers[0], shared)
	published := ""
	if ports := pod.Spec.Containers[0].Ports; len(ports) > 0 {
		// The container's ports are published on a loopback address of its own, which is
		// then its pod IP: the gateway reaches "the pod network" over loopback only.
		published = fmt.Sprintf("127.0.%d.%d", 100+nextLoopback.Load()/250, 1+nextLoopback.Add(1)%250)
		cfg.ExposedPorts = nat.PortSet{}
		hc.PortBindings = nat.PortMap{}
		for _, cp := range ports {
			port := nat.Port(fmt.Sprintf("%d/tcp", cp.ContainerPort))
			cfg.ExposedPorts[port] = struct{}{}
			hc.PortBindings[port] = []nat.PortBinding{{HostIP: published, HostPort: strconv.Itoa(int(cp.ContainerPort))}}
		}
	}
	resp, err := n.docker.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return "", "", err
	}
	if err := n.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		n.removeContainer(resp.ID)
		return "", "", err
	}
	ins, err := n.docker.ContainerInspect(ctx, resp.ID)
	if err != nil {
		n.removeContainer(resp.ID)
		return "", "", err
	}
	if ins.NetworkSettings != nil {
		for _, nw := range ins.NetworkSettings.Networks {
			if nw != nil && nw.IPAddress != "" {
				ip = nw.IPAddress
				break
			}
		}
	}
	if published != "" {
		ip = published
	}
	return resp.ID, ip, nil
}

// nextLoopback numbers the loopback addresses containers' ports are published on.
var nextLoopback atomic.Int64

// runToCompletion runs an init container and waits for it to exit 0.
func (n *playedNode) runToCompletion(ctx context.Context, pod *corev1.Pod, c corev1.Container, shared map[string]string) error {
	cfg, hc := n.containerConfig(pod, c, shared)
	hc.Init = nil
	resp, err := n.docker.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return err
	}
	defer n.removeContainer(resp.ID)
	waitC, errC := n.docker.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := n.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return err
	}
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			return fmt.Errorf("exited with status %d", w.StatusCode)
		}
		return nil
	case err := <-errC:
		return err
	}
}

// containerConfig is the Docker configuration of container c of pod: image, command (as the
// kubelet does: command replaces the image's entrypoint, args its command), working folder,
// env, user and group, read-only root file system, dropped capabilities, no-new-privileges,
// emptyDirs (tmpfs, or the host folders of shared), cpu and memory limits, an init for
// shareProcessNamespace.
func (n *playedNode) containerConfig(pod *corev1.Pod, c corev1.Container, shared map[string]string) (*container.Config, *container.HostConfig) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	uid, gid := psc.RunAsUser, psc.RunAsGroup
	if sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		gid = sc.RunAsGroup
	}
	cfg := &container.Config{
		Image:      c.Image,
		Cmd:        c.Args,
		WorkingDir: c.WorkingDir,
		Labels:     map[string]string{"sandgate.test/played-pod": pod.Namespace + "/" + pod.Name},
	}
	if len(c.Command) > 0 {
		cfg.Entrypoint = c.Command
	}
	for _, e := range c.Env {
		cfg.Env = append(cfg.Env, e.Name+"="+e.Value)
	}
	if uid != nil {
		cfg.User = strconv.FormatInt(*uid, 10)
		if gid != nil {
			cfg.User += ":" + strconv.FormatInt(*gid, 10)
		}
	}
	hc := &container.HostConfig{
		ReadonlyRootfs: sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		Init:           ptr.To(pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace),
		Tmpfs:          map[string]string{},
	}
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			hc.CapDrop = append(hc.CapDrop, string(d))
		}
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	for _, m := range c.VolumeMounts {
		if !emptyDirs[m.Name] {
			continue
		}
		if dir, ok := shared[m.Name]; ok {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: m.MountPath, ReadOnly: m.ReadOnly})
			continue
		}
		// An emptyDir is a writable, executable folder for the pod's users.
		hc.Tmpfs[m.MountPath] = "rw,exec,nosuid,nodev,mode=1777"
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		hc.NanoCPUs = q.MilliValue() * 1_000_000
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		hc.Memory = q.Value()
	}
	return cfg, hc
}

// serveKubelet is the played kubelet's HTTPS endpoint: exec only.
func (n *playedNode) serveKubelet(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "exec" || parts[1] != n.ns {
		http.NotFound(w, r)
		return
	}
	pod, ctr := parts[2], parts[3]
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, r, dockerExecutor{n}, pod, "", ctr, r.URL.Query()["command"], opts,
		10*time.Minute, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// dockerExecutor runs the played kubelet's execs with the Docker exec API.
type dockerExecutor struct{ n *playedNode }

func (e dockerExecutor) ExecInContainer(ctx context.Context, pod, _, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	e.n.mu.Lock()
	id := e.n.containers[pod]
	e.n.mu.Unlock()
	if id == "" {
		return fmt.Errorf("container of pod %s is not running", pod)
	}
	cli := e.n.docker
	created, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: cmd, AttachStdin: in != nil, AttachStdout: out != nil, AttachStderr: errOut != nil,
	})
	if err != nil {
		return err
	}
	hr, err := cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer hr.Close()
	if in != nil {
		go func() {
			_, _ = io.Copy(hr.Conn, in)
			_ = hr.CloseWrite()
		}()
	}
	if out == nil {
		out = nopWriteCloser{io.Discard}
	}
	if errOut == nil {
		errOut = nopWriteCloser{io.Discard}
	}
	_, err = stdcopy.StdCopy(out, errOut, hr.Reader)
	if err != nil {
		return err
	}
	ins, err := cli.ContainerExecInspect(context.WithoutCancel(ctx), created.ID)
	if err != nil {
		return err
	}
	if ins.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", ins.ExitCode), Code: ins.ExitCode}
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// waitPodGone waits until pod ns/name no longer exists.
func waitPodGone(t testing.TB, cs k8s.Interface, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		require.NoError(t, ctx.Err(), "pod %s/%s still exists", ns, name)
		time.Sleep(100 * time.Millisecond)
	}
}
