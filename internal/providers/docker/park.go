package docker

import (
	"context"
	"io"
	"regexp"
	"sync/atomic"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Pause, resume and snapshots of managed sandbox containers (providers.Pauser,
// providers.Snapshotter).

// Labels of snapshot images (and of the containers restored from them, which inherit them).
const (
	LabelSnapshot     = "sandgate.snapshot"      // the snapshot's id
	LabelSession      = "sandgate.session"       // the session whose sandbox was captured
	LabelSnapshotBase = "sandgate.snapshot-base" // the image the capture is a layer on
	// SnapshotRepository names snapshot images: SnapshotRepository:<snapshot id>.
	SnapshotRepository = "sandgate/snapshot"
)

var (
	_ providers.Pauser      = (*Provider)(nil)
	_ providers.Snapshotter = (*Provider)(nil)
)

// snapshotID is the form of a snapshot id (the domain's ids: 32 lower-case hex digits).
var snapshotID = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// Pause freezes sandbox id with the cgroup freezer (the engine's pause): its processes keep
// their memory, files and connections and get no CPU until Resume; sandboxd is frozen with
// them, so nothing else may be asked of the sandbox meanwhile (the domain sees to that). A
// paused sandbox stays paused.
//
// Errors: fault.Gone when the container no longer exists or is not this provider's;
// fault.Capability for an attached profile's target (someone else's container);
// fault.Conflict when the container is not running; fault.Provision when the engine fails.
func (p *Provider) Pause(ctx context.Context, id string) error {
	ins, err := p.parkable(ctx, id, "pause")
	if err != nil {
		return err
	}
	st := ins.State
	switch {
	case st.Paused:
		return nil
	case !st.Running || st.Restarting:
		return fault.New(fault.Conflict, "%s: sandbox '%s' is not running (%s); only a running sandbox can be paused", TypeName, id, st.Status)
	}
	if err := p.cli.ContainerPause(ctx, id); err != nil {
		return p.parkErr(err, id, "pausing")
	}
	p.log.Debug("sandbox paused", "sandbox_id", id)
	return nil
}

// Resume thaws sandbox id (the engine's unpause); a running one is left as it is.
//
// Errors: as Pause's.
func (p *Provider) Resume(ctx context.Context, id string) error {
	ins, err := p.parkable(ctx, id, "pause")
	if err != nil {
		return err
	}
	if !ins.State.Paused {
		return nil
	}
	if err := p.cli.ContainerUnpause(ctx, id); err != nil {
		return p.parkErr(err, id, "resuming")
	}
	p.log.Debug("sandbox resumed", "sandbox_id", id)
	return nil
}

// parkable inspects sandbox id for pause, resume or a snapshot (capability names the
// operation): a container this provider made, with a state.
func (p *Provider) parkable(ctx context.Context, id, capability string) (container.InspectResponse, error) {
	if p.attachTo != "" {
		return container.InspectResponse{}, fault.Unsupported(TypeName, capability)
	}
	if err := p.connect(ctx); err != nil {
		return container.InspectResponse{}, err
	}
	ins, err := p.inspectSandbox(ctx, id)
	if err != nil {
		return ins, err
	}
	if ins.State == nil {
		return ins, fault.New(fault.Provision, "%s: container '%s' has no state", TypeName, id)
	}
	if ins.State.Dead || ins.State.Status == container.StateRemoving {
		return ins, fault.New(fault.Gone, "%s: sandbox '%s' is being removed", TypeName, id)
	}
	return ins, nil
}

func (p *Provider) parkErr(err error, id, doing string) error {
	if cerrdefs.IsNotFound(err) {
		return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
	}
	if cerrdefs.IsConflict(err) {
		return fault.Wrap(fault.Conflict, err, "%s: %s sandbox '%s'", TypeName, doing, id)
	}
	return p.engineErr(err, "%s sandbox '%s'", doing, id)
}

// Snapshot captures sandbox id's workspace into a local image, SnapshotRepository:<meta.ID>:
// one layer holding /workspace (as the archive API reads it, owners and modes kept) on the
// image the sandbox was made from — the profile's image, also for a sandbox that was itself
// restored from a snapshot, so snapshots never stack. The rest of the container's file
// system is its image's (the root is read-only); /tmp (memory), processes and contexts are
// not captured. The image is labelled managed-by, LabelInstallation, LabelSnapshot,
// LabelProfile, LabelOwner (meta.Owner), LabelSession and LabelSnapshotBase. A paused or running sandbox stays as it
// was. SizeBytes is the size of the workspace archive.
//
// Errors: fault.Validation for a malformed meta.ID; Pause's errors but Conflict (a stopped
// container can be captured); fault.Provision when the engine fails.
func (p *Provider) Snapshot(ctx context.Context, id string, meta providers.SnapshotMeta) (providers.SnapshotInfo, error) {
	if !snapshotID.MatchString(meta.ID) {
		return providers.SnapshotInfo{}, fault.New(fault.Validation, "%s: snapshot id %q is not 8 to 64 lower-case hex digits", TypeName, meta.ID)
	}
	ins, err := p.parkable(ctx, id, "snapshots")
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	base, err := p.snapshotBase(ctx, ins.Image)
	if err != nil {
		return providers.SnapshotInfo{}, err
	}
	labels := map[string]string{
		LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelSnapshot: meta.ID, LabelProfile: p.profile,
		LabelSession: meta.SessionID, LabelSnapshotBase: base,
	}
	if meta.Owner != "" {
		labels[LabelOwner] = meta.Owner
	}
	// A container of the base image that never runs receives the workspace in its own file
	// system layer (no volume at /workspace there), which the commit turns into the image.
	tmp, err := p.cli.ContainerCreate(ctx, &container.Config{Image: base, Labels: labels, WorkingDir: Workspace},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "sandgate-snapshot-"+meta.ID[:12]+"-"+randomHex(3))
	if err != nil {
		return providers.SnapshotInfo{}, p.engineErr(err, "creating the snapshot container of sandbox '%s'", id)
	}
	defer p.remove(tmp.ID)
	rc, _, err := p.cli.CopyFromContainer(ctx, id, Workspace)
	if err != nil {
		return providers.SnapshotInfo{}, p.parkErr(err, id, "reading the workspace of")
	}
	defer rc.Close()
	counted := &countingReader{r: rc}
	// The archive's entries are workspace/…, with the owners and modes of the sandbox's files.
	if err := p.cli.CopyToContainer(ctx, tmp.ID, "/", counted, container.CopyToContainerOptions{}); err != nil {
		return providers.SnapshotInfo{}, p.engineErr(err, "copying the workspace of sandbox '%s' into its snapshot", id)
	}
	ref := SnapshotRepository + ":" + meta.ID
	if _, err := p.cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{
		Reference: ref, Comment: "sandgate snapshot " + meta.ID + " of session " + meta.SessionID,
	}); err != nil {
		return providers.SnapshotInfo{}, p.engineErr(err, "committing the snapshot of sandbox '%s'", id)
	}
	p.log.Debug("sandbox snapshotted", "sandbox_id", id, "snapshot", ref, "bytes", counted.n.Load())
	return providers.SnapshotInfo{Ref: ref, SizeBytes: counted.n.Load()}, nil
}

// snapshotBase is the image a snapshot of a container of image img is a layer on: img, or,
// when img is itself a snapshot, the image that one was made on.
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

// Restore starts a new sandbox container from snapshot image ref, configured as Create
// configures one for pol (never from the warm pool): its workspace volume starts with the
// captured files (the engine copies an image's content into a new volume).
//
// Errors: fault.NotFound when ref is not a snapshot image of this installation (or of a
// Sandgate before installation ids) on the engine;
// fault.Capability for attached profiles; Create's others.
func (p *Provider) Restore(ctx context.Context, ref string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := p.refuseIfClosed(); err != nil {
		return nil, err
	}
	if p.attachTo != "" {
		return nil, fault.Unsupported(TypeName, "snapshots")
	}
	if pol.NetworkEgress == providers.EgressAllowlist && pol.Strict {
		return nil, fault.New(fault.Policy, "provider '%s' cannot enforce network_egress allowlist (profile '%s', strict): a container's egress is all or nothing; use deny or allow, or set strict: false", TypeName, p.profile)
	}
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	if err := p.snapshotImage(ctx, ref); err != nil {
		return nil, err
	}
	if err := p.checkRuntime(ctx); err != nil {
		return nil, err
	}
	spec := p.spec(pol)
	spec.cfg.Image = ref
	labels := map[string]string{}
	if pr.Subject != "" {
		labels[LabelOwner] = pr.Subject
	}
	id, err := p.createContainer(ctx, spec, "sandgate-"+p.slug+"-"+randomHex(5), labels)
	if err != nil {
		return nil, err
	}
	sb, err := p.openID(ctx, id)
	if err != nil {
		p.remove(id)
		return nil, fault.Wrap(fault.Provision, err, "%s: the sandbox restored from '%s' did not come up", TypeName, ref)
	}
	p.log.Debug("sandbox restored", "sandbox_id", id, "snapshot", ref)
	return sb, nil
}

// snapshotImage checks that ref is a snapshot image this installation made, or one made before
// installation ids (fault.NotFound otherwise).
func (p *Provider) snapshotImage(ctx context.Context, ref string) error {
	ii, err := p.cli.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return fault.New(fault.NotFound, "%s: snapshot image '%s' no longer exists", TypeName, ref)
	case err != nil:
		return p.engineErr(err, "inspecting snapshot image '%s'", ref)
	case ii.Config == nil || ii.Config.Labels[LabelManagedBy] != ManagedBy || ii.Config.Labels[LabelSnapshot] == "":
		return fault.New(fault.NotFound, "%s: image '%s' is not a snapshot of Sandgate", TypeName, ref)
	case !p.mine(ii.Config.Labels):
		return fault.New(fault.NotFound, "%s: snapshot image '%s' belongs to another Sandgate installation (%s)", TypeName, ref, ii.Config.Labels[LabelInstallation])
	}
	return nil
}

// DeleteSnapshot removes snapshot image ref: its name goes at once; its layers go once no
// container restored from it remains (Destroy removes such an unnamed snapshot image with
// its last container). Unknown refs, images that are not Sandgate snapshots and another
// installation's are left alone (nil).
func (p *Provider) DeleteSnapshot(ctx context.Context, ref string) error {
	defer p.releaseIfClosed()
	if err := p.connect(ctx); err != nil {
		return err
	}
	if err := p.snapshotImage(ctx, ref); err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return nil
		}
		return err
	}
	if _, err := p.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		if !cerrdefs.IsConflict(err) {
			return p.engineErr(err, "removing snapshot image '%s'", ref)
		}
		// Used by a sandbox restored from it: the name goes now, the layers with it.
		if _, err := p.cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return p.engineErr(err, "removing snapshot image '%s'", ref)
		}
	}
	p.log.Debug("snapshot deleted", "snapshot", ref)
	return nil
}

// dropUnnamedSnapshot removes image img after its container was destroyed when it is a
// Sandgate snapshot image whose name was deleted (DeleteSnapshot while a restored sandbox used
// it); best effort: an image another container still uses stays.
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

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
