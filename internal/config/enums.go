package config

// Allowed values of the enumerated keys. Validate checks against these tables and Schema
// copies them into config.schema.json, so the two never disagree.

// Scope values (docs/semantics.md §5 profile fields): how long a sandbox lives.
const (
	ScopePerCall    = "per_call"    // a fresh sandbox for every operation
	ScopePerSession = "per_session" // one sandbox per session (the default)
	ScopePerRuntime = "per_runtime" // one sandbox shared by every session of the profile
)

// Environment values (docs/semantics.md §5–§6): whether the provider creates the environment or
// attaches to one that already exists.
const (
	EnvironmentManaged  = "managed"  // the provider creates and destroys sandboxes (default)
	EnvironmentAttached = "attached" // the provider runs inside an existing target (attach_to)
)

// Identity modes (docs/semantics.md §5).
const (
	IdentityAgent = "agent" // the gateway's own credentials (default)
	IdentityUser  = "user"  // credentials mapped from the caller's token
)

// Idle actions (docs/semantics.md §8): what happens to a session idle for its idle_timeout.
const (
	IdleReset    = "reset"    // destroy the sandbox (default; the seed's behaviour)
	IdlePause    = "pause"    // freeze it; the next use resumes it
	IdleSnapshot = "snapshot" // capture the workspace, remove the sandbox; the next use restores it
)

// Network egress modes (seed SandboxPolicy).
const (
	EgressAllow     = "allow"     // default
	EgressDeny      = "deny"      // no outbound network
	EgressAllowlist = "allowlist" // only the hosts in policy.network_allow
)

// Broker flavors (docs/semantics.md §5 broker block, §10).
const (
	FlavorEmbedded = "embedded" // runs operations inline in the request
	FlavorThread   = "thread"   // goroutines in the gateway process (default)
	FlavorQueue    = "queue"    // `gateway worker` processes behind a queue transport
)

// InMemory is the queue transport and response store type that only works inside one process;
// the two must be used together (docs/semantics.md §10 pairing rule).
const InMemory = "in_memory"

// Queue transports (docs/semantics.md §10 queue). The gateway's transport registry serves
// each of them (internal/gateway/transports.go; a test keeps the two lists equal).
const (
	QueuePostgres = "postgres"
	QueueNATS     = "nats"
	QueueKafka    = "kafka"
	QueueSQS      = "sqs"
)

var queueTypes = []string{QueuePostgres, QueueNATS, QueueKafka, QueueSQS, InMemory}

// QueueTypes returns the queue transport names, in the order messages list them.
func QueueTypes() []string { return append([]string(nil), queueTypes...) }

// Kafka SASL mechanisms.
var kafkaSASLMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// Allowed values per enumerated key, in the order messages and the schema list them.
var (
	scopes        = []string{ScopePerCall, ScopePerSession, ScopePerRuntime}
	environments  = []string{EnvironmentManaged, EnvironmentAttached}
	identityModes = []string{IdentityAgent, IdentityUser}
	idleActions   = []string{IdleReset, IdlePause, IdleSnapshot}
	egressModes   = []string{EgressAllow, EgressDeny, EgressAllowlist}
	brokerFlavors = []string{FlavorEmbedded, FlavorThread, FlavorQueue}
	logLevels     = []string{"debug", "info", "warn", "error"}
	logFormats    = []string{"json", "text"}
	// signingAlgs are the asymmetric JWS algorithms an issuer may allow. "none" and the HMAC
	// family (HS*) are excluded: a public issuer cannot share a secret key with us.
	signingAlgs = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}
)

// profileNamePattern constrains profile names (they appear in URLs and env variable names).
const profileNamePattern = `^[a-z0-9][a-z0-9_.-]{0,62}$`
