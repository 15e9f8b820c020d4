//go:build unix

package local

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Sandbox is a handle on one sandbox folder. Executions, contexts and files go through the
// folder's sandboxd.Runtime (see the package doc), so process-tree handling, output bounds and
// path confinement are sandboxd's, written once. It is safe for concurrent use.
type Sandbox struct {
	providers.NoPackageInstall  // package_install is not declared
	providers.RuntimeExecutions // kept executions: background processes, open input, terminals

	p         *Provider
	id        string
	closeOnce sync.Once
	closed    atomic.Bool
}

var (
	_ providers.Sandbox    = (*Sandbox)(nil)
	_ providers.Executions = (*Sandbox)(nil)
)

// ID returns the absolute path of the sandbox folder.
func (s *Sandbox) ID() string { return s.id }

// Close marks the handle closed. It is idempotent, always returns nil and keeps the folder
// (and its contexts) for a later Attach (docs/semantics.md §3). Other methods of a closed
// handle return fault.Conflict.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() { s.closed.Store(true) })
	return nil
}

// runtime returns the sandbox's runtime after checking the handle: fault.Conflict for a
// closed handle, fault.Gone when the folder was destroyed or the provider closed.
func (s *Sandbox) runtime() (*sandboxd.Runtime, error) {
	if s.closed.Load() {
		return nil, fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	if _, err := os.Lstat(s.id); errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, s.id)
	}
	return s.p.runtime(s.id)
}

// gone maps the error of a runtime call that Destroy (or Close of the provider) cut short
// onto fault.Gone; other errors are returned as they are.
func (s *Sandbox) gone(rt *sandboxd.Runtime, err error) error {
	if err != nil && !s.p.current(s.id, rt) {
		return fault.New(fault.Gone, "%s: sandbox '%s' was destroyed during the call", TypeName, s.id)
	}
	return err
}

// Exec runs spec to completion in the sandbox folder through its runtime (see the package
// doc) and returns how it ended; a non-zero exit is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); the runtime's
// (fault.Policy or fault.NotFound for a working folder that escapes or is missing,
// fault.Validation when it is not a folder); fault.Conflict on a closed handle; fault.Gone
// when the sandbox was destroyed, before or during the execution; ctx.Err() (with the
// status of the killed program) when ctx ends first.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	rt, err := s.runtime()
	if err != nil {
		return providers.ExitStatus{}, err
	}
	if err := ctx.Err(); err != nil {
		return providers.ExitStatus{}, err
	}
	if spec.StdinOpen || spec.PTY != nil {
		return s.execKept(ctx, rt, spec)
	}
	req := providers.RuntimeRequestStreaming(spec)
	// The domain bounds what it keeps (head and tail) and counts every byte: nothing is
	// dropped here.
	req.MaxOutput = math.MaxInt64
	res, err := rt.Exec(ctx, req, providers.RuntimeStreams(spec.Output))
	st := providers.RuntimeStatus(res)
	if err != nil && ctx.Err() != nil {
		return st, ctx.Err()
	}
	return st, s.gone(rt, err)
}

// execKept runs an execution whose input stays open (or a terminal's) as a kept execution of
// the runtime, so that WriteStdin and Resize find it by id, and follows it to its end; the
// end of ctx stops it.
func (s *Sandbox) execKept(ctx context.Context, rt *sandboxd.Runtime, spec providers.ExecSpec) (providers.ExitStatus, error) {
	req, err := providers.RuntimeRequest(spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	req.MaxOutput = math.MaxInt64
	e, err := rt.Start(req)
	if err != nil {
		return providers.ExitStatus{}, s.gone(rt, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = rt.Stop(e.ID()) })
	defer stop()
	res, err := e.Follow(context.WithoutCancel(ctx), providers.RuntimeStreams(spec.Output))
	rt.Forget(e.ID())
	st := providers.RuntimeStatus(res)
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	return st, s.gone(rt, err)
}

// kept returns the sandbox's runtime for kept executions (see runtime for the errors).
func (s *Sandbox) kept() (providers.KeptRuntime, error) {
	rt, err := s.runtime()
	if err != nil {
		return nil, err
	}
	return providers.InProcess(rt), nil
}

// Reattach follows kept execution id (a background process, or one started by Start) from
// its start; see providers.Reattacher. The runtime lives in this process: nothing survives
// the gateway here.
func (s *Sandbox) Reattach(ctx context.Context, id string, out providers.Output) (providers.ExitStatus, error) {
	rt, err := s.kept()
	if err != nil {
		return providers.ExitStatus{}, err
	}
	st, _, err := providers.ReattachRuntime(ctx, rt, id, out, providers.ErrInProcessStopped, func(err error) error { return err })
	return st, err
}

// WriteFile streams r into workspace path p (sandboxd.Runtime.WriteFile: parent folders made,
// mode 0644, a hidden temporary file renamed into place once complete and within maxBytes,
// so a failed or oversized upload leaves nothing behind). maxBytes < 0 means no limit.
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace folder itself and a name
// or path too long, fault.Policy for a NUL byte or when p escapes the workspace), whatever
// the handle; the handle's (fault.Conflict when closed, fault.Gone when destroyed); the
// runtime's (fault.Policy for an escape through a symlink, fault.Conflict when p is a folder
// or a parent is a file, fault.TooLarge beyond maxBytes); ctx.Err() when ctx ends.
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	if _, err := providers.CleanEntry(p); err != nil {
		return 0, err
	}
	rt, err := s.runtime()
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := rt.WriteFile(p, ctxReader{ctx: ctx, r: r}, maxBytes)
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return n, s.gone(rt, err)
}

// ReadFile opens workspace path p for reading; symlinks are followed only while they stay in
// the workspace. The caller closes the reader; it stays valid after Close of the handle.
//
// Errors: providers.CleanPath's (fault.Policy for a NUL byte or an escape, fault.Validation
// for a name or path too long), whatever the handle; the handle's; the runtime's
// (fault.Policy for an escape through a symlink, fault.NotFound when p does not exist,
// fault.Conflict when it is a folder or not a regular file: a FIFO is never waited on).
func (s *Sandbox) ReadFile(_ context.Context, p string) (io.ReadCloser, error) {
	if _, err := providers.CleanPath(p); err != nil {
		return nil, err
	}
	rt, err := s.runtime()
	if err != nil {
		return nil, err
	}
	rc, err := rt.ReadFile(p)
	return rc, s.gone(rt, err)
}

// ListFiles lists workspace folder dir ("" or "." for the workspace), sorted by name, without
// following symlinks.
//
// Errors: providers.CleanPath's, whatever the handle; the handle's; the runtime's
// (fault.Policy for an escape through a symlink, fault.NotFound when dir does not exist,
// fault.Conflict when it is not a folder).
func (s *Sandbox) ListFiles(_ context.Context, dir string) ([]providers.FileInfo, error) {
	if _, err := providers.CleanPath(dir); err != nil {
		return nil, err
	}
	rt, err := s.runtime()
	if err != nil {
		return nil, err
	}
	list, err := rt.ListFiles(dir)
	if err != nil {
		return nil, s.gone(rt, err)
	}
	return providers.RuntimeFiles(list), nil
}

// RemoveFile removes the file, symlink (not its target) or empty folder at workspace path p.
// A missing path is not an error.
//
// Errors: providers.CleanEntry's (as WriteFile's), whatever the handle; the handle's; the
// runtime's (fault.Policy for an escape through a symlink, fault.Conflict for a folder that
// is not empty).
func (s *Sandbox) RemoveFile(_ context.Context, p string) error {
	if _, err := providers.CleanEntry(p); err != nil {
		return err
	}
	rt, err := s.runtime()
	if err != nil {
		return err
	}
	return s.gone(rt, rt.RemoveFile(p))
}

var _ providers.FileTree = (*Sandbox)(nil)

// MakeDir makes workspace folder p and its missing parents (providers.FileTree).
//
// Errors: providers.CleanEntry's, whatever the handle; the handle's; the runtime's
// (fault.Policy for an escape through a symlink, fault.Conflict when p or a parent is not a
// folder).
func (s *Sandbox) MakeDir(_ context.Context, p string) error {
	if _, err := providers.CleanEntry(p); err != nil {
		return err
	}
	rt, err := s.runtime()
	if err != nil {
		return err
	}
	return s.gone(rt, rt.MakeDir(p))
}

// Move renames workspace path from to to as rename(2) does, making to's parents
// (providers.FileTree).
//
// Errors: providers.CleanEntry's for either, whatever the handle; the handle's; the
// runtime's (providers.FileTree.Move's kinds).
func (s *Sandbox) Move(_ context.Context, from, to string) error {
	if _, err := providers.CleanEntry(from); err != nil {
		return err
	}
	if _, err := providers.CleanEntry(to); err != nil {
		return err
	}
	rt, err := s.runtime()
	if err != nil {
		return err
	}
	return s.gone(rt, rt.Move(from, to))
}

// RemoveAll removes workspace path p and whatever a folder there holds; missing is no error
// (providers.FileTree).
//
// Errors: providers.CleanEntry's, whatever the handle; the handle's; the runtime's
// (fault.Policy for an escape through a symlink).
func (s *Sandbox) RemoveAll(_ context.Context, p string) error {
	if _, err := providers.CleanEntry(p); err != nil {
		return err
	}
	rt, err := s.runtime()
	if err != nil {
		return err
	}
	return s.gone(rt, rt.RemoveAll(p))
}

// ctxReader stops reading once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// DialPort connects to port on the host's loopback interface, where the sandbox's programs
// listen (providers.PortDialer; sandboxd.Runtime.DialPort). There is no isolation: any
// program on the gateway's host listening on that port answers.
//
// Errors: fault.Validation for a port outside 1–65535, fault.Conflict when nothing listens,
// the handle's errors (fault.Conflict when closed, fault.Gone when destroyed).
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	rt, err := s.runtime()
	if err != nil {
		return nil, err
	}
	return rt.DialPort(ctx, port)
}

var _ providers.PortDialer = (*Sandbox)(nil)
