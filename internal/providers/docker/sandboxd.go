package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// Where sandboxd lives in a container, and the image label that says an image ships it.
const (
	// LabelSandboxdImage on an image gives the absolute path of the sandboxd binary it ships;
	// images without it get the gateway's binary copied in at sandboxBin.
	LabelSandboxdImage = "dev.sandgate.sandboxd"
	// LabelSandboxd on a container names its socket folder under the socket dir.
	LabelSandboxd = "sandgate.sandboxd"
	// LabelSandboxdToken holds the container's sandboxd secret (256 bits, hex). Only the
	// engine's API shows labels; nothing inside the container does.
	LabelSandboxdToken = "sandgate.sandboxd-token"

	sandboxRun    = "/.sandgate/run" // bind mount of the container's host socket folder
	sandboxBinDir = "/.sandgate/bin" // anonymous volume the binary is copied into
	sandboxBin    = sandboxBinDir + "/sandboxd"
	socketName    = "sd.sock"
	tokenEnv      = "SANDBOXD_TOKEN" // containers made before the secret moved to a file
	tokenFileName = "token"
	stateFileName = "contexts.json"

	// DefaultSandboxdUser runs sandboxd and the programs when neither docker.user nor
	// docker.sandboxd.user is set: the conventional "nonroot" uid/gid of distroless images.
	DefaultSandboxdUser = "65532:65532"
	// readyTimeout bounds how long a started container's sandboxd has to answer /readyz.
	readyTimeout = 20 * time.Second
)

// sdMode is the provider's sandboxd configuration (nil: plain docker exec).
type sdMode struct {
	sockDir string // host folder of this profile's socket folders
	binary  string // configured binary ("" = look next to the executable, then on PATH)
	user    string

	binOnce sync.Once
	binPath string
	binErr  error

	images  sync.Map // image reference → in-image sandboxd path ("" = none)
	clients sync.Map // container id → *remote.Client (keeps its connections alive)
}

// newSDMode prepares sandboxd mode for a profile.
func newSDMode(profileSlug string, c SandboxdConfig, user string) (*sdMode, error) {
	m := &sdMode{user: user, binary: c.Binary}
	if m.user == "" {
		m.user = c.User
	}
	if m.user == "" {
		m.user = DefaultSandboxdUser
	}
	root := c.SocketDir
	if root == "" {
		root = DefaultSocketDir()
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "%s: docker.sandboxd.socket_dir", TypeName)
	}
	if len(profileSlug) > 24 {
		profileSlug = profileSlug[:24]
	}
	m.sockDir = filepath.Join(root, profileSlug)
	// A Unix socket path has room for 107 bytes; leave room for "/<12 hex>/sd.sock".
	if n := len(m.sockDir) + 1 + 12 + 1 + len(socketName); n > 107 {
		return nil, fault.New(fault.Config, "%s: docker.sandboxd.socket_dir '%s' is too long for Unix socket paths (%d > 107 bytes); choose a shorter folder", TypeName, root, n)
	}
	return m, nil
}

// DefaultSocketDir is the default of docker.sandboxd.socket_dir: /run/sandgate/sandboxd for
// root, else $XDG_RUNTIME_DIR/sandgate/sandboxd or <temp>/sandgate-<uid>/sandboxd. Each
// profile has a folder under it, and each sandbox a folder (named by its container label
// sandgate.sandboxd) holding the socket sd.sock.
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
func (m *sdMode) binaryPath() (string, error) {
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

func (m *sdMode) folder(name string) (string, bool) {
	if !socketFolder.MatchString(name) {
		return "", false
	}
	return filepath.Join(m.sockDir, name), true
}

// imageSandboxd returns the path of the sandboxd the image ships, "" when it ships none.
func (p *Provider) imageSandboxd(ctx context.Context) (string, error) {
	ref := p.cfg.Image
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

// sandboxdSpec turns a plain container spec into sandboxd mode: sandboxd as the entrypoint
// (under docker's init) as a non-root user, a read-only root file system with a volume at
// /workspace and a tmpfs at /tmp.
func (m *sdMode) sandboxdSpec(s *containerSpec, tmpfs string) {
	s.cfg.Entrypoint = []string{sandboxBin, "serve"}
	s.cfg.Cmd = nil
	s.cfg.User = m.user
	s.cfg.Env = append(s.cfg.Env,
		"SANDBOXD_SOCKET="+sandboxRun+"/"+socketName,
		"SANDBOXD_TOKEN_FILE="+sandboxRun+"/"+tokenFileName,
		// On the host folder, so it outlives a restart of the container: a restarted sandboxd
		// reports the contexts it lost.
		"SANDBOXD_STATE_FILE="+sandboxRun+"/"+stateFileName,
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

func hasMount(ms []mount.Mount, target string) bool {
	for _, m := range ms {
		if m.Target == target {
			return true
		}
	}
	return false
}

// prepareSandboxd adds the per-container parts of sandboxd mode to cfg and hc before the
// container is created: a fresh secret, a socket folder on the host bind-mounted at
// /.sandgate/run, and — for images without sandboxd — a volume the binary is copied into.
// It returns the binary to copy ("" = the image ships one) and the socket folder.
func (p *Provider) prepareSandboxd(ctx context.Context, cfg *container.Config, hc *container.HostConfig) (copyBin, folder string, err error) {
	inImage, err := p.imageSandboxd(ctx)
	if err != nil {
		return "", "", err
	}
	if inImage != "" {
		cfg.Entrypoint = []string{inImage, "serve"}
	} else {
		bin, err := p.sd.binaryPath()
		if err != nil {
			return "", "", fault.Wrap(fault.Provision, err, "%s: image '%s' does not ship sandboxd (no %s label) and the gateway has no sandboxd binary to copy in: build one with `make build` (bin/sandboxd) or set docker.sandboxd.binary",
				TypeName, p.cfg.Image, LabelSandboxdImage)
		}
		copyBin = bin
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: sandboxBinDir})
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
	// The secret is never in the container's environment (every process there, docker-init
	// as PID 1 first, would show it in /proc/PID/environ): it is a label, which only the
	// engine's API shows, and reaches sandboxd as a file that the gateway removes as soon
	// as sandboxd answers — before any program can run.
	cfg.Labels[LabelSandboxdToken] = randomHex(32)
	if err := writeToken(folder, cfg.Labels[LabelSandboxdToken]); err != nil {
		_ = os.RemoveAll(folder)
		return "", "", err
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: folder, Target: sandboxRun})
	return copyBin, folder, nil
}

// copySandboxd copies the binary at bin into created (not yet started) container id.
func (p *Provider) copySandboxd(ctx context.Context, id, bin string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return fault.Wrap(fault.Provision, err, "%s: reading the sandboxd binary", TypeName)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "sandboxd", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := p.cli.CopyToContainer(ctx, id, sandboxBinDir, &buf, container.CopyToContainerOptions{}); err != nil {
		return p.engineErr(err, "copying sandboxd into sandbox container '%s'", id)
	}
	return nil
}

// sdClient returns the runtime client of a sandboxd container (nil for plain containers),
// waiting until sandboxd answers when wait is set.
func (p *Provider) sdClient(ctx context.Context, ins container.InspectResponse, wait bool) (*remote.Client, error) {
	if p.sd == nil || ins.Config == nil {
		return nil, nil
	}
	name, ok := ins.Config.Labels[LabelSandboxd]
	if !ok {
		return nil, nil // made before sandboxd was enabled: plain exec
	}
	folder, ok := p.sd.folder(name)
	if !ok {
		return nil, fault.New(fault.Provision, "%s: container '%s' has a malformed %s label", TypeName, ins.ID, LabelSandboxd)
	}
	token := ins.Config.Labels[LabelSandboxdToken]
	for _, kv := range ins.Config.Env {
		if v, ok := strings.CutPrefix(kv, tokenEnv+"="); ok && token == "" {
			token = v
		}
	}
	if token == "" {
		return nil, fault.New(fault.Provision, "%s: container '%s' runs sandboxd without a secret", TypeName, ins.ID)
	}
	if v, ok := p.sd.clients.Load(ins.ID); ok {
		c := v.(*remote.Client)
		if err := c.Ready(ctx); err == nil {
			return c, nil
		}
		p.forgetClient(ins.ID)
	}
	initPID := 0
	if ins.State != nil {
		initPID = ins.State.Pid // 0 for a container not started yet: looked up at the first dial
	}
	c := remote.NewVerifiedClient(filepath.Join(folder, socketName), token, p.sandboxdPeer(ins.ID, initPID))
	deadline := time.Now().Add(readyTimeout)
	for {
		err := c.Ready(ctx)
		if err == nil {
			break
		}
		if !wait || time.Now().After(deadline) || ctx.Err() != nil {
			_ = c.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fault.Wrap(fault.Provision, err, "%s: sandboxd in sandbox '%s' does not answer on %s (the gateway must see docker.sandboxd.socket_dir at the engine's path)",
				TypeName, ins.ID, filepath.Join(folder, socketName))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// sandboxd has read its secret: no program may find the file (none has run yet).
	if err := os.Remove(filepath.Join(folder, tokenFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		_ = c.Close()
		return nil, fault.Wrap(fault.Provision, err, "%s: removing the sandboxd secret file of sandbox '%s'", TypeName, ins.ID)
	}
	if prev, loaded := p.sd.clients.LoadOrStore(ins.ID, c); loaded {
		_ = c.Close()
		c = prev.(*remote.Client)
	}
	return c, nil
}

// sandboxdPeer returns the check of a container's sandboxd listener (remote.NewVerifiedClient).
// Programs in the container run as sandboxd's user and may replace its socket with one of
// their own, so the listener must be sandboxd itself: the oldest child of the container's init
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
		return fmt.Errorf("the process listening on the socket (pid %d) is not the sandbox's sandboxd; something in sandbox '%s' replaced its socket", pid, id)
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
// started (sandboxd reads it at every start; a container of the old kind, with the secret
// in its environment, needs nothing).
func (p *Provider) redeliverToken(ins container.InspectResponse) error {
	if p.sd == nil || ins.Config == nil {
		return nil
	}
	token, ok := ins.Config.Labels[LabelSandboxdToken]
	if !ok {
		return nil
	}
	folder, ok := p.sd.folder(ins.Config.Labels[LabelSandboxd])
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
	if p.sd == nil {
		return
	}
	if v, ok := p.sd.clients.LoadAndDelete(id); ok {
		_ = v.(*remote.Client).Close()
	}
}

// removeSocketFolder removes the host socket folder a container's label names.
func (p *Provider) removeSocketFolder(labels map[string]string) {
	if p.sd == nil {
		return
	}
	if folder, ok := p.sd.folder(labels[LabelSandboxd]); ok {
		_ = os.RemoveAll(folder)
	}
}

// sweepSocketFolders removes the profile's socket folders that no container in live names.
func (p *Provider) sweepSocketFolders(live map[string]bool) {
	if p.sd == nil {
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

// execSandboxd runs spec through sandboxd.
func (s *Sandbox) execSandboxd(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	req, err := providers.RuntimeRequest(spec)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	return s.runSandboxd(ctx, req, spec.Output)
}

func (s *Sandbox) runSandboxd(ctx context.Context, req sandboxd.ExecRequest, out providers.Output) (providers.ExitStatus, error) {
	res, err := s.rt.Exec(ctx, req, providers.RuntimeStreams(out))
	st := providers.RuntimeStatus(res)
	if err != nil {
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		return st, s.rtErr(err)
	}
	if res.OOMKilled && out.Stderr != nil {
		_, _ = io.WriteString(out.Stderr, oomNotice)
		s.p.log.Warn("the kernel's OOM killer ended a program in a sandbox", "sandbox_id", s.id)
	}
	return st, nil
}

// rtErr classifies a sandboxd error: its fault kinds stand; anything else (a connection
// that broke) means the sandbox went away or is unreachable.
func (s *Sandbox) rtErr(err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	s.p.forgetClient(s.id)
	return fault.Wrap(fault.Provision, err, "%s: sandboxd in sandbox '%s' failed", TypeName, s.id)
}

// ListContexts lists the sandbox's stateful contexts (sandboxd mode only).
func (s *Sandbox) ListContexts(ctx context.Context) ([]providers.ContextInfo, error) {
	if err := s.contextsUsable(); err != nil {
		return nil, err
	}
	list, err := s.rt.ListContexts(ctx)
	if err != nil {
		return nil, s.rtErr(err)
	}
	out := make([]providers.ContextInfo, len(list))
	for i, c := range list {
		out[i] = providers.RuntimeContext(c)
	}
	return out, nil
}

// CreateContext starts context name for language (sandboxd mode only).
func (s *Sandbox) CreateContext(ctx context.Context, name, language string) (providers.ContextInfo, error) {
	if err := s.contextsUsable(); err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := s.rt.CreateContext(ctx, name, language)
	if err != nil {
		return providers.ContextInfo{}, s.rtErr(err)
	}
	return providers.RuntimeContext(c), nil
}

// RestartContext gives context name a fresh interpreter (sandboxd mode only).
func (s *Sandbox) RestartContext(ctx context.Context, name string) (providers.ContextInfo, error) {
	if err := s.contextsUsable(); err != nil {
		return providers.ContextInfo{}, err
	}
	c, err := s.rt.RestartContext(ctx, name)
	if err != nil {
		return providers.ContextInfo{}, s.rtErr(err)
	}
	return providers.RuntimeContext(c), nil
}

// DeleteContext stops context name (sandboxd mode only).
func (s *Sandbox) DeleteContext(ctx context.Context, name string) error {
	if err := s.contextsUsable(); err != nil {
		return err
	}
	if err := s.rt.DeleteContext(ctx, name); err != nil {
		return s.rtErr(err)
	}
	return nil
}

func (s *Sandbox) contextsUsable() error {
	if err := s.usable(); err != nil {
		return err
	}
	if s.rt == nil {
		return fault.Unsupported(TypeName, "stateful")
	}
	return nil
}
