package e2b

import (
	"context"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

// The folder operations (providers.FileTree) are envd's Filesystem/MakeDir, Move and Remove
// on guest paths the provider resolved first (resolve: symlinks followed only while they stay
// in the workspace), never a command line. envd's own answers are coarse — Move fails with
// Internal for a folder at the destination, a folder over a file or a folder into itself,
// and MakeDir says AlreadyExists for a folder there — so the provider looks before it asks and
// gives the faults sandboxd gives for the same cases.

var _ providers.FileTree = (*Sandbox)(nil)

// entry finds workspace entry rel (cleaned, not the workspace) itself: the folders on the
// way are resolved, the last component is not followed. It returns its guest path and its
// entry, nil when there is none (also below a file or a missing folder).
//
// Errors: fault.Policy when a folder on the way leads out of the workspace; envd's errors.
func (s *Sandbox) entry(ctx context.Context, rel string) (string, *wire.EntryInfo, error) {
	parent := s.p.cfg.Workdir
	if dir := path.Dir(rel); dir != "." {
		g, d, err := s.resolve(ctx, dir, forRead)
		if fault.IsKind(err, fault.NotFound) {
			return "", nil, nil
		}
		if err != nil {
			return "", nil, err
		}
		if d.Type != wire.FileTypeDirectory {
			return "", nil, nil // below a file: nothing there
		}
		parent = g
	}
	target := path.Join(parent, path.Base(rel))
	e, err := s.stat(ctx, target)
	if connect.CodeOf(err) == connect.CodeNotFound {
		return target, nil, nil
	}
	if err != nil {
		return "", nil, envdError(err, "looking up '"+rel+"'")
	}
	return target, e, nil
}

// isFolder says whether envd entry e is a folder itself (not a symlink to one).
func isFolder(e *wire.EntryInfo) bool {
	return e != nil && e.SymlinkTarget == nil && e.Type == wire.FileTypeDirectory
}

// MakeDir makes workspace folder p and its missing parents (Filesystem/MakeDir); a folder
// already there, also through a symlink that stays in the workspace, is no error
// (providers.FileTree).
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// an escape); fault.Conflict on a closed handle; fault.Policy for an escape through a
// symlink; fault.Conflict when p or a parent is not a folder; envd's errors (envdError).
func (s *Sandbox) MakeDir(ctx context.Context, p string) error {
	rel, err := providers.CleanEntry(p)
	if err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	target, e, err := s.resolve(ctx, rel, forWrite)
	if err != nil {
		return err
	}
	if e != nil {
		if e.Type == wire.FileTypeDirectory {
			return nil
		}
		return fault.New(fault.Conflict, "'%s' is there and is not a folder", rel)
	}
	_, err = unary[wire.MakeDirRequest, wire.MakeDirResponse](ctx, s, wire.FSMakeDir, &wire.MakeDirRequest{Path: target})
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		return nil // made meanwhile
	}
	if err != nil {
		return envdError(err, "making folder '"+rel+"'")
	}
	return nil
}

// Move renames workspace path from to to as Go's os.Rename does (Filesystem/Move, which makes
// to's missing parents): a symlink is moved itself, a file at to is replaced, a folder at to
// is not (providers.FileTree).
//
// Errors: providers.CleanEntry's for either; fault.Conflict on a closed handle; fault.Policy
// for an escape through a symlink; fault.NotFound when from does not exist; fault.Conflict
// for a folder at to, a folder moved onto a file, or a parent of to that is not a folder; fault.Validation for a folder moved into itself;
// envd's errors (envdError).
func (s *Sandbox) Move(ctx context.Context, from, to string) error {
	srcRel, err := providers.CleanEntry(from)
	if err != nil {
		return err
	}
	dstRel, err := providers.CleanEntry(to)
	if err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	src, se, err := s.entry(ctx, srcRel)
	if err != nil {
		return err
	}
	if se == nil {
		return fault.New(fault.NotFound, "no file or folder '%s' in the workspace", srcRel)
	}
	dir := s.p.cfg.Workdir
	if d := path.Dir(dstRel); d != "." {
		g, de, err := s.resolve(ctx, d, forWrite)
		if err != nil {
			return err
		}
		if de != nil && de.Type != wire.FileTypeDirectory {
			return fault.New(fault.Conflict, "'%s' is not a folder", d)
		}
		dir = g
	}
	dst := path.Join(dir, path.Base(dstRel))
	if dst == src {
		return nil // rename(2) of a path onto itself does nothing
	}
	if isFolder(se) && strings.HasPrefix(dst, src+"/") {
		return fault.New(fault.Validation, "folder '%s' cannot be moved into itself ('%s')", srcRel, dstRel)
	}
	de, err := s.stat(ctx, dst)
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
	case err != nil:
		return envdError(err, "looking up '"+dstRel+"'")
	case isFolder(de):
		return fault.New(fault.Conflict, "'%s' is a folder already there", dstRel)
	case isFolder(se):
		return fault.New(fault.Conflict, "'%s' is a folder and '%s' is not", srcRel, dstRel)
	}
	if _, err := unary[wire.MoveRequest, wire.MoveResponse](ctx, s, wire.FSMove, &wire.MoveRequest{Source: src, Destination: dst}); err != nil {
		return envdError(err, "moving '"+srcRel+"' to '"+dstRel+"'")
	}
	return nil
}

// RemoveAll removes workspace path p and, for a folder, everything in it (Filesystem/Remove,
// envd's os.RemoveAll: symlinks are removed themselves, never followed); a missing path, also
// one below a file, is no error (providers.FileTree).
//
// Errors: providers.CleanEntry's (fault.Validation for the workspace itself, fault.Policy for
// an escape); fault.Conflict on a closed handle; fault.Policy for an escape through a
// symlink; envd's errors (envdError).
func (s *Sandbox) RemoveAll(ctx context.Context, p string) error {
	rel, err := providers.CleanEntry(p)
	if err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	target, e, err := s.entry(ctx, rel)
	if err != nil || e == nil {
		return err
	}
	if _, err := unary[wire.RemoveRequest, wire.Empty](ctx, s, wire.FSRemove, &wire.RemoveRequest{Path: target}); err != nil {
		return envdError(err, "removing '"+rel+"'")
	}
	return nil
}
