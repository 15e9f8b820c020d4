package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/loopdisk"
	"github.com/sandgate/sandgate/internal/providers"
)

// Size-bounded workspaces (policy disk_mb). Two ways, the engine's first where it has one:
//
//   - storage-opt: where the engine's storage driver bounds a container's writable layer —
//     overlay2 on xfs mounted with pquota, btrfs, zfs (the engine's Info says which driver
//     and backing file system; only creating a container tells whether xfs has pquota) — the
//     container gets StorageOpt size = disk_mb and its /workspace stays in that layer, so the
//     bound covers everything the sandbox writes outside its tmpfs mounts. Only for sandboxes
//     whose root is writable (no fs_allow_*: otherwise /workspace is a volume, which the
//     layer's bound does not reach). NOT TESTED here: the test machine's engine is overlay2
//     on ext4, which has no such option; xfs returns ENOSPC at the project quota, btrfs and
//     zfs report "Disk quota exceeded" (EDQUOT) instead.
//   - loop (tested): a sparse image of disk_mb MiB under docker.state_dir/disks/<installation>
//     (disks of containers made before installation ids: docker.state_dir/disks), formatted
//     ext4 and attached to a loop device by the gateway (internal/loopdisk), mounted at
//     /workspace as a volume of the local driver (type ext4, device = the disk's link, which
//     follows the loop device). The container's label sandgate.disk names the disk. It needs
//     the gateway to run as root on the engine's host (a local engine, the state folder at the
//     same path on both), loop devices and mkfs.ext4, and a numeric sandbox user (the
//     workspace's owner until the engine copies the image's folder in). The disk survives
//     container restarts (the loop device stays attached; Attach re-attaches it after a
//     reboot before starting the container) and is removed with the container, or by
//     SweepOrphans when no container of the installation names it (only the installation's
//     own folder is swept). The ext4 metadata takes a few percent of disk_mb.
//
// Where neither can be done — an attached profile, a remote engine, a gateway not root, no
// loop devices or mkfs.ext4 — the capability policy_disk is false and the domain refuses a
// strict profile with disk_mb (docs/semantics.md §9 step 4).

// LabelDisk on a container names its workspace disk: <state_dir>/disks/<installation>/<name>.img
// (<state_dir>/disks/<name>.img for a container without an installation label), reached
// through the link <name>.dev beside it.
const LabelDisk = "sandgate.disk"

// DefaultStateDir is Config.StateDir's default.
const DefaultStateDir = "/var/lib/sandgate/docker"

// diskName is what LabelDisk may name (20 hex digits).
var diskName = regexp.MustCompile(`^[0-9a-f]{20}$`)

// disks is a provider's way of bounding workspaces.
type disks struct {
	root    string         // <state_dir>/disks
	dir     string         // <state_dir>/disks/<installation>: this installation's disks
	owner   loopdisk.Owner // of a new file system's root folder
	loopErr error          // why loop disks cannot be made here (nil: they can)

	mu         sync.Mutex
	storageOpt *bool // whether the engine bounds a container's size (nil: not asked yet)
}

// newDisks decides whether this gateway can make loop disks for containers of an engine at
// host, run as user (uid or uid:gid), for installation.
func newDisks(stateDir, installation, host, user string, attached bool) *disks {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	root := filepath.Join(stateDir, "disks")
	d := &disks{root: root, dir: filepath.Join(root, installation)}
	var err error
	switch {
	case attached:
		err = errors.New("an attached container's workspace is its own configuration's")
	case !strings.HasPrefix(host, "unix://"):
		err = fmt.Errorf("the engine at %s is not on this host, so its loop devices are not the gateway's", host)
	default:
		if d.owner, err = numericOwner(user); err == nil {
			err = loopdisk.Available()
		}
	}
	d.loopErr = err
	return d
}

// numericOwner parses "uid" or "uid:gid" (gid defaults to uid).
func numericOwner(user string) (loopdisk.Owner, error) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return loopdisk.Owner{}, fmt.Errorf("the sandbox user %q is not numeric (uid or uid:gid), so the workspace's owner is unknown", user)
	}
	gid := uid
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return loopdisk.Owner{}, fmt.Errorf("the sandbox user %q has a group that is not numeric", user)
		}
	}
	return loopdisk.Owner{UID: uid, GID: gid}, nil
}

// paths are the image and link of this installation's disk name.
func (d *disks) paths(name string) (image, link string) {
	return filepath.Join(d.dir, name+".img"), filepath.Join(d.dir, name+".dev")
}

// pathsOf are the image and link of the disk a container's labels name (ok false: none, or a
// malformed label); in its installation's folder, or the root for a container without one.
func (d *disks) pathsOf(labels map[string]string) (image, link string, ok bool) {
	name := labels[LabelDisk]
	if !diskName.MatchString(name) {
		return "", "", false
	}
	dir := d.root
	switch inst := labels[LabelInstallation]; {
	case providers.ValidInstallationID(inst):
		dir = filepath.Join(d.root, inst)
	case inst != "":
		return "", "", false
	}
	return filepath.Join(dir, name+".img"), filepath.Join(dir, name+".dev"), true
}

// storageOptCandidate reports whether the engine's storage driver may bound a container's
// writable layer (asked once; a refusal at creation turns it off).
func (p *Provider) storageOptCandidate(ctx context.Context) bool {
	d := p.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.storageOpt != nil {
		return *d.storageOpt
	}
	info, err := p.cli.Info(ctx)
	if err != nil {
		return false // asked again next time
	}
	ok := false
	switch info.Driver {
	case "btrfs", "zfs":
		ok = true
	case "overlay2":
		for _, kv := range info.DriverStatus {
			if kv[0] == "Backing Filesystem" && kv[1] == "xfs" {
				ok = true // if it is mounted with pquota: the creation tells
			}
		}
	}
	d.storageOpt = &ok
	return ok
}

// noStorageOpt records that the engine refused a storage-opt size.
func (p *Provider) noStorageOpt() {
	p.disk.mu.Lock()
	defer p.disk.mu.Unlock()
	no := false
	p.disk.storageOpt = &no
}

// storageOptRefused reports whether err is the engine refusing a storage-opt size.
func storageOptRefused(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "storage-opt") || strings.Contains(msg, "storage opt") || strings.Contains(msg, "storageopt")
}

// boundWorkspace bounds the workspace of a container about to be created from cfg and hc to
// mb MiB: with storage-opt (try = true, the caller retries without it if the engine refuses)
// or with a new loop disk mounted at /workspace and named by cfg's LabelDisk. It returns
// the disk's name ("" for storage-opt).
func (p *Provider) boundWorkspace(ctx context.Context, mb int, cfg *container.Config, hc *container.HostConfig, tryStorageOpt bool) (string, error) {
	if tryStorageOpt && !hc.ReadonlyRootfs && p.storageOptCandidate(ctx) {
		hc.StorageOpt = map[string]string{"size": strconv.Itoa(mb) + "M"}
		return "", nil
	}
	hc.StorageOpt = nil
	if p.disk.loopErr != nil {
		return "", fault.New(fault.Policy, "%s: profile '%s' bounds the workspace (disk_mb) but this gateway cannot: %v", TypeName, p.profile, p.disk.loopErr)
	}
	if err := os.MkdirAll(p.disk.dir, 0o700); err != nil {
		return "", fault.Wrap(fault.Provision, err, "%s: making the workspace disk folder", TypeName)
	}
	name := randomHex(10)
	image, link := p.disk.paths(name)
	if _, err := loopdisk.Create(ctx, image, link, mb, p.disk.owner); err != nil {
		return "", fault.Wrap(fault.Provision, err, "%s: making a workspace disk of %d MiB", TypeName, mb)
	}
	ws := mount.Mount{Type: mount.TypeVolume, Target: Workspace, VolumeOptions: &mount.VolumeOptions{
		DriverConfig: &mount.Driver{Name: "local", Options: map[string]string{"type": "ext4", "device": link}},
	}}
	hc.Mounts = withoutWorkspace(hc.Mounts)
	hc.Mounts = append(hc.Mounts, ws)
	cfg.Labels[LabelDisk] = name
	return name, nil
}

// withoutWorkspace is ms without a mount at /workspace (the read-only root's volume).
func withoutWorkspace(ms []mount.Mount) []mount.Mount {
	out := ms[:0]
	for _, m := range ms {
		if m.Target != Workspace {
			out = append(out, m)
		}
	}
	return out
}

// removeDisk removes the disk a removed container's labels name (best effort, logged).
func (p *Provider) removeDisk(labels map[string]string) {
	image, link, ok := p.disk.pathsOf(labels)
	if !ok {
		return
	}
	if err := loopdisk.Remove(image, link); err != nil {
		p.log.Warn("removing a workspace disk failed; the orphan sweep retries", "disk", labels[LabelDisk], "err", err)
	}
}

// ensureDisk re-attaches the disk of a stopped container before it starts (the loop device
// is gone after a reboot). Errors: fault.Gone when the disk's image is gone (the sandbox
// cannot come back); fault.Provision when it cannot be attached.
func (p *Provider) ensureDisk(labels map[string]string) error {
	image, link, ok := p.disk.pathsOf(labels)
	if !ok {
		return nil
	}
	if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
		return fault.New(fault.Gone, "%s: the sandbox's workspace disk no longer exists", TypeName)
	}
	if _, err := loopdisk.Attach(image, link); err != nil {
		return fault.Wrap(fault.Provision, err, "%s: attaching the sandbox's workspace disk", TypeName)
	}
	return nil
}

// sweepDisks removes this installation's disks no container names (a gateway that died
// between making a disk and its container, or a removal that failed), once older than
// OrphanMinAge. Every container of the installation counts, of any profile: the folder is
// shared by its profiles. Other installations' folders, and the disks of containers made
// before installation ids (in the root folder), are never swept.
func (p *Provider) sweepDisks(ctx context.Context) error {
	entries, err := os.ReadDir(p.disk.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	list, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManagedBy+"="+ManagedBy),
		filters.Arg("label", LabelInstallation+"="+p.installation),
		filters.Arg("label", LabelDisk),
	)})
	if err != nil {
		return p.engineErr(err, "listing containers with workspace disks")
	}
	live := map[string]bool{}
	for _, c := range list {
		live[c.Labels[LabelDisk]] = true
	}
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok || !diskName.MatchString(name) || live[name] {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < p.orphanMinAge() {
			continue // young: its container may be being created
		}
		image, link := p.disk.paths(name)
		if err := loopdisk.Remove(image, link); err != nil {
			errs = append(errs, fmt.Errorf("removing orphaned workspace disk %s: %w", name, err))
			continue
		}
		p.log.Info("removed an orphaned workspace disk", "disk", name)
	}
	return errors.Join(errs...)
}
