package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Sandbox is a handle on one sandbox container. It holds no engine resources of its own and is
// safe for concurrent use.
type Sandbox struct {
	providers.RuntimeExecutions // kept executions: background processes, open input, terminals

	p      *Provider
	id     string         // the container's full id
	ws     string         // the workspace inside the container
	rt     *remote.Client // the container's sandboxd: executions, files and contexts
	daemon bool           // a sandboxd daemon keeps contexts (false: attach_to targets)
	closed atomic.Bool
}

var (
	_ providers.Sandbox    = (*Sandbox)(nil)
	_ providers.Executions = (*Sandbox)(nil)
)

// ID returns the container's full id.
func (s *Sandbox) ID() string { return s.id }

// Workspace returns the folder inside the container that files are confined to.
func (s *Sandbox) Workspace() string { return s.ws }

// Close marks the handle closed; the container keeps running for a later Attach
// (docs/semantics.md §3). Idempotent; other methods of a closed handle return fault.Conflict.
// A handle that outlived its provider's Close releases the connections its calls opened.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	s.p.releaseIfClosed()
	return nil
}

// kept returns the container's sandboxd for kept executions: fault.Capability in a target
// without a sandboxd daemon of its own (an attach_to target's runtime ends with its
// connection), fault.Conflict on a closed handle.
func (s *Sandbox) kept() (providers.KeptRuntime, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if !s.daemon {
		return nil, fault.Unsupported(TypeName, "background")
	}
	return s.rt, nil
}

func (s *Sandbox) usable() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	return nil
}

// spoolMemory is how much of an upload is held in memory before it is spooled to a file.
const spoolMemory = 1 << 20

// WriteFile streams r into workspace path p, creating parent folders (as the sandbox user).
// The upload is first spooled on the gateway (memory, then a temporary file) up to maxBytes,
// then streamed to sandboxd, which writes a hidden temporary file next to the target and
// renames it into place; so an oversized or broken upload never reaches the container and a
// failed copy leaves nothing behind. The file gets mode 0644 and replaces a file or symlink of
// that name. maxBytes < 0 means no limit.
//
// Errors: fault.Policy when p escapes the workspace (also through symlinks, resolved inside
// the container), fault.Conflict when p is a folder or a parent is a file, fault.TooLarge
// beyond maxBytes, ctx.Err(), r's error (wrapped).
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
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Spooled on the gateway first: an upload that breaks or runs over the limit never
	// reaches the sandbox, so nothing of it can be left there.
	sp, err := spoolUpload(ctx, r, maxBytes, p)
	if err != nil {
		return 0, err
	}
	defer sp.close()
	n, err := s.rt.WriteFile(ctx, clean, sp.reader(), maxBytes)
	if err != nil {
		return n, s.rtErr(err)
	}
	return n, nil
}

// ReadFile opens workspace path p for reading, streamed from sandboxd; symlinks are followed
// while they stay in the workspace. The caller closes the reader; it stays valid after Close
// of the handle.
//
// Errors: fault.Policy when p escapes the workspace, fault.NotFound when it does not exist,
// fault.Conflict when it is a folder or not a regular file.
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	rc, err := s.rt.ReadFile(ctx, clean)
	if err != nil {
		return nil, s.rtErr(err)
	}
	return rc, nil
}

// ListFiles lists workspace folder dir ("" or "." for the workspace), sorted by name. Entries
// describe themselves (lstat, taken by sandboxd): a symlink is reported as
// providers.FileSymlink and not followed.
//
// Errors: fault.Policy when dir escapes the workspace, fault.NotFound when it does not exist,
// fault.Conflict when it is not a folder.
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]providers.FileInfo, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	list, err := s.rt.ListFiles(ctx, clean)
	if err != nil {
		return nil, s.rtErr(err)
	}
	return providers.RuntimeFiles(list), nil
}

// RemoveFile removes the file, symlink (not its target) or empty folder at workspace path p.
// A missing path is not an error.
//
// Errors: fault.Policy when p escapes the workspace, fault.Conflict for the workspace itself
// or a folder that is not empty.
func (s *Sandbox) RemoveFile(ctx context.Context, p string) error {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return err
	}
	if clean == "." {
		return fault.New(fault.Conflict, "the workspace folder itself cannot be removed")
	}
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.rt.RemoveFile(ctx, clean); err != nil {
		return s.rtErr(err)
	}
	return nil
}

// spool holds an upload: in memory up to spoolMemory, else in a temporary file.
type spool struct {
	mem  []byte
	file *os.File
	n    int64
}

// spoolUpload reads r to its end, at most maxBytes (< 0: no limit).
func spoolUpload(ctx context.Context, r io.Reader, maxBytes int64, p string) (*spool, error) {
	limit := int64(math.MaxInt64)
	if maxBytes >= 0 && maxBytes < math.MaxInt64 {
		limit = maxBytes + 1 // one more byte tells "too large" from "exactly the limit"
	}
	src := &io.LimitedReader{R: ctxReader{ctx: ctx, r: r}, N: limit}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(src, spoolMemory+1))
	sp := &spool{}
	if err == nil && n > spoolMemory {
		sp.file, err = os.CreateTemp("", "sandgate-upload-*")
		if err == nil {
			_ = os.Remove(sp.file.Name()) // unlinked: nothing left behind whatever happens
			var m int64
			if _, err = sp.file.Write(buf.Bytes()); err == nil {
				m, err = io.Copy(sp.file, src)
				n += m
			}
		}
		buf = bytes.Buffer{}
	}
	sp.mem, sp.n = buf.Bytes(), n
	switch {
	case err != nil && ctx.Err() != nil:
		sp.close()
		return nil, ctx.Err()
	case err != nil:
		sp.close()
		return nil, fmt.Errorf("reading the upload of '%s': %w", p, err)
	case maxBytes >= 0 && n > maxBytes:
		sp.close()
		return nil, fault.New(fault.TooLarge, "file '%s' is larger than the limit of %d bytes", p, maxBytes)
	}
	return sp, nil
}

func (sp *spool) reader() io.Reader {
	if sp.file != nil {
		return io.NewSectionReader(sp.file, 0, sp.n)
	}
	return bytes.NewReader(sp.mem)
}

func (sp *spool) close() {
	if sp.file != nil {
		_ = sp.file.Close()
	}
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

// numericUser parses a user given as "uid" or "uid:gid"; a bare uid gets group 0, as the
// runtime gives a uid its passwd file does not list.
func numericUser(user string) (uid, gid int, ok bool) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return 0, 0, false
	}
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

// DialPort connects to port on the container's loopback interface through its sandboxd (a
// tunnel on the sandbox's existing transport, remote.Client.DialPort): nothing is published
// on the engine's host and the container's network mode is untouched — also a container
// without network (policy network_egress deny) has its loopback (providers.PortDialer).
//
// Errors: fault.Validation for a port outside 1–65535, fault.Conflict when nothing listens
// there or the handle is closed, fault.Provision (with providers.ErrUnreached) when sandboxd
// does not answer.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	conn, err := s.rt.DialPort(ctx, port)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.rtErr(err)
	}
	return conn, nil
}

var _ providers.PortDialer = (*Sandbox)(nil)
