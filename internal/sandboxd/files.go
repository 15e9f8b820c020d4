//go:build unix

package sandboxd

import (
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
	"syscall"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/wspath"
)

// uploadPrefix starts the name of the hidden temporary file an upload streams into.
const uploadPrefix = ".sandboxd-upload-"

// WriteFile streams rd into workspace path p and returns the number of bytes written. Parent
// folders are created (mode 0755). The content goes to a hidden temporary file in the target
// folder, renamed over p (mode 0644, replacing a file or a symlink itself) only once complete
// and within maxBytes, so readers never see a partial file and a failed upload leaves nothing
// behind. maxBytes < 0 means no limit.
//
// Errors: fault.Validation for the workspace itself ("", ".") and a name or path too long;
// fault.Policy for a NUL byte and when p escapes the workspace (also through a symlinked
// parent); fault.Conflict when p is a folder or a parent is a file; fault.TooLarge beyond
// maxBytes; fault.Full when the workspace's file system has no space left (ENOSPC, EDQUOT);
// rd's error, wrapped, when reading fails.
func (r *Runtime) WriteFile(p string, rd io.Reader, maxBytes int64) (int64, error) {
	clean, err := wspath.CleanEntry(p)
	if err != nil {
		return 0, err
	}
	dir := path.Dir(clean)
	if dir != "." {
		if err := r.mkdirAll(dir); err != nil {
			if wspath.IsEscape(err) {
				return 0, escapes(p)
			}
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
				return 0, fault.New(fault.Conflict, "a parent of path '%s' is not a folder", p)
			}
			return 0, pathErr(p, err)
		}
	}
	if st, err := r.root.Lstat(clean); err == nil && st.IsDir() {
		return 0, fault.New(fault.Conflict, "path '%s' is a folder", p)
	}

	tmp := path.Join(dir, uploadPrefix+randomHex())
	f, err := r.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, pathErr(p, err)
	}
	limit := int64(math.MaxInt64)
	if maxBytes >= 0 && maxBytes < math.MaxInt64 {
		limit = maxBytes + 1 // one byte more tells "too large" from "exactly the limit"
	}
	n, copyErr := io.Copy(f, &io.LimitedReader{R: rd, N: limit})
	var modeErr error
	if copyErr == nil {
		// The programs' own file (when they run as another user), then the mode, which the
		// umask may have narrowed: both on the open file, which no program can swap.
		if modeErr = r.ownFile(f); modeErr == nil {
			modeErr = f.Chmod(0o644)
		}
	}
	closeErr := f.Close()
	fail := func(err error) (int64, error) {
		_ = r.root.Remove(tmp)
		return 0, err
	}
	switch {
	case copyErr != nil && wspath.IsNoSpace(copyErr):
		return fail(wspath.NoSpace(p, copyErr))
	case copyErr != nil:
		return fail(fmt.Errorf("writing '%s' into the sandbox: %w", p, copyErr))
	case maxBytes >= 0 && n > maxBytes:
		return fail(fault.New(fault.TooLarge, "file '%s' is larger than the limit of %d bytes", p, maxBytes))
	case closeErr != nil && wspath.IsNoSpace(closeErr):
		return fail(wspath.NoSpace(p, closeErr))
	case modeErr != nil:
		return fail(pathErr(p, modeErr))
	case closeErr != nil:
		return fail(fmt.Errorf("writing '%s' into the sandbox: %w", p, closeErr))
	}
	if err := r.root.Rename(tmp, clean); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) {
			return fail(fault.New(fault.Conflict, "path '%s' is a folder", p))
		}
		return fail(pathErr(p, err))
	}
	return n, nil
}

// ReadFile opens workspace path p for reading (an *os.File); symlinks are followed only while
// they stay in the workspace. The caller closes it.
//
// Errors: fault.Policy for a NUL byte and when p escapes the workspace; fault.Validation for
// a name or path too long; fault.NotFound when it does not exist; fault.Conflict when it is a
// folder or not a regular file (a FIFO is never waited on).
func (r *Runtime) ReadFile(p string) (io.ReadCloser, error) {
	clean, err := cleanPath(p)
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK: opening a FIFO a program made must not wait for a writer.
	f, err := r.root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, pathErr(p, err)
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
// describe themselves (lstat): a symlink is FileSymlink with the link's own size and is not
// followed. Path is relative to the workspace, slash-separated. Entries that vanish while
// listing are left out.
//
// Errors: fault.Policy for a NUL byte and when dir escapes the workspace; fault.Validation
// for a name or path too long; fault.NotFound when it does not exist; fault.Conflict when it
// is not a folder.
func (r *Runtime) ListFiles(dir string) ([]FileInfo, error) {
	clean, err := cleanPath(dir)
	if err != nil {
		return nil, err
	}
	f, err := r.root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			if st, serr := r.root.Stat(clean); serr == nil && !st.IsDir() {
				return nil, fault.New(fault.Conflict, "path '%s' is not a folder", dir)
			}
		}
		return nil, pathErr(dir, err)
	}
	entries, err := f.ReadDir(-1)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("listing '%s' in the sandbox: %w", dir, err)
	}
	out := make([]FileInfo, 0, len(entries))
	for _, e := range entries {
		rel := e.Name()
		if clean != "." {
			rel = clean + "/" + rel
		}
		info, err := r.root.Lstat(rel)
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, FileInfo{
			Name:    e.Name(),
			Path:    rel,
			Type:    fileType(info.Mode()),
			Size:    info.Size(),
			Mode:    info.Mode().Perm(),
			ModTime: info.ModTime(),
		})
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveFile removes the file, symlink (not its target) or empty folder at workspace path p.
// A missing path is not an error.
//
// Errors: fault.Validation for the workspace itself ("", ".") and a name or path too long;
// fault.Policy for a NUL byte and when p escapes the workspace; fault.Conflict for a folder
// that is not empty.
func (r *Runtime) RemoveFile(p string) error {
	clean, err := wspath.CleanEntry(p)
	if err != nil {
		return err
	}
	err = r.root.Remove(clean)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR) && !wspath.IsEscape(err):
		return nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, fs.ErrExist):
		return fault.New(fault.Conflict, "folder '%s' is not empty", p)
	}
	return pathErr(p, err)
}

// MakeDir makes folder p of the workspace and its missing parents (mode 0755, the programs'
// when they run as another user); a folder already there is no error.
//
// Errors: fault.Validation for the workspace itself and a name or path too long;
// fault.Policy for a NUL byte and when p escapes the workspace (also through a symlinked
// parent); fault.Conflict when p or one of its parents is not a folder.
func (r *Runtime) MakeDir(p string) error {
	clean, err := wspath.CleanEntry(p)
	if err != nil {
		return err
	}
	return r.makeDirs(p, clean)
}

// makeDirs is mkdirAll(clean) with its errors as faults about p.
func (r *Runtime) makeDirs(p, clean string) error {
	err := r.mkdirAll(clean)
	switch {
	case err == nil:
		return nil
	case wspath.IsEscape(err):
		return escapes(p)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, fs.ErrExist):
		return fault.New(fault.Conflict, "path '%s' or one of its parents is not a folder", p)
	}
	return pathErr(p, err)
}

// Move renames workspace path from to to, as Go's os.Rename does: a symlink is moved itself,
// a file at to is replaced (a folder at to, even an empty one, is not), and to's missing
// parents are made first (as MakeDir makes them).
//
// Errors: fault.Validation for the workspace itself as either, a name or path too long, and a
// folder moved into itself; fault.Policy for a NUL byte and when either escapes the
// workspace; fault.NotFound when from does not exist; fault.Conflict when to is a folder
// (empty or not), a folder where from is a file or a file where it is a folder, or a
// parent of to is not a folder.
func (r *Runtime) Move(from, to string) error {
	src, err := wspath.CleanEntry(from)
	if err != nil {
		return err
	}
	dst, err := wspath.CleanEntry(to)
	if err != nil {
		return err
	}
	if _, err := r.root.Lstat(src); err != nil {
		return pathErr(from, err)
	}
	if dir := path.Dir(dst); dir != "." {
		if err := r.makeDirs(to, dir); err != nil {
			return err
		}
	}
	err = r.root.Rename(src, dst)
	switch {
	case err == nil:
		return nil
	case wspath.IsEscape(err):
		return escapes(to)
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, fs.ErrExist):
		return fault.New(fault.Conflict, "'%s' is a folder that is not empty", to)
	case errors.Is(err, syscall.EISDIR):
		return fault.New(fault.Conflict, "'%s' is a folder and '%s' is not", to, from)
	case errors.Is(err, syscall.ENOTDIR):
		return fault.New(fault.Conflict, "'%s' is a folder and '%s' is not", from, to)
	case errors.Is(err, syscall.EINVAL):
		return fault.New(fault.Validation, "folder '%s' cannot be moved into itself ('%s')", from, to)
	}
	return pathErr(from, err)
}

// RemoveAll removes workspace path p and, for a folder, everything in it; symlinks are
// removed themselves, never followed. A missing path is not an error.
//
// Errors: fault.Validation for the workspace itself and a name or path too long;
// fault.Policy for a NUL byte and when p escapes the workspace.
func (r *Runtime) RemoveAll(p string) error {
	clean, err := wspath.CleanEntry(p)
	if err != nil {
		return err
	}
	err = r.root.RemoveAll(clean)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR) && !wspath.IsEscape(err):
		return nil
	}
	return pathErr(p, err)
}

// mkdirAll makes folder dir of the workspace and its missing parents (mode 0755), each given
// to the programs' user when they run as another.
func (r *Runtime) mkdirAll(dir string) error {
	if r.user == nil {
		return r.root.MkdirAll(dir, 0o755)
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		err := r.root.Mkdir(sub, 0o755)
		switch {
		case err == nil:
			if err := r.own(sub); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			// Kept as it is; the next Mkdir below it says when it is not a folder.
		default:
			return err
		}
	}
	if st, err := r.root.Stat(dir); err != nil {
		return err
	} else if !st.IsDir() {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	}
	return nil
}

func fileType(m fs.FileMode) FileType {
	switch {
	case m&fs.ModeSymlink != 0:
		return FileSymlink
	case m.IsDir():
		return FileDir
	case m.IsRegular():
		return FileRegular
	}
	return FileOther
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
