package docker

import (
	_ "embed"

	"github.com/sandgate/sandgate/internal/providers"
)

// Block is a docker profile's block (`docker:`) as the configuration file writes it. Its
// comments are the keys' descriptions in config.schema.json.
type Block struct {
	Image    string `koanf:"image" json:"image"`         // default python:3.12-slim
	Runtime  string `koanf:"runtime" json:"runtime"`     // OCI runtime; default "docker" (the engine default)
	AttachTo string `koanf:"attach_to" json:"attach_to"` // container id/name (attached profiles)
	Host     string `koanf:"host" json:"host"`           // engine address; default from DOCKER_HOST
	// User runs the sandbox's programs as this user ("uid", "uid:gid", "name" or
	// "name:group" of the image); default sandboxd.user, else 65532:65532. sandboxd, root in
	// the container with only the capabilities this needs, starts them so and gives them
	// /workspace: they cannot signal, stop or trace it. Root here leaves it in their reach.
	User string `koanf:"user" json:"user"`
	// PidsLimit caps the number of processes in one sandbox (fork bombs); default 256.
	PidsLimit int64 `koanf:"pids_limit" json:"pids_limit"`
	// Pull says what happens when the engine lacks the image: missing (default) pulls it, never
	// fails the sandbox creation instead.
	Pull string `koanf:"pull" json:"pull"`
	// WarmPool keeps started containers ready so that new sandboxes start at once (managed
	// profiles only).
	WarmPool *WarmPoolBlock `koanf:"warm_pool" json:"warm_pool,omitempty"`
	// Sandboxd configures sandboxd, the runtime agent every docker sandbox's executions, files
	// and code contexts go through (the entrypoint of the containers the gateway starts).
	Sandboxd *SandboxdBlock `koanf:"sandboxd" json:"sandboxd,omitempty"`
	// StateDir is the folder on the engine's host (the gateway must see it at the same path)
	// holding what outlives a gateway restart: the workspace images of size-bounded sandboxes
	// (policy disk_mb), one sparse file each. Default /var/lib/sandgate/docker.
	StateDir string `koanf:"state_dir" json:"state_dir"`
}

// SandboxdBlock configures the sandboxd runtime agent of a docker profile.
type SandboxdBlock struct {
	// Binary is the static sandboxd executable copied into containers whose image does not
	// ship it (images without the label dev.sandgate.sandboxd). Default: "sandboxd" next to the
	// gateway's executable, then on PATH.
	Binary string `koanf:"binary" json:"binary"`
	// Transport is how the gateway reaches sandboxd: socket (a Unix socket in a host folder
	// bind-mounted into the container; the gateway must see socket_dir at the engine's path)
	// or exec (a stream through the engine's exec API to `sandboxd proxy` in the container;
	// works with any engine the gateway can reach, remote ones too). Default: socket for an
	// engine on a local Unix socket, exec otherwise.
	Transport string `koanf:"transport" json:"transport"`
	// SocketDir is the folder on the engine's host holding one socket folder per sandbox,
	// bind-mounted into its container (transport socket); the gateway must see it at the same
	// path (run the gateway on the engine's host, or mount the folder at the same path).
	// Default: /run/sandgate/sandboxd as root, else $XDG_RUNTIME_DIR/sandgate/sandboxd or
	// <temp>/sandgate-<uid>/sandboxd.
	SocketDir string `koanf:"socket_dir" json:"socket_dir"`
	// User, when not root, runs sandboxd and then the programs too (it cannot switch users;
	// docker.user must be unset or the same), so they can stop it. Default: sandboxd runs as
	// root in the container with CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL,
	// CAP_SETGID and CAP_SETUID only, and programs as docker.user.
	User string `koanf:"user" json:"user"`
}

// WarmPoolBlock keeps containers of a docker profile started ahead of use. Each serves one
// sandbox and is destroyed with it; the pool refills in the background.
type WarmPoolBlock struct {
	// Size is how many ready containers the pool keeps; 0 disables the pool.
	Size int `koanf:"size" json:"size"`
}

// Pull policies (docker.pull).
const (
	PullMissing = "missing" // pull the image when the engine lacks it (default)
	PullNever   = "never"   // never pull; a missing image fails sandbox creation
)

var (
	pullPolicies = []string{PullMissing, PullNever}
	transports   = []string{string(TransportSocket), string(TransportExec)}
)

//go:embed block.go
var blockSource []byte

// Backend is the docker provider type for a providers.Registry: its factory and its block.
func Backend() providers.Backend {
	return providers.Backend{
		Type: TypeName, Factory: Factory,
		NewBlock:     func() providers.Block { return new(Block) },
		Provisions:   true,
		Attaches:     true,
		AttachTarget: "a container id or name",
		Summary:      "Docker runs one container per sandbox.",
		SchemaName:   "Docker",
		BlockSource:  blockSource,
		Removed: map[string]string{
			"sandboxd.enabled": "removed: sandboxd now runs in every docker sandbox; delete this key",
		},
	}
}

// ApplyDefaults sets image, pids_limit and pull when unset.
func (b *Block) ApplyDefaults() {
	if b.Image == "" {
		b.Image = DefaultImage
	}
	if b.PidsLimit == 0 {
		b.PidsLimit = DefaultPidsLimit
	}
	if b.Pull == "" {
		b.Pull = PullMissing
	}
}

// AttachTarget is attach_to.
func (b *Block) AttachTarget() string { return b.AttachTo }

// Validate checks the enumerated keys, the warm pool (managed profiles only) and stateful,
// which needs containers the gateway starts.
func (b *Block) Validate(p providers.Profile) []providers.Problem {
	var ps providers.Problems
	if b.Pull != "" { // "" is the default, missing
		ps.Enum(TypeName+".pull", b.Pull, pullPolicies)
	}
	if b.PidsLimit < 0 { // 0 is the default, 256
		ps.Add(TypeName+".pids_limit", "must be greater than 0 (got %d)", b.PidsLimit)
	}
	if sd := b.Sandboxd; sd != nil && sd.Transport != "" { // "" is the default, by engine address
		ps.Enum(TypeName+".sandboxd.transport", sd.Transport, transports)
	}
	if w := b.WarmPool; w != nil {
		switch {
		case w.Size < 0:
			ps.Add(TypeName+".warm_pool.size", "must not be negative (got %d)", w.Size)
		case w.Size > 0 && p.Attached:
			ps.Add(TypeName+".warm_pool", "is only for managed profiles: an attached profile binds to its attach_to target and never creates containers")
		}
	}
	if p.Stateful && p.Attached {
		ps.Add("stateful", "an attached docker profile runs in a container the gateway did not start, where no sandboxd keeps running between calls; remove stateful or use a managed profile")
	}
	return ps
}

// Options returns the Options New is built from: the attach target for an attached profile,
// the Config for every profile (Profile, Installation, Policy, Stateful and Logger are the
// factory's).
func (b *Block) Options(p providers.Profile) any {
	c := Config{
		Image: b.Image, Runtime: b.Runtime, Host: b.Host, User: b.User,
		PidsLimit: b.PidsLimit, NeverPull: b.Pull == PullNever, StateDir: b.StateDir,
	}
	if w := b.WarmPool; w != nil {
		c.WarmPoolSize = w.Size
	}
	if s := b.Sandboxd; s != nil {
		c.Sandboxd = SandboxdConfig{Binary: s.Binary, Transport: Transport(s.Transport), SocketDir: s.SocketDir, User: s.User}
	}
	o := Options{Config: c}
	if p.Attached {
		o.AttachTo = p.AttachTo
	}
	return o
}
