package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// containerSpec is everything a sandbox container is created from, and its hash.
type containerSpec struct {
	cfg    container.Config
	hc     container.HostConfig
	diskMB int // policy disk_mb: the workspace's bound (disk.go), made per container
	hash   string
}

// OOMScoreAdj is the oom_score_adj of every sandbox container's processes: when the host runs
// out of memory, the kernel ends sandboxed programs before the gateway, the engine or anything
// else on the host (1000 is the most; raising it needs no privilege).
const OOMScoreAdj = 1000

// spec maps the profile's block and pol onto a container configuration (docs/semantics.md §12):
// sandboxd (see agent.sandboxdSpec) under docker's init (which reaps zombies) with workdir
// /workspace;
// no-new-privileges, every capability dropped and a pids limit always; egress deny → no
// network; cpu → NanoCPUs; memory → Memory and MemorySwap equal (no swap); fs_allow_* →
// read-only root file system with a volume at /workspace and a tmpfs at /tmp.
func (p *Provider) spec(pol providers.Policy) containerSpec {
	init := true
	pids := p.cfg.PidsLimit
	oom := OOMScoreAdj
	s := containerSpec{
		cfg: container.Config{
			Image:      p.cfg.Image,
			WorkingDir: Workspace,
			User:       p.cfg.User,
			Hostname:   "sandbox",
			Env:        []string{"LANG=C.UTF-8"},
		},
		hc: container.HostConfig{
			Init:        &init,
			SecurityOpt: []string{"no-new-privileges"},
			CapDrop:     []string{"ALL"},
			Resources:   container.Resources{PidsLimit: &pids},
			OomScoreAdj: oom,
		},
	}
	if rt := p.cfg.Runtime; rt != "" && rt != "docker" {
		s.hc.Runtime = rt
	}
	if pol.NetworkEgress == providers.EgressDeny {
		s.hc.NetworkMode = "none"
	}
	if p.proxied(pol) {
		egressSpec(&s, pol)
	}
	if pol.CPU > 0 {
		s.hc.NanoCPUs = int64(pol.CPU * 1e9)
	}
	if pol.MemoryMB > 0 {
		s.hc.Memory = int64(pol.MemoryMB) << 20
		s.hc.MemorySwap = s.hc.Memory
	}
	if len(pol.FSAllowRead) > 0 || len(pol.FSAllowWrite) > 0 {
		s.hc.ReadonlyRootfs = true
		// A volume rather than a tmpfs: the archive API (file uploads and downloads) does not
		// see into a tmpfs, and a read-only root file system refuses it everywhere else.
		s.hc.Mounts = []mount.Mount{{Type: mount.TypeVolume, Target: Workspace}}
		s.hc.Tmpfs = map[string]string{"/tmp": tmpfsOptions(pol)}
	}
	p.sd.sandboxdSpec(&s, tmpfsOptions(pol))
	s.diskMB = pol.DiskMB
	raw, _ := json.Marshal(struct {
		C container.Config
		H container.HostConfig
		D int `json:",omitempty"`
	}{s.cfg, s.hc, s.diskMB})
	sum := sha256.Sum256(raw)
	s.hash = hex.EncodeToString(sum[:8])
	return s
}

// createContainer creates and starts a container of spec named name, with the provider's
// labels (managed-by, installation, profile, spec) plus extra; a missing image is pulled
// first unless the pull policy is never. Its volumes are labelled managed-by, installation
// and profile too (labelVolumes).
func (p *Provider) createContainer(ctx context.Context, s containerSpec, name string, extra map[string]string) (string, error) {
	cfg := s.cfg
	cfg.Labels = map[string]string{LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelProfile: p.profile, LabelSpec: s.hash}
	maps.Copy(cfg.Labels, extra)
	cfg.Env = slices.Clone(cfg.Env)
	hc := s.hc
	hc.Mounts = slices.Clone(hc.Mounts)
	// Whether the image ships sandboxd decides the entrypoint: pull a missing image first
	// (the profile's; a snapshot's image is never pulled).
	if _, err := p.imageSandboxd(ctx, cfg.Image); err != nil {
		if !cerrdefs.IsNotFound(err) {
			return "", p.engineErr(err, "inspecting image '%s'", cfg.Image)
		}
		if cfg.Image != p.cfg.Image {
			return "", fault.New(fault.NotFound, "%s: image '%s' is not on the Docker engine", TypeName, cfg.Image)
		}
		if perr := p.pull(ctx); perr != nil {
			return "", perr
		}
	}
	copyBin, folder, err := p.prepareSandboxd(ctx, &cfg, &hc)
	if err != nil {
		return "", err
	}
	if folder != "" && cfg.Labels[LabelEgress] != "" {
		if err := p.writeEgressCA(folder); err != nil {
			_ = os.RemoveAll(folder)
			return "", err
		}
	}
	fail := func(id string) {
		if id != "" {
			p.remove(id)
		}
		if folder != "" {
			_ = os.RemoveAll(folder)
		}
		p.removeDisk(cfg.Labels)
	}
	if s.diskMB > 0 {
		if _, err := p.boundWorkspace(ctx, s.diskMB, &cfg, &hc, true); err != nil {
			fail("")
			return "", err
		}
	}
	create := func() (container.CreateResponse, error) {
		p.labelVolumes(hc.Mounts) // the workspace disk's volume included
		return p.cli.ContainerCreate(ctx, &cfg, &hc, nil, nil, name)
	}
	resp, err := create()
	if err != nil && cerrdefs.IsNotFound(err) && cfg.Image == p.cfg.Image {
		if perr := p.pull(ctx); perr != nil {
			fail("")
			return "", perr
		}
		resp, err = create()
	}
	if err != nil && hc.StorageOpt != nil && storageOptRefused(err) {
		// Overlay on xfs without pquota (say): the engine cannot bound the container.
		p.log.Info("the Docker engine cannot bound a container's size (storage-opt); bounding workspaces with loop disks instead", "err", err)
		p.noStorageOpt()
		if _, berr := p.boundWorkspace(ctx, s.diskMB, &cfg, &hc, false); berr != nil {
			fail("")
			return "", berr
		}
		resp, err = create()
	}
	if err != nil {
		fail("")
		return "", p.engineErr(err, "creating a sandbox container from image '%s'", cfg.Image)
	}
	if copyBin != "" {
		if err := p.copySandboxd(ctx, resp.ID, copyBin); err != nil {
			fail(resp.ID)
			return "", err
		}
	}
	if p.sd.transport == TransportExec {
		if err := p.deliverToken(ctx, resp.ID, cfg.User, cfg.Labels[LabelSandboxdToken]); err != nil {
			fail(resp.ID)
			return "", err
		}
	}
	if err := p.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		fail(resp.ID)
		return "", p.engineErr(err, "starting a sandbox container from image '%s'", cfg.Image)
	}
	return resp.ID, nil
}

// labelVolumes labels the volumes of ms (anonymous ones: the engine creates them with the
// container, with these labels, and removes them with it) with managed-by, installation and
// profile, so that one left behind names its installation. It changes ms in place (the
// caller's copy), giving each volume mount options of its own.
func (p *Provider) labelVolumes(ms []mount.Mount) {
	for i := range ms {
		if ms[i].Type != mount.TypeVolume {
			continue
		}
		var vo mount.VolumeOptions
		if ms[i].VolumeOptions != nil {
			vo = *ms[i].VolumeOptions
		}
		vo.Labels = map[string]string{LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelProfile: p.profile}
		ms[i].VolumeOptions = &vo
	}
}

// pull fetches the profile's image (pull policy missing).
func (p *Provider) pull(ctx context.Context) error {
	if p.cfg.NeverPull {
		return fault.New(fault.Provision, "%s: image '%s' is not on the Docker engine and docker.pull is never; pull or build it first (the default sandbox image: images/sandbox/build.sh)", TypeName, p.cfg.Image)
	}
	p.log.Info("pulling the sandbox image", "image", p.cfg.Image)
	rc, err := p.cli.ImagePull(ctx, p.cfg.Image, image.PullOptions{})
	if err == nil {
		err = jsonmessage.DisplayJSONMessagesStream(rc, io.Discard, 0, false, nil)
		_ = rc.Close()
	}
	if err != nil {
		return fault.Wrap(fault.Provision, err, "%s: image '%s' is not on the Docker engine and pulling it failed (without a registry, build the default sandbox image with images/sandbox/build.sh)", TypeName, p.cfg.Image)
	}
	return nil
}

// unenforced lists the dimensions of pol that an existing container's configuration does
// not enforce (attached profiles).
func unenforced(ins container.InspectResponse, pol providers.Policy) []string {
	var gaps []string
	hc := ins.HostConfig
	if hc == nil {
		hc = &container.HostConfig{}
	}
	if pol.NetworkEgress != providers.EgressAllow && hc.NetworkMode != "none" {
		gaps = append(gaps, "network_egress")
	}
	if (len(pol.FSAllowRead) > 0 || len(pol.FSAllowWrite) > 0) && !hc.ReadonlyRootfs {
		gaps = append(gaps, "filesystem")
	}
	cpuOK := pol.CPU <= 0 || (hc.NanoCPUs > 0 && float64(hc.NanoCPUs) <= pol.CPU*1e9)
	memOK := pol.MemoryMB <= 0 || (hc.Memory > 0 && hc.Memory <= int64(pol.MemoryMB)<<20)
	if !cpuOK || !memOK {
		gaps = append(gaps, "resources")
	}
	return gaps
}

// open opens a handle on running container ins; with wait, its sandboxd may take
// readyTimeout to answer (a container that has just started), else one probe. When the
// sandboxd of a managed container with a socket does not answer on it — the programs it runs
// may have removed the socket or put a listener of their own in its place — the container is
// restarted once (its workspace is kept; its processes and contexts end, as in any restart)
// and asked again; when it still does not answer, the sandbox is given up: fault.Gone, so the
// domain makes the session a new one (and says so) instead of answering 502 for it forever.
func (p *Provider) open(ctx context.Context, ins container.InspectResponse, wait bool) (*Sandbox, error) {
	c, err := p.client(ctx, ins, wait)
	if err == nil {
		return p.handle(ins.ID, c), nil
	}
	if ctx.Err() != nil || !p.restartable(ins, err) {
		return nil, err
	}
	p.log.Warn("sandboxd does not answer on its socket; restarting the sandbox's container (the workspace is kept, processes and contexts end)",
		"sandbox_id", ins.ID, "err", err)
	if ins, err = p.restart(ctx, ins); err != nil {
		return nil, err
	}
	if c, err = p.client(ctx, ins, true); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fault.Wrap(fault.Gone, err, "%s: the sandboxd of sandbox '%s' does not answer, even after a restart of its container", TypeName, ins.ID)
	}
	return p.handle(ins.ID, c), nil
}

// restartable reports whether open may restart container ins after err: a managed container
// (never an attach_to target) reached through its socket, which sandboxd did not serve.
func (p *Provider) restartable(ins container.InspectResponse, err error) bool {
	return managed(ins) && !p.isTarget(ins) && ins.Config.Labels[LabelSandboxd] != "" &&
		errors.Is(err, remote.ErrUnreachable)
}

// restart stops container ins at once and starts it again (start), returning its new state.
func (p *Provider) restart(ctx context.Context, ins container.InspectResponse) (container.InspectResponse, error) {
	p.forgetClient(ins.ID)
	zero := 0
	if err := p.cli.ContainerStop(ctx, ins.ID, container.StopOptions{Timeout: &zero}); err != nil {
		return ins, p.parkErr(err, ins.ID, "stopping")
	}
	if err := p.start(ctx, ins); err != nil {
		return ins, err
	}
	again, err := p.cli.ContainerInspect(ctx, ins.ID)
	if err != nil {
		return ins, p.parkErr(err, ins.ID, "inspecting")
	}
	return again, nil
}

// attachLive returns a handle on container id without asking the engine when this provider
// already talks to its sandboxd and it answers (nil otherwise).
func (p *Provider) attachLive(ctx context.Context, id string) *Sandbox {
	v, ok := p.sd.clients.Load(id)
	if !ok {
		return nil
	}
	c := v.(sdConn)
	if probe(ctx, c) != nil {
		p.forgetClient(id)
		return nil
	}
	return p.handle(id, c)
}

// workspaceOf is a container's workspace: /workspace for sandboxes; for an attach_to target
// its configured working folder, unless that is unset or /.
func workspaceOf(ins container.InspectResponse, target bool) string {
	if target && ins.Config != nil {
		if wd := strings.TrimRight(ins.Config.WorkingDir, "/"); wd != "" {
			return wd
		}
	}
	return Workspace
}

// Names of containers: fresh sandboxes are sandgate-<profile>-<10 random hex>; ready
// warm-pool containers sandgate-pool-<profile>-<10 random hex>; claimed ones
// sandgate-<profile>-w<first 12 hex of the id> (see pool).
const poolPrefix = "sandgate-pool-"

// slug makes a profile name usable in a container name.
func slug(profile string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(profile) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	if b.Len() == 0 {
		return "profile"
	}
	return b.String()
}

// primaryName is a container's name without the leading slash.
func primaryName(names []string) string {
	for _, n := range names {
		n = strings.TrimPrefix(n, "/")
		if !strings.Contains(n, "/") { // links look like /other/alias
			return n
		}
	}
	return ""
}

// claimedName is the name a pool container of id gets when claimed: the same for every
// claimer.
func claimedName(slug, id string) string {
	return "sandgate-" + slug + "-w" + id[:12]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DefaultTmpMB bounds a sandbox's /tmp (a tmpfs, so memory) when its policy sets no memory
// limit; with one, /tmp gets half of it.
const DefaultTmpMB = 512

// tmpfsOptions are the mount options of a sandbox's /tmp: never without a size, since a
// tmpfs's default is half the host's memory, outside any limit the container lacks. Under a
// memory limit it is half the limit: what /tmp holds counts against the limit but belongs to
// no process, so a /tmp filled to the limit would make the OOM killer pick the largest
// process — sandboxd or a context — instead of the writer; filling half of it answers ENOSPC.
func tmpfsOptions(pol providers.Policy) string {
	mb := DefaultTmpMB
	if pol.MemoryMB > 0 {
		mb = max(pol.MemoryMB/2, 16)
	}
	return fmt.Sprintf("rw,nosuid,nodev,mode=1777,size=%dm", mb)
}
