package kubenode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Assets are the binaries and files the cluster runs, as scripts/kube-setup.sh --node caches
// them under ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube.
type Assets struct {
	APIServer, Etcd                             string
	Kubelet, Scheduler, ControllerManager       string
	CRIDockerd                                  string
	AgentSandboxController, AgentSandboxCRDsDir string
	PauseImage                                  string // a local image, never pulled
	CNIBinDir                                   string // bridge, host-local, loopback
	KubeVersion                                 string // e.g. v1.37.2
}

// FindAssets locates the assets for the versions pinned in repoRoot/tools/kube (go.mod and
// node-versions). The error names what is missing and the command that makes it.
func FindAssets(repoRoot string) (Assets, error) {
	kube, etcd, err := goModVersions(filepath.Join(repoRoot, "tools", "kube", "go.mod"))
	if err != nil {
		return Assets{}, err
	}
	nv, err := nodeVersions(filepath.Join(repoRoot, "tools", "kube", "node-versions"))
	if err != nil {
		return Assets{}, err
	}
	root := os.Getenv("SANDGATE_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return Assets{}, fmt.Errorf("no SANDGATE_CACHE and no home folder: %w", err)
		}
		root = filepath.Join(home, ".cache", "sandgate")
	}
	cache := filepath.Join(root, "kube")
	bin := filepath.Join(cache, kube+"-etcd"+etcd)
	as := filepath.Join(cache, "agent-sandbox-"+nv["agent-sandbox"])
	a := Assets{
		APIServer:              filepath.Join(bin, "kube-apiserver"),
		Etcd:                   filepath.Join(bin, "etcd"),
		Kubelet:                filepath.Join(bin, "kubelet"),
		Scheduler:              filepath.Join(bin, "kube-scheduler"),
		ControllerManager:      filepath.Join(bin, "kube-controller-manager"),
		CRIDockerd:             filepath.Join(cache, "cri-dockerd-"+nv["cri-dockerd"], "cri-dockerd"),
		AgentSandboxController: filepath.Join(as, "agent-sandbox-controller"),
		AgentSandboxCRDsDir:    filepath.Join(as, "crds"),
		PauseImage:             "sandgate/kube-pause:" + kube,
		CNIBinDir:              "/usr/lib/cni",
		KubeVersion:            kube,
	}
	var missing []string
	for _, p := range []string{a.APIServer, a.Etcd, a.Kubelet, a.Scheduler, a.ControllerManager, a.CRIDockerd,
		a.AgentSandboxController, filepath.Join(a.CNIBinDir, "bridge"), filepath.Join(a.CNIBinDir, "host-local")} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	if crds, _ := filepath.Glob(filepath.Join(a.AgentSandboxCRDsDir, "*.yaml")); len(crds) == 0 {
		missing = append(missing, filepath.Join(a.AgentSandboxCRDsDir, "*.yaml"))
	}
	if err := exec.Command("docker", "image", "inspect", a.PauseImage).Run(); err != nil {
		missing = append(missing, "the docker image "+a.PauseImage)
	}
	if len(missing) > 0 {
		return a, fmt.Errorf("missing %s: run scripts/kube-setup.sh --node", strings.Join(missing, ", "))
	}
	return a, nil
}

// goModVersions reads the kubernetes and etcd versions a go.mod requires.
func goModVersions(path string) (kube, etcd string, err error) {
	f, err := os.Open(path)
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
		return "", "", fmt.Errorf("%s pins no k8s.io/kubernetes or etcd server version", path)
	}
	return kube, etcd, sc.Err()
}

// nodeVersions reads "<name> <version>" lines (# comments).
func nodeVersions(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && !strings.HasPrefix(fields[0], "#") {
			out[fields[0]] = fields[1]
		}
	}
	if out["cri-dockerd"] == "" || out["agent-sandbox"] == "" {
		return nil, errors.New(path + " names no cri-dockerd or agent-sandbox version")
	}
	return out, nil
}
