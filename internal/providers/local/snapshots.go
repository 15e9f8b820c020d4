//go:build unix

package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// SnapshotPrefix starts the name of every snapshot folder (SnapshotPrefix + the snapshot's
// id, directly under the workdir); DeleteSnapshot touches nothing else.
const SnapshotPrefix = "sandgate-snapshot-"

var _ providers.Snapshotter = (*Provider)(nil)

var snapshotID = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// Snapshot copies sandbox folder id into a snapshot folder under the workdir (its ref is the
// folder's absolute path): folders, regular files and symlinks (as links, never followed),
// with their permission bits; anything else (sockets, fifos) is left out. Processes and
// contexts are not captured. SizeBytes is the total size of the files copied.
//
// Errors: fault.Validation for a malformed meta.ID; fault.Gone when id is not a sandbox of
// this provider or no longer exists; fault.Conflict when the snapshot exists; fault.Provision
// when copying fails (nothing is left behind).
func (p *Provider) Snapshot(ctx context.Context, id string, meta providers.SnapshotMeta) (providers.SnapshotInfo, error) {
	if !snapshotID.MatchString(meta.ID) {
		return providers.SnapshotInfo{}, fault.New(fault.Validation, "%s: snapshot id %q is not 8 to 64 lower-case hex digits", TypeName, meta.ID)
	}
	if !p.owns(id) {
		return providers.SnapshotInfo{}, fault.New(fault.Gone, "%s: no sandbox '%s' under %s", TypeName, id, p.workdir)
	}
	if st, err := os.Lstat(id); err != nil || !st.IsDir() {
		return providers.SnapshotInfo{}, fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
	}
	dst := filepath.Join(p.workdir, SnapshotPrefix+meta.ID)
	if err := os.Mkdir(dst, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return providers.SnapshotInfo{}, fault.New(fault.Conflict, "%s: snapshot '%s' exists", TypeName, meta.ID)
		}
		return providers.SnapshotInfo{}, fault.Wrap(fault.Provision, err, "%s: creating the snapshot folder", TypeName)
	}
	n, err := copyTree(ctx, id, dst)
	if err != nil {
		_ = os.RemoveAll(dst)
		if ctx.Err() != nil {
			return providers.SnapshotInfo{}, ctx.Err()
		}
		return providers.SnapshotInfo{}, fault.Wrap(fault.Provision, err, "%s: copying sandbox '%s' into its snapshot", TypeName, id)
	}
	p.logger.Debug("sandbox snapshotted", "sandbox_id", id, "snapshot", dst, "bytes", n)
	return providers.SnapshotInfo{Ref: dst, SizeBytes: n}, nil
}

// Restore makes a new sandbox folder holding a copy of snapshot folder ref.
//
// Errors: fault.NotFound when ref is not a snapshot folder of this provider or no longer
// exists; fault.Provision when copying fails (the new folder is removed).
func (p *Provider) Restore(ctx context.Context, ref string, _ providers.Principal, _ providers.Policy) (providers.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !p.ownsSnapshot(ref) {
		return nil, fault.New(fault.NotFound, "%s: no snapshot '%s' under %s", TypeName, ref, p.workdir)
	}
	if st, err := os.Lstat(ref); err != nil || !st.IsDir() {
		return nil, fault.New(fault.NotFound, "%s: snapshot '%s' no longer exists", TypeName, ref)
	}
	dir, err := os.MkdirTemp(p.workdir, SandboxPrefix+"*")
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: cannot create a sandbox folder", TypeName)
	}
	if _, err := copyTree(ctx, ref, dir); err != nil {
		_ = os.RemoveAll(dir)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fault.Wrap(fault.Provision, err, "%s: restoring snapshot '%s'", TypeName, ref)
	}
	sb, err := p.open(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fault.Wrap(fault.Provision, err, "%s: cannot open sandbox folder", TypeName)
	}
	p.logger.Debug("sandbox restored", "sandbox_id", dir, "snapshot", ref)
	return sb, nil
}

// DeleteSnapshot removes snapshot folder ref. Idempotent; a ref that is not a snapshot folder
// of this provider is left alone.
func (p *Provider) DeleteSnapshot(_ context.Context, ref string) error {
	if !p.ownsSnapshot(ref) {
		return nil
	}
	if err := os.RemoveAll(ref); err != nil {
		return fmt.Errorf("%s: deleting snapshot '%s': %w", TypeName, ref, err)
	}
	return nil
}

// ownsSnapshot reports whether ref is a snapshot folder path of this provider.
func (p *Provider) ownsSnapshot(ref string) bool {
	if !filepath.IsAbs(ref) || filepath.Clean(ref) != ref || filepath.Dir(ref) != p.workdir {
		return false
	}
	return snapshotID.MatchString(strings.TrimPrefix(filepath.Base(ref), SnapshotPrefix)) && strings.HasPrefix(filepath.Base(ref), SnapshotPrefix)
}

// copyTree copies folder src's content into existing folder dst and returns the bytes of
// the files copied. Entries are read through an os.Root of src, so a link a program swaps in
// meanwhile cannot lead the copy out of it.
func copyTree(ctx context.Context, src, dst string) (int64, error) {
	root, err := os.OpenRoot(src)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := root.Readlink(rel)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			n, err := copyFile(root, rel, target, info.Mode().Perm())
			total += n
			return err
		}
		return nil // sockets, fifos, devices: not part of a workspace's content
	})
	if err != nil {
		return total, err
	}
	// Folders get their own permission bits back once their content is in.
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." || !d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(filepath.Join(dst, filepath.FromSlash(rel)), info.Mode().Perm())
	})
	return total, err
}

func copyFile(root *os.Root, rel, target string, perm fs.FileMode) (int64, error) {
	in, err := root.Open(rel)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
