package config

import (
	"maps"
	"net"
	"time"
)

// Default values (docs/semantics.md §5 and the comments in types.go). Zero values in the file
// mean "use the default"; keys whose zero is meaningful are pointers (policy.timeout,
// broker.wait_timeout, sandbox.enabled, database.auto_migrate).
const (
	DefaultProfileName    = "default"
	DefaultIdleTimeout    = 1800 // seconds
	DefaultPolicyTimeout  = 120.0
	DefaultAddr           = ":8080"
	DefaultMaxBodyBytes   = 8 << 20
	DefaultMaxOutputBytes = 1 << 20
	DefaultMaxFileBytes   = 100 << 20
	// DefaultKeptOutputMemoryBytes is sandbox.kept_output_memory_bytes' default.
	DefaultKeptOutputMemoryBytes = 128 << 20
	// DefaultQuotaSessions and DefaultQuotaConcurrentExecutions are sandbox.quotas' defaults.
	DefaultQuotaSessions             = 100
	DefaultQuotaConcurrentExecutions = 32
	// DefaultQuotaBackgroundProcesses is sandbox.quotas.background_processes' default.
	DefaultQuotaBackgroundProcesses = 8
	// DefaultQuotaContexts, DefaultQuotaMCPSessions and DefaultQuotaRetainedOutputBytes are
	// sandbox.quotas.contexts', mcp_sessions' and retained_output_bytes' defaults.
	DefaultQuotaContexts            = 32
	DefaultQuotaMCPSessions         = 16
	DefaultQuotaRetainedOutputBytes = 256 << 20
	// DefaultQuotaSnapshots is sandbox.quotas.snapshots' default.
	DefaultQuotaSnapshots = 20
	// DefaultQuotaSnapshotBytes is sandbox.quotas.snapshot_bytes' default: 10 GiB.
	DefaultQuotaSnapshotBytes     = 10 << 30
	DefaultQuotaRequestsPerSecond = 50.0
	DefaultQuotaRequestsBurst     = 100
	// DefaultQuotaLinkRequestsPerSecond and DefaultQuotaLinkRequestsBurst bound the requests
	// through one preview link, and from one client address through links.
	DefaultQuotaLinkRequestsPerSecond = 200.0
	DefaultQuotaLinkRequestsBurst     = 1000
	DefaultToolOutputMaxChars         = 8000
	// DefaultSecretsPerPrincipal is secrets.max_per_principal's default.
	DefaultSecretsPerPrincipal = 100
	// DefaultAuditRetention is audit.retention's default: 90 days.
	DefaultAuditRetention = Duration(90 * 24 * time.Hour)
	// DefaultStreamIdleTimeout is server.stream_idle_timeout's default.
	DefaultStreamIdleTimeout = Duration(2 * time.Minute)
	// DefaultMCPMaxBatch is server.mcp_max_batch's default.
	DefaultMCPMaxBatch = 50
	// DefaultQuotaOpenRequests is sandbox.quotas.open_requests' default.
	DefaultQuotaOpenRequests = 64
	// DefaultAPIKeyTTL and DefaultAPIKeyMaxTTL are auth.api_keys.default_ttl's and max_ttl's
	// defaults: 30 and 365 days.
	DefaultAPIKeyTTL    = Duration(30 * 24 * time.Hour)
	DefaultAPIKeyMaxTTL = Duration(365 * 24 * time.Hour)
	// DefaultAPIKeysPerPrincipal is auth.api_keys.max_per_principal's default.
	DefaultAPIKeysPerPrincipal = 50
)

// ApplyDefaults fills every unset key with its default and expands the single-backend
// shorthand; Load calls it before Validate. It is idempotent.
//
// Shorthand (docs/semantics.md §5): when sandbox.profiles is empty and sandbox.type is set,
// profiles[default_profile] is synthesised from sandbox.type, scope, environment,
// idle_timeout, identity, policy and the top-level provider blocks. An explicit profiles map
// always wins and the shorthand keys are then ignored.
//
// Provider blocks are not this package's: their defaults are their backends', applied when
// the blocks are decoded (BlockDecoder).
func (c *Config) ApplyDefaults() {
	c.Server.applyDefaults()
	if c.Database.MaxConns == 0 {
		c.Database.MaxConns = 20
	}
	if c.Database.AutoMigrate == nil {
		c.Database.AutoMigrate = ptr(true)
	}
	setDefault(&c.Log.Level, "info")
	setDefault(&c.Log.Format, "json")
	c.Auth.applyDefaults()
	c.Sandbox.applyDefaults()
	if c.Server.E2B.Templates == nil {
		c.Server.E2B.Templates = map[string]string{"base": c.Sandbox.DefaultProfile, "code-interpreter-v1": c.Sandbox.DefaultProfile}
	}
	setDefault(&c.Telemetry.ServiceName, "sandgate")
	setDefault(&c.Audit.Retention, DefaultAuditRetention)
	setDefault(&c.Secrets.MaxPerPrincipal, DefaultSecretsPerPrincipal)
}

func (s *Server) applyDefaults() {
	setDefault(&s.Addr, DefaultAddr)
	if s.PublicURL == "" {
		port := "8080"
		if _, p, err := net.SplitHostPort(s.Addr); err == nil && p != "" {
			port = p
		}
		s.PublicURL = "http://localhost:" + port
	}
	setDefault(&s.ReadHeaderTimeout, Duration(10*time.Second))
	setDefault(&s.ReadTimeout, Duration(15*time.Minute))
	setDefault(&s.WriteTimeout, Duration(15*time.Minute))
	setDefault(&s.IdleTimeout, Duration(2*time.Minute))
	setDefault(&s.ShutdownTimeout, Duration(30*time.Second))
	setDefault(&s.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&s.StreamIdleTimeout, DefaultStreamIdleTimeout)
	setDefault(&s.MCPMaxBatch, DefaultMCPMaxBatch)
	setDefault(&s.CORS.MaxAge, Duration(10*time.Minute))
}

func (a *Auth) applyDefaults() {
	setDefault(&a.ClockSkew, Duration(30*time.Second))
	setDefault(&a.APIKeys.MaxTTL, DefaultAPIKeyMaxTTL)
	setDefault(&a.APIKeys.DefaultTTL, min(DefaultAPIKeyTTL, a.APIKeys.MaxTTL))
	setDefault(&a.APIKeys.MaxPerPrincipal, DefaultAPIKeysPerPrincipal)
	for i := range a.Issuers {
		iss := &a.Issuers[i]
		if len(iss.SigningAlgorithms) == 0 {
			iss.SigningAlgorithms = []string{"RS256", "ES256"}
		}
		iss.ClaimMappings.Username.defaultClaim("sub")
		iss.ClaimMappings.Groups.defaultClaim("groups")
		iss.ClaimMappings.Email.defaultClaim("email")
	}
}

// defaultClaim sets Claim when neither Claim nor Expression is set.
func (m *ClaimOrExpression) defaultClaim(claim string) {
	if m.Claim == "" && m.Expression == "" {
		m.Claim = claim
	}
}

func (s *Sandbox) applyDefaults() {
	if s.Enabled == nil {
		s.Enabled = ptr(true)
	}
	setDefault(&s.DefaultProfile, DefaultProfileName)
	setDefault(&s.ToolOutputMaxChars, DefaultToolOutputMaxChars)
	setDefault(&s.MaxOutputBytes, DefaultMaxOutputBytes)
	setDefault(&s.MaxFileBytes, DefaultMaxFileBytes)
	setDefault(&s.KeptOutputMemoryBytes, DefaultKeptOutputMemoryBytes)
	s.Broker.applyDefaults()
	setDefault(&s.Quotas.Sessions, DefaultQuotaSessions)
	setDefault(&s.Quotas.ConcurrentExecutions, DefaultQuotaConcurrentExecutions)
	setDefault(&s.Quotas.BackgroundProcesses, DefaultQuotaBackgroundProcesses)
	setDefault(&s.Quotas.Contexts, DefaultQuotaContexts)
	setDefault(&s.Quotas.MCPSessions, DefaultQuotaMCPSessions)
	setDefault(&s.Quotas.RetainedOutputBytes, DefaultQuotaRetainedOutputBytes)
	setDefault(&s.Quotas.Snapshots, DefaultQuotaSnapshots)
	setDefault(&s.Quotas.OpenRequests, DefaultQuotaOpenRequests)
	setDefault(&s.Quotas.SnapshotBytes, DefaultQuotaSnapshotBytes)
	setDefault(&s.Quotas.RequestsPerSecond, DefaultQuotaRequestsPerSecond)
	setDefault(&s.Quotas.RequestsBurst, DefaultQuotaRequestsBurst)
	setDefault(&s.Quotas.LinkRequestsPerSecond, DefaultQuotaLinkRequestsPerSecond)
	setDefault(&s.Quotas.LinkRequestsBurst, DefaultQuotaLinkRequestsBurst)
	if s.Quotas.AdminsExempt == nil {
		s.Quotas.AdminsExempt = ptr(true)
	}

	if len(s.Profiles) == 0 && s.Type != "" {
		s.Profiles = map[string]Profile{s.DefaultProfile: s.shorthandProfile()}
		s.synthesized = true
	}
	for name, p := range s.Profiles {
		p.applyDefaults()
		s.Profiles[name] = p
	}
}

// shorthandProfile builds the profile the single-backend shorthand describes.
func (s *Sandbox) shorthandProfile() Profile {
	p := Profile{
		Type:        s.Type,
		Scope:       s.Scope,
		Environment: s.Environment,
		IdleTimeout: s.IdleTimeout,
		Blocks:      maps.Clone(s.Blocks),
	}
	if s.Identity != nil {
		p.Identity = *s.Identity
	}
	if s.Policy != nil {
		p.Policy = *s.Policy
	}
	return p
}

func (b *Broker) applyDefaults() {
	setDefault(&b.Flavor, FlavorThread)
	if b.WaitTimeout == nil {
		b.WaitTimeout = ptr(60.0)
	}
	setDefault(&b.WaitPollInterval, 0.5)
	setDefault(&b.InlinePayloadMaxBytes, 131072)
	setDefault(&b.ResponseTTL, 86400)
	setDefault(&b.SweepInterval, 300)
	setDefault(&b.LostAfter, Duration(30*time.Second))
	setDefault(&b.Spool.MaxBytes, 1<<30)
	if q := b.Queue; q != nil {
		setDefault(&q.MaxReceiveCount, 3)
		setDefault(&q.Consumers, 5)
		setDefault(&q.RescueAfter, Duration(time.Minute))
		setDefault(&q.NATS.URL, "nats://127.0.0.1:4222")
		setDefault(&q.NATS.Stream, "SANDGATE_TASKS")
		setDefault(&q.NATS.SubjectPrefix, "sandgate.tasks")
		setDefault(&q.NATS.AckWait, Duration(30*time.Second))
		if len(q.Kafka.Brokers) == 0 {
			q.Kafka.Brokers = []string{"127.0.0.1:9092"}
		}
		setDefault(&q.Kafka.InputTopic, "sandgate-tasks")
		setDefault(&q.Kafka.Partitions, 12)
		setDefault(&q.Kafka.GroupID, "sandgate-workers")
		setDefault(&q.Kafka.SessionTimeout, Duration(45*time.Second))
		setDefault(&q.SQS.VisibilityTimeout, Duration(5*time.Minute))
		setDefault(&q.SQS.WaitTime, Duration(10*time.Second))
	}
	if b.ResponseStore != nil {
		setDefault(&b.ResponseStore.Type, QueuePostgres)
	}
}

func (p *Profile) applyDefaults() {
	setDefault(&p.Scope, ScopePerSession)
	setDefault(&p.Environment, EnvironmentManaged)
	setDefault(&p.IdleTimeout, DefaultIdleTimeout)
	setDefault(&p.Identity.Mode, IdentityAgent)
	setDefault(&p.IdleAction, IdleReset)
	p.Policy.applyDefaults()
}

func (p *Policy) applyDefaults() {
	setDefault(&p.NetworkEgress, EgressAllow)
	if p.Timeout == nil {
		p.Timeout = ptr(DefaultPolicyTimeout)
	}
	if p.Strict == nil {
		p.Strict = ptr(true)
	}
}

// setDefault stores def in *v when *v is the zero value.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func ptr[T any](v T) *T { return &v }
