package config

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const localProfileYAML = `
sandbox:
  profiles:
    default:
      type: local_subprocess
`

func TestLoadEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	file := `
database:
  url: postgres://file@db/sandgate
auth:
  admin_groups: [from-file]
sandbox:
  broker:
    flavor: thread
  profiles:
    default:
      type: local_subprocess
      idle_timeout: 60
`
	tests := []struct {
		name    string
		environ []string
		check   func(t *testing.T, c *Config)
	}{
		{"nested key", []string{"SANDGATE_SANDBOX__BROKER__FLAVOR=embedded"}, func(t *testing.T, c *Config) {
			require.Equal(t, FlavorEmbedded, c.Sandbox.Broker.Flavor)
		}},
		{"override beats file", []string{"SANDGATE_DATABASE__URL=postgres://env@db/sandgate"}, func(t *testing.T, c *Config) {
			require.Equal(t, "postgres://env@db/sandgate", c.Database.URL)
		}},
		{"comma-separated list", []string{"SANDGATE_AUTH__ADMIN_GROUPS=ops, admins,"}, func(t *testing.T, c *Config) {
			require.Equal(t, []string{"ops", "admins"}, c.Auth.AdminGroups)
		}},
		{"typed values", []string{
			"SANDGATE_SANDBOX__PROFILES__DEFAULT__IDLE_TIMEOUT=90",
			"SANDGATE_SANDBOX__PROFILES__DEFAULT__POLICY__STRICT=false",
			"SANDGATE_SANDBOX__PROFILES__DEFAULT__POLICY__CPU=0.5",
			"SANDGATE_SANDBOX__BROKER__LOST_AFTER=45s",
			"SANDGATE_SERVER__READ_TIMEOUT=30",
		}, func(t *testing.T, c *Config) {
			p := c.Sandbox.Profiles["default"]
			require.Equal(t, 90, p.IdleTimeout)
			require.False(t, *p.Policy.Strict)
			require.Equal(t, 0.5, *p.Policy.CPU)
			require.Equal(t, 45*time.Second, c.Sandbox.Broker.LostAfter.D())
			require.Equal(t, 30*time.Second, c.Server.ReadTimeout.D())
		}},
		{"new profile from the environment", []string{
			"SANDGATE_SANDBOX__PROFILES__BOX__TYPE=docker",
			"SANDGATE_SANDBOX__PROFILES__BOX__DOCKER__IMAGE=alpine:3",
		}, func(t *testing.T, c *Config) {
			require.Equal(t, "docker", c.Sandbox.Profiles["box"].Type)
			require.Equal(t, Blocks{"docker": map[string]any{"image": "alpine:3"}}, c.Sandbox.Profiles["box"].Blocks, "kept raw for the backend")
			require.Equal(t, 60, c.Sandbox.Profiles["default"].IdleTimeout, "the file's profile stays")
		}},
		{"list of objects by index", []string{
			"SANDGATE_AUTH__ISSUERS__0__URL=https://issuer.example.com",
			"SANDGATE_AUTH__ISSUERS__0__AUDIENCES=a,b",
		}, func(t *testing.T, c *Config) {
			require.Len(t, c.Auth.Issuers, 1)
			require.Equal(t, "https://issuer.example.com", c.Auth.Issuers[0].URL)
			require.Equal(t, []string{"a", "b"}, c.Auth.Issuers[0].Audiences)
		}},
		{"other prefixes and the config-file variable are ignored", []string{
			"HOME=/root", "SANDGATEWAY=1", "SANDGATE_CONFIG=/etc/sandgate.yaml",
		}, func(t *testing.T, c *Config) {
			require.Equal(t, FlavorThread, c.Sandbox.Broker.Flavor)
		}},
		// A shell set up for the CLI or the Python client (docs/usage.md), or by the test
		// set-up, can start the gateway: those variables are not configuration.
		{"the clients' credentials and the tooling's switches are ignored", []string{
			"SANDGATE_URL=http://localhost:8080", "SANDGATE_TOKEN=abc", "SANDGATE_API_KEY=sgk_x",
			"SANDGATE_CACHE=/tmp/c", "SANDGATE_SKIP_KUBE=1", "SANDGATE_TEST_DATABASE_URL=postgres://x",
			"SANDGATE_DOCKER_TEST_IMAGE=img", "SANDGATE_KUBE_E2E=1", "SANDGATE_KUBE_E2E_NAMESPACE=ns",
		}, func(t *testing.T, c *Config) {
			require.Equal(t, FlavorThread, c.Sandbox.Broker.Flavor)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, loadYAML(t, file, tc.environ...))
		})
	}
}

func TestLoadShorthand(t *testing.T) {
	t.Parallel()
	t.Run("environment type with a block", func(t *testing.T) {
		t.Parallel()
		c, err := LoadWith("", []string{
			"SANDGATE_SANDBOX__TYPE=box",
			"SANDGATE_SANDBOX__BOX__IMAGE=python:3.13-slim",
			"SANDGATE_SANDBOX__SCOPE=per_call",
		}, testBlocks{})
		require.NoError(t, err)
		require.Len(t, c.Sandbox.Profiles, 1)
		p := c.Sandbox.Profiles[DefaultProfileName]
		require.Equal(t, "box", p.Type)
		require.Equal(t, ScopePerCall, p.Scope)
		require.Equal(t, EnvironmentManaged, p.Environment)
		require.Equal(t, "python:3.13-slim", boxOf(t, c, DefaultProfileName).Image)
		require.Equal(t, DefaultIdleTimeout, p.IdleTimeout)
		require.True(t, c.Sandbox.Synthesized())
		require.Equal(t, "sandbox", c.Sandbox.ProfileKey(DefaultProfileName), "the keys the user wrote")
	})
	t.Run("environment type with the file's block", func(t *testing.T) {
		t.Parallel()
		c := loadBoxes(t, "sandbox:\n  default_profile: main\n  box:\n    image: busybox:1\n", "SANDGATE_SANDBOX__TYPE=box")
		require.Equal(t, "busybox:1", boxOf(t, c, "main").Image)
	})
	t.Run("file shorthand with identity and policy", func(t *testing.T) {
		t.Parallel()
		c := loadYAML(t, `
sandbox:
  type: kubernetes
  environment: attached
  idle_timeout: 600
  identity: {mode: user}
  policy: {network_egress: deny, memory_mb: 512}
  kubernetes:
    attach_to: tools/shell-0
`)
		p := c.Sandbox.Profiles["default"]
		require.Equal(t, EnvironmentAttached, p.Environment)
		require.Equal(t, 600, p.IdleTimeout)
		require.Equal(t, IdentityUser, p.Identity.Mode)
		require.Equal(t, EgressDeny, p.Policy.NetworkEgress)
		require.Equal(t, 512, *p.Policy.MemoryMB)
		require.Equal(t, 120.0, *p.Policy.Timeout)
		require.Equal(t, Blocks{"kubernetes": map[string]any{"attach_to": "tools/shell-0"}}, p.Blocks, "the shorthand's blocks are its profile's")
	})
	t.Run("explicit profiles win", func(t *testing.T) {
		t.Parallel()
		c := loadYAML(t, `
sandbox:
  type: docker
  default_profile: local
  profiles:
    local:
      type: local_subprocess
`)
		require.Len(t, c.Sandbox.Profiles, 1)
		require.Equal(t, "local_subprocess", c.Sandbox.Profiles["local"].Type)
		require.False(t, c.Sandbox.Synthesized())
		require.Equal(t, "sandbox.profiles.local", c.Sandbox.ProfileKey("local"))
	})
}

func TestLoadUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string
		environ []string
		key     string
		words   []string
	}{
		{"top level", "listen: :80\n", nil, "listen", nil},
		{"nested", "sandbox:\n  broker:\n    flavour: queue\n", nil, "sandbox.broker.flavour", nil},
		{"in a profile", localProfileYAML + "      imgae: x\n", nil, "sandbox.profiles.default.imgae", nil},
		{"in a provider block", localProfileYAML + "      box:\n        shell: bash\n", nil,
			"sandbox.profiles.default.box.shell", nil},
		{"in a provider block, from the environment", localProfileYAML,
			[]string{"SANDGATE_SANDBOX__PROFILES__DEFAULT__BOX__LIMITS_CPU=2"}, "sandbox.profiles.default.box.limits_cpu",
			[]string{"SANDGATE_SANDBOX__PROFILES__DEFAULT__BOX__LIMITS_CPU", "__"}},
		{"in a list item", "auth:\n  issuers:\n    - url: https://x.example\n      audiences: [a]\n      aud: b\n", nil,
			"auth.issuers[0].aud", nil},
		{"from the environment", localProfileYAML, []string{"SANDGATE_LOG_LEVEL=debug"}, "log_level",
			[]string{"SANDGATE_LOG_LEVEL", "__"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadWith(writeConfig(t, tc.file), tc.environ, testBlocks{})
			requireProblem(t, err, tc.key, append([]string{"unknown key"}, tc.words...)...)
		})
	}
}

func TestLoadIgnoresRemovedBrokerKeys(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, localProfileYAML+`
  broker:
    flavor: embedded
    request_queue_url: https://sqs.example.com/q
    object_store_bucket: old-bucket
`, "SANDGATE_SANDBOX__BROKER__REQUEST_QUEUE_URL=https://sqs.example.com/other")
	require.Equal(t, FlavorEmbedded, c.Sandbox.Broker.Flavor)

	// Only the broker keys are exempt.
	_, err := LoadWith(writeConfig(t, localProfileYAML+"      request_queue_url: x\n"), nil, testBlocks{})
	requireProblem(t, err, "sandbox.profiles.default.request_queue_url", "unknown key")
}

func TestLoadNamesRemovedKeys(t *testing.T) {
	t.Parallel()
	_, err := LoadWith(writeConfig(t, `sandbox:
  profiles:
    web:
      type: box
      box:
        legacy: true
`), nil, testBlocks{})
	requireProblem(t, err, "sandbox.profiles.web.box.legacy", "removed", "delete this key")
}

// A block's keys take the same environment overrides as the rest: strings converted to the
// key's type, lists comma-separated, problems naming the variable.
func TestLoadBlockEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	c := loadBoxes(t, "sandbox:\n  default_profile: web\n  profiles:\n    web:\n      type: box\n      box: {image: alpine:3, size: 1}\n",
		"SANDGATE_SANDBOX__PROFILES__WEB__BOX__SIZE=4",
		"SANDGATE_SANDBOX__PROFILES__WEB__BOX__TAGS=a, b",
		"SANDGATE_SANDBOX__PROFILES__WEB__BOX__LIMITS__CPU=0.5",
		"SANDGATE_SANDBOX__PROFILES__WEB__BOX__ENV__TOKEN=t",
	)
	require.Equal(t, &boxBlock{Image: "alpine:3", Size: 4, Tags: []string{"a", "b"}, Env: map[string]string{"token": "t"}, Limits: &boxLimits{CPU: 0.5}},
		boxOf(t, c, "web"), "the file's keys stay; the environment's beat them")

	_, err := LoadWith(writeConfig(t, "sandbox:\n  profiles:\n    web:\n      type: box\n      box: {}\n"),
		[]string{"SANDGATE_SANDBOX__PROFILES__WEB__BOX__SIZE=big"}, testBlocks{})
	requireProblem(t, err, "sandbox.profiles.web.box.size", `"big"`, "an integer")
}

// DecodeBlock copies a block built in code (a configuration a program writes) and refuses
// a value of another type, naming the key.
func TestDecodeBlock(t *testing.T) {
	t.Parallel()
	c := &Config{}
	var b boxBlock
	require.NoError(t, c.DecodeBlock("sandbox.box", &boxBlock{Size: 3}, &b, nil))
	require.Equal(t, boxBlock{Size: 3}, b)
	b = boxBlock{}
	require.NoError(t, c.DecodeBlock("sandbox.box", boxBlock{Image: "x"}, &b, nil))
	require.Equal(t, boxBlock{Image: "x"}, b)
	require.NoError(t, c.DecodeBlock("sandbox.box", nil, &b, nil), "a block written without keys")
	requireProblem(t, c.DecodeBlock("sandbox.box", &boxLimits{}, &b, nil), "sandbox.box", "boxLimits")
	requireProblem(t, c.DecodeBlock("sandbox.box", "big", &b, nil), "sandbox.box", "expected a mapping of keys, got a string")
	require.Error(t, c.DecodeBlock("sandbox.box", map[string]any{}, b, nil), "into must be a pointer to a struct")
}

func TestLoadDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"30s", 30 * time.Second},
		{"2m", 2 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"45", 45 * time.Second},
		{"1.5", 1500 * time.Millisecond},
		{`"20"`, 20 * time.Second},
		{"0", 30 * time.Second}, // zero means the default
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			c := loadYAML(t, localProfileYAML+"  broker:\n    lost_after: "+tc.value+"\n")
			require.Equal(t, tc.want, c.Sandbox.Broker.LostAfter.D())
		})
	}
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		_, err := Load(writeConfig(t, "server:\n  idle_timeout: soon\n"), nil)
		requireProblem(t, err, "server.idle_timeout", `"soon"`, "30s")
	})
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "nope.yaml")
		_, err := Load(path, nil)
		require.ErrorContains(t, err, path)
		require.NotErrorIs(t, err, ErrInvalid)
	})
	t.Run("malformed YAML", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "sandbox: [unclosed\n")
		_, err := Load(path, nil)
		require.ErrorContains(t, err, path)
	})
	t.Run("wrong type names the key", func(t *testing.T) {
		t.Parallel()
		_, err := Load(writeConfig(t, localProfileYAML+"      idle_timeout: abc\n"), nil)
		requireProblem(t, err, "sandbox.profiles.default.idle_timeout", `"abc"`, "an integer")
	})
	t.Run("every decoding problem at once", func(t *testing.T) {
		t.Parallel()
		_, err := Load(writeConfig(t, localProfileYAML+"      idle_timeout: abc\n  broker: [x]\nlisten: x\n"),
			[]string{"SANDGATE_LOG_LEVEL=debug"})
		requireProblem(t, err, "sandbox.profiles.default.idle_timeout", "an integer")
		requireProblem(t, err, "sandbox.broker", "expected a mapping of keys, got a list")
		requireProblem(t, err, "listen", "unknown key")
		requireProblem(t, err, "log_level", "unknown key", "SANDGATE_LOG_LEVEL")
	})
	t.Run("list index gap", func(t *testing.T) {
		t.Parallel()
		_, err := Load("", []string{"SANDGATE_AUTH__ISSUERS__1__URL=https://x.example"})
		requireProblem(t, err, "auth.issuers", "index")
	})
	t.Run("validation error names file", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, localProfileYAML+"      scope: sometimes\n")
		_, err := Load(path, nil)
		require.ErrorContains(t, err, path)
		requireProblem(t, err, "sandbox.profiles.default.scope", "per_session")
	})
}

func TestLoadWithoutFile(t *testing.T) {
	t.Parallel()
	c, err := Load("", nil)
	require.NoError(t, err)
	require.Empty(t, c.Sandbox.Profiles)
	require.True(t, *c.Sandbox.Enabled)
}

func TestLoadExampleFile(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("..", "..", "sandgate.example.yaml"), nil)
	require.NoError(t, err)
	require.Equal(t, "local", c.Sandbox.DefaultProfile)
	require.ElementsMatch(t, []string{"local", "docker", "oneshot", "cloud"}, sortedKeys(c.Sandbox.Profiles))
	require.Equal(t, ScopePerCall, c.Sandbox.Profiles["oneshot"].Scope)
	require.Contains(t, c.Sandbox.Profiles["docker"].Blocks, "docker", "kept raw (internal/gateway's tests decode it)")
	require.Equal(t, "claims.email_verified == true", c.Auth.Issuers[0].ClaimValidationRules[0].Expression)
}
