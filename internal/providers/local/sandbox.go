//go:build unix

package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/wspath"
)

// Sandbox is a handle on one sandbox folder. Its file methods go through an os.Root on the
// folder, so no path (including one through a symlink) resolves outside it. It is safe for
// concurrent use.
type Sandbox struct {
	providers.NoPackageInstall // package_install is not declared

	p         *Provider
	id        string
	root      *os.Root
	closeOnce sync.Once
	closed    atomic.Bool
}

var _ providers.Sandbox = (*Sandbox)(nil)

// ID returns the absolute path of the sandbox folder.
func (s *Sandbox) ID() string { return s.id }

// Close releases the handle's folder descriptor. It is idempotent, always returns nil and
// keeps the folder for a later Attach (docs/semantics.md §3). Other methods of a closed handle
// return fault.Conflict.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		_ = s.root.Close()
	})
	return nil
}

// usable returns fault.Conflict for a closed handle and fault.Gone when the folder was
// destroyed.
func (s *Sandbox) usable() error {
	if s.closed.Load() {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	if _, err := os.Lstat(s.id); errors.Is(err, fs.ErrNotExist) {
		return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, s.id)
	}
	return nil
}

// WriteFile streams r into workspace path p, creating parent folders (mode 0755); the file
// gets mode 0644 and replaces an existing file (or symlink) of that name. The content goes to
// a hidden temporary file in the same folder, renamed into place once complete, so a failed or
// oversized upload leaves nothing behind. maxBytes < 0 means no limit.
//
// Errors: fault.Policy when p escapes the workspace, fault.Conflict when p is a folder or a
// parent is a file, fault.TooLarge beyond maxBytes, ctx.Err() when ctx ends, r's error
// (wrapped) when reading fails.
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
	dir := path.Dir(clean)
	if dir != "." {
		if err := s.root.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
				return 0, fault.New(fault.Conflict, "a parent of path '%s' is not a folder", p)
			}
			return 0, s.pathErr(p, err)
		}
	}
	if st, err := s.root.Lstat(clean); err == nil && st.IsDir() {
		return 0, fault.New(fault.Conflict, "path '%s' is a folder", p)
	}

	tmp := path.Join(dir, ".sandgate-upload-"+randomHex())
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, s.pathErr(p, err)
	}
	limit := int64(math.MaxInt64)
	if maxBytes >= 0 && maxBytes < math.MaxInt64 {
		limit = maxBytes + 1 // one more byte tells "too large" from "exactly the limit"
	}
	n, copyErr := io.Copy(f, &io.LimitedReader{R: ctxReader{ctx: ctx, r: r}, N: limit})
	closeErr := f.Close()
	fail := func(err error) (int64, error) {
		_ = s.root.Remove(tmp)
		return 0, err
	}
	switch {
	case copyErr != nil && ctx.Err() != nil:
		return fail(ctx.Err())
	case copyErr != nil:
		return fail(fmt.Errorf("writing '%s' into the sandbox: %w", p, copyErr))
	case maxBytes >= 0 && n > maxBytes:
		return fail(fault.New(fault.TooLarge, "file '%s' is larger than the limit of %d bytes", p, maxBytes))
	case closeErr != nil:
		return fail(fmt.Errorf("writing '%s' into the sandbox: %w", p, closeErr))
	}
	if err := s.root.Rename(tmp, clean); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) {
			return fail(fault.New(fault.Conflict, "path '%s' is a folder", p))
		}
		return fail(s.pathErr(p, err))
	}
	return n, nil
}

// ReadFile opens workspace path p for reading; symlinks are followed only while they stay in
// the workspace. The caller closes the reader; it stays valid after Close of the handle.
//
// Errors: fault.Policy when p escapes the workspace, fault.NotFound when it does not exist,
// fault.Conflict when it is a folder or not a regular file (a FIFO is never waited on).
func (s *Sandbox) ReadFile(_ context.Context, p string) (io.ReadCloser, error) {
	clean, err := providers.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO a program made must not wait for a writer.
	f, err := s.root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, s.pathErr(p, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("reading '%s' in the sandbox: %w", p, err)
	}
	if st.IsDir() {
		_ = f.Close()
		return nil, fault.New(fault.Conflict, "path '%s' is a folder, not a file", p)
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fault.New(fault.Conflict, "path '%s' is not a regular file", p)
	}
	return f, nil
}

// ListFiles lists workspace folder dir ("" or "." for the workspace), sorted by name. Entries
// describe themselves (lstat): a symlink is reported as providers.FileSymlink with the link's
// own size and is not followed. Entries that vanish while listing are left out.
//
// Errors: fault.Policy when dir escapes the workspace, fault.NotFound when it does not exist,
// fault.Conflict when it is not a folder.
func (s *Sandbox) ListFiles(_ context.Context, dir string) ([]providers.FileInfo, error) {
	clean, err := providers.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	f, err := s.root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			if st, serr := s.root.Stat(clean); serr == nil && !st.IsDir() {
				return nil, fault.New(fault.Conflict, "path '%s' is not a folder", dir)
			}
		}
		return nil, s.pathErr(dir, err)
	}
	entries, err := f.ReadDir(-1)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("listing '%s' in the sandbox: %w", dir, err)
	}
	out := make([]providers.FileInfo, 0, len(entries))
	for _, e := range entries {
		rel := e.Name()
		if clean != "." {
			rel = clean + "/" + rel
		}
		info, err := s.root.Lstat(rel)
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, providers.FileInfo{
			Name:    e.Name(),
			Path:    rel,
			Type:    fileType(info.Mode()),
			Size:    info.Size(),
			Mode:    info.Mode().Perm(),
			ModTime: info.ModTime(),
		})
	}
	slices.SortFunc(out, func(a, b providers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveFile removes the file, symlink (not its target) or empty folder at workspace path p.
// A missing path is not an error.
//
// Errors: fault.Policy when p escapes the workspace, fault.Conflict for the workspace itself
// or a folder that is not empty.
func (s *Sandbox) RemoveFile(_ context.Context, p string) error {
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
	err = s.root.Remove(clean)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR) && !wspath.IsEscape(err):
		return nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, fs.ErrExist):
		return fault.New(fault.Conflict, "folder '%s' is not empty", p)
	}
	return s.pathErr(p, err)
}

// pathErr classifies an error of an os.Root operation on workspace path p (wspath.RootError);
// a closed root means a closed handle.
func (s *Sandbox) pathErr(p string, err error) error {
	if errors.Is(err, fs.ErrClosed) {
		return fault.New(fault.Conflict, "%s: the handle on sandbox '%s' is closed", TypeName, s.id)
	}
	return wspath.RootError(p, err)
}

func fileType(m fs.FileMode) providers.FileType {
	switch {
	case m&fs.ModeSymlink != 0:
		return providers.FileSymlink
	case m.IsDir():
		return providers.FileDir
	case m.IsRegular():
		return providers.FileRegular
	}
	return providers.FileOther
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
