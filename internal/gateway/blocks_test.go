package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// load reads yaml as a configuration file, with defaults and validation (LoadConfig with the
// built-in backends).
func load(t *testing.T, yaml string, environ ...string) *config.Config {
	t.Helper()
	cfg, err := config.LoadWith(writeConfig(t, yaml), environ, blockDecoder{reg: Builtin()})
	require.NoError(t, err)
	return cfg
}

// loadErr is LoadConfig's error for yaml.
func loadErr(t *testing.T, yaml string, environ ...string) error {
	t.Helper()
	_, err := LoadConfig(writeConfig(t, yaml), environ, Builtin())
	return err
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

// contextOf is the BuildContext buildProfiles hands the registry for profile name.
func contextOf(t *testing.T, cfg *config.Config, name string) providers.BuildContext {
	t.Helper()
	d, err := checkBlocks(cfg, Builtin())
	require.NoError(t, err)
	return buildContext(cfg, d, name, "0123456789abcdef", nil)
}

// blockOf is profile name's block of type T.
func blockOf[T any](t *testing.T, cfg *config.Config, name, typ string) *T {
	t.Helper()
	b, ok := cfg.Sandbox.Profiles[name].Blocks[typ].(*T)
	require.True(t, ok, "profile %s: block %s is %T", name, typ, cfg.Sandbox.Profiles[name].Blocks[typ])
	return b
}

// requireProblem asserts that err reports key with a message containing every word.
func requireProblem(t *testing.T, err error, key string, words ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, config.ErrInvalid)
	var keys []string
	for _, e := range flatten(errors.Unwrap(err)) {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			continue
		}
		if fe.Key != key {
			keys = append(keys, fe.Key)
			continue
		}
		for _, w := range words {
			require.Contains(t, fe.Msg, w, "message of %s", key)
		}
		return
	}
	require.Failf(t, "missing problem", "no problem reported for %s; got keys %s\n%v", key, strings.Join(keys, ", "), err)
}

func TestBuildContextMapsEachBuiltinBlock(t *testing.T) {
	cfg := load(t, `
sandbox:
  default_profile: dev
  profiles:
    dev:
      type: local_subprocess
      stateful: true
      local_subprocess: {workdir: /srv/sandboxes}
    box:
      type: docker
      idle_timeout: 60
      params: {team: data}
      docker:
        image: alpine:3
        runtime: runsc
        host: tcp://engine:2375
        user: "1000:1000"
        pull: never
        warm_pool: {size: 2}
        sandboxd: {binary: /opt/sandboxd, transport: exec, socket_dir: /run/sd, user: "7:7"}
    shell:
      type: docker
      environment: attached
      params: {attach_to: dev-box}
      docker: {}
    pods:
      type: kubernetes
      kubernetes:
        namespace: sbx
        kubeconfig: /etc/kube
        service_account: runner
        image_pull_secrets: [regcred]
        labels: {team: data}
        node_selector: {pool: sandboxes}
        env: {A: "1"}
        security_context: {runAsUser: 1000}
        container_security_context: {readOnlyRootFilesystem: false}
        network_policy: true
        create_timeout: 2.5
        workspace: /mnt/data
        runtime_class_name: gvisor
        snapshot_dir: /var/lib/sandgate/snapshots
        agent_sandbox: {warm_pool: python-sandbox, template: python-sandbox}
    pod:
      type: kubernetes
      environment: attached
      kubernetes: {attach_to: tools/shell-0}
    ec2:
      type: ec2_ssm
      environment: attached
      identity: {mode: user}
      ec2_ssm:
        region: eu-west-1
        attach_to: i-0123456789abcdef0
        endpoint_url: http://localhost:4566
        web_identity: true
        output_s3_bucket: out
        output_s3_prefix: runs/
        python: /usr/bin/python3.12
    cloud:
      type: e2b
      idle_timeout: 600
      stateful: true
      e2b:
        api_key_env: TEAM_E2B_KEY
        template: code-interpreter-v1
        domain: e2b.internal
        api_url: https://api.e2b.internal
        sandbox_url: https://sandboxes.e2b.internal
        workdir: /home/user/work
        env_vars: {MODE: test}
        python: python3.12
`)

	dev := contextOf(t, cfg, "dev")
	assert.Equal(t, local.TypeName, dev.Type)
	assert.Equal(t, "dev", dev.Profile)
	assert.True(t, dev.Stateful)
	assert.Equal(t, local.Options{Workdir: "/srv/sandboxes", Python: "python3"}, dev.Options)

	box := contextOf(t, cfg, "box")
	assert.Equal(t, docker.TypeName, box.Type)
	assert.Equal(t, time.Minute, box.IdleTimeout)
	assert.Equal(t, map[string]any{"team": "data"}, box.Params)
	assert.Equal(t, providers.EgressAllow, box.Policy.NetworkEgress)
	assert.Equal(t, docker.Options{Config: docker.Config{
		Image: "alpine:3", Runtime: "runsc", Host: "tcp://engine:2375", User: "1000:1000",
		PidsLimit: docker.DefaultPidsLimit, NeverPull: true, WarmPoolSize: 2,
		Sandboxd: docker.SandboxdConfig{Binary: "/opt/sandboxd", Transport: docker.TransportExec, SocketDir: "/run/sd", User: "7:7"},
	}}, box.Options)

	shell := contextOf(t, cfg, "shell").Options.(docker.Options)
	assert.Equal(t, "dev-box", shell.AttachTo, "an attached profile's target from params.attach_to")
	assert.False(t, shell.Config.NeverPull, "pull: missing by default")
	assert.Zero(t, shell.Config.WarmPoolSize)

	assert.Equal(t, kubernetes.Options{Config: kubernetes.Config{
		Namespace: "sbx", Image: kubernetes.DefaultImage, Kubeconfig: "/etc/kube", ServiceAccount: "runner",
		ImagePullSecrets: []string{"regcred"}, Labels: map[string]string{"team": "data"},
		NodeSelector: map[string]string{"pool": "sandboxes"}, Env: map[string]string{"A": "1"},
		SecurityContext: map[string]any{"runAsUser": 1000}, ContainerSecurityContext: map[string]any{"readOnlyRootFilesystem": false},
		NetworkPolicy: true, CreateTimeout: 2500 * time.Millisecond, Workspace: "/mnt/data", RuntimeClassName: "gvisor",
		SnapshotDir:  "/var/lib/sandgate/snapshots",
		AgentSandbox: &kubernetes.AgentSandboxConfig{WarmPool: "python-sandbox", Template: "python-sandbox"},
	}}, contextOf(t, cfg, "pods").Options)
	assert.Equal(t, "tools/shell-0", contextOf(t, cfg, "pod").Options.(kubernetes.Options).AttachTo)

	assert.Equal(t, ec2ssm.Options{
		Config: ec2ssm.Config{
			Region: "eu-west-1", EndpointURL: "http://localhost:4566", WebIdentity: true,
			OutputS3Bucket: "out", OutputS3Prefix: "runs/", Python: "/usr/bin/python3.12",
		},
		AttachTo: "i-0123456789abcdef0", UserMode: true,
	}, contextOf(t, cfg, "ec2").Options)

	cloud := contextOf(t, cfg, "cloud")
	assert.Equal(t, 10*time.Minute, cloud.IdleTimeout, "the idle timeout becomes E2B's sandbox timeout")
	assert.True(t, cloud.Stateful)
	assert.Equal(t, e2b.Options{Config: e2b.Config{
		APIKeyEnv: "TEAM_E2B_KEY", Template: "code-interpreter-v1", Domain: "e2b.internal",
		APIURL: "https://api.e2b.internal", SandboxURL: "https://sandboxes.e2b.internal",
		Workdir: "/home/user/work", CodeInterpreter: true, EnvVars: map[string]string{"MODE": "test"}, Python: "python3.12",
	}}, cloud.Options)
}

// TestProviderDefaultsAgree: the defaults config fills into a block it writes out (`config
// validate`, the schema) are the ones each backend's New falls back to for zero fields.
func TestProviderDefaultsAgree(t *testing.T) {
	cfg := load(t, `
sandbox:
  default_profile: dev
  profiles:
    dev: {type: local_subprocess}
    box: {type: docker, docker: {}}
    pods: {type: kubernetes, kubernetes: {}}
    ec2: {type: ec2_ssm, environment: attached, ec2_ssm: {attach_to: i-0123456789abcdef0}}
    day: {type: daytona, daytona: {}}
    cloud: {type: e2b, e2b: {}}
`)
	assert.Equal(t, local.Options{Python: local.DefaultPython}, contextOf(t, cfg, "dev").Options)
	assert.Equal(t, docker.Options{Config: docker.Config{Image: docker.DefaultImage, PidsLimit: docker.DefaultPidsLimit}},
		contextOf(t, cfg, "box").Options)
	assert.Equal(t, kubernetes.Options{Config: kubernetes.Config{
		Namespace: kubernetes.DefaultNamespace, Image: kubernetes.DefaultImage,
		CreateTimeout: kubernetes.DefaultCreateTimeout, Workspace: kubernetes.DefaultWorkspace,
	}}, contextOf(t, cfg, "pods").Options)
	assert.Equal(t, ec2ssm.DefaultPython, contextOf(t, cfg, "ec2").Options.(ec2ssm.Options).Config.Python)
	assert.Equal(t, daytona.Options{Config: daytona.Config{
		APIKeyEnv: daytona.DefaultAPIKeyEnv, APIURL: daytona.DefaultAPIURL, CreateTimeout: daytona.DefaultCreateTimeout,
	}}, contextOf(t, cfg, "day").Options)
	assert.Equal(t, e2b.Options{Config: e2b.Config{
		APIKeyEnv: e2b.DefaultAPIKeyEnv, Template: e2b.DefaultTemplate, Domain: e2b.DefaultDomain,
		Workdir: e2b.DefaultWorkdir, Python: e2b.DefaultPython,
	}}, contextOf(t, cfg, "cloud").Options)
}

func TestBuildContextWithoutABlock(t *testing.T) {
	cfg := &config.Config{Sandbox: config.Sandbox{Profiles: map[string]config.Profile{"box": {Type: docker.TypeName}}}}
	cfg.ApplyDefaults()
	d, err := decodeBlocks(cfg, Builtin())
	require.NoError(t, err)
	bc := buildContext(cfg, d, "box", "0123456789abcdef", nil)
	assert.Nil(t, bc.Options, "no block, no options")
	_, err = Builtin().Build(bc)
	require.Error(t, err)
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.EqualError(t, err, "sandbox profile 'box' has type docker but no docker block")

	_, err = checkBlocks(cfg, Builtin())
	assert.Equal(t, fault.Config, fault.KindOf(err))
	requireProblem(t, err, "sandbox.profiles.box.docker", "missing")
}

// A type registered by a test (no built-in mapping) gets no options, and the profile's params.
func TestBuildContextOfARegisteredType(t *testing.T) {
	var got providers.BuildContext
	reg := providers.NewRegistry()
	reg.Register("fake", func(ctx providers.BuildContext) (providers.Provider, error) {
		got = ctx
		return fakeProvider{}, nil
	})
	cfg := &config.Config{Sandbox: config.Sandbox{DefaultProfile: "f", Profiles: map[string]config.Profile{
		"f": {Type: "fake", Stateful: true, IdleTimeout: 1, Params: map[string]any{"size": 3}},
	}}}
	cfg.ApplyDefaults()
	require.NoError(t, cfg.Validate())
	d, err := checkBlocks(cfg, reg)
	require.NoError(t, err, "a type without a block needs none")
	_, err = reg.Build(buildContext(cfg, d, "f", "0123456789abcdef", nil))
	require.NoError(t, err)
	assert.Nil(t, got.Options)
	assert.Equal(t, "0123456789abcdef", got.Installation, "every provider gets the installation")
	assert.Equal(t, map[string]any{"size": 3}, got.Params)
	assert.Equal(t, time.Second, got.IdleTimeout)
	assert.True(t, got.Stateful)
}

type fakeProvider struct{ providers.NoAttach }

func (fakeProvider) Type() string { return "fake" }
func (fakeProvider) Capabilities() providers.Capabilities {
	return providers.Capabilities{Isolation: providers.IsolationNone, Stateful: true}
}
func (fakeProvider) Create(context.Context, providers.Principal, providers.Policy) (providers.Sandbox, error) {
	return nil, fault.New(fault.Provision, "fake")
}
func (fakeProvider) Destroy(context.Context, string) error { return nil }
