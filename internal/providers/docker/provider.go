package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// TypeName is the provider's type name in profiles and the registry.
const TypeName = "docker"

// Workspace is the working folder of managed sandboxes; files are confined to it.
const Workspace = "/workspace"

// Labels set on every container the provider creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by" // always ManagedBy
	// LabelInstallation is the installation id (providers.NewInstallationID) of the gateway
	// that made the object: on containers, their volumes and snapshot images. Sweeps, warm
	// pools and attaches take only their own installation's objects (and, for attaches,
	// unlabelled ones made before installation ids; see Provider.SweepOrphans).
	LabelInstallation = "sandgate.installation"
	LabelProfile      = "sandgate.profile" // the profile's name
	LabelOwner        = "sandgate.owner"   // the principal's subject (not on warm-pool containers)
	LabelSpec         = "sandgate.spec"    // hash of the container's configuration
	LabelPool         = "sandgate.pool"    // the profile, on warm-pool containers
	ManagedBy         = "sandgate"
)

// Defaults of the Provider's tuning fields.
const (
	DefaultOrphanMinAge       = 10 * time.Minute
	DefaultPoolRefillInterval = 30 * time.Second
)

// Defaults of Config.
const (
	DefaultImage     = "python:3.12-slim"
	DefaultPidsLimit = 256
)

// Provider is the docker provider. Build it with New (or Factory) and Close it when done; its
// exported fields may be changed before its first use only.
type Provider struct {
	// OrphanMinAge protects young containers from SweepOrphans, so that a sandbox whose
	// session is not yet recorded survives (see SweepOrphans). Zero means DefaultOrphanMinAge.
	OrphanMinAge time.Duration

	profile      string
	slug         string
	installation string
	cfg          Config
	policy       providers.Policy
	attachTo     string
	cli          *client.Client
	log          *slog.Logger
	caps         providers.Capabilities

	runtimeOK     atomic.Bool
	warnAllowOnce sync.Once
	pool          *pool
	closeOnce     sync.Once
	closed        atomic.Bool
	connectMu     sync.Mutex
	connected     atomic.Bool
	sweepMu       sync.Mutex
	orphanSince   map[string]time.Time // claimed pool containers first found unclaimed
	legacyOnce    sync.Once            // the sweep's report of unlabelled containers
	sd            *agent               // sandboxd: every sandbox's executions, files and contexts
	egress        *egress.Proxy        // nil: no egress proxy (egress.go)
	grants        grants               // the egress grants served, by container id
	disk          *disks               // size-bounded workspaces (disk.go)
}

var _ providers.Provider = (*Provider)(nil)

// Config is a docker profile's settings (its docker block); zero fields take their defaults.
type Config struct {
	// Image is the image of the sandbox containers. Default DefaultImage.
	Image string
	// Runtime is the OCI runtime of the sandbox containers (e.g. "runsc"); "" or "docker"
	// means the engine's default.
	Runtime string
	// Host is the engine's address; default DOCKER_HOST and the other DOCKER_* variables,
	// else the local socket.
	Host string
	// User runs the sandbox's programs as this user ("name", "uid", "uid:gid" or
	// "name:group", names of the image's /etc/passwd and /etc/group); default
	// SandboxdConfig.User, else DefaultProgramUser. sandboxd, root in the container with a
	// few capabilities, starts them so and gives them the workspace; root here leaves them
	// able to stop sandboxd.
	User string
	// PidsLimit caps the number of processes in one sandbox (fork bombs); zero or less means
	// DefaultPidsLimit.
	PidsLimit int64
	// NeverPull makes a sandbox creation fail when the engine lacks the image; by default the
	// image is pulled then.
	NeverPull bool
	// WarmPoolSize is how many started containers are kept ready so that new sandboxes start
	// at once (managed profiles only); 0 disables the warm pool.
	WarmPoolSize int
	// Sandboxd configures sandboxd, the runtime agent every execution, file operation and
	// context goes through.
	Sandboxd SandboxdConfig
	// StateDir holds what the provider keeps on the engine's host across gateway restarts:
	// the workspace images of size-bounded sandboxes (see disk.go). The gateway must see it
	// at the engine's path. Default DefaultStateDir.
	StateDir string
}

// SandboxdConfig configures sandboxd, the entrypoint of the containers the provider starts.
type SandboxdConfig struct {
	// Transport is how the gateway reaches sandboxd; TransportAuto (the zero value) picks
	// socket for an engine on a local Unix socket, else exec.
	Transport Transport
	// Binary is the static sandboxd executable copied into containers whose image does not
	// ship it (images without the label LabelSandboxdImage). Default: "sandboxd" next to the
	// gateway's executable, then on PATH.
	Binary string
	// SocketDir is the folder on the engine's host holding one socket folder per sandbox,
	// bind-mounted into its container (TransportSocket); the gateway must see it at the same
	// path. Default DefaultSocketDir().
	SocketDir string
	// User, when not root, runs sandboxd — and then the programs too, since it cannot switch
	// users (Config.User must then be unset or the same), which leaves sandboxd within their
	// reach. Unset (the default), sandboxd runs as root in the container with the
	// capabilities to start programs as Config.User, and only those.
	User string
}

// Options configure New.
type Options struct {
	// Profile is the profile's name: it labels containers and names warm-pool containers.
	Profile string
	// Installation is the gateway's installation id (required; providers.NewInstallationID):
	// it labels every container, volume and snapshot image the provider makes and names the
	// folder of its socket folders and workspace disks, and sweeps, warm pools and attaches
	// keep to it.
	Installation string
	// Config is the profile's docker settings.
	Config Config
	// Policy is the profile's policy; warm-pool containers are made for it (a Create with
	// another policy never takes one).
	Policy providers.Policy
	// AttachTo is the container (id or name) an attached profile binds to; "" for managed
	// profiles.
	AttachTo string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// PoolRefillInterval is how often the warm pool is checked besides after each claim;
	// zero means DefaultPoolRefillInterval.
	PoolRefillInterval time.Duration
	// Stateful is the profile's stateful. Every managed docker sandbox keeps contexts
	// (sandboxd runs in all of them), so it changes nothing here; it is refused for attached
	// profiles, whose target runs no sandboxd between calls.
	Stateful bool
	// Egress is the gateway's egress proxy, which serves the sandboxes of allowlist policies
	// and of policies with secrets (egress.go); nil: such policies are refused under strict
	// (secrets always).
	Egress *egress.Proxy
}

// Factory builds the provider of a profile whose type is docker, for providers.Registry, from
// ctx.Options (an Options; Profile, Policy, Stateful and Logger are taken from ctx). A profile
// without a docker block is a fault.Config error (docs/semantics.md §6); other errors are New's.
// The caller should Close the provider (it is an io.Closer) at shutdown to stop its warm pool.
func Factory(ctx providers.BuildContext) (providers.Provider, error) {
	opts, err := providers.OptionsOf[Options](ctx, TypeName)
	if err != nil {
		return nil, err
	}
	opts.Profile, opts.Policy, opts.Stateful, opts.Logger = ctx.Profile, ctx.Policy, ctx.Stateful, ctx.Logger
	opts.Installation, opts.Egress = ctx.Installation, ctx.Egress
	return New(opts)
}

// New builds the provider. It does not contact the engine (so a gateway starts while the
// engine is down); the engine address is Config.Host, else DOCKER_HOST and the other
// DOCKER_* variables, else the local socket, and the API version is negotiated. With a warm
// pool configured, New starts the pool's refill goroutine, which Close stops.
// Errors: fault.Config for a missing or malformed installation id, an unusable engine
// address or a warm pool on an attached profile.
func New(opts Options) (*Provider, error) {
	if err := providers.CheckInstallationID(TypeName, opts.Installation); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	cfg := opts.Config
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = DefaultPidsLimit
	}
	cli, err := newClient(cfg.Host)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		profile:      opts.Profile,
		slug:         slug(opts.Profile),
		installation: opts.Installation,
		cfg:          cfg,
		policy:       opts.Policy,
		attachTo:     opts.AttachTo,
		egress:       opts.Egress,
		cli:          cli,
		log:          logger,
		caps: providers.Capabilities{
			Isolation:        providers.IsolationContainer,
			Shell:            true,
			Languages:        []string{"python", "bash"},
			Files:            true,
			PackageInstall:   true,
			Attach:           true,
			Provisions:       true,
			AttachesExternal: true,
			PolicyNetwork:    true,
			PolicyFilesystem: true,
			PolicyResources:  true,
			PreviewPorts:     true,
			// Freezing and capturing a container is for the containers the gateway makes,
			// never for an attach_to target someone else runs.
			Pause:     opts.AttachTo == "",
			Snapshots: opts.AttachTo == "",
		},
	}
	if opts.Stateful && p.attachTo != "" {
		_ = cli.Close()
		return nil, fault.New(fault.Config, "%s: profile '%s' is attached to '%s': stateful needs containers the gateway starts, where sandboxd keeps running between calls", TypeName, opts.Profile, p.attachTo)
	}
	if p.sd, err = newAgent(p.slug, p.installation, cfg.Sandboxd, cfg.User, cli.DaemonHost()); err != nil {
		_ = cli.Close()
		return nil, err
	}
	p.disk = newDisks(cfg.StateDir, p.installation, cli.DaemonHost(), p.sd.programs, p.attachTo != "")
	if !p.sd.protected && p.attachTo == "" {
		logger.Warn("programs run as sandboxd's own user: they can stop or kill it (the gateway still ends their executions at timeout + grace); leave docker.sandboxd.user unset and docker.user non-root to keep them apart",
			"profile", opts.Profile, "user", p.sd.programs)
	}
	p.caps.PolicyDisk = p.disk.loopErr == nil
	// Contexts, kept executions (background processes, open input, terminals) live in a
	// sandboxd daemon, which attach_to targets lack.
	p.caps.Stateful = p.attachTo == ""
	p.caps.Interactive, p.caps.Background = p.caps.Stateful, p.caps.Stateful
	if cfg.WarmPoolSize > 0 {
		if p.attachTo != "" {
			_ = cli.Close()
			return nil, fault.New(fault.Config, "%s: profile '%s' is attached to '%s' and cannot have a warm pool", TypeName, opts.Profile, p.attachTo)
		}
		if p.proxied(opts.Policy) {
			logger.Warn("docker.warm_pool is not used for sandboxes behind the egress proxy: each gets its grant when it is made", "profile", opts.Profile)
		} else {
			p.pool = newPool(p, cfg.WarmPoolSize, opts.PoolRefillInterval)
		}
	}
	return p, nil
}

func newClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "%s: engine address", TypeName)
	}
	return cli, nil
}

// connect negotiates the API version with the engine once, before any other call: the
// client negotiates lazily otherwise, and its first concurrent requests race on the version
// (it reads the version unlocked in some calls).
func (p *Provider) connect(ctx context.Context) error {
	if p.connected.Load() {
		return nil
	}
	p.connectMu.Lock()
	defer p.connectMu.Unlock()
	if p.connected.Load() {
		return nil
	}
	ping, err := p.cli.Ping(ctx)
	if err != nil {
		return p.engineErr(err, "connecting to the engine")
	}
	p.cli.NegotiateAPIVersionPing(ping)
	p.connected.Store(true)
	return nil
}

// Available reports whether a Docker engine answers at host ("" = DOCKER_HOST or the local
// socket) within ctx (at most 3 s).
func Available(ctx context.Context, host string) bool {
	cli, err := newClient(host)
	if err != nil {
		return false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = cli.Ping(ctx)
	return err == nil
}

// Type returns "docker".
func (p *Provider) Type() string { return TypeName }

// Capabilities reports the provider's capabilities: isolation container; shell; languages python and bash; files;
// package_install; attach; provisions and attaches_external; network, filesystem and
// resources policy; preview ports; stateful, pause and snapshots, except for attached
// profiles; disk policy where this gateway can make loop disks (disk.go). No user-mode
// principals (docs/semantics.md §12).
func (p *Provider) Capabilities() providers.Capabilities {
	c := p.caps
	c.Languages = slices.Clone(p.caps.Languages)
	return c
}

// WarmPoolStats reports the warm pool (providers.WarmPooler): its size, the containers this
// provider has opened and queued ready to claim, and how many Creates it served or missed.
func (p *Provider) WarmPoolStats() (providers.WarmPoolStats, bool) {
	if p.pool == nil {
		return providers.WarmPoolStats{}, false
	}
	return providers.WarmPoolStats{Size: p.pool.size, Ready: p.pool.queued(), Hits: p.pool.hits.Load(), Misses: p.pool.misses.Load()}, true
}

var _ providers.WarmPooler = (*Provider)(nil)

// Close stops the warm pool's refill goroutine and releases every connection the provider
// holds: the engine client's and those of the cached sandboxd clients. Containers are left
// alone (ready pool containers serve the next start; see DrainPool). Idempotent.
//
// After Close, Create and Attach refuse with fault.Provision; Destroy, DrainPool,
// SweepOrphans and PoolReady still work (clean-up after shutdown) and release the
// connections they open before they return, so no idle connection outlives the provider.
func (p *Provider) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		if p.pool != nil {
			p.pool.stop()
		}
		p.sd.clients.Range(func(id, _ any) bool {
			p.forgetClient(id.(string))
			return true
		})
		p.stopAllEgress()
		_ = p.cli.Close()
	})
	return nil
}

// releaseIfClosed drops the engine connections a call made after Close opened; deferred by
// the methods that stay usable after Close.
func (p *Provider) releaseIfClosed() {
	if p.closed.Load() {
		_ = p.cli.Close() // closes idle connections only; the client stays usable
	}
}

// refuseIfClosed is the guard of the methods that make or open sandboxes.
func (p *Provider) refuseIfClosed() error {
	if p.closed.Load() {
		return fault.New(fault.Provision, "%s: profile '%s': the provider is shut down", TypeName, p.profile)
	}
	return nil
}

// Create starts a new sandbox container for pol (see the package doc for its configuration),
// taking a ready one from the warm pool when the profile has one made for pol. An attached
// profile binds to its attach_to container instead and creates nothing.
//
// Errors: fault.Policy, before any engine call, for network_egress allowlist under strict
// (and for an attached container whose configuration does not enforce pol, under strict);
// fault.Config for an OCI runtime the engine does not have; fault.Gone for a missing attach_to
// target; fault.Provision for any other failure (a missing image that cannot be pulled, an
// engine that does not answer).
func (p *Provider) Create(ctx context.Context, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.refuseIfClosed(); err != nil {
		return nil, err
	}
	proxied, err := p.checkEgress(pol)
	if err != nil {
		return nil, err
	}
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	if p.attachTo != "" {
		return p.bind(ctx, pol)
	}
	if err := p.checkRuntime(ctx); err != nil {
		return nil, err
	}
	spec := p.spec(pol)
	if p.pool != nil && spec.hash == p.pool.spec.hash && !proxied {
		if sb := p.pool.claim(ctx); sb != nil {
			p.pool.hits.Add(1)
			return sb, nil
		}
		p.pool.misses.Add(1)
	}
	labels := map[string]string{}
	if pr.Subject != "" {
		labels[LabelOwner] = pr.Subject
	}
	if proxied {
		labels[LabelEgress] = "proxy"
	}
	id, err := p.createContainer(ctx, spec, "sandgate-"+p.slug+"-"+randomHex(5), labels)
	if err != nil {
		return nil, err
	}
	if proxied {
		// Served before any program can run: the domain runs none before Create returns.
		ins, err := p.cli.ContainerInspect(ctx, id)
		if err == nil {
			err = p.serveEgress(ins, pr.Subject, pol)
		}
		if err != nil {
			p.remove(id)
			return nil, fault.Wrap(fault.Provision, err, "%s: serving the new sandbox's egress", TypeName)
		}
	}
	sb, err := p.openID(ctx, id)
	if err != nil {
		p.stopEgress(id)
		p.remove(id)
		return nil, fault.Wrap(fault.Provision, err, "%s: the new sandbox container did not come up", TypeName)
	}
	p.log.Debug("sandbox created", "sandbox_id", id)
	return sb, nil
}

// bind attaches to the profile's attach_to container (attached profiles).
func (p *Provider) bind(ctx context.Context, pol providers.Policy) (providers.Sandbox, error) {
	ins, err := p.cli.ContainerInspect(ctx, p.attachTo)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fault.New(fault.Gone, "%s: attached container '%s' does not exist", TypeName, p.attachTo)
		}
		return nil, p.engineErr(err, "inspecting attached container '%s'", p.attachTo)
	}
	if gaps := unenforced(ins, pol); len(gaps) > 0 {
		if pol.Strict {
			return nil, fault.New(fault.Policy, "%s: attached container '%s' is not configured to enforce policy dimensions %v of profile '%s' (strict); reconfigure the container or relax the policy",
				TypeName, p.attachTo, gaps, p.profile)
		}
		p.log.Warn("attached container does not enforce the profile's policy", "container", p.attachTo, "dimensions", gaps)
	}
	return p.openRunning(ctx, ins)
}

// Attach reconnects to sandbox id (a container id as returned by Sandbox.ID), starting it
// when it is stopped and unpausing it when paused.
//
// Errors: fault.Gone when no container has that id, when it is neither managed by Sandgate
// nor this profile's attach_to target, when another installation made it (a container
// without the installation label, made before installation ids, is taken), or when it is
// being removed; fault.Provision when it cannot be started or the engine does not answer.
func (p *Provider) Attach(ctx context.Context, id string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := p.refuseIfClosed(); err != nil {
		return nil, err
	}
	if sb := p.attachLive(ctx, id); sb != nil {
		// A secret of the session replaced or deleted since: the new grant from now on.
		if err := p.refreshEgress(id, pr, pol); err != nil {
			_ = sb.Close()
			return nil, err
		}
		return sb, nil
	}
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	ins, err := p.inspectSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	// A restarted gateway serves the grant of a sandbox behind the egress proxy again; one
	// whose policy changed since it was served, the new grant.
	if err := p.ensureEgress(ins, pr, pol); err != nil {
		return nil, err
	}
	return p.openRunning(ctx, ins)
}

// inspectSandbox inspects sandbox id and checks it is one this provider may use.
func (p *Provider) inspectSandbox(ctx context.Context, id string) (container.InspectResponse, error) {
	if id == "" {
		return container.InspectResponse{}, fault.New(fault.Gone, "%s: no sandbox id", TypeName)
	}
	ins, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return ins, fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
		}
		return ins, p.engineErr(err, "inspecting sandbox '%s'", id)
	}
	// Only full ids are handed out: a name or prefix that happens to resolve is not ours.
	if ins.ID != id || (!managed(ins) && !p.isTarget(ins)) {
		return ins, fault.New(fault.Gone, "%s: '%s' is not a sandbox of this provider", TypeName, id)
	}
	if !p.isTarget(ins) && !p.mine(ins.Config.Labels) {
		return ins, fault.New(fault.Gone, "%s: sandbox '%s' belongs to another Sandgate installation (%s) on this engine", TypeName, id, ins.Config.Labels[LabelInstallation])
	}
	return ins, nil
}

// openRunning makes sure the container runs and opens a handle on it. Its sandboxd gets
// readyTimeout to answer when the container (re)started or was unpaused here or started
// shortly before; one that has run for longer gets one probe: a sandboxd that does not
// answer then has stopped answering (a stopped or frozen process), and waiting would only
// hold up the execution that asked.
func (p *Provider) openRunning(ctx context.Context, ins container.InspectResponse) (*Sandbox, error) {
	st := ins.State
	wait := st == nil || recentlyStarted(st.StartedAt)
	switch {
	case st == nil:
		return nil, fault.New(fault.Provision, "%s: container '%s' has no state", TypeName, ins.ID)
	case st.Dead || st.Status == container.StateRemoving:
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' is being removed", TypeName, ins.ID)
	case st.Paused:
		if err := p.cli.ContainerUnpause(ctx, ins.ID); err != nil {
			return nil, p.engineErr(err, "unpausing sandbox '%s'", ins.ID)
		}
		wait = true
	case !st.Running || st.Restarting:
		p.log.Info("starting a stopped sandbox container", "sandbox_id", ins.ID)
		if err := p.start(ctx, ins); err != nil {
			return nil, err
		}
		wait = true
	}
	return p.open(ctx, ins, wait)
}

// recentlyStarted reports whether a container that started at startedAt (the engine's
// RFC 3339 time) may still be starting its sandboxd; true when the time is unknown.
func recentlyStarted(startedAt string) bool {
	t, err := time.Parse(time.RFC3339Nano, startedAt)
	return err != nil || time.Since(t) < readyTimeout
}

// start starts stopped container ins: its workspace disk attached again if need be, and its
// sandboxd's secret delivered again.
func (p *Provider) start(ctx context.Context, ins container.InspectResponse) error {
	if ins.Config != nil {
		if err := p.ensureDisk(ins.Config.Labels); err != nil {
			return err
		}
	}
	if err := p.redeliverToken(ctx, ins); err != nil {
		return err
	}
	if ins.Config != nil && ins.Config.Labels[LabelEgress] != "" {
		if folder, ok := p.sd.folder(ins.Config.Labels); ok {
			if err := p.writeEgressCA(folder); err != nil {
				return err
			}
		}
	}
	if err := p.cli.ContainerStart(ctx, ins.ID, container.StartOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, ins.ID)
		}
		return p.engineErr(err, "starting sandbox '%s'", ins.ID)
	}
	return nil
}

// openID inspects a container this provider just made and opens it.
func (p *Provider) openID(ctx context.Context, id string) (*Sandbox, error) {
	ins, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if ins.State == nil || !ins.State.Running {
		return nil, fmt.Errorf("the container is not running%s", p.exitReport(ctx, ins))
	}
	return p.open(ctx, ins, true)
}

// exitReport says how a container that should run ended: its exit code and the last lines
// its entrypoint printed (a sandboxd that refused its flags says why), or "" when the engine
// does not tell.
func (p *Provider) exitReport(ctx context.Context, ins container.InspectResponse) string {
	if ins.State == nil || ins.State.Running || ins.State.StartedAt == "" {
		return ""
	}
	report := fmt.Sprintf(" (it exited with status %d", ins.State.ExitCode)
	rc, err := p.cli.ContainerLogs(ctx, ins.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "3"})
	if err == nil {
		var out bytes.Buffer
		_, _ = stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 4<<10))
		_ = rc.Close()
		if text := strings.Join(strings.Fields(out.String()), " "); text != "" {
			report += "; it printed: " + text
		}
	}
	return report + ")"
}

// Destroy removes sandbox id (forcefully, with its anonymous volumes). It is idempotent and
// conservative: an unknown id, a container without Sandgate's managed-by label, one of
// another installation and the profile's attach_to target are left alone (nil error).
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	defer p.releaseIfClosed()
	if err := p.connect(ctx); err != nil {
		return err
	}
	ins, err := p.cli.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return p.engineErr(err, "inspecting sandbox '%s'", id)
	case ins.ID != id, p.isTarget(ins), !managed(ins), !p.mine(ins.Config.Labels):
		p.log.Debug("destroy ignored: not a sandbox this provider removes", "sandbox_id", id)
		return nil
	}
	p.sd.running.Stop(id) // its executions end now, as fault.Gone, not when their connection breaks
	p.forgetClient(id)
	p.stopEgress(id)
	if err := p.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) { // gone, or already being removed
			p.removeDisk(ins.Config.Labels)
			return nil
		}
		return p.engineErr(err, "removing sandbox '%s'", id)
	}
	p.removeSocketFolder(ins.Config.Labels)
	p.removeDisk(ins.Config.Labels)
	p.dropUnnamedSnapshot(ctx, ins.Image)
	p.log.Debug("sandbox destroyed", "sandbox_id", id)
	return nil
}

// remove removes container id, best effort, with a fresh context.
func (p *Provider) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ins, ierr := p.cli.ContainerInspect(ctx, id)
	if err := p.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		p.log.Warn("removing a container failed", "container", id, "err", err)
		return
	}
	if ierr == nil && ins.Config != nil {
		p.removeDisk(ins.Config.Labels)
	}
}

// SweepOrphans removes this installation's sandbox containers of this profile that keep does
// not claim: every container labelled managed-by sandgate, with this profile's label and this
// provider's installation id, except ready warm-pool containers, ones keep(id) returns true
// for, and young ones: a container created less than OrphanMinAge ago is left alone (its
// session may not be recorded yet). A container claimed from the warm pool carries no claim
// time (labels cannot change and it must keep its claim name), so it counts as orphaned from
// the first sweep of this provider that found it unclaimed, and is removed by a later sweep
// at least OrphanMinAge after that. Workspace disks (disk.go) and socket folders go with
// their containers, and a disk or socket folder of this installation that no container names
// is removed once old enough. It returns the ids it removed; removal failures are joined into
// the error while the sweep goes on.
//
// Other installations' containers are never touched, whatever their profile's name: keep
// answers for this installation's database only. Containers without an installation label
// were made by a Sandgate before installation ids, for this installation or another one on
// the engine, so no sweep removes them either (Attach and Destroy still take them: a session
// of this installation may use one); the first sweep that finds some that keep does not
// claim logs, once, how many there are and how to remove them by hand.
//
// Call it with the sandbox ids of every live session of the profile, periodically from one
// replica; a gateway restart does not need it to find its sandboxes (Attach reconnects by id).
func (p *Provider) SweepOrphans(ctx context.Context, keep func(id string) bool) ([]string, error) {
	defer p.releaseIfClosed()
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	list, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelManagedBy+"="+ManagedBy),
		filters.Arg("label", LabelProfile+"="+p.profile),
	)})
	if err != nil {
		return nil, p.engineErr(err, "listing sandbox containers")
	}
	var own []container.Summary
	var unlabelled []string
	for _, c := range list {
		switch c.Labels[LabelInstallation] {
		case p.installation:
			own = append(own, c)
		case "":
			if !keep(c.ID) {
				unlabelled = append(unlabelled, primaryName(c.Names))
			}
		}
	}
	p.reportUnlabelled(unlabelled)
	p.sweepMu.Lock()
	defer p.sweepMu.Unlock()
	if p.orphanSince == nil {
		p.orphanSince = map[string]time.Time{}
	}
	now := time.Now()
	unclaimed := map[string]bool{}
	liveFolders := map[string]bool{}
	for _, c := range own {
		liveFolders[c.Labels[LabelSandboxd]] = true
	}
	defer p.sweepSocketFolders(liveFolders)
	var removed []string
	var errs []error
	for _, c := range own {
		name := primaryName(c.Names)
		_, pooled := c.Labels[LabelPool]
		if (pooled && strings.HasPrefix(name, poolPrefix)) || keep(c.ID) {
			continue
		}
		since := time.Unix(c.Created, 0)
		if pooled {
			unclaimed[c.ID] = true
			first, ok := p.orphanSince[c.ID]
			if !ok {
				p.orphanSince[c.ID] = now
				continue
			}
			since = first
		}
		if now.Sub(since) < p.orphanMinAge() {
			continue
		}
		if err := p.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing orphan %s: %w", c.ID, err))
			continue
		}
		delete(unclaimed, c.ID)
		delete(liveFolders, c.Labels[LabelSandboxd])
		p.removeDisk(c.Labels)
		p.forgetClient(c.ID)
		p.stopEgress(c.ID)
		p.log.Info("removed an orphaned sandbox container", "sandbox_id", c.ID, "name", name)
		removed = append(removed, c.ID)
	}
	for id := range p.orphanSince {
		if !unclaimed[id] {
			delete(p.orphanSince, id)
		}
	}
	if err := p.sweepDisks(ctx); err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// maxNamesLogged bounds the container names one log line lists.
const maxNamesLogged = 20

// reportUnlabelled logs, once per provider, the profile's containers without an installation
// label that no session of this installation uses (names; see SweepOrphans).
func (p *Provider) reportUnlabelled(names []string) {
	if len(names) == 0 {
		return
	}
	p.legacyOnce.Do(func() {
		slices.Sort(names)
		p.log.Warn("sandbox containers without an installation id (made by a Sandgate before installation ids) are on this engine; "+
			"no sweep removes them, since they may belong to another installation. Once no older gateway uses this engine, list them with "+
			"`docker ps -a --filter label="+LabelManagedBy+"="+ManagedBy+" --filter label="+LabelProfile+"="+p.profile+
			" --format '{{.ID}} {{.Names}} {{.Label \""+LabelInstallation+"\"}}'` and remove those with no installation: `docker rm -f -v <id>…`",
			"count", len(names), "containers", names[:min(len(names), maxNamesLogged)])
	})
}

// checkRuntime makes sure the configured OCI runtime is installed (once per provider).
func (p *Provider) checkRuntime(ctx context.Context) error {
	rt := p.cfg.Runtime
	if rt == "" || rt == "docker" || p.runtimeOK.Load() {
		return nil
	}
	info, err := p.cli.Info(ctx)
	if err != nil {
		return p.engineErr(err, "asking the engine for its runtimes")
	}
	if _, ok := info.Runtimes[rt]; !ok {
		names := make([]string, 0, len(info.Runtimes))
		for n := range info.Runtimes {
			names = append(names, n)
		}
		slices.Sort(names)
		return fault.New(fault.Config, "%s: OCI runtime '%s' (profile '%s') is not installed on the Docker engine; installed runtimes: [%s]",
			TypeName, rt, p.profile, strings.Join(names, ", "))
	}
	p.runtimeOK.Store(true)
	return nil
}

// isTarget reports whether ins is the profile's attach_to container.
func (p *Provider) isTarget(ins container.InspectResponse) bool {
	t := p.attachTo
	if t == "" {
		return false
	}
	return ins.ID == t || strings.TrimPrefix(ins.Name, "/") == strings.TrimPrefix(t, "/") ||
		(len(t) >= 12 && strings.HasPrefix(ins.ID, t))
}

func managed(ins container.InspectResponse) bool {
	return ins.Config != nil && ins.Config.Labels[LabelManagedBy] == ManagedBy
}

// mine reports whether labels (a container's or an image's) name this provider's
// installation, or none: objects made before installation ids are taken by attaches and
// destroys (a session of this installation may use one), never by sweeps.
func (p *Provider) mine(labels map[string]string) bool {
	inst := labels[LabelInstallation]
	return inst == "" || inst == p.installation
}

// engineErr classifies an engine error: an unreachable engine and anything unexpected are
// fault.Provision.
func (p *Provider) engineErr(err error, format string, args ...any) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if client.IsErrConnectionFailed(err) {
		return fault.Wrap(fault.Provision, err, "%s: the Docker engine does not answer (%s)", TypeName, fmt.Sprintf(format, args...))
	}
	return fault.Wrap(fault.Provision, err, "%s: %s", TypeName, fmt.Sprintf(format, args...))
}

func (p *Provider) orphanMinAge() time.Duration {
	if p.OrphanMinAge > 0 {
		return p.OrphanMinAge
	}
	return DefaultOrphanMinAge
}
