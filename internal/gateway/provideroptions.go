package gateway

import (
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// The mapping of configuration onto the providers: a backend never reads internal/config; it
// is built from its own options, which the functions below fill from a profile's provider
// block (validated, defaults applied by config). Defaults are not applied here: the blocks
// carry config's, and each backend's New falls back to the same values for zero fields
// (TestProviderDefaultsAgree).

// buildContext maps profile name (pc, with its policy pol and idle timeout idle already
// converted) of installation onto the BuildContext of its provider. Options are the backend's
// own when pc's type is a built-in: nil when pc lacks the type's block (the factory reports
// it), and nil for a type registered by a test (its factory reads Params).
func buildContext(name string, pc config.Profile, pol providers.Policy, idle time.Duration, installation string, log *slog.Logger) providers.BuildContext {
	bc := providers.BuildContext{
		Type: pc.Type, Profile: name, Params: pc.Params, Installation: installation,
		Policy: pol, IdleTimeout: idle, Stateful: pc.Stateful, Logger: log,
	}
	if b, ok := builtins[pc.Type]; ok {
		bc.Options = b.options(pc)
	}
	return bc
}

// withBlock returns f(*block, p), or nil when p has no such block.
func withBlock[B, O any](block *B, p config.Profile, f func(B, config.Profile) O) any {
	if block == nil {
		return nil
	}
	return f(*block, p)
}

// attachTarget is what profile p binds to when it is attached: its block's attach_to, else
// params.attach_to; "" for a managed profile.
func attachTarget(p config.Profile) string {
	if p.Environment != config.EnvironmentAttached {
		return ""
	}
	return p.AttachTo()
}

func localOptions(b config.LocalSubprocess, _ config.Profile) local.Options {
	return local.Options{Workdir: b.Workdir, Python: b.Python}
}

func dockerOptions(b config.Docker, p config.Profile) docker.Options {
	c := docker.Config{
		Image: b.Image, Runtime: b.Runtime, Host: b.Host, User: b.User,
		PidsLimit: b.PidsLimit, NeverPull: b.Pull == config.DockerPullNever, StateDir: b.StateDir,
	}
	if w := b.WarmPool; w != nil {
		c.WarmPoolSize = w.Size
	}
	if s := b.Sandboxd; s != nil {
		c.Sandboxd = docker.SandboxdConfig{Binary: s.Binary, Transport: docker.Transport(s.Transport), SocketDir: s.SocketDir, User: s.User}
	}
	return docker.Options{Config: c, AttachTo: attachTarget(p)}
}

func kubernetesOptions(b config.Kubernetes, p config.Profile) kubernetes.Options {
	c := kubernetes.Config{
		Namespace: b.Namespace, Image: b.Image, Kubeconfig: b.Kubeconfig,
		ServiceAccount: b.ServiceAccount, ImagePullSecrets: b.ImagePullSecrets,
		Labels: b.Labels, NodeSelector: b.NodeSelector, Env: b.Env,
		SecurityContext: b.SecurityContext, ContainerSecurityContext: b.ContainerSecurityContext,
		NetworkPolicy:    b.NetworkPolicy,
		CreateTimeout:    seconds(b.CreateTimeout),
		Workspace:        b.Workspace,
		RuntimeClassName: b.RuntimeClassName,
		Sandboxd:         kubernetes.SandboxdConfig{Path: b.Sandboxd.Path, Image: b.Sandboxd.Image, Transport: b.Sandboxd.Transport},
		SnapshotDir:      b.SnapshotDir,
	}
	if a := b.AgentSandbox; a != nil {
		c.AgentSandbox = &kubernetes.AgentSandboxConfig{WarmPool: a.WarmPool, Template: a.Template}
	}
	return kubernetes.Options{Config: c, AttachTo: attachTarget(p)}
}

// ec2ssmOptions: ec2_ssm is attach-only, so its target is taken whatever the environment
// (validation requires attached).
func ec2ssmOptions(b config.EC2SSM, p config.Profile) ec2ssm.Options {
	return ec2ssm.Options{
		Config: ec2ssm.Config{
			Region: b.Region, EndpointURL: b.EndpointURL, WebIdentity: b.WebIdentity,
			OutputS3Bucket: b.OutputS3Bucket, OutputS3Prefix: b.OutputS3Prefix, Python: b.Python,
		},
		AttachTo: p.AttachTo(),
		UserMode: p.Identity.Mode == config.IdentityUser,
	}
}

// daytonaOptions: daytona only provisions (validation refuses attached profiles); the
// profile's name, policy and idle timeout reach the factory through the BuildContext.
func daytonaOptions(b config.Daytona, _ config.Profile) daytona.Options {
	return daytona.Options{Config: daytona.Config{
		APIKeyEnv: b.APIKeyEnv, APIURL: b.APIURL, Target: b.Target,
		Image: b.Image, Snapshot: b.Snapshot, EnvVars: b.EnvVars,
		CreateTimeout: seconds(b.CreateTimeout),
	}}
}

// e2bOptions: the profile's name, idle timeout (E2B's sandbox timeout) and logger come from
// the BuildContext.
func e2bOptions(b config.E2B, _ config.Profile) e2b.Options {
	c := e2b.Config{
		APIKeyEnv: b.APIKeyEnv, Template: b.Template, Domain: b.Domain, APIURL: b.APIURL,
		SandboxURL: b.SandboxURL, Workdir: b.Workdir, EnvVars: b.EnvVars, Python: b.Python,
	}
	if b.CodeInterpreter != nil {
		c.CodeInterpreter = *b.CodeInterpreter
	}
	return e2b.Options{Config: c}
}
