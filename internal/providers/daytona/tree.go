package daytona

import (
	"context"
	"net/http"
	"path"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// The folder operations (providers.FileTree) are the toolbox's file API — POST /files/folder,
// POST /files/move, DELETE /files?recursive=true — on paths confined lexically (abs), never
// a command line. The toolbox's move refuses a destination that exists (409) and one whose
// parent is missing (404), where the contract replaces a file and makes the parents: the
// provider makes them first and removes a file to be replaced before it moves, so for a
// moment between the two a program may see neither. The toolbox
// describes entries after following symlinks (see the package doc): a symlink to a folder
// counts as a folder in Move's checks, and a dangling one as missing.

var _ providers.FileTree = (*Sandbox)(nil)

// folderMode is the mode of the folders MakeDir and Move make (octal, as the toolbox reads it).
const folderMode = "755"

// MakeDir makes workspace folder p and its missing parents (POST /files/folder); a folder
// already there is no error (providers.FileTree).
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// a path that leaves the workspace lexically); fault.Conflict on a closed handle;
// fault.Conflict when p or a parent is a file; fault.Provision (fault.Gone for a sandbox that
// is gone) for other toolbox failures.
func (s *Sandbox) MakeDir(ctx context.Context, p string) error {
	if _, err := providers.CleanEntry(p); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	abs, rel, err := s.abs(ctx, p)
	if err != nil {
		return err
	}
	return s.makeFolder(ctx, abs, rel)
}

// makeFolder makes folder abs (workspace path rel) and its parents, explaining a refusal.
func (s *Sandbox) makeFolder(ctx context.Context, abs, rel string) error {
	err := s.tb.makeFolder(ctx, abs, folderMode)
	if err == nil {
		return nil
	}
	if statusOf(err) == http.StatusBadRequest {
		if fi, ierr := s.tb.info(ctx, abs); ierr == nil && !fi.IsDir {
			return fault.New(fault.Conflict, "'%s' is there and is not a folder", rel)
		}
		if c := s.conflict(ctx, abs, rel); c != nil {
			return c
		}
	}
	return s.failed(ctx, err, "making folder '"+rel+"'")
}

// Move renames workspace path from to to as Go's os.Rename does (POST /files/move): a file
// at to is replaced, a folder at to is not, to's missing parents are made
// (providers.FileTree).
//
// Errors: providers.CleanEntry's for either (fault.Validation for the workspace itself,
// fault.Policy for a path that leaves the workspace lexically); fault.Conflict on a closed
// handle; fault.NotFound when from does not exist; fault.Conflict for a folder at to, a folder
// moved onto a file, or a parent of to that is a file; fault.Validation for a folder moved into itself; fault.Provision (fault.Gone for a
// sandbox that is gone) for other toolbox failures.
func (s *Sandbox) Move(ctx context.Context, from, to string) error {
	if _, err := providers.CleanEntry(from); err != nil {
		return err
	}
	if _, err := providers.CleanEntry(to); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	src, srcRel, err := s.abs(ctx, from)
	if err != nil {
		return err
	}
	dst, dstRel, err := s.abs(ctx, to)
	if err != nil {
		return err
	}
	si, err := s.tb.info(ctx, src)
	switch st := statusOf(err); {
	case st == http.StatusNotFound || st == http.StatusBadRequest:
		return fault.New(fault.NotFound, "no file or folder '%s' in the workspace", srcRel)
	case err != nil:
		return s.failed(ctx, err, "moving '"+srcRel+"'")
	}
	if dst == src {
		return nil // rename(2) of a path onto itself does nothing
	}
	if si.IsDir && strings.HasPrefix(dst, src+"/") {
		return fault.New(fault.Validation, "folder '%s' cannot be moved into itself ('%s')", srcRel, dstRel)
	}
	if d := path.Dir(dstRel); d != "." {
		if err := s.makeFolder(ctx, path.Dir(dst), d); err != nil {
			return err
		}
	}
	di, err := s.tb.info(ctx, dst)
	switch st := statusOf(err); {
	case st == http.StatusNotFound:
	case err != nil:
		return s.failed(ctx, err, "moving '"+srcRel+"' to '"+dstRel+"'")
	case di.IsDir:
		return fault.New(fault.Conflict, "'%s' is a folder already there", dstRel)
	case si.IsDir:
		return fault.New(fault.Conflict, "'%s' is a folder and '%s' is not", srcRel, dstRel)
	default:
		if err := s.tb.remove(ctx, dst, false); err != nil && statusOf(err) != http.StatusNotFound {
			return s.failed(ctx, err, "replacing '"+dstRel+"'")
		}
	}
	err = s.tb.move(ctx, src, dst)
	switch st := statusOf(err); {
	case err == nil:
		return nil
	case st == http.StatusNotFound:
		return fault.New(fault.NotFound, "no file or folder '%s' in the workspace", srcRel)
	case st == http.StatusConflict:
		return fault.New(fault.Conflict, "'%s' appeared while '%s' was moved there", dstRel, srcRel)
	}
	return s.failed(ctx, err, "moving '"+srcRel+"' to '"+dstRel+"'")
}

// RemoveAll removes workspace path p and, for a folder, everything in it (DELETE /files with
// recursive; a symlink is removed itself); a missing path, also one below a file, is no error
// (providers.FileTree).
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// a path that leaves the workspace lexically); fault.Conflict on a closed handle;
// fault.Provision (fault.Gone for a sandbox that is gone) for other toolbox failures.
func (s *Sandbox) RemoveAll(ctx context.Context, p string) error {
	if _, err := providers.CleanEntry(p); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	abs, rel, err := s.abs(ctx, p)
	if err != nil {
		return err
	}
	err = s.tb.remove(ctx, abs, true)
	switch st := statusOf(err); {
	case err == nil, st == http.StatusNotFound:
		return nil
	case st == http.StatusBadRequest:
		// A path below a file (the toolbox's stat fails with ENOTDIR): nothing there.
		if _, ierr := s.tb.info(ctx, abs); statusOf(ierr) == http.StatusNotFound || statusOf(ierr) == http.StatusBadRequest {
			return nil
		}
	}
	return s.failed(ctx, err, "removing '"+rel+"'")
}
