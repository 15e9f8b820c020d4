//go:build unix

package sandboxd

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/fault"
)

// cleanPath turns a caller's workspace path into a clean, slash-separated path relative to the
// workspace: "" and "." give ".", "a//b/./c/" gives "a/b/c". It refuses a NUL byte
// (fault.Validation) and, with fault.Policy, an absolute path or one whose cleaned form leaves
// the workspace. Symlinks are confined later, by os.Root.
func cleanPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fault.New(fault.Validation, "path %q contains a NUL byte", p)
	}
	if strings.HasPrefix(p, "/") {
		return "", escapes(p)
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", escapes(p)
	}
	return c, nil
}

func escapes(p string) error {
	return fault.New(fault.Policy, "path '%s' escapes the sandbox workspace", p)
}

// workingDir resolves workspace folder dir to an absolute path without symlinks, inside the
// workspace.
//
// Errors: cleanPath's; fault.Policy when a symlink leads out; fault.NotFound when it does not
// exist; fault.Validation when it is not a folder.
func (r *Runtime) workingDir(dir string) (string, error) {
	clean, err := cleanPath(dir)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return r.workspace, nil
	}
	st, err := r.root.Stat(clean)
	if err != nil {
		return "", pathErr(dir, err)
	}
	if !st.IsDir() {
		return "", fault.New(fault.Validation, "working folder '%s' is not a folder", dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(r.workspace, filepath.FromSlash(clean)))
	if err != nil {
		return "", pathErr(dir, err)
	}
	if real != r.workspace && !strings.HasPrefix(real, r.workspace+string(filepath.Separator)) {
		return "", escapes(dir)
	}
	return real, nil
}

// pathErr classifies an error of an os.Root operation on workspace path p.
func pathErr(p string, err error) error {
	switch {
	case isEscape(err):
		return escapes(p)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fault.New(fault.NotFound, "no file or folder '%s' in the sandbox workspace", p)
	case errors.Is(err, syscall.ELOOP):
		return fault.New(fault.Conflict, "path '%s' has too many levels of symbolic links", p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fault.New(fault.Validation, "path '%s' is too long", p)
	case errors.Is(err, fs.ErrPermission):
		return fault.New(fault.Conflict, "path '%s' is not accessible (permission denied)", p)
	case errors.Is(err, fs.ErrClosed):
		return fault.New(fault.Gone, "%s", errShutdown)
	}
	return fmt.Errorf("sandbox path '%s': %w", p, err)
}

// isEscape reports whether err is os.Root refusing a path that leads out of the root. The os
// package does not export that error, so it is recognised by its text; the tests catch a
// change.
func isEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}
