// Package kubenode brings up a real single-node Kubernetes cluster for tests and for
// `make kube-up`: etcd and kube-apiserver (through controller-runtime's envtest, as the
// provider's envtest suite does), kube-scheduler, kube-controller-manager, a kubelet whose
// container runtime is cri-dockerd on the shared Docker engine, pod networking by the bridge
// and host-local CNI plugins inside a network namespace the cluster makes, and the real
// agent-sandbox controller (extensions on) with its CRDs. Everything comes from
// scripts/kube-setup.sh --node (see FindAssets); nothing is pulled from a registry.
//
// Layout on the host (<id> is random per cluster, <dir> a fresh temporary folder):
//
//	processes   etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubelet,
//	            agent-sandbox-controller (host network namespace, loopback), cri-dockerd
//	            (in the network namespace sgk-<id>, so the CNI bridge and the pods are there)
//	network     netns sgk-<id>; a veth pair sgk<id> (host, 10.213.N.1/30, the node's
//	            InternalIP, which the API server dials for exec and logs) ↔ eth0 in the netns
//	            (10.213.N.2, cri-dockerd's streaming server); pods on 10.214.N.0/24 (PodCIDR)
//	            behind the bridge in the netns, with no route out of it; the host reaches them
//	            through a route via the veth (it goes with the veth) and a masquerade in the
//	            netns (pods see the bridge's address), so a test may dial a pod IP (the
//	            provider's pod_ip transport) while pods still reach nothing outside the netns
//	cgroups     /sgk-<id> in each cgroup v1 hierarchy (the kubelet's cgroupRoot)
//	containers  every container of the cluster is labelled LabelCluster=<id> by the Docker
//	            API proxy cri-dockerd talks through (see dockerproxy.go)
//	files       <dir> (etcd data, kube-apiserver certificates, kubelet root and pod logs,
//	            cri-dockerd root, CNI config and IPAM state, logs of every process in
//	            <dir>/logs); /var/log/containers symlinks
//	record      StateDir/<id>.json: the above, the host state before Start, and the
//	            process that started the cluster (see sweep.go)
//
// Stop removes all of it and restores the sysctls the kubelet sets (vm.overcommit_memory,
// vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, kernel.keys.root_maxkeys,
// kernel.keys.root_maxbytes) to the values they had before Start.
//
// A process killed before Stop (go test's -timeout) leaves the cluster behind; the processes
// Start runs itself die with it (parent-death signal), etcd and kube-apiserver (envtest's)
// do not. The next Start sweeps such clusters first: those whose record names a process
// that is gone; their processes (found by the cluster's folder on their command line) are
// killed and Stop runs on the record.
//
// It needs root, cgroup v1 or v2 with the cgroupfs driver, iproute2 and the docker CLI.
package kubenode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configure Start.
type Options struct {
	// RepoRoot is the repository's root (for tools/kube's pinned versions).
	RepoRoot string
	// Log receives progress; nil discards it.
	Log *slog.Logger
	// ReadyTimeout bounds the wait for the node to be Ready (default 3 minutes).
	ReadyTimeout time.Duration
}

// Cluster is a running single-node cluster. Stop it exactly once.
type Cluster struct {
	// ID names the cluster's node, netns, cgroups and containers.
	ID string
	// NodeName is the Node's name ("sgk-<id>").
	NodeName string
	// Config is a system:masters client configuration.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// Dir is the cluster's folder (removed by Stop).
	Dir string
	// PodCIDR is the pods' subnet ("10.214.N.0/24"), routed from the host into the netns.
	PodCIDR string

	log      *slog.Logger
	env      *envtest.Environment
	proxy    *dockerProxy
	procs    []*proc // in start order; stopped in reverse
	netns    string
	hostVeth string
	cgroup   string // relative cgroup path, "/sgk-<id>"
	sysctls  map[string]string
	absent   []string                 // hostPaths that did not exist before Start
	iptables map[string]iptablesState // "iptables"/"ip6tables" → chains before Start
	tags     []string
	stateDir string // where the cluster's record is (see StateDir); "" before it is written
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// sysctlsKubeletSets are the host sysctls the kubelet changes at start
// (pkg/kubelet/cm's setupKernelTunables), restored by Stop.
var sysctlsKubeletSets = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// Start brings the cluster up and waits until its node is Ready. On error, whatever was
// started is torn down again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("kubenode needs root (network namespaces, cgroups, mounts)")
	}
	assets, err := FindAssets(opts.RepoRoot)
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Clusters of runs that ended without Stop (killed by go test's -timeout) would hold
	// the host's subnets, sysctls and memory: they go first.
	if err := sweep(StateDir, log); err != nil {
		log.Warn("removing clusters left by earlier runs", "err", err)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	dir, err := os.MkdirTemp("", "sgk-"+id+"-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{ID: id, NodeName: "sgk-" + id, Dir: dir, log: log, netns: "sgk-" + id, hostVeth: "sgk" + id, cgroup: "/sgk-" + id}
	defer func() {
		if err != nil {
			if serr := c.Stop(); serr != nil {
				log.Warn("tearing down after a failed start", "err", serr)
			}
			c = nil
		}
	}()
	for _, d := range []string{"logs", "etcd", "kube-apiserver", "kubelet", "pod-logs", "cri-dockerd", "cni/net.d", "cni/cache", "cni/ipam", "agent-sandbox"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return c, err
		}
	}
	c.sysctls = map[string]string{}
	for _, k := range sysctlsKubeletSets {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return c, fmt.Errorf("reading sysctl %s: %w", k, err)
		}
		c.sysctls[k] = strings.TrimSpace(string(v))
	}
	c.absent = absentPaths()
	c.iptables = map[string]iptablesState{}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if c.iptables[cmd], err = iptablesChains(cmd); err != nil {
			return c, err
		}
	}
	// The record, before the first change to the host: a later Start sweeps the cluster
	// with it should this process die without Stop.
	if err := c.saveRecord(StateDir); err != nil {
		return c, fmt.Errorf("recording the cluster in %s: %w", StateDir, err)
	}
	c.stateDir = StateDir

	// Network: the netns, the veth pair, addresses. N comes from the id so that two clusters
	// rarely share a subnet; a clash fails at "ip addr add" rather than misroutes.
	n := int(b[0])
	hostIP, nsIP := fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n)
	podCIDR := fmt.Sprintf("10.214.%d.0/24", n)
	c.PodCIDR = podCIDR
	for _, args := range [][]string{
		{"netns", "add", c.netns},
		{"link", "add", c.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", c.netns},
		{"addr", "add", hostIP + "/30", "dev", c.hostVeth},
		{"link", "set", c.hostVeth, "up"},
		{"-n", c.netns, "addr", "add", nsIP + "/30", "dev", "eth0"},
		{"-n", c.netns, "link", "set", "eth0", "up"},
		{"-n", c.netns, "link", "set", "lo", "up"},
		// The pods, from the host: through the netns, which forwards to its bridge and gives
		// the host's connections the bridge's address (pods have no route beyond their subnet,
		// and are given none). Forwarding and the NAT rule are the netns's own; the route
		// lives and dies with the veth.
		{"netns", "exec", c.netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
		{"netns", "exec", c.netns, "iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-s", hostIP + "/32", "-o", "cni0", "-j", "MASQUERADE"},
		{"route", "add", podCIDR, "via", nsIP, "dev", c.hostVeth},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return c, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}

	// Control plane.
	c.env = &envtest.Environment{
		CRDDirectoryPaths:        []string{assets.AgentSandboxCRDsDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	c.env.ControlPlane.APIServer = &envtest.APIServer{Path: assets.APIServer}
	c.env.ControlPlane.APIServer.Configure().
		Set("kubelet-preferred-address-types", "InternalIP").
		Set("service-cluster-ip-range", "10.215.0.0/24")
	// Their folders are the cluster's: their command lines name it, which is how a sweep
	// finds them (envtest starts them without a parent-death signal).
	c.env.ControlPlane.APIServer.CertDir = filepath.Join(dir, "kube-apiserver")
	c.env.ControlPlane.Etcd = &envtest.Etcd{Path: assets.Etcd, DataDir: filepath.Join(dir, "etcd")}
	log.Info("starting etcd and kube-apiserver")
	if _, err := c.env.Start(); err != nil {
		return c, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	admin, err := c.env.AddUser(envtest.User{Name: "sandgate-kubenode-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return c, err
	}
	c.Config = admin.Config()
	kc, err := admin.KubeConfig()
	if err != nil {
		return c, err
	}
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kc, 0o600); err != nil {
		return c, err
	}

	// The runtime: the Docker API proxy, then cri-dockerd in the netns.
	c.proxy, err = startDockerProxy(filepath.Join(dir, "docker.sock"), "/var/run/docker.sock", id)
	if err != nil {
		return c, err
	}
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "sgk-%s", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}},
  {"type": "loopback"}]}`, id, podCIDR, filepath.Join(dir, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(dir, "cni", "net.d", "10-sgk.conflist"), []byte(cni), 0o644); err != nil {
		return c, err
	}
	criSock := filepath.Join(dir, "cri-dockerd.sock")
	if err := c.start(ctx, "cri-dockerd", "ip", "netns", "exec", c.netns, assets.CRIDockerd,
		"--container-runtime-endpoint", "unix://"+criSock,
		"--docker-endpoint", "unix://"+filepath.Join(dir, "docker.sock"),
		"--cri-dockerd-root-directory", filepath.Join(dir, "cri-dockerd"),
		"--network-plugin", "cni",
		"--cni-bin-dir", assets.CNIBinDir,
		"--cni-conf-dir", filepath.Join(dir, "cni", "net.d"),
		"--cni-cache-dir", filepath.Join(dir, "cni", "cache"),
		"--pod-infra-container-image", assets.PauseImage,
		"--streaming-bind-addr", nsIP+":10010",
		"--hairpin-mode", "none",
	); err != nil {
		return c, err
	}
	if err := waitFile(ctx, criSock, time.Minute, c.procs[len(c.procs)-1]); err != nil {
		return c, fmt.Errorf("cri-dockerd: %w (log: %s)", err, c.logPath("cri-dockerd"))
	}

	// The kubelet.
	cg, err := cgroupSubsystems()
	if err != nil {
		return c, err
	}
	for _, s := range cg {
		p := filepath.Join(s, c.cgroup)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return c, fmt.Errorf("creating cgroup %s: %w", p, err)
		}
		if filepath.Base(s) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(s, f))
				if err != nil {
					return c, err
				}
				if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
					return c, fmt.Errorf("cgroup %s/%s: %w", p, f, err)
				}
			}
		}
	}
	kubeletPort, err := freePort(hostIP)
	if err != nil {
		return c, err
	}
	// ExtendWebSocketsToKubelet off: the kubelet's websocket translator dials the runtime's
	// streaming URL as https when it has no scheme, and cri-dockerd's (plain http) has none;
	// without the gate the node does not declare it, the API server translates websockets to
	// SPDY itself and the kubelet's upgrade-aware proxy takes a schemeless URL as http.
	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: %[3]s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://%[4]s
podLogsDir: %[5]s
volumePluginDir: %[6]s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
serializeImagePulls: false
maxPods: 50
featureGates:
  ExtendWebSocketsToKubelet: false
`, hostIP, kubeletPort, c.cgroup, criSock, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "kubelet-plugins"))
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(kcfg), 0o644); err != nil {
		return c, err
	}
	if err := c.start(ctx, "kubelet", assets.Kubelet,
		"--config", filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig", c.Kubeconfig,
		"--root-dir", filepath.Join(dir, "kubelet"),
		"--cert-dir", filepath.Join(dir, "kubelet", "pki"),
		"--node-ip", hostIP,
		"--hostname-override", c.NodeName,
		"--v", "1",
	); err != nil {
		return c, err
	}

	// Scheduler, controller manager, agent-sandbox controller.
	for _, name := range []string{"kube-scheduler", "kube-controller-manager"} {
		port, err := freePort("127.0.0.1")
		if err != nil {
			return c, err
		}
		bin := assets.Scheduler
		if name == "kube-controller-manager" {
			bin = assets.ControllerManager
		}
		args := []string{
			"--kubeconfig", c.Kubeconfig,
			"--authentication-kubeconfig", c.Kubeconfig,
			"--authorization-kubeconfig", c.Kubeconfig,
			"--leader-elect=false",
			"--bind-address", "127.0.0.1",
			"--secure-port", strconv.Itoa(port),
		}
		if name == "kube-controller-manager" {
			args = append(args, "--flex-volume-plugin-dir", filepath.Join(dir, "kubelet-plugins"))
		}
		if err := c.start(ctx, name, bin, args...); err != nil {
			return c, err
		}
	}
	args := []string{assets.AgentSandboxController, "--kubeconfig", c.Kubeconfig, "--extensions",
		"--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	if err := c.start(ctx, "agent-sandbox-controller", args[0], args[1:]...); err != nil {
		return c, err
	}

	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	if err := c.waitNodeReady(ctx, timeout); err != nil {
		return c, err
	}
	return c, nil
}

// AddUser returns a client configuration of a new user of the cluster's API server (a client
// certificate for name and groups), with no rights until RBAC grants some: a gateway that is
// not an administrator, for impersonation tests.
func (c *Cluster) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// LocalImage gives image (a local Docker image) a tag of the cluster's own, which Stop removes,
// and returns it. The kubelet pulls an image tagged :latest (or untagged) before each start —
// impossible here — and uses any other tag as it is (imagePullPolicy IfNotPresent).
func (c *Cluster) LocalImage(image string) (string, error) {
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	tag := repo + ":kubenode-" + c.ID
	// Recorded before it is made: a process killed in between leaves nothing unrecorded.
	c.tags = append(c.tags, tag)
	if c.stateDir != "" {
		if err := c.saveRecord(c.stateDir); err != nil {
			return "", fmt.Errorf("recording the tag %s: %w", tag, err)
		}
	}
	if out, err := exec.Command("docker", "tag", image, tag).CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker tag %s %s: %w: %s", image, tag, err, out)
	}
	return tag, nil
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.Dir, "logs", name+".log") }

// start runs a process of the cluster, its output in <dir>/logs/<name>.log. It is killed with
// the test process (Pdeathsig) if Stop never runs.
func (c *Cluster) start(ctx context.Context, name, bin string, args ...string) error {
	f, err := os.Create(c.logPath(name))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.log.Info("starting", "process", name)
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return ctx.Err()
}

func (c *Cluster) waitNodeReady(ctx context.Context, timeout time.Duration) error {
	cs, err := k8s.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		for _, p := range c.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.name, p.err, c.logPath(p.name), tail(c.logPath(p.name), 15))
			default:
			}
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err == nil {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					c.log.Info("node ready", "node", c.NodeName)
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready within %s; kubelet log %s:\n%s", c.NodeName, timeout, c.logPath("kubelet"), tail(c.logPath("kubelet"), 20))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Stop tears the cluster down and restores the host: processes, containers, mounts, cgroups,
// network namespace and veth, sysctls, files. It goes on past errors and returns them all.
func (c *Cluster) Stop() error {
	var errs []error
	// The controllers first, so nothing recreates pods while the node goes away.
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.name == "cri-dockerd" {
			continue // after the containers
		}
		errs = append(errs, stopProc(p))
	}
	// Every container of the cluster (labelled by the proxy).
	if out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+LabelCluster+"="+c.ID).Output(); err != nil {
		errs = append(errs, fmt.Errorf("listing the cluster's containers: %w", err))
	} else if ids := strings.Fields(string(out)); len(ids) > 0 {
		if out, err := exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing the cluster's containers: %w: %s", err, out))
		}
	}
	for _, p := range c.procs {
		if p.name == "cri-dockerd" {
			errs = append(errs, stopProc(p))
		}
	}
	for _, tag := range c.tags {
		// Removes the tag only: the image keeps its other names.
		// A tag already gone is removed: a Stop cut short, then done again by a sweep.
		if out, err := exec.Command("docker", "rmi", "--no-prune", tag).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("No such image")) {
			errs = append(errs, fmt.Errorf("docker rmi %s: %w: %s", tag, err, out))
		}
	}
	if c.proxy != nil {
		c.proxy.close()
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
	}
	// Mounts under the folder (emptyDir tmpfs, projected volumes), deepest first.
	if c.Dir != "" {
		errs = append(errs, unmountUnder(c.Dir))
	}
	// cgroups, deepest first.
	if subs, err := cgroupSubsystems(); err == nil {
		for _, s := range subs {
			errs = append(errs, removeCgroupTree(filepath.Join(s, c.cgroup)))
		}
	} else {
		errs = append(errs, err)
	}
	// Network: deleting the netns deletes its end of the veth, and so the host's.
	if c.netns != "" {
		if out, err := exec.Command("ip", "netns", "delete", c.netns).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("No such file")) {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %w: %s", c.netns, err, out))
		}
		if _, err := net.InterfaceByName(c.hostVeth); err == nil {
			if out, err := exec.Command("ip", "link", "delete", c.hostVeth).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", c.hostVeth, err, out))
			}
		}
	}
	for k, v := range c.sysctls {
		p := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", k, v, err))
		}
	}
	for cmd, before := range c.iptables {
		errs = append(errs, removeNewKubeChains(cmd, before))
	}
	errs = append(errs, c.removeLogLinks())
	for _, p := range c.absent {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Dir != "" {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err == nil && c.stateDir != "" {
		// Kept after a failure: the next Start's sweep tries again once this process is gone.
		if rerr := os.Remove(recordPath(c.stateDir, c.ID)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return rerr
		}
	}
	return err
}

// removeLogLinks removes the kubelet's /var/log/containers symlinks into the cluster's pod
// logs (the folder itself goes with the other hostPaths when Start did not find it).
func (c *Cluster) removeLogLinks() error {
	const d = "/var/log/containers"
	entries, err := os.ReadDir(d)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(d, e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, c.Dir+string(filepath.Separator)) {
			errs = append(errs, os.Remove(p))
		}
	}
	return errors.Join(errs...)
}

func stopProc(p *proc) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// cgroupSubsystems lists the cgroup hierarchies' mount points (v1: one per controller
// hierarchy; v2: the one unified mount).
func cgroupSubsystems() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// mountinfo: ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		out = append(out, f[4])
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return out, nil
}

// removeCgroupTree removes a cgroup folder and its children, deepest first (cgroup folders
// are removed with rmdir; their files go with them).
func removeCgroupTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("rmdir cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range slices.Compact(points) {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func waitFile(ctx context.Context, path string, timeout time.Duration, p *proc) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, timeout)
		}
	}
}

// freePort asks the kernel for a free TCP port on ip.
func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 4<<20))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
