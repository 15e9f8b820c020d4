//go:build unix

package local

import (
	"compress/gzip"
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
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Snapshots (providers.Snapshotter): the sandbox runtime's own workspace archive
// (sandboxd.Runtime.ArchiveWorkspace: sparse files as their data, modes and times, symlinks
// as links), gzip-compressed into a file SnapshotPrefix + <id> + SnapshotSuffix directly
// under the workdir, whose absolute path is the ref; Restore has a new sandbox folder's
// runtime extract it (sandboxd.Runtime.ExtractWorkspace). Restores are therefore what the
// docker and kubernetes providers' are, whose sandboxd does the same: setuid and setgid
// dropped, holes and runs of zeros left as holes.
//
// Snapshots made before this format are folders SnapshotPrefix + <id> holding a copy of the
// workspace; Restore still takes them (archived from the folder and extracted the same way)
// and DeleteSnapshot still removes them.

// SnapshotPrefix starts the name of every snapshot file (and of the folders of the earlier
// format) directly under the workdir; DeleteSnapshot touches nothing else.
const SnapshotPrefix = "sandgate-snapshot-"

// SnapshotSuffix ends the name of every snapshot file.
const SnapshotSuffix = ".tar.gz"

var _ providers.Snapshotter = (*Provider)(nil)

var snapshotID = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// Snapshot archives sandbox folder id into the snapshot file of meta.ID (written to a hidden
// temporary file, synced, renamed); its absolute path is the ref and its size SizeBytes.
// Processes and contexts are not captured; what programs change meanwhile may or may not be.
//
// Errors: fault.Validation for a malformed meta.ID; fault.Gone when id is not a sandbox of
// this provider or no longer exists; fault.Conflict when the snapshot exists, or a file
// shrank while it was read (try again); fault.Provision when writing fails (nothing is left
// behind).
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
	final := filepath.Join(p.workdir, SnapshotPrefix+meta.ID+SnapshotSuffix)
	for _, existing := range []string{final, strings.TrimSuffix(final, SnapshotSuffix)} {
		if _, err := os.Lstat(existing); err == nil {
			return providers.SnapshotInfo{}, fault.New(fault.Conflict, "%s: snapshot '%s' exists", TypeName, meta.ID)
		}
	}
	rt, err := p.runtime(id)
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	size, err := p.writeArchive(ctx, rt, final)
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	p.logger.Debug("sandbox snapshotted", "sandbox_id", id, "snapshot", final, "bytes", size)
	return providers.SnapshotInfo{Ref: final, SizeBytes: size}, nil
}

// writeArchive writes rt's workspace, gzip-compressed, to a hidden temporary file in the
// workdir, syncs it and renames it to final; on any error nothing is left. It returns the
// file's size.
func (p *Provider) writeArchive(ctx context.Context, rt *sandboxd.Runtime, final string) (int64, error) {
	tmp, err := os.CreateTemp(p.workdir, ".sandgate-snapshot-*.tmp")
	if err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: creating a snapshot file in %s", TypeName, p.workdir)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	zw, _ := gzip.NewWriterLevel(tmp, gzip.BestSpeed)
	if _, err := rt.ArchiveWorkspace(ctx, zw); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		var fe *fault.Error
		if errors.As(err, &fe) {
			return 0, err // a file that shrank (Conflict), a closed runtime (Gone)
		}
		return 0, fault.Wrap(fault.Provision, err, "%s: writing snapshot %s", TypeName, final)
	}
	if err := zw.Close(); err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: writing snapshot %s", TypeName, final)
	}
	if err := tmp.Sync(); err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: syncing snapshot %s", TypeName, final)
	}
	st, err := tmp.Stat()
	if err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: writing snapshot %s", TypeName, final)
	}
	if err := tmp.Close(); err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: writing snapshot %s", TypeName, final)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: renaming into %s", TypeName, final)
	}
	done = true
	return st.Size(), nil
}

// Restore makes a new sandbox folder and extracts snapshot ref into it (or, for a snapshot
// folder of the earlier format, that folder's content, archived on the fly), within
// pol.DiskMB when set (the bytes written; holes are free).
//
// Errors: fault.NotFound when ref is not a snapshot of this provider or no longer exists;
// fault.TooLarge when its files exceed pol.DiskMB; fault.Provision when the extraction fails
// otherwise (a corrupt archive). The new folder is removed on any error.
func (p *Provider) Restore(ctx context.Context, ref string, _ providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("local_subprocess", pol); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	folder, ok := p.snapshotKind(ref)
	if !ok {
		return nil, fault.New(fault.NotFound, "%s: no snapshot '%s' under %s", TypeName, ref, p.workdir)
	}
	src, err := p.openSnapshot(ctx, ref, folder)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dir, err := os.MkdirTemp(p.workdir, SandboxPrefix+"*")
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: cannot create a sandbox folder", TypeName)
	}
	sb, err := p.extractInto(ctx, dir, src, pol)
	if err != nil {
		_ = p.Destroy(context.WithoutCancel(ctx), dir)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if k := fault.KindOf(err); k == fault.TooLarge {
			return nil, fault.Wrap(k, err, "%s: snapshot '%s' does not fit the profile's disk_mb", TypeName, ref)
		}
		return nil, fault.Wrap(fault.Provision, err, "%s: restoring snapshot '%s'", TypeName, ref)
	}
	p.logger.Debug("sandbox restored", "sandbox_id", dir, "snapshot", ref)
	return sb, nil
}

// extractInto extracts tar stream src into the new sandbox folder dir.
func (p *Provider) extractInto(ctx context.Context, dir string, src io.Reader, pol providers.Policy) (*Sandbox, error) {
	rt, err := p.runtime(dir)
	if err != nil {
		return nil, err
	}
	maxBytes := int64(-1)
	if pol.DiskMB > 0 {
		maxBytes = int64(pol.DiskMB) << 20
	}
	if _, err := rt.ExtractWorkspace(ctx, src, maxBytes); err != nil {
		return nil, err
	}
	return p.open(dir)
}

// openSnapshot returns snapshot ref as a tar stream: the file decompressed, or a folder of
// the earlier format archived as it is read (by a runtime of its own that runs nothing).
func (p *Provider) openSnapshot(ctx context.Context, ref string, folder bool) (io.ReadCloser, error) {
	st, err := os.Lstat(ref)
	if err != nil || st.IsDir() != folder || (!folder && !st.Mode().IsRegular()) {
		return nil, fault.New(fault.NotFound, "%s: snapshot '%s' no longer exists", TypeName, ref)
	}
	if folder {
		rt, err := sandboxd.New(sandboxd.Options{Workspace: ref, Logger: p.logger})
		if err != nil {
			return nil, fault.Wrap(fault.Provision, err, "%s: opening snapshot folder '%s'", TypeName, ref)
		}
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := rt.ArchiveWorkspace(ctx, pw)
			_ = rt.Close()
			_ = pw.CloseWithError(err)
		}()
		return &pipedArchive{PipeReader: pr, done: done}, nil
	}
	f, err := os.Open(ref)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.NotFound, "%s: snapshot '%s' no longer exists", TypeName, ref)
	}
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: opening snapshot '%s'", TypeName, ref)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		_ = f.Close()
		return nil, fault.Wrap(fault.Provision, err, "%s: snapshot '%s' is not gzip-compressed", TypeName, ref)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// pipedArchive is the read end of an archive written by a goroutine; Close stops the writer
// (its next write fails) and waits for it to end.
type pipedArchive struct {
	*io.PipeReader
	done chan struct{}
}

func (a *pipedArchive) Close() error {
	err := a.PipeReader.Close()
	<-a.done
	return err
}

// DeleteSnapshot removes snapshot ref (a file, or a folder of the earlier format).
// Idempotent; a ref that is not a snapshot of this provider is left alone.
func (p *Provider) DeleteSnapshot(_ context.Context, ref string) error {
	folder, ok := p.snapshotKind(ref)
	if !ok {
		return nil
	}
	var err error
	if folder {
		err = os.RemoveAll(ref)
	} else if err = os.Remove(ref); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%s: deleting snapshot '%s': %w", TypeName, ref, err)
	}
	return nil
}

// snapshotKind reports whether ref is a snapshot path of this provider — directly under the
// workdir, SnapshotPrefix and an id, then SnapshotSuffix for a file (folder false) or
// nothing for a folder of the earlier format (folder true).
func (p *Provider) snapshotKind(ref string) (folder, ok bool) {
	if !filepath.IsAbs(ref) || filepath.Clean(ref) != ref || filepath.Dir(ref) != p.workdir {
		return false, false
	}
	name, isSnapshot := strings.CutPrefix(filepath.Base(ref), SnapshotPrefix)
	if !isSnapshot {
		return false, false
	}
	id, isFile := strings.CutSuffix(name, SnapshotSuffix)
	return !isFile, snapshotID.MatchString(id)
}
