package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Sandbox is a handle on one sandbox pod: its operations go to the pod's sandboxd through
// the provider's runtime client of (pod, identity). It is safe for concurrent use.
type Sandbox struct {
	providers.RuntimeExecutions // kept executions: background processes, open input, terminals

	p         *Provider
	id        string   // "<namespace>/<pod>" or, in agent-sandbox mode, "<namespace>/<claim>"
	ns, pod   string   // the pod
	container string   // the container sandboxd runs in
	token     string   // the pod's sandboxd secret (AnnotationSandboxdToken)
	podIP     string   // the pod's IP (transport pod_ip)
	c         *clients // the identity the tunnel is opened as
	closed    atomic.Bool
}

var (
	_ providers.Sandbox    = (*Sandbox)(nil)
	_ providers.Contexts   = (*Sandbox)(nil)
	_ providers.Executions = (*Sandbox)(nil)
)

// open returns a handle on sandbox id, served by pod, whose sandboxd has token, acting as c.
func (p *Provider) open(c *clients, id string, pod *corev1.Pod, token string) *Sandbox {
	return (&Sandbox{p: p, id: id, ns: pod.Namespace, pod: pod.Name, container: sandboxContainer(pod), token: token, podIP: pod.Status.PodIP, c: c}).withExecutions()
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

// ID returns "<namespace>/<pod>" (in agent-sandbox mode "<namespace>/<claim>").
func (s *Sandbox) ID() string { return s.id }

// Pod returns the namespace and name of the pod that serves the sandbox.
func (s *Sandbox) Pod() (namespace, name string) { return s.ns, s.pod }

// Close marks the handle closed; the pod keeps running for a later Attach (docs/semantics.md §3).
// Idempotent; other methods of a closed handle return fault.Conflict.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	return nil
}

func (s *Sandbox) usable() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	return nil
}

// rt returns the runtime client of the sandbox's sandboxd.
func (s *Sandbox) rt() *remote.Client { return s.p.sdClient(s) }

// kept returns the pod's sandboxd for kept executions; fault.Conflict on a closed handle.
func (s *Sandbox) kept() (providers.KeptRuntime, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	return s.rt(), nil
}

// withExecutions sets up the handle's kept executions and returns it.
func (s *Sandbox) withExecutions() *Sandbox {
	s.RuntimeExecutions = providers.RuntimeExecutions{
		Subject: TypeName, Caps: s.p.Capabilities, Runtime: s.kept, Classify: s.rtErr,
	}
	return s
}

// rtErr classifies an error of the runtime client: a request sandboxd never served carries
// providers.ErrUnreached (nothing ran); sandboxd's fault kinds (and the tunnel's) stand;
// anything else (a tunnel that broke) is fault.Gone when the pod is gone, else
// fault.Provision.
func (s *Sandbox) rtErr(err error) error {
	if errors.Is(err, remote.ErrUnreachable) {
		s.p.servedBy(s, false)
		return fault.Wrap(fault.Provision, errors.Join(providers.ErrUnreached, err), "%s: sandboxd in pod %s/%s could not be reached", TypeName, s.ns, s.pod)
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gone := s.p.podGone(ctx, s.c, s.ns, s.pod); gone != nil {
		return gone
	}
	return fault.Wrap(fault.Provision, err, "%s: sandboxd in pod %s/%s failed", TypeName, s.ns, s.pod)
}

// WriteFile streams r into workspace path p, creating parent folders (sandboxd writes a
// temporary file renamed into place when complete). The upload is spooled on the gateway
// first, so one that breaks or runs over maxBytes (< 0: no limit) never reaches the pod.
//
// Errors: fault.Policy when p escapes the workspace (also through symlinks), fault.Conflict
// when p is a folder or a parent is a file, fault.TooLarge beyond maxBytes, r's error
// (wrapped), fault.Conflict on a closed handle, ctx.Err().
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return 0, err
	}
	if clean == "." {
		return 0, fault.New(fault.Conflict, "path '%s' is the workspace folder, not a file", p)
	}
	if err := s.usable(); err != nil {
		return 0, err
	}
	sp, err := spoolUpload(r, maxBytes, p)
	if err != nil {
		return 0, err
	}
	defer sp.close()
	n, err := s.rt().WriteFile(ctx, clean, sp.reader(), maxBytes)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, s.rtErr(err)
	}
	return n, nil
}

// spoolMemory is how much of an upload is kept in memory; more goes to a temporary file.
const spoolMemory = 4 << 20

// spool holds an upload.
type spool struct {
	mem  []byte
	file *os.File
}

// spoolUpload reads r to its end, refusing more than maxBytes (< 0: no limit).
func spoolUpload(r io.Reader, maxBytes int64, p string) (*spool, error) {
	if r == nil {
		return &spool{}, nil
	}
	tooLarge := func(n int64) bool { return maxBytes >= 0 && n > maxBytes }
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, spoolMemory+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the upload of '%s': %w", TypeName, p, err)
	}
	if tooLarge(n) {
		return nil, fault.New(fault.TooLarge, "file '%s' is larger than %d bytes", p, maxBytes)
	}
	if n <= spoolMemory {
		return &spool{mem: buf.Bytes()}, nil
	}
	f, err := os.CreateTemp("", "sandgate-upload-*")
	if err != nil {
		return nil, fmt.Errorf("%s: spooling the upload of '%s': %w", TypeName, p, err)
	}
	_ = os.Remove(f.Name()) // the open file stays usable, nothing is left behind
	sp := &spool{file: f}
	limit := int64(-1)
	if maxBytes >= 0 {
		limit = maxBytes - n + 1
	}
	rest := io.Reader(r)
	if limit >= 0 {
		rest = io.LimitReader(r, limit)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		sp.close()
		return nil, fmt.Errorf("%s: spooling the upload of '%s': %w", TypeName, p, err)
	}
	m, err := io.Copy(f, rest)
	if err != nil {
		sp.close()
		return nil, fmt.Errorf("%s: reading the upload of '%s': %w", TypeName, p, err)
	}
	if tooLarge(n + m) {
		sp.close()
		return nil, fault.New(fault.TooLarge, "file '%s' is larger than %d bytes", p, maxBytes)
	}
	return sp, nil
}

func (s *spool) reader() io.Reader {
	if s.file != nil {
		return io.NewSectionReader(s.file, 0, 1<<62)
	}
	return bytes.NewReader(s.mem)
}

func (s *spool) close() {
	if s.file != nil {
		_ = s.file.Close()
	}
}

// ReadFile opens workspace file p for reading; the content streams from the pod as it is
// read, and Close ends the transfer. Errors: fault.Policy when p escapes the workspace,
// fault.NotFound when it is missing, fault.Conflict when it is a folder or not a regular
// file, fault.Conflict on a closed handle, ctx.Err().
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	// The transfer outlives this call: it ends with Close or the end of the file.
	rc, err := s.rt().ReadFile(context.WithoutCancel(ctx), clean)
	if err != nil {
		return nil, s.rtErr(err)
	}
	return rc, nil
}

// ListFiles lists workspace folder dir without following symlinks in it, sorted by name.
// Errors: fault.Policy when dir escapes the workspace, fault.NotFound when it is missing,
// fault.Conflict when it is a file, fault.Conflict on a closed handle, ctx.Err().
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]providers.FileInfo, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	list, err := s.rt().ListFiles(ctx, clean)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.rtErr(err)
	}
	return providers.RuntimeFiles(list), nil
}

// RemoveFile removes a file, a symlink (not its target) or an empty folder; a missing one is
// no error. Errors: fault.Policy when p escapes the workspace, fault.Conflict for a folder
// that is not empty, fault.Validation for the workspace itself, fault.Conflict on a closed
// handle, ctx.Err().
func (s *Sandbox) RemoveFile(ctx context.Context, p string) error {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return err
	}
	if clean == "." {
		return fault.New(fault.Validation, "the workspace folder itself cannot be removed")
	}
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.rt().RemoveFile(ctx, clean); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.rtErr(err)
	}
	return nil
}

// DialPort connects to port on the pod's loopback interface through its sandboxd (a tunnel
// over the sandbox's own channel: the exec stream, or TCP to the pod IP with transport
// pod_ip), so no Service, port-forward or published port is involved and the pod's network
// policy is untouched (providers.PortDialer).
//
// Errors: fault.Validation for a port outside 1–65535, fault.Conflict when nothing listens
// there or the handle is closed, the runtime client's others (rtErr).
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	conn, err := s.rt().DialPort(ctx, port)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.rtErr(err)
	}
	return conn, nil
}

var _ providers.PortDialer = (*Sandbox)(nil)
