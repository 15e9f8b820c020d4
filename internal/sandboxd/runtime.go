//go:build unix

package sandboxd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
)

// Defaults of Options' tuning fields.
const (
	DefaultKillGrace  = 2 * time.Second
	DefaultDrainDelay = 250 * time.Millisecond
	// DefaultMaxContexts is how many contexts a runtime keeps at most when Options.MaxContexts
	// is 0: each one is a process, and a sandbox's process and memory limits are shared.
	DefaultMaxContexts = 16
)

// defaultPath is PATH of programs when neither Options.Env nor sandboxd's own environment
// has one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// shell runs commands.
const shell = "/bin/sh"

// Options configure a Runtime. Only Workspace is required.
type Options struct {
	// Workspace is the absolute path of the folder files are confined to and programs run in
	// by default. It must exist and must not be "/".
	Workspace string
	// Env is the base environment of programs, as "K=V" entries. Nil means a minimal base:
	// PATH (sandboxd's own PATH, or a standard default), HOME=Workspace, LANG=C.UTF-8 and
	// PYTHONUNBUFFERED=1.
	Env []string
	// Python is the interpreter of python code and python contexts: a path, or a name looked
	// up on the PATH of Env when used. Empty means "python3".
	Python string
	// Bash runs bash code and bash contexts, like Python. Empty means "bash".
	Bash string
	// KillGrace is how long the processes of a timed-out or cancelled execution have between
	// SIGTERM and SIGKILL, and how long a python context has to answer an interrupt. Zero
	// means DefaultKillGrace.
	KillGrace time.Duration
	// DrainDelay is how long output is still read once an execution's program has ended, for
	// output held open by processes that escaped it. Zero means DefaultDrainDelay.
	DrainDelay time.Duration
	// MaxContexts caps the number of contexts (created or auto-created); more is
	// fault.Conflict. Zero means DefaultMaxContexts.
	MaxContexts int
	// StateFile, when set, is a file outside the workspace (say, next to the socket) in which
	// the runtime records the name and language of each context it keeps. A runtime started
	// again on the same file — the sandbox restarted — knows which contexts it lost, and the
	// first execution in each reports Result.ContextReset instead of silently starting from
	// nothing (see the package doc). "" keeps no record.
	StateFile string
	// Cgroups, when set, gives every execution and context a cgroup of its own, so that
	// processes that leave the execution's session (setsid, a double fork) are killed with
	// it too (procgroup.DetectCgroups); nil keeps the session-only handling.
	Cgroups *procgroup.Cgroups
	// Subreaper makes the runtime's process the child subreaper of what it starts and ends
	// every process that escaped its execution's session (setsid, a double fork) once the
	// executions that may own it have ended (see orphans). For a runtime that owns its process
	// (cmd/sandboxd) without Cgroups, which contain such processes by themselves; the setting
	// is process-wide, so a runtime sharing its process with others should leave it off.
	Subreaper bool
	// User, when set, runs every program and context as this user instead of the runtime's
	// own (setuid and setgid through SysProcAttr.Credential), so that no program can signal,
	// stop, trace or read the runtime's process; files and folders the runtime makes in the
	// workspace (WriteFile, ExtractWorkspace) and the folders of bash context state belong to
	// it. The runtime's process needs CAP_SETUID and CAP_SETGID to start programs so,
	// CAP_KILL to signal them, and CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER to keep the
	// workspace theirs and still readable and writable for itself — root in a container with
	// just those capabilities (cmd/sandboxd --run-as). Nil runs programs as the runtime's own
	// user: they can then stop it (local_subprocess; see the package doc).
	User *User
	// Logger receives debug and warning records; nil discards them.
	Logger *slog.Logger
}

// User is a user programs run as (Options.User).
type User struct {
	UID, GID uint32
	// Groups are the supplementary groups; nil means none.
	Groups []uint32
}

// Runtime runs programs and stateful contexts in one workspace and moves its files. Build it
// with New; its methods are safe for concurrent use.
type Runtime struct {
	workspace  string // absolute, symlinks resolved
	root       *os.Root
	env        []string // base environment
	python     string
	bash       string
	killGrace  time.Duration
	drainDelay time.Duration
	maxCtx     int
	stateDir   string // private folder of bash context state, made on first use; under mu
	log        *slog.Logger

	life     context.Context // cancelled by Close
	shutdown context.CancelFunc
	running  sync.WaitGroup // executions in progress

	stateFile string             // Options.StateFile
	cgroups   *procgroup.Cgroups // Options.Cgroups
	orphans   *orphans           // Options.Subreaper
	user      *User              // Options.User

	mu       sync.Mutex
	closed   bool
	contexts map[string]*codeContext
	lost     map[string]string     // contexts an earlier runtime kept, not used since: name → language
	kept     map[string]*Execution // executions started with Start, by id (executions.go)
	nextID   int                   // names the state folders of bash contexts
}

// errShutdown is the cause of an execution killed by Close.
var errShutdown = errors.New("sandboxd is shutting down")

// New checks opts and returns a Runtime on opts.Workspace. It starts no process and writes
// nothing: contexts start on first use, and the private 0700 folder of bash context state
// is made under os.TempDir when the first bash context is created. Close releases it.
//
// Errors: a fault.Validation error when Workspace is not absolute, is "/", or is not an
// existing folder.
func New(opts Options) (*Runtime, error) {
	if !filepath.IsAbs(opts.Workspace) {
		return nil, fault.New(fault.Validation, "sandboxd: the workspace %q must be an absolute path", opts.Workspace)
	}
	ws, err := filepath.EvalSymlinks(opts.Workspace)
	if err != nil {
		return nil, fault.Wrap(fault.Validation, err, "sandboxd: the workspace %q is not usable", opts.Workspace)
	}
	if ws == "/" {
		return nil, fault.New(fault.Validation, "sandboxd: refusing to use / as the workspace; give a folder")
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return nil, fault.New(fault.Validation, "sandboxd: the workspace %q is not a folder", opts.Workspace)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, fault.Wrap(fault.Validation, err, "sandboxd: opening the workspace %q", opts.Workspace)
	}
	r := &Runtime{
		workspace:  ws,
		root:       root,
		env:        baseEnv(opts.Env, ws),
		python:     cmp.Or(opts.Python, "python3"),
		bash:       cmp.Or(opts.Bash, "bash"),
		killGrace:  durationOr(opts.KillGrace, DefaultKillGrace),
		drainDelay: durationOr(opts.DrainDelay, DefaultDrainDelay),
		maxCtx:     cmp.Or(opts.MaxContexts, DefaultMaxContexts),
		log:        opts.Logger,
		contexts:   make(map[string]*codeContext),
		stateFile:  opts.StateFile,
		cgroups:    opts.Cgroups,
		orphans:    newOrphans(opts.Subreaper),
		user:       opts.User,
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.lost = r.readState(); len(r.lost) > 0 {
		r.log.Info("sandboxd: contexts of an earlier start are gone; their next executions say so", "contexts", len(r.lost))
	}
	r.life, r.shutdown = context.WithCancel(context.Background())
	return r, nil
}

// Workspace returns the absolute path of the workspace, symlinks resolved.
func (r *Runtime) Workspace() string { return r.workspace }

// Close kills every running execution and every context's processes, waits (at most
// KillGrace plus a few seconds) for the executions to return, and removes the private folder
// of bash context state. Later calls of other methods fail with fault.Gone. It is idempotent and returns nil.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	ctxs := make([]*codeContext, 0, len(r.contexts))
	for _, c := range r.contexts {
		ctxs = append(ctxs, c)
	}
	clear(r.contexts)
	r.mu.Unlock()

	r.shutdown()
	for _, c := range ctxs {
		c.stop(errShutdown)
	}
	done := make(chan struct{})
	go func() { r.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.killGrace + r.drainDelay + 5*time.Second):
		r.log.Warn("sandboxd: executions still running after close")
	}
	for _, c := range ctxs {
		c.dropPython(errShutdown) // one an execution started meanwhile
	}
	r.orphans.close()
	r.mu.Lock()
	if r.stateDir != "" {
		_ = os.RemoveAll(r.stateDir)
	}
	r.mu.Unlock()
	_ = r.root.Close()
	return nil
}

// begin registers an execution; end must be called when it has returned. A background
// execution does not shelter escaped processes (see orphans), but its end sweeps them too.
func (r *Runtime) begin(background bool) (end func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fault.New(fault.Gone, "%s", errShutdown)
	}
	r.running.Add(1)
	endOrphans := r.orphans.ended
	if !background {
		endOrphans = r.orphans.begin()
	}
	return func() {
		endOrphans()
		r.running.Done()
	}, nil
}

// baseEnv returns a copy of env, or the minimal base when env is nil.
func baseEnv(env []string, workspace string) []string {
	if env != nil {
		return append([]string(nil), env...)
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	return []string{
		"PATH=" + path,
		"HOME=" + workspace,
		"LANG=C.UTF-8",
		"PYTHONUNBUFFERED=1",
	}
}

// mergeEnv returns base with the variables of extra set (replacing base's), in base's order
// then extra's sorted order.
func mergeEnv(base []string, extra map[string]string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[name]; !ok {
			out = append(out, kv)
		}
	}
	for _, name := range sortedKeys(extra) {
		out = append(out, name+"="+extra[name])
	}
	return out
}

// envValue returns the value of name in env ("" when absent; the last entry wins).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// lookPath finds program name on the search path pathEnv, the way a shell does: a name with a
// slash is used as is (relative to dir when not absolute).
func lookPath(name, pathEnv, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, executable(p)
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, os.ErrNotExist)
}

// executable returns nil when p is a regular file with an execute bit.
func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: %w", p, os.ErrPermission)
	}
	return nil
}

// interpreter resolves the program of language (python or bash) on the base PATH.
// Errors: fault.Capability when it is not installed.
func (r *Runtime) interpreter(language string) (string, error) {
	name := r.python
	if language == "bash" {
		name = r.bash
	}
	p, err := lookPath(name, envValue(r.env, "PATH"), r.workspace)
	if err != nil {
		return "", fault.Unsupported("this sandbox", "language:"+language+" ("+name+" is not installed)")
	}
	return p, nil
}

// credential sets attr (made when nil) to start a program as the programs' user, when they
// have one of their own, and returns it.
func (r *Runtime) credential(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	if r.user != nil {
		attr.Credential = &syscall.Credential{Uid: r.user.UID, Gid: r.user.GID, Groups: append([]uint32{}, r.user.Groups...)}
	}
	return attr
}

// own gives workspace entry name (a symlink itself, not followed) to the programs' user,
// when they have one of their own.
func (r *Runtime) own(name string) error {
	if r.user == nil {
		return nil
	}
	return r.root.Lchown(name, int(r.user.UID), int(r.user.GID))
}

// ownFile gives open file f to the programs' user, when they have one of their own.
func (r *Runtime) ownFile(f *os.File) error {
	if r.user == nil {
		return nil
	}
	return f.Chown(int(r.user.UID), int(r.user.GID))
}

// givePrograms gives the program's ends of its pipes (and its terminal) to the programs'
// user, when they run as another: a program that opens them again by name — /dev/stdout,
// /dev/stdin, /dev/fd/3, /dev/tty — must be allowed to, as it would be for pipes it made
// itself. Best effort: a program may always use the descriptors it inherits.
func (r *Runtime) givePrograms(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = r.ownFile(f)
		}
	}
}

func durationOr(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
