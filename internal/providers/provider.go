// Package providers defines what a sandbox backend is to Sandgate: a Provider creates,
// attaches and destroys sandboxes, and a Sandbox runs programs and moves files. Each provider
// declares its Capabilities honestly; the domain (internal/sandbox) checks policy, identity and
// capabilities before it calls a provider, and providers fail closed on anything they cannot
// enforce (docs/semantics.md §3, §12).
//
// Providers know nothing of HTTP, Postgres or the caller beyond the Principal and Policy values
// they are handed, and never read the global configuration: a provider is built from its own
// profile block (see Registry).
//
// Every provider should pass the contract suite in package providertest.
package providers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"time"
)

// IsolationTier says how strongly a provider separates sandboxed code from its host
// (docs/semantics.md §1).
type IsolationTier string

const (
	IsolationNone          IsolationTier = "none"
	IsolationOSPolicy      IsolationTier = "os_policy"
	IsolationContainer     IsolationTier = "container"
	IsolationSyscallFilter IsolationTier = "syscall_filter"
	IsolationMicroVM       IsolationTier = "micro_vm"
	IsolationWASM          IsolationTier = "wasm"
)

// Valid reports whether t is one of the defined tiers.
func (t IsolationTier) Valid() bool {
	switch t {
	case IsolationNone, IsolationOSPolicy, IsolationContainer, IsolationSyscallFilter, IsolationMicroVM, IsolationWASM:
		return true
	}
	return false
}

// Principal is the identity a provider acts for (seed SandboxPrincipal). In agent mode the
// provider uses the gateway's own identity; in user mode it must act as Subject with the given
// Credentials (Kubernetes impersonation, AWS AssumeRole, run-as user) or fail closed.
type Principal struct {
	Mode        string // ModeAgent or ModeUser
	Subject     string // required
	Groups      []string
	Credentials Credentials
}

// Identity modes of a Principal (a profile's identity.mode).
const (
	ModeAgent = "agent" // the gateway's own identity
	ModeUser  = "user"  // the caller's, from Credentials
)

// Credentials are user-mode identity inputs. Only WebIdentityToken is a secret.
type Credentials struct {
	User    string   // Kubernetes user to impersonate (default: Subject)
	Groups  []string // Kubernetes groups to impersonate (default: Principal.Groups)
	RoleARN string   // AWS role to assume
	RunAs   string   // OS user to run commands as
	// WebIdentityToken is the caller's own OIDC token, for providers that exchange it
	// (ec2_ssm web_identity: AssumeRoleWithWebIdentity). A secret: never log or persist it.
	// Empty when the execution does not carry it (queued executions, requests made with an
	// API key).
	WebIdentityToken string `json:"-"`
}

// Network egress modes of a Policy.
const (
	EgressAllow     = "allow"
	EgressDeny      = "deny"
	EgressAllowlist = "allowlist"
)

// Policy bounds what a sandbox may do (seed SandboxPolicy). Timeout is always enforced; the
// other dimensions only by providers that declare the matching policy capability.
type Policy struct {
	NetworkEgress string   // allow | deny | allowlist
	NetworkAllow  []string // CIDRs or domains, for allowlist
	FSAllowRead   []string
	FSAllowWrite  []string
	CPU           float64 // cores; 0 = unset
	MemoryMB      int     // 0 = unset
	Timeout       time.Duration
	Strict        bool

	// DiskMB bounds the workspace's size in MiB (0 = unset); writes past it fail inside the
	// sandbox (ENOSPC where the provider can make it so; see each provider's doc).
	DiskMB int

	// Secrets are the session's secrets, resolved: the sandbox sees only their placeholders,
	// and the egress proxy substitutes the values for the hosts each is bound to. A provider
	// that cannot route a sandbox's traffic through the egress proxy refuses a policy with
	// secrets (fault.Policy): a secret it cannot keep out of the sandbox is never handed in.
	Secrets []SecretBinding
}

// How a policy's network egress is enforced (EgressEnforcement; /v1/profiles egress).
const (
	EnforcedByProxy    = "proxy"    // the gateway's egress proxy (internal/egress; docker)
	EnforcedByProvider = "provider" // the provider's own network controls
	EnforcedByNone     = "none"     // nothing: egress allow, or a mode the provider does not enforce (strict false)
)

// EgressEnforcer is implemented by providers that say themselves how they enforce a policy's
// network egress (one of the EnforcedBy values).
type EgressEnforcer interface {
	EgressEnforcement(pol Policy) string
}

// EgressEnforcement says how p, declaring caps, enforces pol's network egress: its
// EgressEnforcer's answer when it has one; else none for allow and, for deny and allowlist,
// provider when it declares policy_network, none when not.
func EgressEnforcement(p Provider, caps Capabilities, pol Policy) string {
	if e, ok := p.(EgressEnforcer); ok {
		return e.EgressEnforcement(pol)
	}
	if pol.NetworkEgress == EgressAllow || pol.NetworkEgress == "" || !caps.PolicyNetwork {
		return EnforcedByNone
	}
	return EnforcedByProvider
}

// SecretBinding is one named secret as a session uses it (issue 39): programs in the sandbox
// see only Placeholder, in the environment variable EnvName; the egress proxy replaces
// Placeholder with Value in the headers of requests to Hosts, and nowhere else.
type SecretBinding struct {
	// Name is the secret's name (lower-case letters, digits, '_' and '-').
	Name string
	// EnvName is the variable holding the placeholder in the sandbox: SANDGATE_SECRET_ and the
	// upper-cased name with '-' as '_' (SANDGATE_SECRET_OPENAI for "openai").
	EnvName string
	// Placeholder is an opaque token standing for the value, unique per session and secret.
	Placeholder string
	// Value is the secret itself. Never log, persist unencrypted or hand it to a sandbox.
	Value []byte `json:"-"`
	// Hosts are the host patterns the value may be sent to, in network_allow's syntax
	// (api.example.com, *.example.com, api.example.com:443).
	Hosts []string
}

// Capabilities is what a provider honestly supports (seed SandboxCapabilities). Isolation is
// required.
type Capabilities struct {
	Isolation        IsolationTier
	Shell            bool
	Languages        []string
	Files            bool
	PackageInstall   bool
	Stateful         bool // variables persist across code executions
	Attach           bool // can reconnect to a live sandbox by id
	Provisions       bool // false: attach-only
	AttachesExternal bool // can bind to a target it did not create (attach_to)
	PrincipalUser    bool // can act as a user-mode principal
	PolicyNetwork    bool
	PolicyFilesystem bool
	PolicyResources  bool
	// PolicyDisk: the provider bounds the workspace's size (policy disk_mb).
	PolicyDisk bool
	// OneShotCommands: each command runs as its own process with nothing carried over — no
	// working directory, exported variable or background job outlives it (ec2_ssm).
	OneShotCommands bool
	// Interactive: an execution's standard input can stay open and be fed while it runs, and
	// a command can run on a terminal (ExecSpec.StdinOpen, ExecSpec.PTY; Executions).
	Interactive bool
	// Background: commands can run as background processes that outlive their call
	// (ExecSpec.Background with Executions.Start).
	Background bool
	// Pause: sandboxes can be frozen in place and thawed (Pauser): a paused sandbox keeps its
	// files, processes and memory and uses no CPU.
	Pause bool
	// Snapshots: a sandbox's workspace and file system can be captured and a new sandbox
	// started from the capture (Snapshotter).
	Snapshots bool
	// PreviewPorts: TCP ports inside a sandbox can be reached through the provider, without
	// publishing them on any host (PortDialer).
	PreviewPorts bool
}

// SupportsLanguage reports whether lang is one of the declared languages.
func (c Capabilities) SupportsLanguage(lang string) bool {
	for _, l := range c.Languages {
		if l == lang {
			return true
		}
	}
	return false
}

// WarmPooler is implemented by providers that keep sandboxes started ahead of use (docker's
// warm_pool), for the metrics (docs/semantics.md §14). ok is false when this instance has no
// pool.
type WarmPooler interface {
	WarmPoolStats() (stats WarmPoolStats, ok bool)
}

// WarmPoolStats describe a provider's warm pool as this process sees it.
type WarmPoolStats struct {
	Size  int // the configured size
	Ready int // sandboxes ready to claim now
	// Hits and Misses count Create calls since the provider was built that a ready sandbox
	// served, and that found none (a sandbox was started for them instead).
	Hits, Misses uint64
}

// Provider creates, attaches and destroys sandboxes of one backend.
type Provider interface {
	// Type is the provider's short name (local_subprocess, docker, …).
	Type() string
	// Capabilities may differ per instance (e.g. Kubernetes network policy).
	Capabilities() Capabilities
	// Create provisions a new sandbox (or, for attach_to profiles, binds to the target).
	// Failures are fault.Provision.
	Create(ctx context.Context, p Principal, pol Policy) (Sandbox, error)
	// Attach reconnects to sandbox id. It returns a fault.Gone error when the target no longer
	// exists, and a fault.Capability error when the provider cannot attach.
	Attach(ctx context.Context, id string, p Principal, pol Policy) (Sandbox, error)
	// Destroy removes sandbox id. It is idempotent: an unknown id is a no-op.
	Destroy(ctx context.Context, id string) error
}

// Sandbox is a live handle on one sandbox. At most one Exec, InstallPackages or write runs
// per sandbox at a time (the domain serialises them); reads may run concurrently.
type Sandbox interface {
	// ID is stable across attach and reconnect.
	ID() string
	// Exec runs one program to completion and returns how it ended. A non-zero exit is an
	// ExitStatus, never an error. When spec.Timeout passes (wall clock from start) or ctx is
	// cancelled, the whole process tree is killed and the partial output already written
	// stays written; the status says TimedOut, or the error is ctx.Err().
	// Errors: fault.Capability for an undeclared language or shell without the capability;
	// an error wrapping ErrUnreached when the sandbox could not be reached and nothing ran.
	Exec(ctx context.Context, spec ExecSpec) (ExitStatus, error)
	// InstallPackages installs packages with the sandbox's package manager.
	// Without the package_install capability: fault.Capability.
	InstallPackages(ctx context.Context, packages []string, out Output) (ExitStatus, error)
	// WriteFile streams r into path (relative to the workspace), creating parent folders.
	// More than maxBytes bytes: fault.TooLarge and no file is left behind. Returns bytes written.
	//
	// The file methods answer one bad path with one fault on every provider (CleanPath,
	// CleanEntry; pinned by providertest's faults group): fault.Policy for a NUL byte, an
	// absolute path or one leaving the workspace (also through a symlink, where the provider
	// confines them); fault.Validation for the workspace folder itself as what WriteFile
	// writes or RemoveFile removes, and for a name or path too long; fault.Conflict for a
	// folder where WriteFile or ReadFile wants a file, a file where ListFiles wants a folder
	// or WriteFile a parent folder, and a folder RemoveFile finds not empty; fault.NotFound
	// when ReadFile or ListFiles finds nothing there (also below a file), where RemoveFile
	// succeeds. A bad path is refused before the handle is looked at (a closed handle too
	// answers it so), as a bad ExecSpec is (CheckExecSpec).
	WriteFile(ctx context.Context, path string, r io.Reader, maxBytes int64) (int64, error)
	// ReadFile opens path for reading. Missing: fault.NotFound; a folder: fault.Conflict.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
	// ListFiles lists folder dir without following symlinks, sorted by name.
	ListFiles(ctx context.Context, dir string) ([]FileInfo, error)
	// RemoveFile removes a file or an empty folder. Missing: nil.
	RemoveFile(ctx context.Context, path string) error
	// Close releases the handle. It is idempotent and never destroys state a later Attach
	// needs; every other method of a closed handle returns fault.Conflict, once its input
	// passed the checks (a bad ExecSpec or path keeps its fault, a capability the provider
	// lacks is still fault.Capability).
	Close() error
}

// Output receives a program's two streams and, for code, its rich results.
type Output struct {
	Stdout io.Writer
	Stderr io.Writer
	// ResultFunc, when set, is called with each rich result of code as the code produces it
	// (ExitStatus.Results has them all), never concurrently. Providers without rich results
	// never call it.
	ResultFunc func(RichResult)
}

// RichResult is one rich result of code, as a notebook shows it (sandboxd's python contexts:
// sandboxd.RichResult, whose doc gives the forms): the value of the code's last expression
// (Main) or a display (display(...), a matplotlib figure), as a MIME bundle. Its JSON form is
// the API's.
type RichResult struct {
	// Data maps MIME types to their representation: a JSON string (base64 for image/png,
	// image/jpeg and application/pdf), or any JSON value for application/json and "+json"
	// types. Nil when Dropped.
	Data map[string]json.RawMessage `json:"data,omitempty"`
	// Main: the value of the code's last expression; false for a display.
	Main bool `json:"is_main_result"`
	// Dropped: the result was over the output limit and dropped whole; it names what it was.
	Dropped *DroppedResult `json:"dropped,omitempty"`
}

// DroppedResult names a rich result that was dropped whole.
type DroppedResult struct {
	Types []string `json:"types"` // its MIME types, sorted
	Bytes int64    `json:"bytes"` // its size (RichResult.Size)
}

// Size is the size of r's data in bytes: the lengths of its values as JSON (a dropped
// result's: the size it had).
func (r RichResult) Size() int64 {
	if r.Dropped != nil {
		return r.Dropped.Bytes
	}
	var n int64
	for _, v := range r.Data {
		n += int64(len(v))
	}
	return n
}

// ExecSpec describes one execution: exactly one of Command (run by /bin/sh -c) or Code (run by
// the interpreter for Language).
type ExecSpec struct {
	Command  string
	Code     string
	Language string
	// Env adds variables to the program's environment; names are validated by the domain and
	// values passed natively, never through a shell string.
	Env map[string]string
	// Dir is the working folder relative to the workspace ("" = the workspace).
	Dir string
	// Stdin feeds standard input; nil means empty (immediate EOF).
	Stdin io.Reader
	// Timeout is the wall-clock limit from start; 0 means none.
	Timeout time.Duration
	// Context names the stateful context that runs Code ("" = a fresh interpreter). Only for
	// code, and only on sandboxes that implement Contexts; an unknown name is created with
	// spec.Language on first use. See Contexts.
	Context string
	// ID names the execution (the domain gives its task id). A sandbox that implements
	// Reattacher holds an execution with an id in the sandbox, so that it runs on when the
	// gateway that started it stops and another one can follow it (Reattach); others ignore
	// it. Ending ctx still stops the execution.
	ID string
	// StdinOpen keeps standard input open after Stdin: Executions.WriteStdin feeds it while
	// the execution runs (capability interactive; ID required).
	StdinOpen bool
	// PTY runs a command on a pseudo-terminal of this size: one output stream (Stdout), input
	// open as with StdinOpen, Executions.Resize changes the size (capability interactive).
	PTY *TermSize
	// Background makes the command a background process (Executions.Start only; capability
	// background): it runs until it ends, is stopped, or its sandbox goes.
	Background bool
	// MaxResultBytes bounds the rich results of code together (RichResult.Size; 0: the
	// provider's own bound): a result that does not fit is dropped whole and named
	// (RichResult.Dropped), never cut.
	MaxResultBytes int64
	Output
}

// TermSize is a terminal's size in character cells (1 to 1000 each).
type TermSize struct {
	Rows, Cols int
}

// Executions is implemented by sandboxes whose runtime keeps executions by id (sandboxd, and
// e2b's envd, which keeps no output: see Reattacher): they run detached from their caller, and any gateway can follow them (Reattach), feed
// their input, resize their terminal or stop them. Errors of every method: fault.NotFound
// when the sandbox keeps no execution of that id (never started there, ended long ago, or the
// sandbox restarted); the provider's others.
type Executions interface {
	Reattacher
	// Start starts spec (spec.ID required; spec.Output unused: follow with Reattach) and
	// returns once its program runs. Errors: fault.Conflict when the id is taken;
	// fault.Validation for what the runtime refuses (a PTY or background with code).
	Start(ctx context.Context, spec ExecSpec) (ProcessInfo, error)
	// Stop ends execution id like a cancel (its whole process tree is killed); one that
	// ended is left as it is.
	Stop(ctx context.Context, id string) error
	// WriteStdin copies in to the execution's open standard input; with eof it then closes it
	// (a terminal gets ^D). Errors: fault.Conflict when it takes no input (not started with
	// StdinOpen or PTY, closed, or ended).
	WriteStdin(ctx context.Context, id string, in io.Reader, eof bool) (int64, error)
	// Resize sets the size of the execution's terminal. Errors: fault.Conflict without one.
	Resize(ctx context.Context, id string, size TermSize) error
}

// ProcessInfo describes a started execution.
type ProcessInfo struct {
	ID        string
	PID       int // in the sandbox; 0 when unknown
	StartedAt time.Time
}

// Reattacher is implemented by sandboxes whose runtime holds executions (sandboxd in a
// container or pod, e2b's envd): an execution started with ExecSpec.ID outlives the gateway
// that started it, and Reattach follows it again — its kept output (the start and the end of
// each stream) to out, and how it ended. Writers of out with a method Skip(n int64) are told
// of bytes dropped from the middle. A runtime that keeps no output (envd) gives only what the
// program writes from the moment of following, except to the gateway that started it. An
// execution that was stopped keeps its output like one that ended: a follower that comes
// after the stop gets the output written before it, then ErrExecutionStopped.
//
// Errors: fault.NotFound when the sandbox holds no such execution (it ran elsewhere, it ended
// long before, or the sandbox restarted); ErrExecutionStopped when it was stopped; ctx.Err()
// (following stops, the execution runs on); the provider's other errors.
type Reattacher interface {
	Reattach(ctx context.Context, id string, out Output) (ExitStatus, error)
}

// Pauser is implemented by providers that can freeze a sandbox in place (capability pause):
// every process of a paused sandbox stops being scheduled — it uses no CPU — and keeps its
// memory, open files and connections; files stay as they were. Both methods work by sandbox id
// (no Attach: attaching may itself resume a sandbox) and are idempotent.
//
// Errors: fault.Gone when the sandbox no longer exists (or is not one of the provider's);
// the provider's others (fault.Provision when its backend does not answer).
type Pauser interface {
	// Pause freezes sandbox id; a paused one stays paused.
	Pause(ctx context.Context, id string) error
	// Resume thaws sandbox id; a running one is left as it is.
	Resume(ctx context.Context, id string) error
}

// SnapshotMeta describes a snapshot to the provider, which records it with the capture (as
// labels, names or metadata) so that what it stores can be told apart and traced back.
type SnapshotMeta struct {
	ID        string // the snapshot's id (32 lower-case hex digits)
	Owner     string // who it belongs to (the principal's label); "" for none
	SessionID string // the session the sandbox served
	Profile   string
}

// SnapshotInfo is what a provider captured.
type SnapshotInfo struct {
	// Ref is the provider's handle on the capture (an image id, a folder): what Restore and
	// DeleteSnapshot take.
	Ref string
	// SizeBytes is the size of what was captured (the workspace archive), in bytes.
	SizeBytes int64
}

// Snapshotter is implemented by providers that can capture a sandbox (capability
// snapshots): its workspace and whatever else of its file system outlives a restart, never
// its processes or memory.
type Snapshotter interface {
	// Snapshot captures sandbox id (running or paused; it keeps running as it was).
	// Errors: fault.Gone when the sandbox no longer exists; the provider's others.
	Snapshot(ctx context.Context, id string, meta SnapshotMeta) (SnapshotInfo, error)
	// Restore creates a new sandbox from capture ref, for p under pol, as Create does: its
	// workspace holds the captured files, and nothing runs in it but what Create starts.
	// Errors: fault.NotFound when the capture no longer exists; Create's others.
	Restore(ctx context.Context, ref string, p Principal, pol Policy) (Sandbox, error)
	// DeleteSnapshot removes capture ref. Idempotent: an unknown ref is a no-op. Sandboxes
	// restored from it are not affected.
	DeleteSnapshot(ctx context.Context, ref string) error
}

// MaxPort is the highest TCP port (PortDialer).
const MaxPort = 65535

// PortDialer is implemented by sandboxes whose provider can reach TCP ports inside them
// (capability preview_ports): DialPort returns a connection to 127.0.0.1:port as seen
// from inside the sandbox (its network namespace), made by the sandbox's runtime, so nothing
// is published on a host and the sandbox's egress policy is untouched. The connection
// outlives the handle's Close.
//
// Errors: fault.Validation for a port outside 1–MaxPort; fault.Conflict when nothing listens
// on the port; the provider's others.
type PortDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// ErrUnreached is in the chain of an Exec error whose sandbox could not be reached: nothing
// ran. A provider may hand out a handle it trusts without a round trip (a kept connection
// to the sandbox); when the sandbox is gone, or was restarted, the first Exec finds out, and
// the domain attaches again — the ordinary path, with its self-healing — and runs the
// execution once more.
var ErrUnreached = errors.New("the sandbox could not be reached; nothing ran")

// ErrExecutionStopped is Reattach's error for an execution stopped by its caller.
var ErrExecutionStopped = errors.New("the execution was stopped by its caller")

// DefaultContext is the context that serves code executions of a profile with
// `stateful: true` when the caller names none.
const DefaultContext = "default"

// Contexts is implemented by the sandboxes of providers that keep interpreter state between
// code executions (capability stateful). A context is a named, long-lived interpreter inside
// the sandbox: a Python context keeps its globals across executions (seed 004's runtime), a
// bash context keeps its working folder and exported variables. Contexts die with their
// sandbox.
type Contexts interface {
	// ListContexts returns the sandbox's contexts, sorted by name.
	ListContexts(ctx context.Context) ([]ContextInfo, error)
	// CreateContext starts context name for language (python or bash).
	// Errors: fault.Validation for a bad name or language, fault.Conflict when it exists.
	CreateContext(ctx context.Context, name, language string) (ContextInfo, error)
	// RestartContext replaces context name's interpreter with a fresh one: its state is lost.
	// Errors: fault.NotFound when there is no such context.
	RestartContext(ctx context.Context, name string) (ContextInfo, error)
	// DeleteContext stops context name and forgets it. Errors: fault.NotFound.
	DeleteContext(ctx context.Context, name string) error
}

// ContextInfo describes one stateful context.
type ContextInfo struct {
	Name       string
	Language   string // python | bash
	CreatedAt  time.Time
	Executions int  // executions run since the context (re)started
	Alive      bool // false after its interpreter died; the next execution restarts it
}

// ExitStatus is how a program ended.
type ExitStatus struct {
	// ExitCode is the exit status; 128+n when killed by signal n. Meaningless when TimedOut.
	ExitCode int
	// Signal names the signal that ended the program ("SIGKILL"), if any.
	Signal   string
	TimedOut bool
	// OOMKilled says the kernel's out-of-memory killer ended the program (policy memory_mb).
	OOMKilled bool
	// ContextLost says the execution's context died during it (crash, os._exit, OOM, timeout
	// that needed SIGKILL): its state is gone and the next execution starts a fresh one.
	ContextLost bool
	// ContextReset says the context was lost when the sandbox restarted, so this execution ran
	// in a fresh one, without the state of earlier executions (reported once).
	ContextReset bool
	// Error is the exception code in a context raised (sandboxd's python contexts; also
	// printed to stderr as its traceback); nil otherwise, and for providers that report none.
	Error *CodeError
	// Results are the rich results of code, in the order it produced them (nil without any,
	// and for providers that give none).
	Results []RichResult
}

// CodeError is an exception raised by code in a context, as Jupyter reports one: its class
// name ("NameError"), its value (str(exception)) and its traceback as printed.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// FileTree is what a Sandbox with the files capability may add to its file methods: folders
// made, entries moved, folders removed with what they hold — each done in the sandbox on the
// paths given, never through a command line made of them. A Sandbox without it does not offer
// these (the domain answers fault.Unsupported "files"). The paths are checked as the file
// methods check them (CleanEntry: the workspace itself is fault.Validation; an escape,
// also through a symlink where the provider confines them, fault.Policy).
type FileTree interface {
	// MakeDir makes folder path and its missing parents; a folder already there is no
	// error. fault.Conflict when path or a parent is not a folder.
	MakeDir(ctx context.Context, path string) error
	// Move renames from to to as Go's os.Rename does: a symlink is moved itself, a file at
	// to is replaced, to's missing parents are made first. fault.NotFound when from does not
	// exist; fault.Conflict for a folder at to (empty or not: os.Rename replaces none), or a
	// folder moved onto a file; fault.Validation for a folder moved into itself.
	Move(ctx context.Context, from, to string) error
	// RemoveAll removes path and, for a folder, everything in it (symlinks themselves, never
	// followed). Missing: nil.
	RemoveAll(ctx context.Context, path string) error
}

// FileType classifies a workspace entry.
type FileType string

const (
	FileRegular FileType = "file"
	FileDir     FileType = "dir"
	FileSymlink FileType = "symlink"
	FileOther   FileType = "other"
)

// FileInfo is one entry of a workspace listing.
type FileInfo struct {
	Name    string
	Path    string // relative to the workspace
	Type    FileType
	Size    int64
	Mode    fs.FileMode // permission bits
	ModTime time.Time
}
