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
			"default": {Type: "local_subprocess"},
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
			p.Type, p.Environment, p.IdleAction = "docker", EnvironmentAttached, IdlePause
			p.Blocks = Blocks{"docker": map[string]any{"attach_to": "box"}}
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
		{"a bad network_allow entry", profile(func(p *Profile) {
			p.Policy.NetworkEgress, p.Policy.NetworkAllow = EgressAllowlist, []string{"pypi.org", "api.*.com:443"}
		}), prof + ".policy.network_allow[1]", []string{"api.*.com:443", "wildcard"}},
		{"egress host not a name", func(c *Config) { c.Egress.Hosts = map[string]string{"*.x.test": "127.0.0.1"} },
			"egress.hosts.*.x.test", []string{"not a host name"}},
		{"egress host address", func(c *Config) { c.Egress.Hosts = map[string]string{"allowed.test": "localhost:80"} },
			"egress.hosts.allowed.test", []string{"not an IP address"}},
		{"network_allow without allowlist", profile(func(p *Profile) { p.Policy.NetworkAllow = []string{"pypi.org"} }),
			prof + ".policy.network_allow", []string{"only meaningful", "allowlist"}},

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
		{"provider types and blocks are not this package's", profile(func(p *Profile) {
			p.Type, p.Environment = "firecracker", EnvironmentAttached
			p.Blocks = Blocks{"firecracker": map[string]any{"vcpus": "many"}, "docker": nil}
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
	c := &Config{Sandbox: Sandbox{Type: "docker", Scope: "sometimes"}}
	c.ApplyDefaults()
	requireProblem(t, c.Validate(), "sandbox.scope", "per_session")
}

// LoadWith runs the BlockDecoder after the rest is decoded and defaulted: its decoding
// problems are reported with the file's, sorted by key, and its validation problems with
// Validate's — under the keys the user wrote (the shorthand's for the shorthand).
func TestLoadWithBlockDecoder(t *testing.T) {
	t.Parallel()
	c := loadBoxes(t, "sandbox:\n  default_profile: web\n  profiles:\n    web:\n      type: box\n      box: {size: 2, tags: [a, b], limits: {cpu: 1.5}}\n    bare:\n      type: box\n      box:\n")
	require.Equal(t, &boxBlock{Image: "busybox", Size: 2, Tags: []string{"a", "b"}, Limits: &boxLimits{CPU: 1.5}}, boxOf(t, c, "web"))
	require.Equal(t, &boxBlock{Image: "busybox"}, boxOf(t, c, "bare"), "a block written without keys has its defaults")

	_, err := LoadWith(writeConfig(t, "listen: x\nsandbox:\n  profiles:\n    web:\n      type: box\n      imgae: x\n      box: {size: many, colour: red}\n"), nil, testBlocks{})
	var keys []string
	for _, fe := range fieldErrors(err) {
		keys = append(keys, fe.Key)
	}
	require.Equal(t, []string{"listen", "sandbox.profiles.web.box.colour", "sandbox.profiles.web.box.size", "sandbox.profiles.web.imgae"}, keys,
		"every decoding problem, the blocks' too, sorted by key")
	requireProblem(t, err, "sandbox.profiles.web.box.size", `"many"`, "an integer")
	requireProblem(t, err, "sandbox.profiles.web.imgae", "unknown key")

	_, err = LoadWith(writeConfig(t, "log:\n  level: loud\nsandbox:\n  type: box\n  box: {size: -1}\n"), nil, testBlocks{})
	requireProblem(t, err, "log.level", "debug")
	requireProblem(t, err, "sandbox.box.size", "negative")
	_, err = LoadWith("", []string{"SANDGATE_SANDBOX__TYPE=box"}, testBlocks{})
	requireProblem(t, err, "sandbox.box", "missing")
}

// Without a BlockDecoder (Load), blocks and the keys of a profile this package does not
// define stay raw: Load is for programs that need the rest (gateway.LoadConfig checks them).
func TestLoadKeepsBlocksRaw(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, "sandbox:\n  default_profile: web\n  profiles:\n    web:\n      type: docker\n      docker: {image: alpine:3, pids_limit: 64}\n      imgae: x\n")
	require.Equal(t, Blocks{"docker": map[string]any{"image": "alpine:3", "pids_limit": 64}, "imgae": "x"}, c.Sandbox.Profiles["web"].Blocks)
}
