package sdadapter

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// WriteFile streams r into workspace path p, creating parent folders. The upload is spooled on
// the gateway first (memory, then an unlinked temporary file) up to maxBytes (< 0: no limit),
// then streamed to sandboxd, which writes a hidden temporary file beside the target and
// renames it into place (mode 0644, replacing a file or symlink of that name): an upload that
// breaks or runs over the limit never reaches the sandbox, and one that fails there leaves
// nothing behind. It returns the bytes written.
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace folder itself or a name
// too long, fault.Policy for a NUL byte or an escape); fault.Conflict on a closed handle;
// fault.TooLarge beyond maxBytes; r's error (wrapped); sandboxd's (fault.Policy for an escape
// through a symlink, fault.Conflict when p is a folder or a parent is a file, fault.Full);
// ctx.Err(); Fault's others.
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, maxBytes int64) (int64, error) {
	clean, err := providers.CleanEntry(p)
	if err != nil {
		return 0, err
	}
	if err := s.Usable(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sp, err := spoolUpload(ctx, r, maxBytes, p)
	if err != nil {
		return 0, err
	}
	defer sp.close()
	n, err := s.cfg.ClientFunc().WriteFile(ctx, clean, sp.reader(), maxBytes)
	if err != nil {
		return 0, s.err(ctx, err)
	}
	return n, nil
}

// ReadFile opens workspace path p for reading, streamed from sandboxd; symlinks are followed
// while they stay in the workspace. Opening is bound to ctx; the reader then lives until it
// is closed or read to its end, whatever becomes of ctx or the handle (callers close it).
//
// Errors: providers.CleanPath's (fault.Policy for a NUL byte or an escape, fault.Validation
// for a name too long); fault.Conflict on a closed handle; sandboxd's (fault.Policy for an
// escape through a symlink, fault.NotFound when p does not exist, fault.Conflict when it is a
// folder — the workspace too — or not a regular file); ctx.Err(); Fault's others.
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := s.Usable(); err != nil {
		return nil, err
	}
	// The transfer outlives this call: ctx bounds it until sandboxd answers, Close after.
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	rc, err := s.cfg.ClientFunc().ReadFile(tctx, clean)
	if !stop() && err == nil {
		err = ctx.Err() // ctx ended as the answer came: the reader may already be cut
		_ = rc.Close()
	}
	if err != nil {
		cancel()
		return nil, s.err(ctx, err)
	}
	return &transfer{ReadCloser: rc, cancel: cancel}, nil
}

// transfer is a file read from sandboxd; Close also ends its context.
type transfer struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (t *transfer) Close() error {
	err := t.ReadCloser.Close()
	t.cancel()
	return err
}

// ListFiles lists workspace folder dir ("" or "." for the workspace), sorted by name. Entries
// describe themselves (lstat, taken by sandboxd): a symlink is providers.FileSymlink and not
// followed.
//
// Errors: providers.CleanPath's; fault.Conflict on a closed handle; sandboxd's (fault.Policy
// for an escape through a symlink, fault.NotFound when dir does not exist, fault.Conflict
// when it is not a folder); ctx.Err(); Fault's others.
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]providers.FileInfo, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	if err := s.Usable(); err != nil {
		return nil, err
	}
	list, err := s.cfg.ClientFunc().ListFiles(ctx, clean)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return providers.RuntimeFiles(list), nil
}

// RemoveFile removes the file, symlink (not its target) or empty folder at workspace path p.
// A missing path (also one below a file) is not an error.
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace folder itself or a name
// too long, fault.Policy for a NUL byte or an escape); fault.Conflict on a closed handle;
// sandboxd's (fault.Policy for an escape through a symlink, fault.Conflict for a folder that
// is not empty); ctx.Err(); Fault's others.
func (s *Sandbox) RemoveFile(ctx context.Context, p string) error {
	clean, err := providers.CleanEntry(p)
	if err != nil {
		return err
	}
	if err := s.Usable(); err != nil {
		return err
	}
	return s.err(ctx, s.cfg.ClientFunc().RemoveFile(ctx, clean))
}

var _ providers.FileTree = (*Sandbox)(nil)

// MakeDir makes workspace folder p and its missing parents (providers.FileTree).
//
// Errors: providers.CleanEntry's; fault.Conflict on a closed handle; sandboxd's (fault.Policy
// for an escape through a symlink, fault.Conflict when p or a parent is not a folder);
// ctx.Err(); Fault's others.
func (s *Sandbox) MakeDir(ctx context.Context, p string) error {
	clean, err := providers.CleanEntry(p)
	if err != nil {
		return err
	}
	if err := s.Usable(); err != nil {
		return err
	}
	return s.err(ctx, s.cfg.ClientFunc().MakeDir(ctx, clean))
}

// Move renames workspace path from to to as rename(2) does, making to's parents
// (providers.FileTree).
//
// Errors: providers.CleanEntry's for either; fault.Conflict on a closed handle; sandboxd's
// (providers.FileTree.Move's kinds); ctx.Err(); Fault's others.
func (s *Sandbox) Move(ctx context.Context, from, to string) error {
	src, err := providers.CleanEntry(from)
	if err != nil {
		return err
	}
	dst, err := providers.CleanEntry(to)
	if err != nil {
		return err
	}
	if err := s.Usable(); err != nil {
		return err
	}
	return s.err(ctx, s.cfg.ClientFunc().Move(ctx, src, dst))
}

// RemoveAll removes workspace path p and whatever a folder there holds; missing is no error
// (providers.FileTree).
//
// Errors: providers.CleanEntry's; fault.Conflict on a closed handle; sandboxd's (fault.Policy
// for an escape through a symlink); ctx.Err(); Fault's others.
func (s *Sandbox) RemoveAll(ctx context.Context, p string) error {
	clean, err := providers.CleanEntry(p)
	if err != nil {
		return err
	}
	if err := s.Usable(); err != nil {
		return err
	}
	return s.err(ctx, s.cfg.ClientFunc().RemoveAll(ctx, clean))
}

// DialPort connects to port on the sandbox's loopback interface through its sandboxd (a
// tunnel on the sandbox's own channel to it, remote.Client.DialPort): nothing is published
// anywhere and the sandbox's network policy is untouched — a sandbox without network has its
// loopback too (providers.PortDialer).
//
// Errors: fault.Conflict on a closed handle; fault.Validation for a port outside 1–65535,
// fault.Conflict when nothing listens there; ctx.Err(); Fault's others.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := s.Usable(); err != nil {
		return nil, err
	}
	conn, err := s.cfg.ClientFunc().DialPort(ctx, port)
	if err != nil {
		return nil, s.err(ctx, err)
	}
	return conn, nil
}

// spoolMemory is how much of an upload is held in memory before it is spooled to a file.
const spoolMemory = 1 << 20

// spool holds an upload: in memory up to spoolMemory, else in an unlinked temporary file.
type spool struct {
	mem  []byte
	file *os.File
	n    int64
}

// spoolUpload reads r (nil: nothing) to its end, at most maxBytes (< 0: no limit).
//
// Errors: fault.TooLarge beyond maxBytes; ctx.Err() once ctx ended; r's error or the
// temporary file's, wrapped.
func spoolUpload(ctx context.Context, r io.Reader, maxBytes int64, p string) (*spool, error) {
	if r == nil {
		return &spool{}, nil
	}
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
