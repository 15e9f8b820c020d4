// Package wspath holds the workspace path and environment-name rules shared by the gateway's
// providers and by sandboxd, so that a path or a variable name means the same thing on every
// backend. It is a leaf: it imports only the standard library and internal/fault.
package wspath

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/fault"
)

// Clean turns a caller's workspace path into a clean, slash-separated path relative to the
// sandbox workspace.
//
// "" and "." both mean the workspace root and come back as "."; "a//b/./c/" comes back as
// "a/b/c"; "a/../b" as "b". Clean refuses, with a fault.Policy error, a path that contains a
// NUL byte, is absolute ("/etc/passwd"), or whose cleaned form leaves the workspace ("..",
// "../x", "a/../../x"). It is purely lexical: the caller must still confine the cleaned path
// after resolving symlinks (field-notes "Files"; docs/semantics.md §2, SandboxPolicyError on
// path traversal). Percent-encoding is not decoded here; "%2e%2e" is an ordinary name.
//
// A cleaned path with a name over MaxNameBytes, or of MaxPathBytes or more, is a
// fault.Validation error: no Linux file system holds it (NAME_MAX, PATH_MAX), and refusing it
// here gives every backend the answer sandboxd's kernel gives (RootError), before anything
// is made on the way to it.
func Clean(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fault.New(fault.Policy, "path %q contains a NUL byte and escapes the sandbox workspace", p)
	}
	if strings.HasPrefix(p, "/") {
		return "", Escapes(p)
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", Escapes(p)
	}
	if len(c) >= MaxPathBytes || longName(c) {
		return "", TooLong(p)
	}
	return c, nil
}

// CleanEntry is Clean for a path that must name an entry inside the workspace — a file to
// write, an entry to remove — and so cannot be the workspace folder itself: "", "." and
// "a/.." are a fault.Validation error (docs/semantics.md §8 "Files": the root itself is not a
// file). It is the caller's input that is wrong, whatever the workspace holds, so it is
// Validation and not Conflict (which says the workspace's state is in the way: a folder where
// a file is written, a folder that is not empty). Clean's errors otherwise.
func CleanEntry(p string) (string, error) {
	c, err := Clean(p)
	if err != nil {
		return "", err
	}
	if c == "." {
		return "", fault.New(fault.Validation, "path '%s' is the workspace folder itself: name a file or folder inside it", p)
	}
	return c, nil
}

// longName reports whether a name of slash-separated path c is over MaxNameBytes.
func longName(c string) bool {
	for name := range strings.SplitSeq(c, "/") {
		if len(name) > MaxNameBytes {
			return true
		}
	}
	return false
}

// TooLong is the fault.Validation error for workspace path p with a name or a length no
// Linux file system takes.
// The message shows the start of p only.
func TooLong(p string) error {
	if len(p) > 64 {
		p = strings.ToValidUTF8(p[:64], "") + "…"
	}
	return fault.New(fault.Validation, "path '%s' is too long: each name in it may have at most %d bytes, the whole path at most %d bytes (Linux NAME_MAX, PATH_MAX)", p, MaxNameBytes, MaxPathBytes-1)
}

// MaxNameBytes and MaxPathBytes are the Linux bounds on one file name (NAME_MAX) and on a
// whole path (PATH_MAX, its terminating NUL included) every backend's file system applies.
const (
	MaxNameBytes = 255
	MaxPathBytes = 4096
)

// Escapes is the fault.Policy error for workspace path p leading out of the workspace.
func Escapes(p string) error {
	return fault.New(fault.Policy, "path '%s' escapes the sandbox workspace", p)
}

// ValidEnvName reports whether name is a portable environment variable name, matching
// ^[A-Za-z_][A-Za-z0-9_]*$. Names are validated and values passed natively, never through a
// shell string (field-notes "Security").
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// RootError classifies an error of an os.Root operation on workspace path p: an escape
// (os.Root refusing a path through a symlink leading out) is fault.Policy; a missing path or
// parent fault.NotFound; a symlink loop or a permission problem fault.Conflict; a name too
// long fault.Validation. Anything else (fs.ErrClosed included: callers say what closed) comes
// back wrapped with the path and unclassified.
func RootError(p string, err error) error {
	switch {
	case IsEscape(err):
		return Escapes(p)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fault.New(fault.NotFound, "no file or folder '%s' in the sandbox workspace", p)
	case errors.Is(err, syscall.ELOOP):
		return fault.New(fault.Conflict, "path '%s' has too many levels of symbolic links", p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return TooLong(p)
	case errors.Is(err, fs.ErrPermission):
		return fault.New(fault.Conflict, "path '%s' is not accessible (permission denied)", p)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return NoSpace(p, err)
	}
	return fmt.Errorf("sandbox path '%s': %w", p, err)
}

// NoSpace is the fault.Full error of a write to workspace path p that found no space left
// (cause: ENOSPC or EDQUOT, kept for errors.Is but not in the message, which must not show
// host paths). The gateway adds the profile's disk limit when it has one.
func NoSpace(p string, cause error) error {
	return &fault.Error{Kind: fault.Full, Err: cause,
		Msg: fmt.Sprintf("no space left in the sandbox's workspace for '%s'; nothing was written — remove files to make room", p)}
}

// IsNoSpace reports whether err is a write's ENOSPC or EDQUOT.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// IsEscape reports whether err is os.Root refusing a path that leads out of the root. The os
// package does not export that error, so it is recognised by its text; the providers' and
// sandboxd's contract tests catch a change.
func IsEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}
