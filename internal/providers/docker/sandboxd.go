package docker

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/sdadapter"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Where sandboxd lives in a container, and the image label that says an image ships it.
const (
	// LabelSandboxdImage on an image gives the absolute path of the sandboxd binary it ships;
	// images without it get the gateway's binary copied in at sandboxBin.
	LabelSandboxdImage = "dev.sandgate.sandboxd"
	// LabelSandboxd on a container started with transport socket names its socket folder
	// under the socket dir.
	LabelSandboxd = "sandgate.sandboxd"
	// LabelSandboxdTransport on a container records the transport it was started for:
	// "socket" or "exec" (containers without it but with LabelSandboxd: socket).
	LabelSandboxdTransport = "sandgate.sandboxd-transport"
	// LabelSandboxdToken holds the container's sandboxd secret (256 bits, hex). Only the
	// engine's API shows labels; nothing inside the container does.
	LabelSandboxdToken = "sandgate.sandboxd-token"

	sandboxRun    = "/.sandgate/run" // socket: bind mount of the host socket folder; exec: a volume
	sandboxBinDir = "/.sandgate/bin" // anonymous volume the binary is copied into
	sandboxBin    = sandboxBinDir + "/sandboxd"
	socketName    = "sd.sock"
	tokenEnv      = "SANDBOXD_TOKEN" // containers made before the secret moved to a file
	tokenFileName = "token"
	stateFileName = "contexts.json"
	// execRunDir is sandboxd's folder on the /.sandgate/run volume of exec-transport
	// containers: copied in with the secret, owned by sandboxd's user, so that sandboxd (not
	// root) can make its socket there.
	execRunDir = "sd"

	// DefaultProgramUser runs the programs when neither docker.user nor docker.sandboxd.user
	// is set: the conventional "nonroot" uid/gid of distroless images.
	DefaultProgramUser = "65532:65532"
	// sandboxdRoot is sandboxd's user when programs run as another: root in the container,
	// with sandboxdCaps only.
	sandboxdRoot = "0:0"
	// readyTimeout bounds how long a started container's sandboxd has to answer /readyz.
	readyTimeout = 20 * time.Second
	// probeTimeout bounds one /readyz of a sandboxd that should answer at once: a stopped or
	// frozen one accepts connections (the kernel queues them) and never answers. Generous:
	// over the exec transport a probe may need a new engine exec on a busy engine.
	probeTimeout = 10 * time.Second
)

// Transport is how the gateway reaches the sandboxd of a container it started.
type Transport string

// Transports (docker.sandboxd.transport).
const (
	// TransportAuto picks TransportSocket for an engine on a local Unix socket, else
	// TransportExec.
	TransportAuto Transport = ""
	// TransportSocket: a Unix socket in a host folder
	// (SocketDir/<installation>/<profile>/<12 hex>)
	// bind-mounted into the container; the gateway must see that folder at the engine's path.
	// The fastest: one kept-alive connection per container, no engine in between.
	TransportSocket Transport = "socket"
	// TransportExec: a stream through the engine's exec API to `sandboxd proxy` in the
	// container, one exec per kept-alive connection. Works with any engine the gateway can
	// call, a remote DOCKER_HOST included; the socket is on a volume of the container.
	TransportExec Transport = "exec"
)

// agent is the provider's sandboxd configuration: every sandbox's executions, files and
// contexts go through sandboxd (docs/semantics.md §12, "docker").
type agent struct {
	transport Transport // of containers this provider starts
	sockRoot  string    // TransportSocket: docker.sandboxd.socket_dir, absolute
	sockDir   string    // TransportSocket: host folder of this installation's and profile's socket folders
	binary    string    // configured binary ("" = look next to the executable, then on PATH)
	// programs is the user the programs run as; daemon sandboxd's. They differ when
	// protected: sandboxd runs as root with sandboxdCaps and starts programs with --run-as.
	programs, daemon string
	protected        bool

	binOnce sync.Once
	binPath string
	binErr  error

	images    sync.Map // image reference or ID → in-image sandboxd path ("" = none)
	clients   sync.Map // container id → *client (keeps its connections alive)
	installed sync.Map // container id + start time → sandboxd path in a container without a daemon

	running sdadapter.Running // executions in progress, which Destroy ends (fault.Gone)
}

// sandboxdCaps are the capabilities a protected sandboxd keeps (every other is dropped):
// start programs as their user, signal them, and keep the workspace theirs while it reads
// and writes all of it (cmd/sandboxd --run-as). Programs keep none of them.
var sandboxdCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}

// newAgent prepares the sandboxd configuration of a profile of installation; host is the
// engine's address.
// Programs run as docker.user, else as docker.sandboxd.user, else as DefaultProgramUser.
// sandboxd runs as root with sandboxdCaps and starts them as that user, so that they cannot
// signal, stop or trace it — unless docker.sandboxd.user names a user of its own (it then
// cannot switch users, and programs run as it) or the programs run as root.
//
// Errors: fault.Config for an unknown transport, a socket folder too long, or a
// docker.user that differs from a non-root docker.sandboxd.user.
func newAgent(profileSlug, installation string, c SandboxdConfig, user, host string) (*agent, error) {
	m := &agent{binary: c.Binary, transport: c.Transport}
	m.programs = cmp.Or(user, c.User, DefaultProgramUser)
	switch {
	case c.User != "" && !rootUser(c.User):
		if user != "" && user != c.User {
			return nil, fault.New(fault.Config, "%s: docker.sandboxd.user '%s' is not root, so sandboxd cannot run programs as docker.user '%s'; leave docker.sandboxd.user unset (sandboxd then runs as root with a few capabilities and programs as docker.user, out of reach of each other)", TypeName, c.User, user)
		}
		m.daemon = c.User
	case rootUser(m.programs):
		m.daemon = m.programs // root programs would hold sandboxd's capabilities: none are added
	default:
		m.daemon, m.protected = sandboxdRoot, true
	}
	switch m.transport {
	case TransportAuto:
		m.transport = TransportExec
		if strings.HasPrefix(host, "unix://") {
			m.transport = TransportSocket
		}
	case TransportSocket, TransportExec:
	default:
		return nil, fault.New(fault.Config, "%s: docker.sandboxd.transport '%s' is not one of socket, exec", TypeName, c.Transport)
	}
	if m.transport != TransportSocket {
		return m, nil
	}
	root := c.SocketDir
	if root == "" {
		root = DefaultSocketDir()
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "%s: docker.sandboxd.socket_dir", TypeName)
	}
	m.sockRoot = root
	m.sockDir = filepath.Join(root, installation, profileFolder(profileSlug))
	// A Unix socket path has room for 107 bytes; leave room for "/<12 hex>/sd.sock".
	if n := len(m.sockDir) + 1 + 12 + 1 + len(socketName); n > 107 {
		return nil, fault.New(fault.Config, "%s: docker.sandboxd.socket_dir '%s' is too long for Unix socket paths (%d > 107 bytes); choose a shorter folder", TypeName, root, n)
	}
	return m, nil
}

// DefaultSocketDir is the default of docker.sandboxd.socket_dir: /run/sandgate/sandboxd for
// root, else $XDG_RUNTIME_DIR/sandgate/sandboxd or <temp>/sandgate-<uid>/sandboxd. Each
// installation has a folder under it (named by its id), each of its profiles a folder in
// that, and each sandbox a folder (named by its container label sandgate.sandboxd) holding
// the socket sd.sock. Containers made before installation ids have theirs in
// <socket_dir>/<profile>/.
func DefaultSocketDir() string {
	if os.Geteuid() == 0 {
		return "/run/sandgate/sandboxd"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sandgate", "sandboxd")
	}
	return filepath.Join(os.TempDir(), "sandgate-"+strconv.Itoa(os.Geteuid()), "sandboxd")
}

// binary finds the sandboxd executable to copy into images that lack it.
func (m *agent) binaryPath() (string, error) {
	m.binOnce.Do(func() {
		if m.binary != "" {
			m.binPath, m.binErr = checkBinary(m.binary)
			return
		}
		if exe, err := os.Executable(); err == nil {
			if p, err := checkBinary(filepath.Join(filepath.Dir(exe), "sandboxd")); err == nil {
				m.binPath = p
				return
			}
		}
		if p, err := exec.LookPath("sandboxd"); err == nil {
			m.binPath, m.binErr = checkBinary(p)
			return
		}
		m.binErr = errors.New("no sandboxd binary next to the gateway's executable nor on PATH")
	})
	return m.binPath, m.binErr
}

func checkBinary(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", abs)
	}
	return abs, nil
}

// socketFolder matches the socket folder names the provider makes (labels are not trusted
// to be paths).
var socketFolder = regexp.MustCompile(`^[0-9a-f]{12}$`)

// profileFolder names a profile's folder under the socket dir.
func profileFolder(profileSlug string) string {
	if len(profileSlug) > 24 {
		return profileSlug[:24]
	}
	return profileSlug
}

// folder returns the host socket folder of a container from its labels: under the folder of
// the installation and profile that made it (a renamed profile still finds its sandboxes);
// directly under the profile's for a container made before installation ids.
func (m *agent) folder(labels map[string]string) (string, bool) {
	name := labels[LabelSandboxd]
	if !socketFolder.MatchString(name) {
		return "", false
	}
	profile := profileFolder(slug(labels[LabelProfile]))
	switch inst := labels[LabelInstallation]; {
	case inst == "":
		return filepath.Join(m.sockRoot, profile, name), true
	case providers.ValidInstallationID(inst):
		return filepath.Join(m.sockRoot, inst, profile, name), true
	}
	return "", false
}

// imageSandboxd returns the path of the sandboxd image ref (a reference or an ID) ships, ""
// when it ships none.
func (p *Provider) imageSandboxd(ctx context.Context, ref string) (string, error) {
	if v, ok := p.sd.images.Load(ref); ok {
		return v.(string), nil
	}
	ins, err := p.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", err
	}
	path := ""
	if ins.Config != nil {
		path = ins.Config.Labels[LabelSandboxdImage]
	}
	if path != "" && !strings.HasPrefix(path, "/") {
		path = ""
	}
	p.sd.images.Store(ref, path)
	return path, nil
}

// sandboxdSpec makes sandboxd a container's entrypoint (under docker's init) as a non-root
// user, on a read-only root file system with a volume at /workspace and a tmpfs at /tmp. With
// TransportExec, sandboxd's folder (socket, secret, state file) is on a volume at
// /.sandgate/run; with TransportSocket, prepareSandboxd bind-mounts the host socket folder
// there.
func (m *agent) sandboxdSpec(s *containerSpec, tmpfs string) {
	run := sandboxRun
	if m.transport == TransportExec {
		run = sandboxRun + "/" + execRunDir
		s.hc.Mounts = append(s.hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: sandboxRun})
	}
	s.cfg.Entrypoint = []string{sandboxBin, "serve"}
	s.cfg.Cmd = nil
	s.cfg.User = m.daemon
	if m.protected {
		// Arguments after the entrypoint's (prepareSandboxd may replace the entrypoint with
		// the image's sandboxd): a sandboxd too old to know the flag refuses to start rather
		// than run programs as root.
		s.cfg.Cmd = []string{"--run-as", m.programs}
		s.hc.CapAdd = append(s.hc.CapAdd, sandboxdCaps...)
	}
	s.cfg.Env = append(s.cfg.Env,
		"SANDBOXD_SOCKET="+run+"/"+socketName,
		"SANDBOXD_TOKEN_FILE="+run+"/"+tokenFileName,
		// Outside the workspace and on a mount that outlives a restart of the container: a
		// restarted sandboxd reports the contexts it lost.
		"SANDBOXD_STATE_FILE="+run+"/"+stateFileName,
		"SANDBOXD_WORKSPACE="+Workspace,
		"HOME="+Workspace,
		"PYTHONUNBUFFERED=1",
	)
	s.hc.ReadonlyRootfs = true
	if !hasMount(s.hc.Mounts, Workspace) {
		s.hc.Mounts = append(s.hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: Workspace})
	}
	if s.hc.Tmpfs == nil {
		s.hc.Tmpfs = map[string]string{"/tmp": tmpfs}
	}
}

// rootUser reports whether docker user spec u names root ("root", uid 0, with any group).
func rootUser(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "root" || name == "0"
}

func hasMount(ms []mount.Mount, target string) bool {
	for _, m := range ms {
		if m.Target == target {
			return true
		}
	}
	return false
}

// prepareSandboxd adds the per-container parts of sandboxd to cfg and hc before the container
// is created: a fresh secret (label), the transport label, for TransportSocket a socket
// folder on the host bind-mounted at /.sandgate/run holding the secret file, and — for images
// without sandboxd — a volume the binary is copied into. It returns the binary to copy ("" =
// the image ships one) and the socket folder ("" for TransportExec, whose secret file
// deliverToken copies in).
func (p *Provider) prepareSandboxd(ctx context.Context, cfg *container.Config, hc *container.HostConfig) (copyBin, folder string, err error) {
	inImage, err := p.imageSandboxd(ctx, cfg.Image)
	if err != nil {
		return "", "", err
	}
	if inImage != "" {
		cfg.Entrypoint = []string{inImage, "serve"}
	} else {
		bin, err := p.sd.binaryPath()
		if err != nil {
			return "", "", fault.Wrap(fault.Provision, err, "%s: image '%s' does not ship sandboxd (no %s label) and the gateway has no sandboxd binary to copy in: build one with `make build` (bin/sandboxd) or set docker.sandboxd.binary",
				TypeName, cfg.Image, LabelSandboxdImage)
		}
		copyBin = bin
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: sandboxBinDir})
	}
	// The secret is never in the container's environment (every process there, docker-init
	// as PID 1 first, would show it in /proc/PID/environ): it is a label, which only the
	// engine's API shows, and reaches sandboxd as a file that the gateway empties as soon as
	// sandboxd answers — before any program can run.
	cfg.Labels[LabelSandboxdToken] = randomHex(32)
	cfg.Labels[LabelSandboxdTransport] = string(p.sd.transport)
	if p.sd.transport == TransportExec {
		return copyBin, "", nil
	}
	name := randomHex(6)
	folder = filepath.Join(p.sd.sockDir, name)
	if err := os.MkdirAll(p.sd.sockDir, 0o711); err != nil {
		return "", "", fault.Wrap(fault.Provision, err, "%s: creating the sandboxd socket folder", TypeName)
	}
	if err := os.Mkdir(folder, 0o700); err != nil {
		return "", "", fault.Wrap(fault.Provision, err, "%s: creating the sandboxd socket folder", TypeName)
	}
	// The container's (non-root) user creates the socket; the sticky bit keeps others from
	// replacing it, and the parent is not listable.
	if err := os.Chmod(folder, 0o777|os.ModeSticky); err != nil {
		_ = os.Remove(folder)
		return "", "", fault.Wrap(fault.Provision, err, "%s: preparing the sandboxd socket folder", TypeName)
	}
	cfg.Labels[LabelSandboxd] = name
	if err := writeToken(folder, cfg.Labels[LabelSandboxdToken]); err != nil {
		_ = os.RemoveAll(folder)
		return "", "", err
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: folder, Target: sandboxRun})
	return copyBin, folder, nil
}

// tarEntry is one file or folder of an archive copied into a container.
type tarEntry struct {
	name string // relative to the archive's destination; a trailing "/" makes a folder
	mode int64
	data []byte
}

// copyIn copies entries into folder dst of container id (created or running), owned by
// numeric user (uid[:gid]; "" for root).
func (p *Provider) copyIn(ctx context.Context, id, dst, user string, entries ...tarEntry) error {
	uid, gid, _ := numericUser(user)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: uid, Gid: gid, ModTime: now, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := p.cli.CopyToContainer(ctx, id, dst, &buf, container.CopyToContainerOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
		}
		return p.engineErr(err, "copying into sandbox container '%s'", id)
	}
	return nil
}

// copySandboxd copies the binary at bin into created (not yet started) container id.
func (p *Provider) copySandboxd(ctx context.Context, id, bin string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return fault.Wrap(fault.Provision, err, "%s: reading the sandboxd binary", TypeName)
	}
	return p.copyIn(ctx, id, sandboxBinDir, "", tarEntry{name: "sandboxd", mode: 0o755, data: data})
}

// deliverToken puts the secret of an exec-transport container where its sandboxd reads it at
// start (sandboxd's folder on the /.sandgate/run volume, owned by sandboxd's user); before
// every start, since the gateway empties the file once sandboxd answers.
func (p *Provider) deliverToken(ctx context.Context, id, user, token string) error {
	return p.copyIn(ctx, id, sandboxRun, user,
		tarEntry{name: execRunDir + "/", mode: 0o700},
		tarEntry{name: execRunDir + "/" + tokenFileName, mode: 0o400, data: []byte(token)})
}

// sdConn is the kept-alive sandboxd client of one container.
type sdConn struct {
	rt *remote.Client
	// daemon: a sandboxd serves in the container and keeps contexts; false for containers
	// reached with `sandboxd stdio` per connection.
	daemon bool
	ws     string // the workspace
}

// client returns the sandboxd client of a container, waiting (when wait is set) until
// sandboxd answers. A container the provider started runs sandboxd as its entrypoint, reached
// by the transport its label records; any other container (an attach_to target, or one
// made before sandboxd ran everywhere) is reached with `sandboxd stdio`, one engine exec per
// connection, with sandboxd copied into it when its image does not ship it.
func (p *Provider) client(ctx context.Context, ins container.InspectResponse, wait bool) (sdConn, error) {
	if v, ok := p.sd.clients.Load(ins.ID); ok {
		c := v.(sdConn)
		if err := probe(ctx, c); err == nil {
			return c, nil
		}
		p.forgetClient(ins.ID)
	}
	c, err := p.dialSandboxd(ctx, ins, wait)
	if err != nil {
		return sdConn{}, err
	}
	return p.keepClient(ins.ID, c), nil
}

// keepClient caches c as the client of container id, unless one is cached already: then c is
// closed and the cached one returned.
func (p *Provider) keepClient(id string, c sdConn) sdConn {
	if prev, loaded := p.sd.clients.LoadOrStore(id, c); loaded {
		_ = c.rt.Close()
		return prev.(sdConn)
	}
	if p.closed.Load() {
		// Close ran while this client was being made: it closed the clients it found, not
		// this one. The handle still works (a client reconnects); nothing stays cached.
		p.forgetClient(id)
	}
	return c
}

// dialSandboxd makes a new client of the sandboxd of container ins, not cached (see client),
// that has answered /readyz (waiting for it up to readyTimeout when wait is set, asking with
// a delay that doubles from 10 ms to 500 ms; not at all once its socket's listener is known
// to be someone else's); the caller closes it.
func (p *Provider) dialSandboxd(ctx context.Context, ins container.InspectResponse, wait bool) (sdConn, error) {
	if ins.Config == nil {
		return sdConn{}, fault.New(fault.Provision, "%s: container '%s' has no configuration", TypeName, ins.ID)
	}
	labels := ins.Config.Labels
	var (
		c     sdConn
		clean func(context.Context) error // run once sandboxd answers: the secret file goes
		err   error
	)
	switch {
	case labels[LabelSandboxdTransport] == string(TransportExec):
		c, clean, err = p.execClient(ins)
	case labels[LabelSandboxd] != "":
		c, clean, err = p.socketClient(ins)
	default:
		c, err = p.stdioClient(ctx, ins)
	}
	if err != nil {
		return sdConn{}, err
	}
	deadline := time.Now().Add(readyTimeout)
	delay := 10 * time.Millisecond
	var last error // the last answer that says why, rather than the deadline's
	for {
		var err error
		if wait {
			rctx, cancel := context.WithDeadline(ctx, deadline)
			err = c.rt.Ready(rctx)
			if err != nil && rctx.Err() != nil && ctx.Err() == nil && last != nil {
				err = last
			}
			cancel()
		} else {
			err = probe(ctx, c)
		}
		if err == nil {
			break
		}
		last = err
		if !wait || time.Now().After(deadline) || ctx.Err() != nil || errors.Is(err, remote.ErrForeignListener) {
			_ = c.rt.Close()
			if ctx.Err() != nil {
				return sdConn{}, ctx.Err()
			}
			report := ""
			if now, ierr := p.cli.ContainerInspect(ctx, ins.ID); ierr == nil {
				report = p.exitReport(ctx, now) // a sandboxd that refused to start says why
			}
			return sdConn{}, fault.Wrap(fault.Provision, err, "%s: sandboxd in sandbox '%s' does not answer%s (stopped, frozen or overloaded: try again, or destroy the session for a new sandbox)", TypeName, ins.ID, report)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
	if clean != nil {
		// sandboxd has read its secret: no program may find the file (none has run yet).
		if err := clean(ctx); err != nil {
			_ = c.rt.Close()
			return sdConn{}, err
		}
	}
	return c, nil
}

// probe asks c's sandboxd whether it is ready, for at most probeTimeout.
func probe(ctx context.Context, c sdConn) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return c.rt.Ready(ctx)
}

// containerToken returns the secret of a container the provider started.
func containerToken(ins container.InspectResponse) (string, error) {
	token := ins.Config.Labels[LabelSandboxdToken]
	for _, kv := range ins.Config.Env {
		if v, ok := strings.CutPrefix(kv, tokenEnv+"="); ok && token == "" {
			token = v
		}
	}
	if token == "" {
		return "", fault.New(fault.Provision, "%s: container '%s' runs sandboxd without a secret", TypeName, ins.ID)
	}
	return token, nil
}

// socketClient reaches the sandboxd of a TransportSocket container through its host socket.
func (p *Provider) socketClient(ins container.InspectResponse) (sdConn, func(context.Context) error, error) {
	if p.sd.sockDir == "" {
		return sdConn{}, nil, fault.New(fault.Provision, "%s: sandbox '%s' was started with docker.sandboxd.transport socket, but this profile's transport is exec: set transport: socket (the gateway must see docker.sandboxd.socket_dir at the engine's path) or recreate the sandbox", TypeName, ins.ID)
	}
	folder, ok := p.sd.folder(ins.Config.Labels)
	if !ok {
		return sdConn{}, nil, fault.New(fault.Provision, "%s: container '%s' has a malformed %s label", TypeName, ins.ID, LabelSandboxd)
	}
	token, err := containerToken(ins)
	if err != nil {
		return sdConn{}, nil, err
	}
	initPID := 0
	if ins.State != nil {
		initPID = ins.State.Pid // 0 for a container not started yet: looked up at the first dial
	}
	sock := filepath.Join(folder, socketName)
	rt := remote.NewVerifiedClient("sandbox "+ins.ID, sock, token, p.sandboxdPeer(ins.ID, initPID))
	clean := func(context.Context) error {
		if err := os.Remove(filepath.Join(folder, tokenFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fault.Wrap(fault.Provision, err, "%s: removing the sandboxd secret file of sandbox '%s'", TypeName, ins.ID)
		}
		return nil
	}
	return sdConn{rt: rt, daemon: true, ws: Workspace}, clean, nil
}

// execClient reaches the sandboxd of a TransportExec container through `sandboxd proxy`.
func (p *Provider) execClient(ins container.InspectResponse) (sdConn, func(context.Context) error, error) {
	token, err := containerToken(ins)
	if err != nil {
		return sdConn{}, nil, err
	}
	if len(ins.Config.Entrypoint) == 0 {
		return sdConn{}, nil, fault.New(fault.Provision, "%s: container '%s' has no sandboxd entrypoint", TypeName, ins.ID)
	}
	bin := ins.Config.Entrypoint[0]
	sock := sandboxRun + "/" + execRunDir + "/" + socketName
	dial := p.execDialer(ins.ID, "", []string{bin, "proxy", "--socket", sock}, nil)
	rt := remote.NewDialClient("sandbox "+ins.ID, dial, token)
	clean := func(ctx context.Context) error {
		// Archives cannot delete: the secret file is emptied instead.
		return p.copyIn(ctx, ins.ID, sandboxRun, ins.Config.User, tarEntry{name: execRunDir + "/" + tokenFileName, mode: 0o400})
	}
	return sdConn{rt: rt, daemon: true, ws: Workspace}, clean, nil
}

// stdioClient reaches a container without a sandboxd daemon through `sandboxd stdio`, one
// engine exec per connection, with a fresh secret per client in the exec's environment.
func (p *Provider) stdioClient(ctx context.Context, ins container.InspectResponse) (sdConn, error) {
	bin, err := p.installSandboxd(ctx, ins)
	if err != nil {
		return sdConn{}, err
	}
	ws := workspaceOf(ins, p.isTarget(ins))
	token := randomHex(32)
	dial := p.execDialer(ins.ID, p.cfg.User, []string{bin, "stdio", "--workspace", ws}, []string{tokenEnv + "=" + token})
	return sdConn{rt: remote.NewDialClient("sandbox "+ins.ID, dial, token), ws: ws}, nil
}

// installSandboxd returns the path of sandboxd in running container ins (one without a
// sandboxd daemon): its image's, or the gateway's binary copied to /.sandgate/bin/sandboxd on
// its root file system (once per start of the container).
func (p *Provider) installSandboxd(ctx context.Context, ins container.InspectResponse) (string, error) {
	inImage, err := p.imageSandboxd(ctx, ins.Image)
	if err != nil {
		return "", p.engineErr(err, "inspecting the image of container '%s'", ins.ID)
	}
	if inImage != "" {
		return inImage, nil
	}
	started := ""
	if ins.State != nil {
		started = ins.State.StartedAt
	}
	key := ins.ID + "@" + started
	if v, ok := p.sd.installed.Load(key); ok {
		return v.(string), nil
	}
	bin, err := p.sd.binaryPath()
	if err != nil {
		return "", fault.Wrap(fault.Provision, err, "%s: container '%s' (image '%s') does not ship sandboxd (no %s label) and the gateway has no sandboxd binary to copy in: build one with `make build` (bin/sandboxd) or set docker.sandboxd.binary",
			TypeName, ins.ID, ins.Config.Image, LabelSandboxdImage)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fault.Wrap(fault.Provision, err, "%s: reading the sandboxd binary", TypeName)
	}
	err = p.copyIn(ctx, ins.ID, "/", "",
		tarEntry{name: ".sandgate/", mode: 0o755},
		tarEntry{name: ".sandgate/bin/", mode: 0o755},
		tarEntry{name: ".sandgate/bin/sandboxd", mode: 0o755, data: data})
	if err != nil {
		if ins.HostConfig != nil && ins.HostConfig.ReadonlyRootfs {
			return "", fault.Wrap(fault.Provision, err, "%s: container '%s' has a read-only root file system and its image does not ship sandboxd: use an image with sandboxd (label %s) or a writable root file system", TypeName, ins.ID, LabelSandboxdImage)
		}
		return "", err
	}
	p.sd.installed.Store(key, sandboxBin)
	return sandboxBin, nil
}

// execDialer returns a dial function that opens one engine exec of cmd in container id (as
// user; "" for the container's) and makes a connection of its standard input and output.
// What the command writes to its standard error is kept (the last 4 KiB) for the error of a
// connection that ends early.
func (p *Provider) execDialer(id, user string, cmd, env []string) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		resp, err := p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
			User: user, AttachStdin: true, AttachStdout: true, AttachStderr: true,
			WorkingDir: "/", Cmd: cmd, Env: env,
		})
		if err != nil {
			return nil, p.execErr(err, id)
		}
		hr, err := p.cli.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
		if err != nil {
			return nil, p.execErr(err, id)
		}
		pr, pw := io.Pipe()
		stderr := &tailBuffer{max: 4 << 10}
		demuxed := make(chan struct{})
		go func() {
			defer close(demuxed)
			_, err := stdcopy.StdCopy(pw, stderr, hr.Reader)
			if err == nil && stderr.Len() > 0 {
				err = fmt.Errorf("sandboxd in sandbox '%s' ended: %s", id, strings.TrimSpace(stderr.String()))
			}
			_ = pw.CloseWithError(cmp.Or(err, io.EOF))
		}()
		return remote.StreamConn(pr, closeWriter{hr}, func() error {
			hr.Close()
			<-demuxed
			return nil
		}), nil
	}
}

// closeWriter writes to a hijacked exec stream; Close ends its standard input.
type closeWriter struct{ hr types.HijackedResponse }

func (w closeWriter) Write(b []byte) (int, error) { return w.hr.Conn.Write(b) }
func (w closeWriter) Close() error                { return w.hr.CloseWrite() }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.b)
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// execErr classifies an error of starting an exec in container id.
func (p *Provider) execErr(err error, id string) error {
	switch {
	case cerrdefs.IsNotFound(err):
		return fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
	case cerrdefs.IsConflict(err): // not running, paused or restarting
		return fault.Wrap(fault.Gone, err, "%s: sandbox '%s' is not running", TypeName, id)
	}
	return p.engineErr(err, "reaching sandboxd in sandbox '%s'", id)
}

// sandboxdPeer returns the check of a container's sandboxd listener (remote.NewVerifiedClient).
// Programs that run as sandboxd's own user (a non-root docker.sandboxd.user; by default they
// run as another and cannot touch its socket) may replace its socket with one of their own,
// so the listener must be sandboxd itself: the oldest child of the container's init
// (docker-init, State.Pid; sandboxd is the process it starts, and the container ends with it,
// so any other child — an orphan reparented to init — is younger). A listener that is not
// visible from the gateway's pid namespace (pid 0: the gateway runs in another one) cannot be
// checked and is let through, as is one of a container whose init is not visible.
func (p *Provider) sandboxdPeer(id string, initPID int) func(pid int32) error {
	var mu sync.Mutex
	return func(pid int32) error {
		if pid == 0 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		for attempt := 0; attempt < 2; attempt++ {
			if initPID == 0 || attempt == 1 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ins, err := p.cli.ContainerInspect(ctx, id)
				cancel()
				if err != nil {
					return fmt.Errorf("inspecting sandbox '%s': %w", id, err)
				}
				if ins.State == nil || ins.State.Pid == 0 {
					return fmt.Errorf("sandbox '%s' is not running", id)
				}
				initPID = ins.State.Pid
			}
			want, visible := oldestChild(initPID)
			switch {
			case visible && want == int(pid):
				return nil
			case !visible && attempt == 1:
				return nil // the container's init is in no pid namespace we see
			}
			// A mismatch or an init that is gone (the container restarted): look again.
		}
		return fmt.Errorf("%w: the process listening on it (pid %d) is not the sandbox's sandboxd; something in sandbox '%s' replaced its socket", remote.ErrForeignListener, pid, id)
	}
}

// oldestChild returns the child of process ppid that started first; visible is false when
// /proc does not show ppid (another pid namespace).
func oldestChild(ppid int) (pid int, visible bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	if err != nil {
		return 0, false
	}
	best, bestStart := 0, uint64(math.MaxUint64)
	for _, f := range strings.Fields(string(b)) {
		c, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c))
		if err != nil {
			continue
		}
		// Field 22 (starttime) counts from the field after the command, which ends at the
		// last ')'.
		i := strings.LastIndexByte(string(st), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(st[i+1:]))
		if len(fields) < 20 {
			continue
		}
		start, err := strconv.ParseUint(fields[19], 10, 64)
		if err != nil {
			continue
		}
		if start < bestStart || (start == bestStart && c < best) {
			best, bestStart = c, start
		}
	}
	return best, true
}

// writeToken puts the secret where sandboxd reads it at start (SANDBOXD_TOKEN_FILE), in the
// container's host socket folder, readable by the container's (non-root) user; sdClient
// removes it once sandboxd answers.
//
// The folder is writable from inside the container (sandboxd makes its socket there), so the
// sandbox may have planted links in it: the file is made through an os.Root of the folder
// (nothing outside it can be reached), under a fresh random name with O_EXCL|O_NOFOLLOW
// (never through an existing name or link), then renamed over "token" (a rename replaces a
// link, it does not follow it).
func writeToken(folder, token string) error {
	root, err := os.OpenRoot(folder)
	if err != nil {
		return fault.Wrap(fault.Provision, err, "%s: opening the sandboxd socket folder", TypeName)
	}
	defer root.Close()
	tmp := ".token-" + randomHex(8)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o444)
	if err != nil {
		return fault.Wrap(fault.Provision, err, "%s: writing the sandboxd secret file", TypeName)
	}
	_, err = f.WriteString(token)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, tokenFileName)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fault.Wrap(fault.Provision, err, "%s: writing the sandboxd secret file", TypeName)
	}
	return nil
}

// redeliverToken writes the secret of a stopped sandboxd container again before it is
// started (sandboxd reads it at every start; the gateway removes or empties the file once
// sandboxd answers). Containers without a sandboxd daemon, and those of the old kind with the
// secret in their environment, need nothing.
func (p *Provider) redeliverToken(ctx context.Context, ins container.InspectResponse) error {
	if ins.Config == nil {
		return nil
	}
	token, ok := ins.Config.Labels[LabelSandboxdToken]
	if !ok {
		return nil
	}
	if ins.Config.Labels[LabelSandboxdTransport] == string(TransportExec) {
		return p.deliverToken(ctx, ins.ID, ins.Config.User, token)
	}
	if p.sd.sockDir == "" {
		return nil // socketClient says what is wrong
	}
	folder, ok := p.sd.folder(ins.Config.Labels)
	if !ok {
		return fault.New(fault.Provision, "%s: container '%s' has a malformed %s label", TypeName, ins.ID, LabelSandboxd)
	}
	if err := os.MkdirAll(folder, 0o700); err != nil {
		return fault.Wrap(fault.Provision, err, "%s: recreating the sandboxd socket folder", TypeName)
	}
	if err := os.Chmod(folder, 0o777|os.ModeSticky); err != nil {
		return fault.Wrap(fault.Provision, err, "%s: preparing the sandboxd socket folder", TypeName)
	}
	return writeToken(folder, token)
}

// forgetClient drops the cached client of container id.
func (p *Provider) forgetClient(id string) {
	if v, ok := p.sd.clients.LoadAndDelete(id); ok {
		_ = v.(sdConn).rt.Close()
	}
}

// removeSocketFolder removes the host socket folder a container's label names.
func (p *Provider) removeSocketFolder(labels map[string]string) {
	if p.sd.sockDir == "" {
		return
	}
	if folder, ok := p.sd.folder(labels); ok {
		_ = os.RemoveAll(folder)
	}
}

// sweepSocketFolders removes this installation's socket folders of the profile that no
// container in live names.
func (p *Provider) sweepSocketFolders(live map[string]bool) {
	if p.sd.sockDir == "" {
		return
	}
	entries, err := os.ReadDir(p.sd.sockDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !live[e.Name()] && socketFolder.MatchString(e.Name()) {
			// Young folders may belong to a container being created right now.
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) < time.Minute {
				continue
			}
			_ = os.RemoveAll(filepath.Join(p.sd.sockDir, e.Name()))
		}
	}
}
