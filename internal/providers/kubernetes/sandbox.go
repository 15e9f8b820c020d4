package kubernetes

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/sdadapter"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Sandbox is a handle on one sandbox pod: its executions, files, contexts and ports go to the
// pod's sandboxd through the shared adapter (sdadapter: the faults are the same as docker's),
// over the provider's runtime client of (pod, identity); what a broken connection means is
// the API server's answer on the pod. It is safe for concurrent use.
type Sandbox struct {
	*sdadapter.Sandbox

	p         *Provider
	ns, pod   string   // the pod
	container string   // the container sandboxd runs in
	token     string   // the pod's sandboxd secret (AnnotationSandboxdToken)
	podIP     string   // the pod's IP (transport pod_ip)
	c         *clients // the identity the tunnel is opened as
}

var (
	_ providers.Sandbox    = (*Sandbox)(nil)
	_ providers.Contexts   = (*Sandbox)(nil)
	_ providers.Executions = (*Sandbox)(nil)
	_ providers.PortDialer = (*Sandbox)(nil)
)

// open returns a handle on sandbox id, served by pod, whose sandboxd has token, acting as c.
func (p *Provider) open(c *clients, id string, pod *corev1.Pod, token string) *Sandbox {
	return p.handle(&Sandbox{ns: pod.Namespace, pod: pod.Name, container: sandboxContainer(pod), token: token, podIP: pod.Status.PodIP, c: c}, id)
}

// handle completes s, a handle on sandbox id (its pod fields set), with the adapter: its
// sandboxd is reached through the provider's client of (pod, identity) (sdClient); one that
// cannot be reached is checked again at the next attach; a broken connection is fault.Gone
// when the pod is gone (podGone).
func (p *Provider) handle(s *Sandbox, id string) *Sandbox {
	s.p = p
	s.Sandbox = sdadapter.New(sdadapter.Config{
		Subject:       TypeName,
		ID:            id,
		Where:         "pod " + s.ns + "/" + s.pod,
		CapsFunc:      p.Capabilities,
		ClientFunc:    func() *remote.Client { return p.sdClient(s) },
		UnreachedFunc: func() { p.servedBy(s, false) },
		ServedFunc:    func() { p.servedBy(s, true) },
		BrokenFunc:    s.broken,
		Running:       &p.running,
		Logger:        p.log,
	})
	return s
}

// sandboxContainer returns the container named ContainerName, else the first one.
func sandboxContainer(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == ContainerName {
			return c.Name
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Name
	}
	return ContainerName
}

// Pod returns the namespace and name of the pod that serves the sandbox.
func (s *Sandbox) Pod() (namespace, name string) { return s.ns, s.pod }

// broken is what a connection to the pod's sandboxd that broke during a request means:
// fault.Gone when the pod is gone (podGone), else fault.Provision.
func (s *Sandbox) broken(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gone := s.p.podGone(ctx, s.c, s.ns, s.pod); gone != nil {
		return gone
	}
	return fault.Wrap(fault.Provision, err, "%s: sandboxd in pod %s/%s failed", TypeName, s.ns, s.pod)
}

// podGone returns a fault.Gone error when pod ns/name no longer exists, is being deleted or
// has ended, and nil otherwise (also when that cannot be told).
func (p *Provider) podGone(ctx context.Context, c *clients, ns, name string) error {
	pod, err := c.core.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fault.New(fault.Gone, "%s: pod %s/%s no longer exists", TypeName, ns, name)
	}
	if err != nil {
		return nil
	}
	return goneErr(pod)
}
