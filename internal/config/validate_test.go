package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// validConfig is a small valid configuration after defaults: one local profile and one issuer.
func validConfig(t *testing.T) *Config {
	t.Helper()
	c := &Config{
		Auth: Auth{Issuers: []Issuer{{URL: "https://issuer.example.com", Audiences: []string{"sandgate"}}}},
		Sandbox: Sandbox{Profiles: map[string]Profile{
			"default": {Type: ProviderLocalSubprocess},
		}},
	}
	c.ApplyDefaults()
	require.NoError(t, c.Validate())
	return c
}

// profile edits the profile named "default".
func profile(edit func(p *Profile)) func(c *Config) {
	return func(c *Config) {
		p := c.Sandbox.Profiles["default"]
		edit(&p)
		c.Sandbox.Profiles["default"] = p
	}
}

func issuer(edit func(iss *Issuer)) func(c *Config) {
	return func(c *Config) { edit(&c.Auth.Issuers[0]) }
}

func TestValidateRules(t *testing.T) {
	t.Parallel()
	const prof = "sandbox.profiles.default"
	builtins := []string{"local_subprocess", "docker", "kubernetes", "ec2_ssm", "e2b", "daytona"}

	tests := []struct {
		name   string
		mutate func(c *Config)
		key    string
		words  []string
	}{
		// Enumerated keys name the allowed values.
		{"scope", profile(func(p *Profile) { p.Scope = "forever" }), prof + ".scope",
			[]string{`"forever"`, "per_call", "per_session", "per_runtime"}},
		{"environment", profile(func(p *Profile) { p.Environment = "remote" }), prof + ".environment",
			[]string{`"remote"`, "managed", "attached"}},
		{"identity mode", profile(func(p *Profile) { p.Identity.Mode = "root" }), prof + ".identity.mode",
			[]string{"agent", "user"}},
		{"network egress", profile(func(p *Profile) { p.Policy.NetworkEgress = "some" }), prof + ".policy.network_egress",
			[]string{"allow", "deny", "allowlist"}},
		{"idle action", profile(func(p *Profile) { p.IdleAction = "hibernate" }), prof + ".idle_action",
			[]string{`"hibernate"`, "reset", "pause", "snapshot"}},
		{"idle action on per_call", profile(func(p *Profile) { p.IdleAction = IdleSnapshot; p.Scope = ScopePerCall }), prof + ".idle_action",
			[]string{"snapshot", "per_call"}},
		{"idle action on an attached environment", profile(func(p *Profile) {
			p.Type, p.Environment, p.IdleAction = ProviderDocker, EnvironmentAttached, IdlePause
			p.Docker = &Docker{AttachTo: "box"}
		}), prof + ".idle_action", []string{"pause", "attached"}},
		{"broker flavor", func(c *Config) { c.Sandbox.Broker.Flavor = "celery" }, "sandbox.broker.flavor",
			[]string{"embedded", "thread", "queue"}},
		{"log level", func(c *Config) { c.Log.Level = "trace" }, "log.level", []string{"debug", "info", "warn", "error"}},
		{"kept output below one execution's", func(c *Config) { c.Sandbox.KeptOutputMemoryBytes = c.Sandbox.MaxOutputBytes }, "sandbox.kept_output_memory_bytes",
			[]string{"twice", "sandbox.max_output_bytes"}},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, "log.format", []string{"json", "text"}},
		{"an E2B template of no profile", func(c *Config) {
			c.Server.E2B.Enabled, c.Server.E2B.Templates = true, map[string]string{"base": "gpu"}
		}, "server.e2b.templates.base", []string{`"gpu"`, "sandbox.profiles"}},
		{"shorthand scope next to explicit profiles", func(c *Config) { c.Sandbox.Scope = "sometimes" }, "sandbox.scope",
			[]string{"per_session"}},

		// Provider types (docs/semantics.md §6).
		{"unknown provider", profile(func(p *Profile) { p.Type = "firecracker" }), prof + ".type",
			append([]string{`"firecracker"`}, builtins...)},
		{"missing provider type", profile(func(p *Profile) { p.Type = "" }), prof + ".type", []string{"required"}},
		{"bedrock has no provider", profile(func(p *Profile) {
			p.Type = ProviderBedrockAgentCore
			p.BedrockAgentCore = &BedrockAgentCore{}
		}), prof + ".type", []string{"no bedrock_agentcore provider has shipped"}},
		{"missing docker block", profile(func(p *Profile) { p.Type = ProviderDocker }), prof + ".docker",
			[]string{"missing", "docker"}},
		{"missing kubernetes block", profile(func(p *Profile) { p.Type = ProviderKubernetes }), prof + ".kubernetes",
			[]string{"missing"}},
		{"missing ec2_ssm block", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderEC2SSM, EnvironmentAttached
			p.Params = map[string]any{"attach_to": "i-0abc"}
		}), prof + ".ec2_ssm", []string{"missing"}},
		{"missing e2b block", profile(func(p *Profile) { p.Type = ProviderE2B }), prof + ".e2b", []string{"missing"}},
		{"missing daytona block", profile(func(p *Profile) { p.Type = ProviderDaytona }), prof + ".daytona", []string{"missing"}},
		{"daytona image and snapshot", profile(func(p *Profile) {
			p.Type = ProviderDaytona
			p.Daytona = &Daytona{Image: "python:3.12", Snapshot: "snap-1"}
		}), prof + ".daytona", []string{"image", "snapshot", "mutually exclusive"}},

		// Profiles.
		{"default profile undefined", func(c *Config) { c.Sandbox.DefaultProfile = "missing" }, "sandbox.default_profile",
			[]string{`"missing"`, "not defined", "default"}},
		{"profile name", func(c *Config) {
			c.Sandbox.Profiles["Web Tools"] = c.Sandbox.Profiles["default"]
		}, "sandbox.profiles.Web Tools", []string{profileNamePattern}},
		{"idle timeout", profile(func(p *Profile) { p.IdleTimeout = -5 }), prof + ".idle_timeout", []string{"greater than 0"}},
		{"policy timeout", profile(func(p *Profile) { p.Policy.Timeout = ptr(0.0) }), prof + ".policy.timeout",
			[]string{"greater than 0"}},
		{"policy cpu", profile(func(p *Profile) { p.Policy.CPU = ptr(-1.0) }), prof + ".policy.cpu", []string{"greater than 0"}},
		{"policy memory", profile(func(p *Profile) { p.Policy.MemoryMB = ptr(0) }), prof + ".policy.memory_mb",
			[]string{"greater than 0"}},
		{"allowlist without hosts", profile(func(p *Profile) { p.Policy.NetworkEgress = EgressAllowlist }),
			prof + ".policy.network_allow", []string{"allowlist", "at least one"}},
		{"network_allow without allowlist", profile(func(p *Profile) { p.Policy.NetworkAllow = []string{"pypi.org"} }),
			prof + ".policy.network_allow", []string{"only meaningful", "allowlist"}},

		// The environment matrix (docs/semantics.md §6).
		{"managed attach-only provider", profile(func(p *Profile) {
			p.Type = ProviderEC2SSM
			p.EC2SSM = &EC2SSM{}
		}), prof + ".environment", []string{"attach-only", "environment: attached"}},
		{"managed with block attach_to", profile(func(p *Profile) {
			p.Type = ProviderDocker
			p.Docker = &Docker{Image: "python:3.12-slim", AttachTo: "dev-box"}
		}), prof + ".docker.attach_to", []string{"managed", "environment: attached"}},
		{"managed with params.attach_to", profile(func(p *Profile) {
			p.Type = ProviderKubernetes
			p.Kubernetes = &Kubernetes{}
			p.Params = map[string]any{"attach_to": "ns/pod"}
		}), prof + ".params.attach_to", []string{"environment: attached"}},
		{"attached provision-only provider", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderE2B, EnvironmentAttached
			p.E2B = &E2B{}
		}), prof + ".environment", []string{"e2b", "cannot attach to an existing environment"}},
		{"attached local_subprocess", profile(func(p *Profile) { p.Environment = EnvironmentAttached }),
			prof + ".environment", []string{"cannot attach to an existing environment"}},
		{"attached without target", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderDocker, EnvironmentAttached
			p.Docker = &Docker{}
		}), prof + ".docker.attach_to", []string{"no attach_to target"}},
		{"attached ec2_ssm without target", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderEC2SSM, EnvironmentAttached
			p.EC2SSM = &EC2SSM{Region: "eu-west-1"}
		}), prof + ".ec2_ssm.attach_to", []string{"no attach_to target", "instance id"}},
		{"docker sandboxd transport", profile(func(p *Profile) {
			p.Type = ProviderDocker
			p.Docker = &Docker{Sandboxd: &DockerSandboxd{Transport: "tcp"}}
		}), prof + ".docker.sandboxd.transport", []string{`"tcp"`, "socket", "exec"}},
		{"kubernetes sandboxd transport", profile(func(p *Profile) {
			p.Type = ProviderKubernetes
			p.Kubernetes = &Kubernetes{Sandboxd: KubernetesSandboxd{Transport: "proxy"}}
		}), prof + ".kubernetes.sandboxd.transport", []string{`"proxy"`, "exec", "pod_ip"}},
		{"kubernetes sandboxd path", profile(func(p *Profile) {
			p.Type = ProviderKubernetes
			p.Kubernetes = &Kubernetes{Sandboxd: KubernetesSandboxd{Path: "bin/sandboxd"}}
		}), prof + ".kubernetes.sandboxd.path", []string{"absolute"}},
		{"kubernetes snapshot_dir relative", profile(func(p *Profile) {
			p.Type = ProviderKubernetes
			p.Kubernetes = &Kubernetes{SnapshotDir: "snapshots"}
		}), prof + ".kubernetes.snapshot_dir", []string{"absolute", `"snapshots"`}},
		{"kubernetes snapshot_dir attached", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderKubernetes, EnvironmentAttached
			p.Kubernetes = &Kubernetes{AttachTo: "tools/shell-0", SnapshotDir: "/var/lib/sandgate/snapshots"}
		}), prof + ".kubernetes.snapshot_dir", []string{"managed profiles"}},
		{"kubernetes sandboxd image with agent_sandbox", profile(func(p *Profile) {
			p.Type = ProviderKubernetes
			p.Kubernetes = &Kubernetes{Sandboxd: KubernetesSandboxd{Image: "sandgate/sandbox-python"}, AgentSandbox: &KubernetesAgentSandbox{WarmPool: "w"}}
		}), prof + ".kubernetes.sandboxd.image", []string{"agent_sandbox"}},
		{"stateful attached docker", profile(func(p *Profile) {
			p.Type, p.Environment, p.Stateful = ProviderDocker, EnvironmentAttached, true
			p.Docker = &Docker{AttachTo: "dev-box"}
		}), prof + ".stateful", []string{"attached", "no sandboxd keeps running"}},
		{"stateful ec2_ssm", profile(func(p *Profile) {
			p.Type, p.Environment, p.Stateful = ProviderEC2SSM, EnvironmentAttached, true
			p.EC2SSM = &EC2SSM{Region: "eu-west-1", AttachTo: "i-0123456789abcdef0"}
		}), prof + ".stateful", []string{"ec2_ssm", "keeps no interpreter state"}},
		{"stateful e2b without the code interpreter", profile(func(p *Profile) {
			p.Type, p.Stateful = ProviderE2B, true
			p.E2B = &E2B{Template: "base"}
		}), prof + ".stateful", []string{"code-interpreter template", "code_interpreter: true"}},
		{"e2b sandbox_url not a URL", profile(func(p *Profile) {
			p.Type = ProviderE2B
			p.E2B = &E2B{SandboxURL: "sandbox.internal:8080"}
		}), prof + ".e2b.sandbox_url", []string{"absolute http or https URL"}},
		{"e2b api_key_env not a variable name", profile(func(p *Profile) {
			p.Type = ProviderE2B
			p.E2B = &E2B{APIKeyEnv: "e2b_abc-123"}
		}), prof + ".e2b.api_key_env", []string{"name of an environment variable"}},
		{"e2b relative workdir", profile(func(p *Profile) {
			p.Type = ProviderE2B
			p.E2B = &E2B{Workdir: "work"}
		}), prof + ".e2b.workdir", []string{"absolute folder"}},
		{"params.attach_to not a string", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderDocker, EnvironmentAttached
			p.Docker = &Docker{}
			p.Params = map[string]any{"attach_to": 42}
		}), prof + ".params.attach_to", []string{"string"}},

		// Broker (docs/semantics.md §5, §10).
		{"queue flavor without queue", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: "postgres"}
		}, "sandbox.broker.queue", []string{"sandbox.broker.flavor is queue"}},
		{"queue without type", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.Queue = &Queue{Consumers: 10}
			c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: "postgres"}
		}, "sandbox.broker.queue.type", []string{"required"}},
		{"queue flavor without response store", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.Queue = &Queue{Type: "postgres"}
		}, "sandbox.broker.response_store", []string{"required"}},
		{"in_memory queue with postgres store", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.Queue = &Queue{Type: "in_memory"}
			c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: "postgres"}
		}, "sandbox.broker", []string{"only valid together"}},
		{"in_memory store with nats queue", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.Queue = &Queue{Type: "nats"}
			c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: "in_memory"}
		}, "sandbox.broker", []string{"only valid together"}},
		{"worker timeout ceiling", func(c *Config) { c.Sandbox.Broker.WorkerTimeoutCeiling = ptr(0.0) },
			"sandbox.broker.worker_timeout_ceiling", []string{"greater than 0"}},
		{"negative wait timeout", func(c *Config) { c.Sandbox.Broker.WaitTimeout = ptr(-1.0) },
			"sandbox.broker.wait_timeout", []string{"negative"}},

		// Auth.
		{"issuer without url", issuer(func(iss *Issuer) { iss.URL = "" }), "auth.issuers[0].url", []string{"required"}},
		{"issuer url scheme", issuer(func(iss *Issuer) { iss.URL = "ftp://issuer.example.com" }), "auth.issuers[0].url",
			[]string{"http", "https"}},
		{"duplicate issuer", func(c *Config) { c.Auth.Issuers = append(c.Auth.Issuers, c.Auth.Issuers[0]) },
			"auth.issuers[1].url", []string{"already configured"}},
		{"issuer without audience", issuer(func(iss *Issuer) { iss.Audiences = nil }), "auth.issuers[0].audiences",
			[]string{"at least one audience"}},
		{"alg none", issuer(func(iss *Issuer) { iss.SigningAlgorithms = []string{"RS256", "none"} }),
			"auth.issuers[0].signing_algorithms[1]", []string{"unsigned", "RS256"}},
		{"alg HMAC", issuer(func(iss *Issuer) { iss.SigningAlgorithms = []string{"HS256"} }),
			"auth.issuers[0].signing_algorithms[0]", []string{"HMAC", "shared"}},
		{"alg unknown", issuer(func(iss *Issuer) { iss.SigningAlgorithms = []string{"RS1"} }),
			"auth.issuers[0].signing_algorithms[0]", []string{"RS256", "EdDSA"}},
		{"claim and expression", issuer(func(iss *Issuer) {
			iss.ClaimMappings.Groups = ClaimOrExpression{Claim: "groups", Expression: "claims.roles"}
		}), "auth.issuers[0].claim_mappings.groups", []string{"claim or expression, not both"}},
		{"credential claim and expression", issuer(func(iss *Issuer) {
			iss.ClaimMappings.Credentials.AWSRoleARN = ClaimOrExpression{Claim: "role", Expression: "claims.role"}
		}), "auth.issuers[0].claim_mappings.credentials.aws_role_arn", []string{"not both"}},
		{"empty validation rule", issuer(func(iss *Issuer) {
			iss.ClaimValidationRules = []ClaimValidationRule{{Message: "nope"}}
		}), "auth.issuers[0].claim_validation_rules[0].expression", []string{"required"}},
		{"clock skew too large", func(c *Config) { c.Auth.ClockSkew = Duration(10 * 60e9) }, "auth.clock_skew",
			[]string{"between 0 and 5m"}},
		{"clock skew negative", func(c *Config) { c.Auth.ClockSkew = -1 }, "auth.clock_skew", []string{"between"}},
		{"api key max ttl too short", func(c *Config) { c.Auth.APIKeys.MaxTTL = Duration(30e9) }, "auth.api_keys.max_ttl", []string{"at least 1m"}},
		{"api key default ttl over the max", func(c *Config) { c.Auth.APIKeys.DefaultTTL = c.Auth.APIKeys.MaxTTL + 1 }, "auth.api_keys.default_ttl",
			[]string{"between 1m", "max_ttl"}},

		// Server and database.
		{"server addr", func(c *Config) { c.Server.Addr = " " }, "server.addr", []string{"must not be empty"}},
		{"max body bytes", func(c *Config) { c.Server.MaxBodyBytes = -1 }, "server.max_body_bytes", []string{"greater than 0"}},
		{"cors origin with a path", func(c *Config) {
			c.Server.CORS.AllowedOrigins = []string{"https://ok.example", "https://app.example/ui"}
		},
			"server.cors.allowed_origins[1]", []string{"not an origin", "scheme://host[:port]"}},
		{"cors origin without scheme", func(c *Config) { c.Server.CORS.AllowedOrigins = []string{"app.example.com"} },
			"server.cors.allowed_origins[0]", []string{"not an origin"}},
		{"cors max age", func(c *Config) { c.Server.CORS.MaxAge = -1 }, "server.cors.max_age", []string{"must not be negative"}},
		{"public url", func(c *Config) { c.Server.PublicURL = "localhost:8080" }, "server.public_url", []string{"http"}},
		{"max conns", func(c *Config) { c.Database.MaxConns = -1 }, "database.max_conns", []string{"greater than 0"}},
		{"preview domain with a scheme", func(c *Config) { c.Server.PreviewDomain = "https://preview.example.com" },
			"server.preview_domain", []string{"DNS name", "without scheme"}},
		{"preview domain wildcard", func(c *Config) { c.Server.PreviewDomain = "*.preview.example.com" },
			"server.preview_domain", []string{"wildcard"}},
		{"preview domain of one label", func(c *Config) { c.Server.PreviewDomain = "previews" },
			"server.preview_domain", []string{"two or more labels"}},
		{"preview domain an address", func(c *Config) { c.Server.PreviewDomain = "10.0.0.1" },
			"server.preview_domain", []string{"IP address"}},
		{"preview domain bad port", func(c *Config) { c.Server.PreviewDomain = "preview.example.com:0" },
			"server.preview_domain", []string{"TCP port"}},
		{"preview domain bad label", func(c *Config) { c.Server.PreviewDomain = "pre_view.example.com" },
			"server.preview_domain", []string{"not a DNS label"}},
		{"preview domain holds the console", func(c *Config) {
			c.Server.PublicURL = "https://sandgate.example.com"
			c.Server.PreviewDomain = "example.com"
		}, "server.preview_domain", []string{"public_url's host", "domain of their own"}},
		{"preview domain is the console", func(c *Config) {
			c.Server.PublicURL = "https://preview.example.com:8443"
			c.Server.PreviewDomain = "Preview.Example.com"
		}, "server.preview_domain", []string{"public_url's host"}},
		{"trusted proxy", func(c *Config) { c.Server.TrustedProxies = []string{"10.0.0.0/8", "ingress"} },
			"server.trusted_proxies[1]", []string{"CIDR"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			tc.mutate(c)
			requireProblem(t, c.Validate(), tc.key, tc.words...)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"preview domain", func(c *Config) {
			c.Server.PublicURL = "https://sandgate.example.com"
			c.Server.PreviewDomain = "preview.sandgate.example.com"
			c.Server.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"}
		}},
		{"preview domain for development", func(c *Config) { c.Server.PreviewDomain = "preview.localhost:8080" }},
		{"cors origins", func(c *Config) {
			c.Server.CORS.AllowedOrigins = []string{"https://app.example.com", "http://localhost:5173", "*"}
		}},
		{"attached docker", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderDocker, EnvironmentAttached
			p.Docker = &Docker{AttachTo: "dev-box"}
		})},
		{"attached kubernetes through params", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderKubernetes, EnvironmentAttached
			p.Kubernetes = &Kubernetes{}
			p.Params = map[string]any{"attach_to": "tools/shell-0"}
		})},
		{"attached ec2_ssm", profile(func(p *Profile) {
			p.Type, p.Environment = ProviderEC2SSM, EnvironmentAttached
			p.EC2SSM = &EC2SSM{AttachTo: "i-0123456789abcdef0"}
		})},
		{"managed kubernetes", profile(func(p *Profile) {
			p.Type = ProviderKubernetes
			p.Kubernetes = &Kubernetes{Namespace: "sandboxes"}
		})},
		{"allowlist with hosts", profile(func(p *Profile) {
			p.Policy.NetworkEgress = EgressAllowlist
			p.Policy.NetworkAllow = []string{"pypi.org"}
		})},
		{"queue broker", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.Queue = &Queue{Type: "postgres"}
			c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: "postgres"}
		}},
		{"in_memory pair", func(c *Config) {
			c.Sandbox.Broker.Flavor = FlavorQueue
			c.Sandbox.Broker.Queue = &Queue{Type: "in_memory"}
			c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: "in_memory"}
		}},
		{"queue blocks ignored by other flavors", func(c *Config) {
			c.Sandbox.Broker.Queue = &Queue{Type: "in_memory"}
		}},
		{"wait timeout zero promotes always", func(c *Config) { c.Sandbox.Broker.WaitTimeout = ptr(0.0) }},
		{"no profiles at all", func(c *Config) { c.Sandbox.Profiles = nil }},
		{"bedrock block unused", func(c *Config) { c.Sandbox.BedrockAgentCore = &BedrockAgentCore{} }},
		{"expression mapping", issuer(func(iss *Issuer) {
			iss.ClaimMappings.Username = ClaimOrExpression{Expression: "claims.sub"}
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			tc.mutate(c)
			require.NoError(t, c.Validate())
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c := validConfig(t)
	c.Log.Level = "loud"
	c.Server.Addr = ""
	profile(func(p *Profile) { p.Scope = "x"; p.IdleTimeout = -1 })(c)
	err := c.Validate()
	keys := map[string]bool{}
	for _, fe := range fieldErrors(err) {
		keys[fe.Key] = true
	}
	require.Equal(t, map[string]bool{
		"log.level":                             true,
		"server.addr":                           true,
		"sandbox.profiles.default.scope":        true,
		"sandbox.profiles.default.idle_timeout": true,
	}, keys)
}

func TestValidateShorthandNamesShorthandKeys(t *testing.T) {
	t.Parallel()
	c := &Config{Sandbox: Sandbox{Type: ProviderDocker, Scope: "sometimes"}}
	c.ApplyDefaults()
	err := c.Validate()
	requireProblem(t, err, "sandbox.scope", "per_session")
	requireProblem(t, err, "sandbox.docker", "missing")
}

func TestKindOf(t *testing.T) {
	t.Parallel()
	k, ok := KindOf(ProviderEC2SSM)
	require.True(t, ok)
	require.Equal(t, ProviderKind{Attaches: true}, k)
	_, ok = KindOf(ProviderBedrockAgentCore)
	require.False(t, ok)
	require.Equal(t, []string{"local_subprocess", "docker", "kubernetes", "ec2_ssm", "e2b", "daytona"}, BuiltinProviders())
}
