package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Snapshots of managed sandbox containers (providers.Snapshotter).
//
// A snapshot is a local image, SnapshotRepository:<id>, whose one layer holds one file,
// SnapshotArchive: the workspace as the sandbox's sandboxd archives it
// (sandboxd.Runtime.ArchiveWorkspace: folders, files, symlinks as links, modes and times;
// a sparse file as its data regions only), gzip-compressed. The engine therefore stores what
// the workspace holds, compressed — a 3 GiB file with no blocks costs a few hundred bytes —
// and SnapshotInfo.SizeBytes is exactly that file's size. The layer sits on the image the
// sandbox was made from, which it shares (no copy), and the image carries the labels that
// say whose it is. Keeping captures in the engine, rather than in a folder of one gateway,
// keeps them where every replica that uses the engine finds them.
//
// A restore creates a sandbox as Create does (policy, disk_mb, the warm pool) and has its
// sandboxd replace the workspace with the archive (sandboxd.Runtime.ReplaceWorkspace):
// setuid and setgid dropped, every run of zero blocks left as a hole, the bytes written
// bounded by disk_mb (fault.TooLarge past it) — the same restore as the kubernetes and
// local providers'.
//
// Snapshots of the earlier format (images without LabelSnapshotFormat, committed with the
// workspace as the engine's archive API gave it as their layer) stay restorable: their
// workspace is read from the image with that API and streamed into the new sandbox's
// sandboxd, with the same result. That format is gone because the engine reads holes as
// zeros and writes them back as data: a sparse file became its whole length in the image,
// and again in every restored workspace, through any disk_mb bound.
//
// A paused or stopped sandbox's sandboxd cannot answer (nor one that does not answer within
// readyTimeout); its workspace is read with the engine's archive API too and converted
// (engineWorkspace): holes arrive as zeros there, which the compression shrinks about a
// thousandfold and the restore makes holes again.

// Labels of snapshot images.
const (
	LabelSnapshot     = "sandgate.snapshot"      // the snapshot's id
	LabelSession      = "sandgate.session"       // the session whose sandbox was captured
	LabelSnapshotBase = "sandgate.snapshot-base" // the image the capture is a layer on
	// LabelSnapshotFormat is SnapshotFormatArchive on images that hold SnapshotArchive;
	// images of the earlier format have none.
	LabelSnapshotFormat = "sandgate.snapshot-format"
	// SnapshotRepository names snapshot images: SnapshotRepository:<snapshot id>.
	SnapshotRepository = "sandgate/snapshot"
)

// SnapshotFormatArchive is LabelSnapshotFormat's value: a gzip-compressed workspace archive.
const SnapshotFormatArchive = "tar+gzip"

// SnapshotArchive is where the workspace archive lies in a snapshot image.
const SnapshotArchive = "/sandgate-snapshot.tar.gz"

var _ providers.Snapshotter = (*Provider)(nil)

// snapshotID is the form of a snapshot id (the domain's ids: 32 lower-case hex digits).
var snapshotID = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// Snapshot captures sandbox id's workspace into the local image SnapshotRepository:<meta.ID>
// (see above): a running sandbox's sandboxd archives it; a paused or stopped one is read
// with the engine's archive API and stays as it was. The archive is spooled to an unlinked
// temporary file of the gateway (TMPDIR) to learn its size, then copied into the image. The
// image is labelled managed-by, LabelSnapshot, LabelSnapshotFormat, LabelProfile,
// LabelOwner (meta.Owner), LabelSession and LabelSnapshotBase; its base is the image the
// sandbox was made from — the profile's, also for a sandbox restored from a snapshot of the
// earlier format, so captures never stack. /tmp (memory), processes and contexts are not
// captured; what programs change while it is read may or may not be. SizeBytes is the size
// of the compressed archive, what the engine keeps.
//
// Errors: fault.Validation for a malformed meta.ID; fault.Capability on an attached profile;
// fault.Gone when the container no longer exists or is not this provider's; fault.Conflict
// when the snapshot exists; fault.Provision when sandboxd or the engine fails, or the
// stream breaks (a file that shrank while it was read: try again).
func (p *Provider) Snapshot(ctx context.Context, id string, meta providers.SnapshotMeta) (providers.SnapshotInfo, error) {
	if !snapshotID.MatchString(meta.ID) {
		return providers.SnapshotInfo{}, fault.New(fault.Validation, "%s: snapshot id %q is not 8 to 64 lower-case hex digits", TypeName, meta.ID)
	}
	ins, err := p.parkable(ctx, id, "snapshots")
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	ref := SnapshotRepository + ":" + meta.ID
	if _, err := p.cli.ImageInspect(ctx, ref); err == nil {
		return providers.SnapshotInfo{}, fault.New(fault.Conflict, "%s: snapshot '%s' exists", TypeName, meta.ID)
	}
	base, err := p.snapshotBase(ctx, ins.Image)
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	spool, err := os.CreateTemp("", "sandgate-snapshot-*")
	if err != nil {
		return providers.SnapshotInfo{}, fault.Wrap(fault.Provision, err, "%s: making a temporary file for the snapshot", TypeName)
	}
	_ = os.Remove(spool.Name()) // unlinked: nothing is left behind whatever happens
	defer spool.Close()
	if err := p.archiveWorkspace(ctx, ins, spool); err != nil {
		if ctx.Err() != nil {
			return providers.SnapshotInfo{}, ctx.Err()
		}
		return providers.SnapshotInfo{}, err
	}
	size, err := spool.Seek(0, io.SeekCurrent)
	if err != nil {
		return providers.SnapshotInfo{}, fault.Wrap(fault.Provision, err, "%s: reading the snapshot's temporary file", TypeName)
	}
	labels := map[string]string{
		LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelSnapshot: meta.ID, LabelSnapshotFormat: SnapshotFormatArchive, LabelProfile: p.profile,
		LabelSession: meta.SessionID, LabelSnapshotBase: base,
	}
	if meta.Owner != "" {
		labels[LabelOwner] = meta.Owner
	}
	if err := p.commitArchive(ctx, base, ref, labels, io.NewSectionReader(spool, 0, size), size); err != nil {
		return providers.SnapshotInfo{}, err
	}
	p.log.Debug("sandbox snapshotted", "sandbox_id", id, "snapshot", ref, "bytes", size)
	return providers.SnapshotInfo{Ref: ref, SizeBytes: size}, nil
}

// archiveWorkspace writes sandbox ins's workspace to w as a gzip-compressed archive: through
// its sandboxd when it runs and answers within readyTimeout, else through the engine's
// archive API.
func (p *Provider) archiveWorkspace(ctx context.Context, ins container.InspectResponse, w io.Writer) error {
	if !ins.State.Running || ins.State.Paused || ins.State.Restarting {
		return p.engineWorkspaceGzip(ctx, ins.ID, w)
	}
	// The client, not open: a sandboxd that does not answer is read around, not restarted.
	octx, cancel := context.WithTimeout(ctx, readyTimeout)
	c, err := p.client(octx, ins, true)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.log.Warn("sandboxd does not answer; reading the workspace for a snapshot through the engine", "sandbox_id", ins.ID, "err", err)
		return p.engineWorkspaceGzip(ctx, ins.ID, w)
	}
	sb := p.handle(ins.ID, c)
	rc, err := sb.Client().ReadArchive(ctx, true)
	if err != nil {
		return sb.Fault(err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, &markedReader{r: rc}); err != nil {
		var me *markedErr
		if errors.As(err, &me) {
			return sb.Fault(fmt.Errorf("reading the workspace archive: %w", me.err))
		}
		return fault.Wrap(fault.Provision, err, "%s: writing the snapshot's temporary file", TypeName)
	}
	return nil
}

// engineWorkspaceGzip is engineWorkspace, gzip-compressed.
func (p *Provider) engineWorkspaceGzip(ctx context.Context, id string, w io.Writer) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err := p.engineWorkspace(ctx, id, zw); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fault.Wrap(fault.Provision, err, "%s: writing the snapshot's temporary file", TypeName)
	}
	return nil
}

// engineWorkspace writes container id's workspace, as the engine's archive API reads it, to
// w as a workspace archive (engineArchive).
func (p *Provider) engineWorkspace(ctx context.Context, id string, w io.Writer) error {
	rc, _, err := p.cli.CopyFromContainer(ctx, id, Workspace)
	if err != nil {
		return p.parkErr(err, id, "reading the workspace of")
	}
	defer rc.Close()
	if err := engineArchive(w, rc, path.Base(Workspace)); err != nil {
		return fault.Wrap(fault.Provision, err, "%s: reading the workspace of sandbox '%s'", TypeName, id)
	}
	return nil
}

// engineArchive copies the engine's archive of a folder (entries named top/…, with owners)
// from src into w as a workspace archive as sandboxd writes one: names relative to the
// folder, folders, regular files, symlinks and hard links only, no owners. Modes and times
// are kept as they are (the extraction decides what it restores).
func engineArchive(w io.Writer, src io.Reader, top string) error {
	tr := tar.NewReader(src)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the engine's archive: %w", err)
		}
		name, ok := underTop(hdr.Name, top)
		if !ok || name == "" {
			continue // the folder itself, or anything else
		}
		out := &tar.Header{Name: name, Mode: hdr.Mode, ModTime: hdr.ModTime, Format: tar.FormatPAX}
		switch hdr.Typeflag {
		case tar.TypeDir:
			out.Typeflag = tar.TypeDir
			out.Name = strings.TrimSuffix(name, "/") + "/"
		case tar.TypeReg, tar.TypeGNUSparse: // archive/tar reads the old TypeRegA as TypeReg
			out.Typeflag, out.Size = tar.TypeReg, hdr.Size
		case tar.TypeSymlink:
			out.Typeflag, out.Linkname = tar.TypeSymlink, hdr.Linkname
		case tar.TypeLink:
			target, ok := underTop(hdr.Linkname, top)
			if !ok || target == "" {
				continue
			}
			out.Typeflag, out.Linkname = tar.TypeLink, target
		default:
			continue // FIFOs, devices: not content
		}
		if err := tw.WriteHeader(out); err != nil {
			return err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// underTop is name relative to folder top ("top/a/b" → "a/b", "top/" → ""); ok is false for
// a name outside it.
func underTop(name, top string) (string, bool) {
	name = strings.TrimPrefix(name, "./")
	if strings.TrimSuffix(name, "/") == top {
		return "", true
	}
	rest, ok := strings.CutPrefix(name, top+"/")
	return rest, ok
}

// commitArchive commits image ref, labelled labels, as image base plus SnapshotArchive
// holding the size bytes of archive: a container of base that never runs (no network)
// receives the file in its own layer, which the commit turns into the image.
func (p *Provider) commitArchive(ctx context.Context, base, ref string, labels map[string]string, archive io.Reader, size int64) error {
	tmp, err := p.cli.ContainerCreate(ctx, &container.Config{Image: base, Labels: labels},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "sandgate-snapshot-"+labels[LabelSnapshot][:8]+"-"+randomHex(3))
	if err != nil {
		return p.engineErr(err, "creating the container that makes snapshot '%s'", ref)
	}
	defer p.remove(tmp.ID)
	if err := p.cli.CopyToContainer(ctx, tmp.ID, "/", oneFileTar(strings.TrimPrefix(SnapshotArchive, "/"), archive, size),
		container.CopyToContainerOptions{}); err != nil {
		return p.engineErr(err, "copying the workspace archive into snapshot '%s'", ref)
	}
	if _, err := p.cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{
		Reference: ref, Comment: "sandgate snapshot " + labels[LabelSnapshot] + " of session " + labels[LabelSession],
	}); err != nil {
		return p.engineErr(err, "committing snapshot '%s'", ref)
	}
	return nil
}

// oneFileTar is a tar stream of one regular file, name (mode 0600), holding the size bytes
// of r.
func oneFileTar(name string, r io.Reader, size int64) io.Reader {
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	// The header alone: tar.Writer writes it at once; the content and the end follow as is.
	_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: time.Now().Truncate(time.Second), Typeflag: tar.TypeReg})
	pad := (512 - size%512) % 512
	return io.MultiReader(&hdr, io.LimitReader(r, size), bytes.NewReader(make([]byte, pad+2*512)))
}

// snapshotBase is the image a snapshot of a container of image img is a layer on: img, or,
// when img is itself a snapshot (of the earlier format), the image that one was made on.
func (p *Provider) snapshotBase(ctx context.Context, img string) (string, error) {
	ii, err := p.cli.ImageInspect(ctx, img)
	if err != nil {
		return "", p.engineErr(err, "inspecting image '%s'", img)
	}
	if ii.Config != nil {
		if b := ii.Config.Labels[LabelSnapshotBase]; b != "" && ii.Config.Labels[LabelSnapshot] != "" {
			return b, nil
		}
	}
	return ii.ID, nil
}

// Restore creates a sandbox for pr under pol as Create does and has its sandboxd replace
// the workspace with snapshot ref's archive (or, for a snapshot of the earlier format, the
// workspace its image holds), within pol.DiskMB when set: the bytes written, holes and runs
// of zeros not counted. A sandbox whose restore fails is destroyed again.
//
// Errors: fault.NotFound when ref is not a snapshot image of Sandgate on the engine;
// fault.Capability for attached profiles; Create's errors; fault.TooLarge when the
// snapshot's files do not fit disk_mb; fault.Provision when the extraction fails otherwise.
func (p *Provider) Restore(ctx context.Context, ref string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := p.refuseIfClosed(); err != nil {
		return nil, err
	}
	if p.attachTo != "" {
		return nil, fault.Unsupported(TypeName, "snapshots")
	}
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	ii, err := p.snapshotImage(ctx, ref)
	if err != nil {
		return nil, err
	}
	archived := ii.Config.Labels[LabelSnapshotFormat] == SnapshotFormatArchive
	src, err := p.readSnapshot(ctx, ref, archived)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	created, err := p.Create(ctx, pr, pol)
	if err != nil {
		return nil, err
	}
	sb, ok := created.(*Sandbox)
	if !ok { // Create hands out *Sandbox only
		_ = p.Destroy(context.WithoutCancel(ctx), created.ID())
		return nil, fault.New(fault.Internal, "%s: restore got a sandbox of type %T", TypeName, created)
	}
	maxBytes := int64(-1)
	if pol.DiskMB > 0 {
		maxBytes = int64(pol.DiskMB) << 20
	}
	st, err := sb.Client().ReplaceWorkspace(ctx, src, archived, maxBytes)
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := p.Destroy(dctx, sb.ID()); derr != nil {
			p.log.Warn("removing a sandbox whose restore failed", "sandbox_id", sb.ID(), "err", derr)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if fault.KindOf(err) == fault.TooLarge {
			return nil, fault.Wrap(fault.TooLarge, err, "%s: snapshot '%s' does not fit the profile's disk_mb", TypeName, ref)
		}
		return nil, fault.Wrap(fault.Provision, err, "%s: restoring snapshot '%s'", TypeName, ref)
	}
	p.log.Debug("sandbox restored", "sandbox_id", sb.ID(), "snapshot", ref, "entries", st.Entries, "bytes", st.Bytes, "written", st.DataBytes)
	return sb, nil
}

// readSnapshot streams snapshot image ref's workspace: the archive file (gzip-compressed)
// when archived, else the earlier format's workspace layer as a workspace archive (plain
// tar). It reads from a container of the image that never runs; Close removes it.
func (p *Provider) readSnapshot(ctx context.Context, ref string, archived bool) (io.ReadCloser, error) {
	labels := map[string]string{LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelProfile: p.profile}
	tmp, err := p.cli.ContainerCreate(ctx, &container.Config{Image: ref, Labels: labels},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "sandgate-restore-"+randomHex(5))
	if err != nil {
		return nil, p.engineErr(err, "creating a container of snapshot image '%s'", ref)
	}
	from := Workspace
	if archived {
		from = SnapshotArchive
	}
	rc, _, err := p.cli.CopyFromContainer(ctx, tmp.ID, from)
	if err != nil {
		p.remove(tmp.ID)
		if cerrdefs.IsNotFound(err) {
			return nil, fault.New(fault.NotFound, "%s: snapshot image '%s' holds no %s", TypeName, ref, from)
		}
		return nil, p.engineErr(err, "reading snapshot image '%s'", ref)
	}
	s := &snapshotStream{closeFunc: func() { _ = rc.Close(); p.remove(tmp.ID) }}
	if archived {
		tr := tar.NewReader(rc)
		hdr, err := tr.Next()
		if err != nil || hdr.Typeflag != tar.TypeReg {
			s.Close()
			return nil, fault.New(fault.Provision, "%s: snapshot image '%s' does not hold its archive as a file", TypeName, ref)
		}
		s.Reader = tr
		return s, nil
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pw.CloseWithError(engineArchive(pw, rc, path.Base(Workspace)))
	}()
	s.Reader = pr
	s.closeFunc = func() { _ = pr.Close(); _ = rc.Close(); <-done; p.remove(tmp.ID) }
	return s, nil
}

// snapshotStream is a snapshot's content being read; Close releases what reading it holds.
type snapshotStream struct {
	io.Reader
	closeFunc func()
}

func (s *snapshotStream) Close() error {
	s.closeFunc()
	return nil
}

// snapshotImage inspects ref and checks it is a snapshot image this installation made, or one
// made before installation ids (fault.NotFound otherwise).
func (p *Provider) snapshotImage(ctx context.Context, ref string) (image.InspectResponse, error) {
	ii, err := p.cli.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return ii, fault.New(fault.NotFound, "%s: snapshot image '%s' no longer exists", TypeName, ref)
	case err != nil:
		return ii, p.engineErr(err, "inspecting snapshot image '%s'", ref)
	case ii.Config == nil || ii.Config.Labels[LabelManagedBy] != ManagedBy || ii.Config.Labels[LabelSnapshot] == "":
		return ii, fault.New(fault.NotFound, "%s: image '%s' is not a snapshot of Sandgate", TypeName, ref)
	case !p.mine(ii.Config.Labels):
		return ii, fault.New(fault.NotFound, "%s: snapshot image '%s' belongs to another Sandgate installation (%s)", TypeName, ref, ii.Config.Labels[LabelInstallation])
	}
	return ii, nil
}

// DeleteSnapshot removes snapshot image ref. A snapshot of the earlier format that a sandbox
// restored from it (by an earlier gateway) still uses loses its name at once and its layers
// with that sandbox (Destroy removes such an unnamed snapshot image with its last
// container). Unknown refs, images that are not Sandgate snapshots and another installation's
// are left alone (nil).
func (p *Provider) DeleteSnapshot(ctx context.Context, ref string) error {
	defer p.releaseIfClosed()
	if err := p.connect(ctx); err != nil {
		return err
	}
	if _, err := p.snapshotImage(ctx, ref); err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil
		}
		return err
	}
	if _, err := p.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		if !cerrdefs.IsConflict(err) {
			return p.engineErr(err, "removing snapshot image '%s'", ref)
		}
		// Used by a container: the name goes now, the layers with it.
		if _, err := p.cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return p.engineErr(err, "removing snapshot image '%s'", ref)
		}
	}
	p.log.Debug("snapshot deleted", "snapshot", ref)
	return nil
}

// dropUnnamedSnapshot removes image img after its container was destroyed when it is a
// Sandgate snapshot image whose name was deleted (DeleteSnapshot while a sandbox restored
// from a snapshot of the earlier format used it); best effort: an image another container
// still uses stays.
func (p *Provider) dropUnnamedSnapshot(ctx context.Context, img string) {
	ii, err := p.cli.ImageInspect(ctx, img)
	if err != nil || ii.Config == nil || ii.Config.Labels[LabelManagedBy] != ManagedBy || ii.Config.Labels[LabelSnapshot] == "" ||
		!p.mine(ii.Config.Labels) || len(ii.RepoTags) > 0 {
		return
	}
	if _, err := p.cli.ImageRemove(ctx, ii.ID, image.RemoveOptions{PruneChildren: true}); err == nil {
		p.log.Debug("removed a deleted snapshot's image with its last sandbox", "image", ii.ID)
	}
}

// markedReader marks its reader's errors but io.EOF, so that io.Copy's error tells a broken
// source from a failing destination.
type markedReader struct{ r io.Reader }

type markedErr struct{ err error }

func (e *markedErr) Error() string { return e.err.Error() }

func (m *markedReader) Read(b []byte) (int, error) {
	n, err := m.r.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &markedErr{err}
	}
	return n, err
}
