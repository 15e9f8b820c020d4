//go:build unix

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// TypeName is the provider's type name in profiles and the registry.
const TypeName = "local_subprocess"

// SandboxPrefix starts the name of every sandbox folder; Attach and Destroy touch nothing else.
const SandboxPrefix = "sandgate-sandbox-"

// Defaults of the Provider's tuning fields.
const (
	DefaultKillGrace  = 2 * time.Second
	DefaultDrainDelay = time.Second
)

// shell runs commands (docs/semantics.md §12: commands run by /bin/sh -c).
const shell = "/bin/sh"

// Provider is the local_subprocess provider. Build it with New (or Factory); its exported
// fields may be changed before its first use only.
type Provider struct {
	// KillGrace is how long the processes of a timed-out or cancelled execution have between
	// SIGTERM and SIGKILL. Zero means DefaultKillGrace.
	KillGrace time.Duration
	// DrainDelay is how long Exec keeps reading output once every process of the execution's
	// session is dead, for output held open by a process that escaped the session. Zero means
	// DefaultDrainDelay.
	DrainDelay time.Duration

	workdir string // absolute, symlinks resolved
	python  string // absolute path of the interpreter (its sys.executable)
	bash    string // absolute path, "" when the host has none
	pathEnv string // PATH of executions
	caps    providers.Capabilities
	logger  *slog.Logger

	mu       sync.Mutex
	runtimes map[string]*sandboxd.Runtime // by sandbox id (see contexts.go)
	cgroups  *procgroup.Cgroups           // nil where cgroups cannot be made
	closed   bool
}

var _ providers.Provider = (*Provider)(nil)

// DefaultPython is the default of Options.Python.
const DefaultPython = "python3"

// Options configure New: the profile's local_subprocess settings.
type Options struct {
	// Workdir is the folder that holds the per-sandbox folders; it is created when missing.
	// Default os.TempDir().
	Workdir string
	// Python is the interpreter for language "python": a path, or a name looked up on PATH.
	// Default DefaultPython.
	Python string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Factory builds the provider of a profile whose type is local_subprocess, for
// providers.Registry, from ctx.Options (an Options). A profile without a local_subprocess
// block is a fault.Config error (docs/semantics.md §6); other errors are New's.
func Factory(ctx providers.BuildContext) (providers.Provider, error) {
	opts, err := providers.OptionsOf[Options](ctx, TypeName)
	if err != nil {
		return nil, err
	}
	opts.Logger = ctx.Logger
	return New(opts)
}

// New builds the provider. opts.Workdir is created when missing and resolved to an absolute
// path without symlinks; opts.Python is run once to learn its sys.executable. bash is looked
// up on PATH: without it the provider declares python only.
//
// New logs one WARNING that the provider provides NO isolation (docs/semantics.md §12).
// Errors: fault.Config when the workdir cannot be made or /bin/sh or the interpreter is
// missing or does not run.
func New(opts Options) (*Provider, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	workdir, err := resolveWorkdir(opts.Workdir)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(shell); err != nil || st.IsDir() {
		return nil, fault.New(fault.Config, "%s: %s is missing on this host", TypeName, shell)
	}
	python, err := resolvePython(opts.Python)
	if err != nil {
		return nil, err
	}
	bash, _ := exec.LookPath("bash")
	if bash != "" {
		if bash, err = filepath.Abs(bash); err != nil {
			bash = ""
		}
	}

	langs := []string{"python"}
	if bash != "" {
		langs = append(langs, "bash")
	} else {
		logger.Warn("local_subprocess: bash not found on PATH; declaring python only")
	}
	pathEnv := os.Getenv("PATH")
	if pathEnv == "" {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	if dir := filepath.Dir(python); !strings.HasPrefix(pathEnv, dir+":") {
		pathEnv = dir + ":" + pathEnv
	}

	p := &Provider{
		workdir: workdir,
		python:  python,
		bash:    bash,
		pathEnv: pathEnv,
		logger:  logger,
		caps: providers.Capabilities{
			Isolation:   providers.IsolationNone,
			Shell:       true,
			Languages:   langs,
			Files:       true,
			Attach:      true,
			Provisions:  true,
			Stateful:    true,
			Interactive: true,
			Background:  true,
			// A snapshot is an archive of the folder; a port is the host's loopback. There is
			// nothing to freeze a folder's processes with: no pause.
			Snapshots:    true,
			PreviewPorts: true,
		},
	}
	// Executions that leave their session (setsid, a double fork) are contained where this
	// process may make cgroups (root on a cgroup v2 host); elsewhere they are not.
	if cg, err := procgroup.DetectCgroups("sandgate"); err == nil {
		p.cgroups = cg
		logger.Info("local_subprocess: each execution gets a cgroup of its own; processes that leave its session die with it", "cgroup", cg.Parent())
	} else {
		logger.Info("local_subprocess: processes that leave an execution's session (setsid) outlive it here", "reason", err)
	}
	logger.Warn("local_subprocess provides NO isolation: programs run as the gateway's own user on the gateway's host; use it for development and tests only",
		"workdir", workdir, "python", python)
	return p, nil
}

func resolveWorkdir(dir string) (string, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fault.Wrap(fault.Config, err, "%s: workdir '%s'", TypeName, dir)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fault.Wrap(fault.Config, err, "%s: cannot create workdir '%s'", TypeName, abs)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fault.Wrap(fault.Config, err, "%s: workdir '%s'", TypeName, abs)
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", fault.New(fault.Config, "%s: workdir '%s' is not a folder", TypeName, real)
	}
	return real, nil
}

// resolvePython finds the interpreter and asks it for sys.executable, so that version-manager
// shims (which need the gateway's environment) are not in the way of executions that get a
// minimal environment.
func resolvePython(name string) (string, error) {
	if name == "" {
		name = DefaultPython
	}
	found, err := exec.LookPath(name)
	if err != nil {
		return "", fault.Wrap(fault.Config, err, "%s: python interpreter '%s' not found", TypeName, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, found, "-c", "import sys; sys.stdout.write(sys.executable)").Output()
	if err != nil {
		return "", fault.Wrap(fault.Config, err, "%s: python interpreter '%s' does not run", TypeName, found)
	}
	exe := strings.TrimSpace(string(out))
	if exe == "" || !filepath.IsAbs(exe) {
		exe = found
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return "", fault.Wrap(fault.Config, err, "%s: python interpreter '%s'", TypeName, found)
	}
	return exe, nil
}

// Type returns "local_subprocess".
func (p *Provider) Type() string { return TypeName }

// Capabilities reports the provider's capabilities: isolation none; shell; languages python and bash (python only when the host
// has no bash); files; attach; provisions; stateful (contexts in the gateway process — more
// than the seed's local_subprocess, which keeps none); snapshots (workspace archives); preview
// ports (the host's loopback). No package_install, no pause, no policy dimension
// (docs/semantics.md §12).
func (p *Provider) Capabilities() providers.Capabilities {
	c := p.caps
	c.Languages = append([]string(nil), p.caps.Languages...)
	return c
}

// Workdir returns the absolute folder that holds the sandbox folders.
func (p *Provider) Workdir() string { return p.workdir }

// Create makes a fresh sandbox folder under the workdir. The principal and policy are not
// used (see the package doc). Errors: ctx.Err(), or fault.Provision when the folder cannot be
// made.
func (p *Provider) Create(ctx context.Context, _ providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("local_subprocess", pol); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(p.workdir, SandboxPrefix+"*")
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: cannot create a sandbox folder", TypeName)
	}
	sb, err := p.open(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fault.Wrap(fault.Provision, err, "%s: cannot open sandbox folder", TypeName)
	}
	p.logger.Debug("sandbox created", "sandbox_id", dir)
	return sb, nil
}

// Attach reopens sandbox id, the absolute path of a sandbox folder. Errors: ctx.Err(), or
// fault.Gone when id is not a "sandgate-sandbox-" folder directly under the workdir or no
// longer exists (docs/semantics.md §3, §12).
func (p *Provider) Attach(ctx context.Context, id string, _ providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("local_subprocess", pol); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !p.owns(id) {
		return nil, fault.New(fault.Gone, "%s: no sandbox '%s' under %s", TypeName, id, p.workdir)
	}
	st, err := os.Lstat(id)
	if err != nil || !st.IsDir() {
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
	}
	sb, err := p.open(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", TypeName, id)
	}
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: cannot open sandbox '%s'", TypeName, id)
	}
	return sb, nil
}

// Destroy removes sandbox folder id with everything in it. It is idempotent: an id that is not
// a "sandgate-sandbox-" folder directly under the workdir, or no longer exists, is a no-op.
// Executions still running in the sandbox (through this Provider) are killed first and return
// fault.Gone (field-notes "Lifecycle": an in-flight call fails within seconds); folders a
// program made unwritable are made writable.
func (p *Provider) Destroy(_ context.Context, id string) error {
	if !p.owns(id) {
		p.logger.Debug("destroy ignored: not a sandbox of this provider", "sandbox_id", id)
		return nil
	}
	st, err := os.Lstat(id)
	if err != nil || !st.IsDir() {
		return nil
	}
	p.closeRuntime(id) // ends the executions running in it, within KillGrace
	_ = os.Remove(filepath.Join(p.workdir, contextStateDir, filepath.Base(id)+".json"))
	if err := os.RemoveAll(id); err != nil {
		// A program may have left folders without write or search permission.
		_ = filepath.WalkDir(id, func(path string, d fs.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				_ = os.Chmod(path, 0o700)
			}
			return nil
		})
		if err := os.RemoveAll(id); err != nil {
			return fmt.Errorf("%s: destroying sandbox '%s': %w", TypeName, id, err)
		}
	}
	p.logger.Debug("sandbox destroyed", "sandbox_id", id)
	return nil
}

// owns reports whether id names a sandbox folder of this provider: an absolute, clean path
// directly under the workdir whose name starts with SandboxPrefix.
func (p *Provider) owns(id string) bool {
	if !filepath.IsAbs(id) || filepath.Clean(id) != id || filepath.Dir(id) != p.workdir {
		return false
	}
	name := filepath.Base(id)
	return len(name) > len(SandboxPrefix) && strings.HasPrefix(name, SandboxPrefix)
}

func (p *Provider) open(dir string) (*Sandbox, error) {
	s := &Sandbox{NoPackageInstall: providers.NoPackageInstall{Subject: TypeName}, p: p, id: dir}
	s.RuntimeExecutions = providers.RuntimeExecutions{
		Subject: TypeName, Caps: p.Capabilities, Runtime: s.kept, Classify: func(err error) error { return err },
	}
	return s, nil
}

func (p *Provider) killGrace() time.Duration {
	if p.KillGrace > 0 {
		return p.KillGrace
	}
	return DefaultKillGrace
}

func (p *Provider) drainDelay() time.Duration {
	if p.DrainDelay > 0 {
		return p.DrainDelay
	}
	return DefaultDrainDelay
}
