package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Snapshots of sandbox pods' workspaces (providers.Snapshotter): a gzip-compressed tar
// archive that the pod's sandboxd writes (remote.Client.ReadArchive), kept as a file in
// Config.SnapshotDir on the gateway's host, and extracted by the sandboxd of a new pod on
// restore (remote.Client.WriteArchive).

// Names of the files in the snapshot folder: SnapshotPrefix + <snapshot id> +
// SnapshotSuffix is the archive (also the snapshot's ref), with MetaSuffix its metadata.
const (
	SnapshotPrefix = "sandgate-snapshot-"
	SnapshotSuffix = ".tar.gz"
	MetaSuffix     = ".json"
)

var _ providers.Snapshotter = (*Provider)(nil)

var (
	// snapshotID is the form of a snapshot id (the domain's: 32 lower-case hex digits).
	snapshotID = regexp.MustCompile(`^[0-9a-f]{8,64}$`)
	// snapshotRef is the form of a ref: a bare file name, so no ref can name a path elsewhere.
	snapshotRef = regexp.MustCompile(`^` + regexp.QuoteMeta(SnapshotPrefix) + `[0-9a-f]{8,64}` + regexp.QuoteMeta(SnapshotSuffix) + `$`)
)

// SnapshotMetadata is the JSON file kept next to each archive (<ref without
// SnapshotSuffix>.json), so that an operator looking at the folder can tell what each
// archive is and whose. The gateway's own record of a snapshot is its database row; this file
// is not read back.
type SnapshotMetadata struct {
	ID string `json:"id"`
	// Installation is the installation id of the gateway that made the snapshot.
	Installation string    `json:"installation"`
	Owner        string    `json:"owner,omitempty"`
	SessionID    string    `json:"session_id"`
	Profile      string    `json:"profile"`
	SandboxID    string    `json:"sandbox_id"` // "<namespace>/<pod>" (or claim)
	Pod          string    `json:"pod"`        // "<namespace>/<pod>"
	Format       string    `json:"format"`     // "tar+gzip"
	SizeBytes    int64     `json:"size_bytes"` // of the archive file
	CreatedAt    time.Time `json:"created_at"`
}

// Snapshot captures sandbox id's workspace: the pod's sandboxd streams it as a
// gzip-compressed tar (folders, files and symlinks with their modes and times; see
// internal/sandboxd) into a hidden temporary file in Config.SnapshotDir, which is synced and
// renamed to SnapshotPrefix+meta.ID+SnapshotSuffix, with SnapshotMetadata next to it. The ref
// is that file name, relative to the folder (so the folder may move); SizeBytes is the
// archive file's size. The archive is read as the gateway (the pods/exec right deletion and
// clean-up already use), whatever the profile's identity mode. The sandbox keeps running;
// what programs change while it is read may or may not be in the capture. /tmp, processes
// and contexts are not captured.
//
// Errors: fault.Capability without Config.SnapshotDir or on an attached profile;
// fault.Validation for a malformed meta.ID; fault.Gone when the pod (or claim) no longer
// exists or is not this provider's; fault.Conflict when the snapshot exists, or a file
// shrank while it was read (try again); fault.Provision when sandboxd cannot be reached or
// the stream breaks, and when writing the file fails (nothing is left behind).
func (p *Provider) Snapshot(ctx context.Context, id string, meta providers.SnapshotMeta) (providers.SnapshotInfo, error) {
	if !p.caps.Snapshots {
		return providers.SnapshotInfo{}, fault.Unsupported(TypeName, "snapshots")
	}
	if !snapshotID.MatchString(meta.ID) {
		return providers.SnapshotInfo{}, fault.New(fault.Validation, "%s: snapshot id %q is not 8 to 64 lower-case hex digits", TypeName, meta.ID)
	}
	sb, err := p.ownSandbox(ctx, id)
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	dir := p.cfg.SnapshotDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return providers.SnapshotInfo{}, fault.Wrap(fault.Provision, err, "%s: creating the snapshot folder %s", TypeName, dir)
	}
	ref := SnapshotPrefix + meta.ID + SnapshotSuffix
	final := filepath.Join(dir, ref)
	if _, err := os.Lstat(final); err == nil {
		return providers.SnapshotInfo{}, fault.New(fault.Conflict, "%s: snapshot '%s' exists", TypeName, meta.ID)
	}
	rc, err := sb.Client().ReadArchive(ctx, true)
	if err != nil {
		if ctx.Err() != nil {
			return providers.SnapshotInfo{}, ctx.Err()
		}
		return providers.SnapshotInfo{}, sb.Fault(err)
	}
	defer rc.Close()
	size, err := writeFileAtomically(dir, final, rc)
	if err != nil {
		if ctx.Err() != nil {
			return providers.SnapshotInfo{}, ctx.Err()
		}
		var fe *fault.Error
		if errors.As(err, &fe) {
			return providers.SnapshotInfo{}, err
		}
		return providers.SnapshotInfo{}, sb.Fault(fmt.Errorf("reading the workspace of sandbox '%s': %w", id, err))
	}
	md, _ := json.MarshalIndent(SnapshotMetadata{
		ID: meta.ID, Installation: p.installation, Owner: meta.Owner, SessionID: meta.SessionID, Profile: meta.Profile,
		SandboxID: id, Pod: sb.ns + "/" + sb.pod, Format: "tar+gzip", SizeBytes: size, CreatedAt: time.Now().UTC(),
	}, "", "  ")
	if _, err := writeFileAtomically(dir, metaPath(final), strings.NewReader(string(md)+"\n")); err != nil {
		_ = os.Remove(final)
		return providers.SnapshotInfo{}, err
	}
	p.log.Debug("sandbox snapshotted", "sandbox_id", id, "snapshot", final, "bytes", size)
	return providers.SnapshotInfo{Ref: ref, SizeBytes: size}, nil
}

// writeFileAtomically copies r into a hidden temporary file in dir, syncs it, renames it to
// final and syncs dir; on any error nothing is left. It returns the bytes written. r's errors
// come back wrapped as they are; the file system's as fault.Provision.
func writeFileAtomically(dir, final string, r io.Reader) (int64, error) {
	tmp, err := os.CreateTemp(dir, ".sandgate-snapshot-*.tmp")
	if err != nil {
		return 0, fault.Wrap(fault.Provision, err, "%s: creating a file in the snapshot folder %s", TypeName, dir)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, &sourceErrs{r: r})
	if err != nil {
		var se *sourceError
		if errors.As(err, &se) {
			return n, se.err
		}
		return n, fault.Wrap(fault.Provision, err, "%s: writing %s", TypeName, final)
	}
	if err := tmp.Sync(); err != nil {
		return n, fault.Wrap(fault.Provision, err, "%s: syncing %s", TypeName, final)
	}
	if err := tmp.Close(); err != nil {
		return n, fault.Wrap(fault.Provision, err, "%s: writing %s", TypeName, final)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return n, fault.Wrap(fault.Provision, err, "%s: renaming into %s", TypeName, final)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself, durable
		_ = d.Close()
	}
	return n, nil
}

// sourceErrs marks the errors of its reader, so a broken stream is told apart from a full
// disk.
type sourceErrs struct{ r io.Reader }

type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

func (s *sourceErrs) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &sourceError{err}
	}
	return n, err
}

// metaPath is the metadata file of archive path archive.
func metaPath(archive string) string {
	return strings.TrimSuffix(archive, SnapshotSuffix) + MetaSuffix
}

// Restore creates a new sandbox for pr under pol as Create does, and has its sandboxd
// extract snapshot archive ref into its (empty) workspace, within the policy's disk_mb when
// set. A sandbox whose restore fails is destroyed again.
//
// Errors: fault.Capability without Config.SnapshotDir or on an attached profile;
// fault.NotFound when ref is not a snapshot file name or the file no longer exists;
// Create's errors; fault.TooLarge when the archive's files exceed disk_mb; fault.Provision
// when the extraction fails otherwise (a corrupt archive, a broken stream).
func (p *Provider) Restore(ctx context.Context, ref string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("kubernetes", pol); err != nil {
		return nil, err
	}
	if !p.caps.Snapshots {
		return nil, fault.Unsupported(TypeName, "snapshots")
	}
	path, ok := p.snapshotPath(ref)
	if !ok {
		return nil, fault.New(fault.NotFound, "%s: '%s' is not a snapshot of this provider", TypeName, ref)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.NotFound, "%s: snapshot '%s' no longer exists", TypeName, ref)
	}
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: opening snapshot '%s'", TypeName, ref)
	}
	defer f.Close()
	created, err := p.Create(ctx, pr, pol)
	if err != nil {
		return nil, err
	}
	sb, ok := created.(*Sandbox)
	if !ok { // Create hands out *Sandbox only; anything else is a bug, not a capture
		_ = p.Destroy(context.WithoutCancel(ctx), created.ID())
		return nil, fault.New(fault.Internal, "%s: restore got a sandbox of type %T", TypeName, created)
	}
	maxBytes := int64(-1)
	if pol.DiskMB > 0 {
		maxBytes = int64(pol.DiskMB) << 20
	}
	st, err := sb.Client().WriteArchive(ctx, f, true, maxBytes)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := p.Destroy(dctx, sb.ID()); derr != nil {
			p.log.Warn("removing a sandbox whose restore failed", "sandbox_id", sb.ID(), "error", derr)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if fault.KindOf(err) == fault.TooLarge {
			return nil, fault.Wrap(fault.TooLarge, err, "%s: snapshot '%s' does not fit the profile's disk_mb", TypeName, ref)
		}
		return nil, fault.Wrap(fault.Provision, err, "%s: restoring snapshot '%s' into pod %s/%s", TypeName, ref, sb.ns, sb.pod)
	}
	p.log.Debug("sandbox restored", "sandbox_id", sb.ID(), "snapshot", ref, "entries", st.Entries, "bytes", st.Bytes)
	return sb, nil
}

// DeleteSnapshot removes snapshot archive ref and its metadata file. Idempotent: a missing
// file is no error, and a ref that is not a snapshot file name is left alone.
//
// Errors: fault.Capability without Config.SnapshotDir (the archive cannot be found);
// fault.Provision when a file cannot be removed.
func (p *Provider) DeleteSnapshot(_ context.Context, ref string) error {
	if !p.caps.Snapshots {
		return fault.Unsupported(TypeName, "snapshots")
	}
	path, ok := p.snapshotPath(ref)
	if !ok {
		return nil
	}
	for _, f := range []string{path, metaPath(path)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fault.Wrap(fault.Provision, err, "%s: deleting snapshot '%s'", TypeName, ref)
		}
	}
	p.log.Debug("snapshot deleted", "snapshot", path)
	return nil
}

// snapshotPath is the archive file of ref in the snapshot folder; ok is false for anything
// but a snapshot file name (a path, "..", another name).
func (p *Provider) snapshotPath(ref string) (string, bool) {
	if !snapshotRef.MatchString(ref) {
		return "", false
	}
	return filepath.Join(p.cfg.SnapshotDir, ref), true
}

// ownSandbox returns a handle on managed sandbox id as the gateway: a pod (or claim) of the
// configured namespace that this provider made.
func (p *Provider) ownSandbox(ctx context.Context, id string) (*Sandbox, error) {
	ns, name, err := p.splitID(id)
	if err != nil || ns != p.cfg.Namespace || !strings.HasPrefix(name, NamePrefix) {
		return nil, fault.New(fault.Gone, "%s: '%s' is not a sandbox of this provider", TypeName, id)
	}
	var sb providers.Sandbox
	if p.cfg.AgentSandbox != nil {
		sb, err = p.attachClaim(ctx, p.gateway, id)
	} else {
		sb, err = p.attach(ctx, p.gateway, id)
	}
	if err != nil {
		return nil, err
	}
	own, ok := sb.(*Sandbox)
	if !ok {
		return nil, fault.New(fault.Internal, "%s: attach gave a sandbox of type %T", TypeName, sb)
	}
	return own, nil
}
