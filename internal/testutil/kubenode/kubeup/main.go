// Command kubeup keeps the single-node cluster of internal/testutil/kubenode up for
// development (`make kube-up`, `make kube-down`): it starts the cluster, creates the
// namespace "sandboxes", gives the sandbox image a tag the kubelet will not try to pull, writes
// <state>/kubeconfig, <state>/gateway.yaml (a configuration whose default profile is a
// kubernetes profile on the cluster: SANDGATE_CONFIG=<state>/gateway.yaml make run) and
// <state>/pid, then waits for SIGINT or SIGTERM and tears the cluster down, restoring the host.
//
// Usage (as root, from the repository's root): kubeup [-state .sandgate/kube] [-image sandgate/sandbox-python:latest]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/internal/testutil/kubenode"
)

func main() {
	state := flag.String("state", filepath.Join(".sandgate", "kube"), "folder for kubeconfig, gateway.yaml and pid")
	image := flag.String("image", "sandgate/sandbox-python:latest", "local image with python3 and sandboxd")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *state, *image); err != nil {
		log.Error("kubeup", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, state, image string) error {
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := kubenode.Start(ctx, kubenode.Options{RepoRoot: ".", Log: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			log.Error("tearing the cluster down", "err", err)
		}
		for _, f := range []string{"pid", "kubeconfig", "gateway.yaml"} {
			_ = os.Remove(filepath.Join(state, f))
		}
	}()
	img, err := c.LocalImage(image)
	if err != nil {
		return err
	}
	cs, err := k8s.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	kc, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(filepath.Join(state, "kubeconfig"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(abs, kc, 0o600); err != nil {
		return err
	}
	profile := fmt.Sprintf(`# The gateway's configuration for the cluster of make kube-up (valid until make kube-down):
#   SANDGATE_CONFIG=%s make run
sandbox:
  default_profile: kube
  profiles:
    kube:
      type: kubernetes
      stateful: true
      kubernetes:
        kubeconfig: %s
        namespace: sandboxes
        image: %s
        create_timeout: 120
`, filepath.Join(state, "gateway.yaml"), abs, img)
	if err := os.WriteFile(filepath.Join(state, "gateway.yaml"), []byte(profile), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(state, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	log.Info("cluster up: make kube-down stops it", "kubeconfig", abs, "config", filepath.Join(state, "gateway.yaml"), "logs", filepath.Join(c.Dir, "logs"))
	<-sigs
	log.Info("tearing the cluster down")
	return nil
}
