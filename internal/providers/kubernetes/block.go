package kubernetes

import (
	_ "embed"
	"path"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/providers"
)

// Block is a kubernetes profile's block (`kubernetes:`) as the configuration file writes it.
// Its comments are the keys' descriptions in config.schema.json.
type Block struct {
	Namespace                string            `koanf:"namespace" json:"namespace"` // default "default"
	Image                    string            `koanf:"image" json:"image"`         // default sandgate/sandbox-python:latest (ships sandboxd)
	AttachTo                 string            `koanf:"attach_to" json:"attach_to"` // "<ns>/<pod>"
	Kubeconfig               string            `koanf:"kubeconfig" json:"kubeconfig"`
	ServiceAccount           string            `koanf:"service_account" json:"service_account"`
	ImagePullSecrets         []string          `koanf:"image_pull_secrets" json:"image_pull_secrets"`
	Labels                   map[string]string `koanf:"labels" json:"labels"`
	NodeSelector             map[string]string `koanf:"node_selector" json:"node_selector"`
	Env                      map[string]string `koanf:"env" json:"env" secret:"true"` // values redacted when printed
	SecurityContext          map[string]any    `koanf:"security_context" json:"security_context"`
	ContainerSecurityContext map[string]any    `koanf:"container_security_context" json:"container_security_context"`
	NetworkPolicy            bool              `koanf:"network_policy" json:"network_policy"`
	CreateTimeout            float64           `koanf:"create_timeout" json:"create_timeout"` // seconds; default 120
	// Workspace is the folder in the pod that holds the sandbox's files (an emptyDir in the
	// pods the provider creates); files are confined to it. Default "/workspace".
	Workspace string `koanf:"workspace" json:"workspace"`
	// RuntimeClassName selects a RuntimeClass for the sandbox pods (e.g. "kata" or "gvisor");
	// default the cluster's default runtime.
	RuntimeClassName string `koanf:"runtime_class_name" json:"runtime_class_name"`
	// AgentSandbox acquires sandboxes from kubernetes-sigs/agent-sandbox (a SandboxClaim on a
	// warm pool) instead of creating pods (managed profiles only).
	AgentSandbox *AgentSandboxBlock `koanf:"agent_sandbox" json:"agent_sandbox,omitempty"`
	// Sandboxd says where the pods' sandboxd (the runtime every execution, file operation
	// and context goes through) comes from.
	Sandboxd SandboxdBlock `koanf:"sandboxd" json:"sandboxd"`
	// SnapshotDir is an absolute folder on the gateway's host where workspace snapshots are
	// kept (one gzip-compressed tar archive per snapshot, with a JSON metadata file); with
	// several replicas, a volume they all mount (a ReadWriteMany PVC). Unset: the profile
	// cannot snapshot (capability snapshots false). Managed profiles only.
	SnapshotDir string `koanf:"snapshot_dir" json:"snapshot_dir"`
}

// SandboxdBlock is the kubernetes.sandboxd block.
type SandboxdBlock struct {
	// Path is the sandboxd executable in the sandbox container; default
	// /usr/local/bin/sandboxd (where images labelled dev.sandgate.sandboxd, like
	// sandgate/sandbox-python, ship it). Attached pods must run `<path> serve --await-token
	// --socket /.sandgate/run/sd.sock`. With image, it is the path in that image.
	Path string `koanf:"path" json:"path"`
	// Image, when set, is an image that ships sandboxd at path: an init container made from
	// it copies the binary (`sandboxd install`) into an emptyDir the sandbox container runs
	// it from, so kubernetes.image need not ship sandboxd. Pods the provider creates only
	// (not agent_sandbox or attach_to).
	Image string `koanf:"image" json:"image"`
	// Transport is how the gateway reaches sandboxd: exec (default: a tunnel through the API
	// server's pods/exec to `sandboxd proxy`; works from outside the cluster) or pod_ip
	// (TCP to the pod IP, port 8888, where sandboxd listens once it has its token, given
	// through one exec tunnel; the gateway must reach the pod network).
	Transport string `koanf:"transport" json:"transport"`
}

// AgentSandboxBlock names the agent-sandbox warm pool (extensions.agents.x-k8s.io/v1beta1
// SandboxWarmPool, in the profile's namespace) that sandboxes are claimed from.
type AgentSandboxBlock struct {
	// WarmPool is the SandboxWarmPool each SandboxClaim references. Required.
	WarmPool string `koanf:"warm_pool" json:"warm_pool"`
	// Template, when set, is the SandboxTemplate the warm pool must be made from; the provider
	// checks it before its first claim.
	Template string `koanf:"template" json:"template"`
}

var transports = []string{TransportExec, TransportPodIP}

//go:embed block.go
var blockSource []byte

// Backend is the kubernetes provider type for a providers.Registry: its factory and its block.
func Backend() providers.Backend {
	return providers.Backend{
		Type: TypeName, Factory: Factory,
		NewBlock:     func() providers.Block { return new(Block) },
		Provisions:   true,
		Attaches:     true,
		AttachTarget: "\"<namespace>/<pod>\"",
		Summary:      "Kubernetes runs one pod per sandbox.",
		SchemaName:   "Kubernetes",
		BlockSource:  blockSource,
	}
}

// ApplyDefaults sets namespace, image, create_timeout and workspace when unset.
func (b *Block) ApplyDefaults() {
	if b.Namespace == "" {
		b.Namespace = DefaultNamespace
	}
	if b.Image == "" {
		b.Image = DefaultImage
	}
	if b.CreateTimeout == 0 {
		b.CreateTimeout = DefaultCreateTimeout.Seconds()
	}
	if b.Workspace == "" {
		b.Workspace = DefaultWorkspace
	}
}

// AttachTarget is attach_to.
func (b *Block) AttachTarget() string { return b.AttachTo }

// Validate checks the paths (absolute and clean), the transport, and the keys that are only
// for pods the gateway creates (sandboxd.image, snapshot_dir, agent_sandbox).
func (b *Block) Validate(p providers.Profile) []providers.Problem {
	var ps providers.Problems
	const key = TypeName
	if b.CreateTimeout < 0 { // 0 is the default, 120
		ps.Add(key+".create_timeout", "must be greater than 0 seconds (got %g)", b.CreateTimeout)
	}
	if ws := b.Workspace; ws != "" && (!path.IsAbs(ws) || path.Clean(ws) != ws || ws == "/") {
		ps.Add(key+".workspace", "must be an absolute, clean folder path other than / (got %q)", ws)
	}
	sd := b.Sandboxd
	if sd.Transport != "" { // "" is the default, exec
		ps.Enum(key+".sandboxd.transport", sd.Transport, transports)
	}
	if sd.Path != "" && (!path.IsAbs(sd.Path) || path.Clean(sd.Path) != sd.Path) {
		ps.Add(key+".sandboxd.path", "must be an absolute, clean file path (got %q)", sd.Path)
	}
	if sd.Image != "" && (b.AgentSandbox != nil || p.Attached) {
		ps.Add(key+".sandboxd.image", "is only for pods the gateway creates: agent_sandbox templates and attached pods must run sandboxd themselves")
	}
	if d := b.SnapshotDir; d != "" {
		if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
			ps.Add(key+".snapshot_dir", "must be an absolute, clean folder path other than / (got %q)", d)
		}
		if p.Attached {
			ps.Add(key+".snapshot_dir", "is only for managed profiles: an attached pod is never captured")
		}
	}
	if a := b.AgentSandbox; a != nil {
		if strings.TrimSpace(a.WarmPool) == "" {
			ps.Add(key+".agent_sandbox.warm_pool", "required: the SandboxWarmPool that sandboxes are claimed from")
		}
		if p.Attached {
			ps.Add(key+".agent_sandbox", "is only for managed profiles: an attached profile binds to its attach_to pod and never claims sandboxes")
		}
	}
	return ps
}

// Options returns the Options New is built from: the attach target for an attached profile,
// the Config for every profile (Profile, Installation, IdleTimeout and Logger are the
// factory's).
func (b *Block) Options(p providers.Profile) any {
	c := Config{
		Namespace: b.Namespace, Image: b.Image, Kubeconfig: b.Kubeconfig,
		ServiceAccount: b.ServiceAccount, ImagePullSecrets: b.ImagePullSecrets,
		Labels: b.Labels, NodeSelector: b.NodeSelector, Env: b.Env,
		SecurityContext: b.SecurityContext, ContainerSecurityContext: b.ContainerSecurityContext,
		NetworkPolicy:    b.NetworkPolicy,
		CreateTimeout:    time.Duration(b.CreateTimeout * float64(time.Second)),
		Workspace:        b.Workspace,
		RuntimeClassName: b.RuntimeClassName,
		Sandboxd:         SandboxdConfig{Path: b.Sandboxd.Path, Image: b.Sandboxd.Image, Transport: b.Sandboxd.Transport},
		SnapshotDir:      b.SnapshotDir,
	}
	if a := b.AgentSandbox; a != nil {
		c.AgentSandbox = &AgentSandboxConfig{WarmPool: a.WarmPool, Template: a.Template}
	}
	o := Options{Config: c}
	if p.Attached {
		o.AttachTo = p.AttachTo
	}
	return o
}
