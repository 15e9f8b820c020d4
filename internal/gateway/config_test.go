package gateway

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// The configuration as the gateway's commands read it (LoadConfig): internal/config's keys,
// and the provider blocks decoded, defaulted and checked by their backends.

// defaultProfile is a profile "default" of the given YAML lines (indented under it) in a
// configuration that is otherwise valid.
func defaultProfile(lines string) string {
	return "sandbox:\n  profiles:\n    default:\n" + indent(lines, "      ")
}

func indent(text, by string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString(by + line + "\n")
	}
	return b.String()
}

// Each profile's type, block and environment as docs/semantics.md §6 says, with each
// backend's own rules, under the keys the user wrote.
func TestLoadConfigRefusesBadBlocks(t *testing.T) {
	t.Parallel()
	const prof = "sandbox.profiles.default"
	served := []string{"local_subprocess", "docker", "kubernetes", "ec2_ssm", "e2b", "daytona"}
	for _, tc := range []struct {
		name    string
		profile string
		key     string
		words   []string
	}{
		// Provider types.
		{"unknown provider", "type: firecracker", prof + ".type", append([]string{`"firecracker"`}, served...)},
		{"missing provider type", "scope: per_call", prof + ".type", append([]string{"required"}, served...)},
		{"bedrock has no provider", "type: bedrock_agentcore\nbedrock_agentcore: {}", prof + ".type",
			[]string{"no bedrock_agentcore provider has shipped", "docker"}},
		{"missing docker block", "type: docker", prof + ".docker", []string{"missing", "docker: {}"}},
		{"missing kubernetes block", "type: kubernetes", prof + ".kubernetes", []string{"missing"}},
		{"missing ec2_ssm block", "type: ec2_ssm\nenvironment: attached\nparams: {attach_to: i-0abc}", prof + ".ec2_ssm", []string{"missing"}},
		{"missing e2b block", "type: e2b", prof + ".e2b", []string{"missing"}},
		{"missing daytona block", "type: daytona", prof + ".daytona", []string{"missing"}},

		// Decoding: the backend's block type, strictly.
		{"unknown block", "type: local_subprocess\ndockr: {}", prof + ".dockr", []string{"unknown key"}},
		{"unknown key in a block", "type: docker\ndocker: {imgae: x}", prof + ".docker.imgae", []string{"unknown key"}},
		{"unknown nested key", "type: kubernetes\nkubernetes: {sandboxd: {transprot: exec}}", prof + ".kubernetes.sandboxd.transprot", []string{"unknown key"}},
		{"wrong type in a block", "type: docker\ndocker: {pids_limit: many}", prof + ".docker.pids_limit", []string{`"many"`, "an integer"}},
		{"a list where a block belongs", "type: docker\ndocker: [alpine]", prof + ".docker", []string{"expected a mapping of keys, got a list"}},
		{"removed key", "type: docker\ndocker: {sandboxd: {enabled: true}}", prof + ".docker.sandboxd.enabled",
			[]string{"removed", "every docker sandbox", "delete this key"}},

		// The environment matrix.
		{"managed attach-only provider", "type: ec2_ssm\nec2_ssm: {}", prof + ".environment", []string{"attach-only", "environment: attached", "an EC2 instance id"}},
		{"managed with block attach_to", "type: docker\ndocker: {attach_to: dev-box}", prof + ".docker.attach_to", []string{"managed", "environment: attached"}},
		{"managed with params.attach_to", "type: kubernetes\nkubernetes: {}\nparams: {attach_to: ns/pod}", prof + ".params.attach_to", []string{"environment: attached"}},
		{"attached provision-only provider", "type: e2b\nenvironment: attached\ne2b: {}", prof + ".environment", []string{"e2b", "cannot attach to an existing environment"}},
		{"attached local_subprocess", "type: local_subprocess\nenvironment: attached", prof + ".environment", []string{"cannot attach to an existing environment"}},
		{"attached without target", "type: docker\nenvironment: attached\ndocker: {}", prof + ".docker.attach_to", []string{"no attach_to target", "a container id or name"}},
		{"attached ec2_ssm without target", "type: ec2_ssm\nenvironment: attached\nec2_ssm: {region: eu-west-1}", prof + ".ec2_ssm.attach_to",
			[]string{"no attach_to target", "instance id"}},
		{"params.attach_to not a string", "type: docker\nenvironment: attached\ndocker: {}\nparams: {attach_to: 42}", prof + ".params.attach_to", []string{"string"}},

		// Each backend's own rules, under the profile's key.
		{"docker sandboxd transport", "type: docker\ndocker: {sandboxd: {transport: tcp}}", prof + ".docker.sandboxd.transport", []string{`"tcp"`, "socket", "exec"}},
		{"kubernetes snapshot_dir", "type: kubernetes\nkubernetes: {snapshot_dir: snapshots}", prof + ".kubernetes.snapshot_dir", []string{"absolute", `"snapshots"`}},
		{"daytona image and snapshot", "type: daytona\ndaytona: {image: python:3.12, snapshot: snap-1}", prof + ".daytona", []string{"mutually exclusive"}},
		{"daytona snapshot with cpu", "type: daytona\npolicy: {cpu: 1}\ndaytona: {snapshot: s}", prof + ".daytona.snapshot", []string{"cpu or memory_mb"}},
		{"e2b workdir", "type: e2b\ne2b: {workdir: work}", prof + ".e2b.workdir", []string{"absolute folder"}},
		{"ec2_ssm web_identity in agent mode", "type: ec2_ssm\nenvironment: attached\nec2_ssm: {attach_to: i-0abc, web_identity: true}", prof + ".ec2_ssm.web_identity",
			[]string{"identity.mode: user"}},
		{"stateful attached docker", "type: docker\nenvironment: attached\nstateful: true\ndocker: {attach_to: dev-box}", prof + ".stateful",
			[]string{"attached", "no sandboxd keeps running"}},
		{"stateful ec2_ssm", "type: ec2_ssm\nenvironment: attached\nstateful: true\nec2_ssm: {attach_to: i-0abc}", prof + ".stateful", []string{"keeps no interpreter state"}},
		{"stateful e2b without the code interpreter", "type: e2b\nstateful: true\ne2b: {template: base}", prof + ".stateful", []string{"code-interpreter template"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireProblem(t, loadErr(t, defaultProfile(tc.profile)), tc.key, tc.words...)
		})
	}
	t.Run("stateful local_subprocess with the queue broker", func(t *testing.T) {
		t.Parallel()
		file := defaultProfile("type: local_subprocess\nstateful: true") +
			"  broker:\n    flavor: queue\n    queue: {type: in_memory}\n    response_store: {type: in_memory}\n"
		requireProblem(t, loadErr(t, file), prof+".stateful", "local_subprocess context lives in one worker process")
	})
	t.Run("the shorthand names the shorthand's keys", func(t *testing.T) {
		t.Parallel()
		err := loadErr(t, "", "SANDGATE_SANDBOX__TYPE=e2b")
		requireProblem(t, err, "sandbox.e2b", "missing")
		err = loadErr(t, "sandbox:\n  type: docker\n  scope: sometimes\n  docker: {pull: always, imgae: x}\n")
		requireProblem(t, err, "sandbox.docker.imgae", "unknown key")
		err = loadErr(t, "sandbox:\n  type: docker\n  scope: sometimes\n  docker: {pull: always}\n")
		requireProblem(t, err, "sandbox.scope", "per_session")
		requireProblem(t, err, "sandbox.docker.pull", `"always"`)
	})
	t.Run("an unknown key from the environment names the variable", func(t *testing.T) {
		t.Parallel()
		err := loadErr(t, defaultProfile("type: docker\ndocker: {}"), "SANDGATE_SANDBOX__PROFILES__DEFAULT__DOCKER__PIDS=5")
		requireProblem(t, err, prof+".docker.pids", "unknown key", "SANDGATE_SANDBOX__PROFILES__DEFAULT__DOCKER__PIDS")
	})
}

func TestLoadConfigAccepts(t *testing.T) {
	t.Parallel()
	for name, profile := range map[string]string{
		"attached docker":                    "type: docker\nenvironment: attached\ndocker: {attach_to: dev-box}",
		"attached kubernetes through params": "type: kubernetes\nenvironment: attached\nkubernetes: {}\nparams: {attach_to: tools/shell-0}",
		"attached ec2_ssm":                   "type: ec2_ssm\nenvironment: attached\nec2_ssm: {attach_to: i-0123456789abcdef0}",
		"managed kubernetes":                 "type: kubernetes\nkubernetes: {namespace: sandboxes}",
		"daytona image with resources":       "type: daytona\npolicy: {cpu: 1, memory_mb: 1024}\ndaytona: {image: python:3.13-slim}",
		"a stateful code interpreter":        "type: e2b\nstateful: true\ne2b: {template: code-interpreter-v1}",
		"another type's block, unused":       "type: local_subprocess\ndocker: {image: alpine:3}",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			load(t, defaultProfile(profile))
		})
	}
	t.Run("the bedrock_agentcore block, unused", func(t *testing.T) {
		t.Parallel()
		c := load(t, defaultProfile("type: local_subprocess")+"  bedrock_agentcore: {region: eu-west-1}\n")
		assert.Equal(t, &bedrockBlock{Region: "eu-west-1", NetworkMode: "sandbox"}, c.Sandbox.Blocks[bedrockType])
	})
}

// The blocks LoadConfig returns are the backends' own values, their defaults applied; a
// block written without keys is present with its defaults, and local_subprocess needs none.
func TestLoadConfigAppliesBlockDefaults(t *testing.T) {
	t.Parallel()
	c := load(t, `
sandbox:
  profiles:
    default:
      type: local_subprocess
    box:
      type: docker
      docker: {}
    pods:
      type: kubernetes
      kubernetes:
    cloud:
      type: e2b
      e2b: {}
    day:
      type: daytona
      daytona: {}
`)
	assert.Equal(t, &local.Block{Python: local.DefaultPython}, blockOf[local.Block](t, c, "default", local.TypeName))
	assert.Equal(t, &docker.Block{Image: "python:3.12-slim", PidsLimit: 256, Pull: docker.PullMissing}, blockOf[docker.Block](t, c, "box", docker.TypeName))
	k := blockOf[kubernetes.Block](t, c, "pods", kubernetes.TypeName)
	assert.Equal(t, "default", k.Namespace)
	assert.Equal(t, "sandgate/sandbox-python:latest", k.Image, "pods need an image that ships sandboxd")
	assert.Equal(t, 120.0, k.CreateTimeout)
	assert.Equal(t, "/workspace", k.Workspace)
	no := false
	assert.Equal(t, &e2b.Block{APIKeyEnv: "E2B_API_KEY", Template: "base", Domain: "e2b.app", Workdir: "/home/user", Python: "python3", CodeInterpreter: &no},
		blockOf[e2b.Block](t, c, "cloud", e2b.TypeName))
	assert.Equal(t, &daytona.Block{APIKeyEnv: "DAYTONA_API_KEY", APIURL: "https://app.daytona.io/api", CreateTimeout: 300},
		blockOf[daytona.Block](t, c, "day", daytona.TypeName))
	assert.NotContains(t, c.Sandbox.Profiles["box"].Blocks, local.TypeName, "only the type's own optional block is added")
}

// Provider keys take SANDGATE_ overrides like the rest: values converted to the key's type,
// lists comma-separated, the shorthand's blocks too.
func TestLoadConfigBlockEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	file := "sandbox:\n  default_profile: box\n  profiles:\n    box:\n      type: docker\n      docker: {image: alpine:3, pids_limit: 64}\n"
	c := load(t, file,
		"SANDGATE_SANDBOX__PROFILES__BOX__DOCKER__PIDS_LIMIT=100",
		"SANDGATE_SANDBOX__PROFILES__BOX__DOCKER__WARM_POOL__SIZE=2",
		"SANDGATE_SANDBOX__PROFILES__PODS__TYPE=kubernetes",
		"SANDGATE_SANDBOX__PROFILES__PODS__KUBERNETES__IMAGE_PULL_SECRETS=regcred, other",
		"SANDGATE_SANDBOX__PROFILES__PODS__KUBERNETES__NETWORK_POLICY=true",
		"SANDGATE_SANDBOX__PROFILES__PODS__KUBERNETES__CREATE_TIMEOUT=2.5",
	)
	box := blockOf[docker.Block](t, c, "box", docker.TypeName)
	assert.Equal(t, "alpine:3", box.Image, "the file's keys stay")
	assert.Equal(t, int64(100), box.PidsLimit, "the environment beats the file")
	assert.Equal(t, &docker.WarmPoolBlock{Size: 2}, box.WarmPool)
	pods := blockOf[kubernetes.Block](t, c, "pods", kubernetes.TypeName)
	assert.Equal(t, []string{"regcred", "other"}, pods.ImagePullSecrets)
	assert.True(t, pods.NetworkPolicy)
	assert.Equal(t, 2.5, pods.CreateTimeout)

	c = load(t, "", "SANDGATE_SANDBOX__TYPE=docker", "SANDGATE_SANDBOX__DOCKER__IMAGE=python:3.13-slim")
	assert.Equal(t, "python:3.13-slim", blockOf[docker.Block](t, c, config.DefaultProfileName, docker.TypeName).Image)
	c = load(t, "sandbox:\n  default_profile: main\n  docker:\n    image: busybox\n", "SANDGATE_SANDBOX__TYPE=docker")
	assert.Equal(t, "busybox", blockOf[docker.Block](t, c, "main", docker.TypeName).Image, "the environment's type with the file's block")
	c = load(t, "sandbox:\n  type: kubernetes\n  environment: attached\n  kubernetes:\n    attach_to: tools/shell-0\n")
	assert.Equal(t, "tools/shell-0", contextOf(t, c, "default").Options.(kubernetes.Options).AttachTo)

	requireProblem(t, loadErr(t, file, "SANDGATE_SANDBOX__PROFILES__BOX__DOCKER__PIDS_LIMIT=lots"),
		"sandbox.profiles.box.docker.pids_limit", `"lots"`, "an integer")
}

// `config print`: decoded blocks are redacted by their types' secret tags, and what is printed
// reads back to the same configuration.
func TestConfigPrint(t *testing.T) {
	t.Parallel()
	c := load(t, `
database:
  url: postgres://u:hunter2@db/sandgate
sandbox:
  default_profile: pods
  profiles:
    pods:
      type: kubernetes
      kubernetes: {env: {TOKEN: abc}, labels: {app: x}}
    day:
      type: daytona
      daytona: {env_vars: {KEY: v}}
    cloud:
      type: e2b
      e2b: {env_vars: {SECRET: s}}
`)
	r := c.Redacted()
	k := blockOf[kubernetes.Block](t, r, "pods", kubernetes.TypeName)
	assert.Equal(t, map[string]string{"TOKEN": "REDACTED"}, k.Env)
	assert.Equal(t, map[string]string{"app": "x"}, k.Labels)
	d := blockOf[daytona.Block](t, r, "day", daytona.TypeName)
	assert.Equal(t, map[string]string{"KEY": "REDACTED"}, d.EnvVars)
	assert.Equal(t, "DAYTONA_API_KEY", d.APIKeyEnv, "names of variables are not secret")
	assert.Equal(t, map[string]string{"SECRET": "REDACTED"}, blockOf[e2b.Block](t, r, "cloud", e2b.TypeName).EnvVars)
	assert.Equal(t, "abc", blockOf[kubernetes.Block](t, c, "pods", kubernetes.TypeName).Env["TOKEN"], "the original is untouched")

	out, err := r.YAML()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "hunter2")
	assert.NotContains(t, string(out), "abc")
	assert.Contains(t, string(out), "      kubernetes:\n")

	// Round trip: the example file, its blocks decoded, printed and read back.
	example, err := LoadConfig(filepath.Join("..", "..", "sandgate.example.yaml"), nil, Builtin())
	require.NoError(t, err)
	out, err = example.YAML()
	require.NoError(t, err)
	again := load(t, string(out))
	assert.Equal(t, example.Redacted(), again.Redacted(), "rendered:\n%s", out)
	assert.Equal(t, example.Sandbox.Profiles, again.Sandbox.Profiles)
}

var update = flag.Bool("update", false, "rewrite the repository's config.schema.json from Schema()")

var schemaPath = filepath.Join("..", "..", config.SchemaFile)

// config.schema.json is what Schema returns: config's keys and each registered provider's
// block, described from its own type (`go generate ./internal/config` writes it).
func TestSchema(t *testing.T) {
	t.Parallel()
	got, err := Schema()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(schemaPath, got, 0o644))
		return
	}
	want, err := os.ReadFile(schemaPath)
	require.NoError(t, err, "run: go generate ./internal/config")
	require.Equal(t, string(want), string(got),
		"%s is out of date with the config types or the provider blocks; run: go generate ./internal/config", config.SchemaFile)

	var doc struct {
		Defs map[string]struct {
			Description string `json:"description"`
			Properties  map[string]struct {
				Ref  string   `json:"$ref"`
				Enum []string `json:"enum"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(got, &doc))
	reg := Builtin()
	for _, b := range reg.Backends() {
		def, ok := doc.Defs[b.SchemaName]
		require.True(t, ok, "%s: no definition %s", b.Type, b.SchemaName)
		assert.Equal(t, b.Summary, def.Description)
		assert.NotEmpty(t, def.Properties, b.Type)
		for _, parent := range []string{"Profile", "Sandbox"} {
			assert.Equal(t, "#/$defs/"+b.SchemaName, doc.Defs[parent].Properties[b.Type].Ref, "%s.%s", parent, b.Type)
		}
	}
	for _, parent := range []string{"Profile", "Sandbox"} {
		assert.Equal(t, reg.Types(), doc.Defs[parent].Properties["type"].Enum, parent)
	}
	assert.Contains(t, doc.Defs, "DockerWarmPool", "a nested block type: its block's name and its own")
	assert.Contains(t, doc.Defs, "KubernetesAgentSandbox")
}

// compiledSchema compiles Schema() with a real JSON Schema validator.
func compiledSchema(t *testing.T) *santhosh.Schema {
	t.Helper()
	raw, err := Schema()
	require.NoError(t, err)
	doc, err := santhosh.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := santhosh.NewCompiler()
	require.NoError(t, c.AddResource(config.SchemaFile, doc))
	s, err := c.Compile(config.SchemaFile)
	require.NoError(t, err)
	return s
}

// yamlInstance reads YAML into the JSON value model the validator expects.
func yamlInstance(t *testing.T, text []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(text, &v))
	js, err := json.Marshal(v)
	require.NoError(t, err)
	inst, err := santhosh.UnmarshalJSON(bytes.NewReader(js))
	require.NoError(t, err)
	return inst
}

// The schema accepts the files the gateway accepts (the example, the compose file's, the
// Helm chart's default) and refuses what the gateway refuses for the same reason.
func TestSchemaValidatesFiles(t *testing.T) {
	t.Parallel()
	s := compiledSchema(t)
	for _, path := range []string{"sandgate.example.yaml", "deploy/compose/sandgate.yaml"} {
		text, err := os.ReadFile(filepath.Join("..", "..", path))
		require.NoError(t, err)
		require.NoError(t, s.Validate(yamlInstance(t, text)), "%s must match the schema", path)
	}
	for name, text := range map[string]string{
		"unknown key":            "sandbox:\n  broker:\n    flavour: queue\n",
		"bad enum":               "sandbox:\n  profiles:\n    p:\n      type: docker\n      scope: sometimes\n",
		"bad duration":           "auth:\n  clock_skew: soon\n",
		"profile name":           "sandbox:\n  profiles:\n    Web:\n      type: docker\n",
		"missing type":           "sandbox:\n  profiles:\n    web:\n      scope: per_call\n",
		"hmac algorithm":         "auth:\n  issuers:\n    - url: https://x\n      signing_algorithms: [HS256]\n",
		"unknown provider":       "sandbox:\n  profiles:\n    web:\n      type: firecracker\n",
		"unserved provider":      "sandbox:\n  type: bedrock_agentcore\n  bedrock_agentcore: {}\n",
		"unknown key in a block": "sandbox:\n  profiles:\n    web:\n      type: docker\n      docker: {imgae: x}\n",
		"wrong type in a block":  "sandbox:\n  type: kubernetes\n  kubernetes: {create_timeout: soon}\n",
		"unknown block":          "sandbox:\n  profiles:\n    web:\n      type: docker\n      dockr: {}\n",
	} {
		require.Error(t, s.Validate(yamlInstance(t, []byte(text))), name)
	}
	require.NoError(t, s.Validate(yamlInstance(t, []byte("auth:\n  clock_skew: 45\nserver:\n  idle_timeout: 1h30m\n"))))
	require.NoError(t, s.Validate(yamlInstance(t, []byte("sandbox:\n  type: docker\n  docker: {warm_pool: {size: 2}}\n  bedrock_agentcore: {region: eu-west-1}\n"))))
}
