package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/sdadapter"
)

// TypeName is the provider's type name in profiles and the registry.
const TypeName = "kubernetes"

// Labels on every object the provider creates.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by" // always ManagedBy
	LabelSandbox     = "sandgate.io/sandbox"          // always "true"
	LabelSandboxName = "sandgate.io/sandbox-name"     // the pod's (or claim's) name; set last
	// LabelInstallation is the installation id (providers.NewInstallationID) of the gateway
	// that made the object. Attaches and destroys take only their own installation's objects
	// (and unlabelled ones, made before installation ids), so two installations sharing a
	// namespace never take or delete each other's sandboxes.
	LabelInstallation = "sandgate.io/installation"
	ManagedBy         = "sandgate"

	// AnnotationProfile and AnnotationOwner record the profile and the principal's subject.
	AnnotationProfile = "sandgate.io/profile"
	AnnotationOwner   = "sandgate.io/owner"
)

// NamePrefix starts the name of every pod, NetworkPolicy and SandboxClaim the provider makes.
const NamePrefix = "sandgate-"

// ContainerName is the sandbox container of the pods the provider creates. In pods it did not
// create, the container named so is used, else the first one.
const ContainerName = "sandbox"

// Where sandboxd lives in the pods.
const (
	// DefaultSandboxdPath is the default of kubernetes.sandboxd.path: where the default
	// image (sandgate/sandbox-python, label dev.sandgate.sandboxd) ships sandboxd.
	DefaultSandboxdPath = "/usr/local/bin/sandboxd"
	// SandboxdRun is the emptyDir of sandboxd's socket and state file: it survives restarts
	// of the container within the pod, so a restarted sandboxd reports the contexts it lost.
	SandboxdRun = "/.sandgate/run"
	// SandboxdSocket is sandboxd's Unix socket; `sandboxd proxy` joins the tunnel to it.
	SandboxdSocket = SandboxdRun + "/sd.sock"
	// sandboxdState is sandboxd's state file.
	sandboxdState = SandboxdRun + "/contexts.json"
	// SandboxdBin is the emptyDir the init container of kubernetes.sandboxd.image installs
	// sandboxd into.
	SandboxdBin = "/.sandgate/bin"
)

// Defaults of Config.
const (
	DefaultNamespace = "default"
	// DefaultImage ships sandboxd at DefaultSandboxdPath (images/sandbox builds it; push it to
	// a registry the cluster pulls from, or set Config.Sandboxd.Image for another image).
	DefaultImage         = "sandgate/sandbox-python:latest"
	DefaultCreateTimeout = 120 * time.Second
	DefaultWorkspace     = "/workspace"
)

// defaultUID is the user, group and fsGroup of created pods unless security_context says
// otherwise (the conventional "nonroot" id, as in agent-sandbox's examples).
const defaultUID int64 = 65532

// Provider is the kubernetes provider. Build it with New (or Factory); its exported fields may
// be changed before its first use only.
type Provider struct {
	profile      string
	installation string
	cfg          Config
	idle         time.Duration
	attachTo     string
	log          *slog.Logger
	caps         providers.Capabilities
	podSec       *corev1.PodSecurityContext
	ctrSec       *corev1.SecurityContext

	gateway *clients // the gateway's own identity

	mu      sync.Mutex
	users   map[string]*clients    // impersonating clients by identity
	running sdadapter.Running      // live executions, which Destroy ends
	checked map[string]bool        // warm pools whose template was checked
	sd      map[clientKey]*sdEntry // runtime clients by (pod, identity)

	// spdyOnly makes executions skip the WebSocket attempt (tests of the fallback).
	spdyOnly bool
	// readyTimeout is how long a tunnel waits for sandboxd to listen; zero means
	// defaultReadyTimeout (tests shorten it).
	readyTimeout time.Duration
	// tunnels counts the exec tunnels opened (tests of the pod_ip transport).
	tunnels atomic.Int64
}

var _ providers.Provider = (*Provider)(nil)

// Config is a kubernetes profile's settings (its kubernetes block); zero fields take their
// defaults.
type Config struct {
	// Namespace holds the pods (and NetworkPolicies, SandboxClaims) the provider makes.
	// Default DefaultNamespace.
	Namespace string
	// Image is the sandbox container's image. Default DefaultImage.
	Image string
	// Kubeconfig is the kubeconfig file of the gateway's own identity, when Options.RESTConfig
	// is nil; default the in-cluster service account, else the default loading rules.
	Kubeconfig string
	// ServiceAccount is the created pods' service account; default the namespace's default.
	ServiceAccount string
	// ImagePullSecrets name the secrets the created pods pull their image with.
	ImagePullSecrets []string
	// Labels are added to every object the provider makes; the provider's own keys are
	// refused.
	Labels map[string]string
	// NodeSelector constrains the nodes of the created pods.
	NodeSelector map[string]string
	// Env is the environment of the sandbox container (values are secrets).
	Env map[string]string
	// SecurityContext and ContainerSecurityContext are merged (JSON merge) over the hardened
	// pod and container security contexts; unknown keys are refused.
	SecurityContext          map[string]any
	ContainerSecurityContext map[string]any
	// NetworkPolicy makes a NetworkPolicy per sandbox enforce the policy's network egress.
	NetworkPolicy bool
	// CreateTimeout bounds how long a sandbox may take to become ready; zero or less means
	// DefaultCreateTimeout.
	CreateTimeout time.Duration
	// Workspace is the folder in the pod that holds the sandbox's files (an emptyDir in the
	// pods the provider creates); files are confined to it. Default DefaultWorkspace.
	Workspace string
	// RuntimeClassName selects a RuntimeClass for the sandbox pods (e.g. "kata" or "gvisor");
	// default the cluster's default runtime.
	RuntimeClassName string
	// AgentSandbox, when set, acquires sandboxes from kubernetes-sigs/agent-sandbox (a
	// SandboxClaim on a warm pool) instead of creating pods (managed profiles only).
	AgentSandbox *AgentSandboxConfig
	// Sandboxd says where the pods' sandboxd is.
	Sandboxd SandboxdConfig
	// SnapshotDir, when set, is the absolute path of a folder on the gateway's host that
	// keeps workspace snapshots (gzip-compressed tar archives, see Snapshot); every replica
	// of the gateway must see the same folder (a shared volume). Empty: the provider does not
	// declare snapshots. Not for attached profiles.
	SnapshotDir string
}

// SandboxdConfig is the kubernetes.sandboxd block.
type SandboxdConfig struct {
	// Path is the sandboxd executable in the sandbox container; default
	// DefaultSandboxdPath. Attached pods must run it (see the package doc). With Image, it
	// is the path in that image.
	Path string
	// Image, when set, is an image that ships sandboxd at Path: an init container made from
	// it copies the binary into an emptyDir at SandboxdBin, which the sandbox container runs
	// it from (pods the provider creates only).
	Image string
	// Transport is how the gateway reaches sandboxd: TransportExec (default) or
	// TransportPodIP (see the package doc).
	Transport string
}

// Transports of kubernetes.sandboxd.transport.
const (
	TransportExec  = "exec"
	TransportPodIP = "pod_ip"
	// SandboxdPort is the TCP port sandboxd listens on with TransportPodIP.
	SandboxdPort = 8888
)

// AgentSandboxConfig names the agent-sandbox warm pool (extensions.agents.x-k8s.io/v1beta1
// SandboxWarmPool, in the profile's namespace) that sandboxes are claimed from.
type AgentSandboxConfig struct {
	// WarmPool is the SandboxWarmPool each SandboxClaim references. Required.
	WarmPool string
	// Template, when set, is the SandboxTemplate the warm pool must be made from; the provider
	// checks it before its first claim.
	Template string
}

// Options configure New.
type Options struct {
	// Profile is the profile's name, recorded on created objects and in messages.
	Profile string
	// Installation is the gateway's installation id (required; providers.NewInstallationID):
	// it labels every object the provider makes, and attaches and destroys keep to it.
	Installation string
	// Config is the profile's kubernetes settings.
	Config Config
	// IdleTimeout is the profile's idle timeout; pods get activeDeadlineSeconds = 2 × it.
	// Zero sets no deadline.
	IdleTimeout time.Duration
	// AttachTo is the pod ("<namespace>/<pod>" or a bare name) an attached profile binds to;
	// "" for managed profiles.
	AttachTo string
	// RESTConfig is the gateway's own identity. Nil: Config.Kubeconfig when set, else the
	// in-cluster service account, else the default kubeconfig loading rules.
	RESTConfig *rest.Config
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Factory builds the provider of a profile whose type is kubernetes, for providers.Registry,
// from ctx.Options (an Options; Profile, IdleTimeout and Logger are taken from ctx). A profile
// without a kubernetes block is a fault.Config error (docs/semantics.md §6); other errors are
// New's.
func Factory(ctx providers.BuildContext) (providers.Provider, error) {
	opts, err := providers.OptionsOf[Options](ctx, TypeName)
	if err != nil {
		return nil, err
	}
	opts.Profile, opts.IdleTimeout, opts.Logger = ctx.Profile, ctx.IdleTimeout, ctx.Logger
	opts.Installation = ctx.Installation
	return New(opts)
}

// New builds the provider. It loads the gateway's client configuration but does not contact
// the cluster, so a gateway starts while the cluster is unreachable.
//
// Errors (fault.Config): a missing or malformed installation id; no usable client
// configuration; security_context or
// container_security_context that are not valid (pod / container) security contexts; labels
// that are invalid or use the provider's reserved keys; an env name that is not a valid
// environment variable name; agent_sandbox without warm_pool or on an attached profile.
func New(opts Options) (*Provider, error) {
	if err := providers.CheckInstallationID(TypeName, opts.Installation); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	cfg := opts.Config
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = DefaultCreateTimeout
	}
	if cfg.Workspace == "" {
		cfg.Workspace = DefaultWorkspace
	}
	if cfg.Sandboxd.Path == "" {
		cfg.Sandboxd.Path = DefaultSandboxdPath
	}
	if !strings.HasPrefix(cfg.Sandboxd.Path, "/") {
		return nil, fault.New(fault.Config, "%s: sandboxd.path '%s' must be an absolute path", TypeName, cfg.Sandboxd.Path)
	}
	switch cfg.Sandboxd.Transport {
	case "":
		cfg.Sandboxd.Transport = TransportExec
	case TransportExec, TransportPodIP:
	default:
		return nil, fault.New(fault.Config, "%s: sandboxd.transport '%s' is not one of exec, pod_ip", TypeName, cfg.Sandboxd.Transport)
	}
	if cfg.Sandboxd.Image != "" && (cfg.AgentSandbox != nil || opts.AttachTo != "") {
		return nil, fault.New(fault.Config, "%s: sandboxd.image is for pods the provider creates; claimed and attached pods must ship sandboxd themselves (sandboxd.path)", TypeName)
	}
	if cfg.AgentSandbox != nil {
		if cfg.AgentSandbox.WarmPool == "" {
			return nil, fault.New(fault.Config, "%s: agent_sandbox needs warm_pool, the SandboxWarmPool to claim sandboxes from", TypeName)
		}
		if opts.AttachTo != "" {
			return nil, fault.New(fault.Config, "%s: agent_sandbox is for managed profiles; profile '%s' is attached to '%s'", TypeName, opts.Profile, opts.AttachTo)
		}
	}
	if cfg.SnapshotDir != "" {
		if !filepath.IsAbs(cfg.SnapshotDir) {
			return nil, fault.New(fault.Config, "%s: snapshot_dir '%s' must be an absolute path", TypeName, cfg.SnapshotDir)
		}
		cfg.SnapshotDir = filepath.Clean(cfg.SnapshotDir)
	}
	if err := checkLabels(cfg.Labels); err != nil {
		return nil, err
	}
	for name := range cfg.Env {
		if !providers.ValidEnvName(name) {
			return nil, fault.New(fault.Config, "%s: env name %q is not a valid environment variable name", TypeName, name)
		}
	}
	podSec, ctrSec, err := securityContexts(cfg)
	if err != nil {
		return nil, err
	}
	base := opts.RESTConfig
	if base == nil {
		if base, err = loadRESTConfig(cfg.Kubeconfig); err != nil {
			return nil, err
		}
	} else {
		base = rest.CopyConfig(base)
	}
	gw, err := newClients(base)
	if err != nil {
		return nil, fault.Wrap(fault.Config, err, "%s: client configuration", TypeName)
	}

	managedPods := cfg.AgentSandbox == nil
	p := &Provider{
		profile:      opts.Profile,
		installation: opts.Installation,
		cfg:          cfg,
		idle:         opts.IdleTimeout,
		attachTo:     opts.AttachTo,
		log:          logger,
		podSec:       podSec,
		ctrSec:       ctrSec,
		gateway:      gw,
		users:        make(map[string]*clients),
		checked:      make(map[string]bool),
		sd:           make(map[clientKey]*sdEntry),
		caps: providers.Capabilities{
			Isolation:        providers.IsolationContainer,
			Shell:            true,
			Languages:        []string{"python", "bash"},
			Files:            true,
			PackageInstall:   true,
			Stateful:         true,
			Interactive:      true,
			Background:       true,
			Attach:           true,
			Provisions:       true,
			AttachesExternal: true,
			PrincipalUser:    true,
			PolicyNetwork:    cfg.NetworkPolicy,
			PolicyFilesystem: managedPods,
			PolicyResources:  managedPods,
			PolicyDisk:       managedPods,
			PreviewPorts:     true, // sandboxd's tunnel
			// Workspace archives in snapshot_dir; pods cannot be frozen (no pause).
			Snapshots: cfg.SnapshotDir != "" && opts.AttachTo == "",
		},
	}
	warnWeakened(logger, podSec, ctrSec)
	return p, nil
}

// Type returns "kubernetes".
func (p *Provider) Type() string { return TypeName }

// Capabilities reports the provider's capabilities: isolation container; shell; python and bash; files; package_install;
// stateful (sandboxd's contexts); attach;
// provisions; attaches_external; principal_user; policy_filesystem, policy_resources and
// policy_disk (the workspace emptyDir's sizeLimit, enforced by eviction; not in agent-sandbox
// mode, where the SandboxTemplate decides); policy_network only with
// kubernetes.network_policy; preview_ports; snapshots only with kubernetes.snapshot_dir on a
// managed profile; never pause (docs/semantics.md §12).
func (p *Provider) Capabilities() providers.Capabilities {
	c := p.caps
	c.Languages = append([]string(nil), p.caps.Languages...)
	return c
}

// sandboxdPath is the sandboxd executable in the sandbox container.
func (p *Provider) sandboxdPath() string {
	if p.cfg.Sandboxd.Image != "" {
		return SandboxdBin + "/sandboxd"
	}
	return p.cfg.Sandboxd.Path
}

// Close closes the provider's runtime clients (their idle tunnels); pods keep running. The
// provider stays usable.
func (p *Provider) Close() error {
	p.forgetClients("")
	return nil
}

func (p *Provider) createTimeout() time.Duration { return p.cfg.CreateTimeout }

// Create provisions a sandbox for principal pr under policy pol: a pod (see the package doc),
// a SandboxClaim in agent-sandbox mode, or, for an attached profile, a binding to the
// attach_to pod. Identity and policy problems are fault.Policy errors raised before any API
// call; creation failures are fault.Provision (fault.Gone for a vanished attach_to target);
// ctx.Err() when ctx ends first.
func (p *Provider) Create(ctx context.Context, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("kubernetes", pol); err != nil {
		return nil, err
	}
	c, err := p.clientsFor(pr)
	if err != nil {
		return nil, err
	}
	if p.attachTo != "" {
		return p.attach(ctx, c, p.attachTo)
	}
	np, err := p.networkPolicyNeeded(pol)
	if err != nil {
		return nil, err
	}
	if p.cfg.AgentSandbox != nil {
		return p.claim(ctx, c, pr, pol, np)
	}
	return p.createPod(ctx, c, pr, pol, np)
}

// createPod makes the NetworkPolicy (when np) and the pod, and waits for the pod.
func (p *Provider) createPod(ctx context.Context, c *clients, pr providers.Principal, pol providers.Policy, np bool) (providers.Sandbox, error) {
	name := newName()
	ns := p.cfg.Namespace
	token := newSandboxdToken()
	pod := p.buildPod(name, pr, pol, token)
	if np {
		netpol, err := p.buildNetworkPolicy(name, map[string]string{LabelSandboxName: name}, pol)
		if err != nil {
			return nil, err
		}
		if _, err := c.core.NetworkingV1().NetworkPolicies(ns).Create(ctx, netpol, metav1.CreateOptions{}); err != nil {
			return nil, provisionErr(err, "creating NetworkPolicy %s/%s", ns, name)
		}
	}
	created, err := c.core.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		p.cleanup(ns, name, np, false)
		return nil, provisionErr(err, "creating pod %s/%s", ns, name)
	}
	p.log.Debug("pod created", "sandbox_id", ns+"/"+name)
	ready, err := p.waitPod(ctx, c, ns, name, created)
	if err != nil {
		p.cleanup(ns, name, np, true)
		return nil, err
	}
	return p.open(c, ns+"/"+name, ready, token), nil
}

// cleanup removes what a failed Create made, as the gateway, with a context of its own.
func (p *Provider) cleanup(ns, name string, netpol, pod bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if pod {
		if err := p.deletePod(ctx, ns, name); err != nil {
			p.log.Warn("cleaning up a failed sandbox pod", "pod", ns+"/"+name, "error", err)
		}
	}
	if netpol {
		if err := p.deleteNetworkPolicy(ctx, ns, name); err != nil {
			p.log.Warn("cleaning up a failed sandbox's NetworkPolicy", "networkpolicy", ns+"/"+name, "error", err)
		}
	}
}

// Attach reconnects to sandbox id ("<namespace>/<name>", a bare name meaning the configured
// namespace): the pod, or in agent-sandbox mode the SandboxClaim and its pod. A missing pod or
// claim, one being deleted, or a pod that has ended is fault.Gone; a pending pod gets the
// bounded wait of Create. Identity problems are fault.Policy errors raised before any call.
func (p *Provider) Attach(ctx context.Context, id string, pr providers.Principal, pol providers.Policy) (providers.Sandbox, error) {
	if err := providers.RefuseSecrets("kubernetes", pol); err != nil {
		return nil, err
	}
	c, err := p.clientsFor(pr)
	if err != nil {
		return nil, err
	}
	if p.cfg.AgentSandbox != nil && p.attachTo == "" {
		return p.attachClaim(ctx, c, id)
	}
	return p.attach(ctx, c, id)
}

// attach binds to pod target.
func (p *Provider) attach(ctx context.Context, c *clients, target string) (providers.Sandbox, error) {
	ns, name, err := p.splitID(target)
	if err != nil {
		return nil, err
	}
	if sb := p.attachLive(ctx, c, ns, name); sb != nil {
		return sb, nil
	}
	pod, err := c.core.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fault.New(fault.Gone, "%s: pod %s/%s no longer exists", TypeName, ns, name)
	}
	if err != nil {
		return nil, provisionErr(err, "reading pod %s/%s", ns, name)
	}
	if err := goneErr(pod); err != nil {
		return nil, err
	}
	if p.attachTo == "" && p.cfg.AgentSandbox == nil && (pod.Labels[LabelManagedBy] != ManagedBy || !p.mine(pod.Labels)) {
		// A managed profile only reconnects to pods its installation created.
		return nil, fault.New(fault.Gone, "%s: pod %s/%s is not a sandbox of this provider's installation", TypeName, ns, name)
	}
	ready, err := p.waitPod(ctx, c, ns, name, pod)
	if err != nil {
		return nil, err
	}
	token, err := p.ensureToken(ctx, c, ready)
	if err != nil {
		return nil, err
	}
	return p.open(c, ns+"/"+name, ready, token), nil
}

// Destroy removes sandbox id: the pod and its NetworkPolicy, or in agent-sandbox mode the
// SandboxClaim (and its NetworkPolicy), always as the gateway. It is idempotent: a missing
// object, an id outside the configured namespace, an object without the managed-by label or
// of another installation, and any id of an attached profile are no-ops. Executions this provider runs in the sandbox are
// ended first (they return fault.Gone).
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if p.attachTo != "" {
		p.log.Debug("destroy ignored: attached profiles never delete their target", "sandbox_id", id)
		return nil
	}
	ns, name, err := p.splitID(id)
	if err != nil || ns != p.cfg.Namespace || !strings.HasPrefix(name, NamePrefix) {
		p.log.Debug("destroy ignored: not a sandbox of this provider", "sandbox_id", id)
		return nil
	}
	p.running.Stop(ns + "/" + name)
	if p.cfg.AgentSandbox != nil {
		var pod string
		pod, err = p.deleteClaim(ctx, ns, name)
		if pod != "" {
			p.forgetClients(ns + "/" + pod)
		}
	} else {
		p.forgetClients(ns + "/" + name)
		err = p.deletePod(ctx, ns, name)
	}
	if p.cfg.NetworkPolicy {
		err = errors.Join(err, p.deleteNetworkPolicy(ctx, ns, name))
	}
	if err != nil {
		return fmt.Errorf("%s: destroying sandbox '%s': %w", TypeName, id, err)
	}
	p.log.Debug("sandbox destroyed", "sandbox_id", id)
	return nil
}

// deletePod deletes pod ns/name as the gateway when it carries the managed-by label, with a
// UID precondition so a pod recreated under the name in between is left alone.
func (p *Provider) deletePod(ctx context.Context, ns, name string) error {
	pods := p.gateway.core.CoreV1().Pods(ns)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Labels[LabelManagedBy] != ManagedBy || !p.mine(pod.Labels) {
		p.log.Warn("not deleting a pod this installation did not create", "pod", ns+"/"+name, "installation", pod.Labels[LabelInstallation])
		return nil
	}
	err = pods.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (p *Provider) deleteNetworkPolicy(ctx context.Context, ns, name string) error {
	nps := p.gateway.core.NetworkingV1().NetworkPolicies(ns)
	np, err := nps.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if np.Labels[LabelManagedBy] != ManagedBy || !p.mine(np.Labels) {
		return nil
	}
	err = nps.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &np.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// mine reports whether an object's labels name this provider's installation, or none (made
// before installation ids: a session of this installation may use it).
func (p *Provider) mine(labels map[string]string) bool {
	inst := labels[LabelInstallation]
	return inst == "" || inst == p.installation
}

// splitID parses "<namespace>/<name>" or a bare name (the configured namespace).
func (p *Provider) splitID(id string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok {
		ns, name = p.cfg.Namespace, id
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fault.New(fault.Gone, "%s: '%s' is not a pod (\"<namespace>/<pod>\")", TypeName, id)
	}
	return ns, name, nil
}

// goneErr returns a fault.Gone error when pod is being deleted or has ended.
func goneErr(pod *corev1.Pod) error {
	id := pod.Namespace + "/" + pod.Name
	switch {
	case pod.DeletionTimestamp != nil:
		return fault.New(fault.Gone, "%s: pod %s is being deleted", TypeName, id)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		msg := fault.New(fault.Gone, "%s: pod %s has ended (phase %s)", TypeName, id, pod.Status.Phase)
		if r := podReason(pod); r != "" {
			msg.Msg += ": " + r
		}
		return msg
	}
	return nil
}

// provisionErr classifies an API error of Create: fault.Provision wrapping the API error
// (which stays reachable with errors.As), or ctx's error as is.
func provisionErr(err error, format string, args ...any) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := fmt.Sprintf(format, args...)
	if apierrors.IsForbidden(err) {
		msg += " (forbidden: check the RBAC of the identity the profile acts as)"
	}
	return fault.Wrap(fault.Provision, err, "%s: %s", TypeName, msg)
}

// newName returns "sandgate-" and 12 random hex digits.
func newName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return NamePrefix + hex.EncodeToString(b[:])
}
