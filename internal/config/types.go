// Package config loads Sandgate's configuration: one YAML file plus SANDGATE_-prefixed
// environment overrides (`__` separates levels: SANDGATE_SANDBOX__BROKER__FLAVOR=embedded),
// decoded into typed structs, defaulted and validated. Invalid configuration stops start-up
// with a message naming the key and the allowed values.
//
// The `sandbox:` block follows the seed's keys and defaults (docs/semantics.md §5–§6).
package config

import "time"

// Config is the whole file.
type Config struct {
	Server   Server   `koanf:"server" json:"server"`
	Database Database `koanf:"database" json:"database"`
	Auth     Auth     `koanf:"auth" json:"auth"`
	Sandbox  Sandbox  `koanf:"sandbox" json:"sandbox"`
	Log      Log      `koanf:"log" json:"log"`
	// Telemetry configures trace export (docs/semantics.md §14).
	Telemetry Telemetry `koanf:"telemetry" json:"telemetry"`
	// Audit configures the audit log (docs/semantics.md §14).
	Audit Audit `koanf:"audit" json:"audit"`
	// Secrets configures the secrets store (docs/semantics.md §15).
	Secrets Secrets `koanf:"secrets" json:"secrets"`
	// Egress configures the egress proxy of docker sandboxes with network_egress allowlist or
	// with secrets (docs/semantics.md §3).
	Egress Egress `koanf:"egress" json:"egress"`

	// fromEnv maps each dotted key an environment variable set to that variable's name (Load
	// records it), so that problems found later (DecodeBlock) can name the variable.
	fromEnv map[string]string
}

// Telemetry configures OpenTelemetry traces. Metrics are served on server.metrics_addr.
type Telemetry struct {
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector (e.g.
	// "http://otel-collector:4318"); spans are sent to <url>/v1/traces. Empty: the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables decide, and
	// without them tracing is off.
	OTLPEndpoint string `koanf:"otlp_endpoint" json:"otlp_endpoint"`
	// ServiceName is the traces' service.name (OTEL_SERVICE_NAME wins). Default "sandgate".
	ServiceName string `koanf:"service_name" json:"service_name"`
}

// Audit configures the audit log of executions, file writes and session changes.
type Audit struct {
	// Retention is how long audit events are kept; the sweeper deletes older ones. Default
	// 2160h (90 days); at least 1h.
	Retention Duration `koanf:"retention" json:"retention"`
}

// Secrets configures the principals' secrets (docs/semantics.md §15): their values are kept
// sealed with AES-256-GCM under these keys.
type Secrets struct {
	// Keys are "id:key" pairs, key the standard base64 of 32 random bytes (openssl rand
	// -base64 32); the first seals, every one opens. Rotate by putting a new key first,
	// running `gateway secrets reseal`, then removing the old one. In the environment:
	// SANDGATE_SECRETS__KEYS="k2:…,k1:…". Empty: secrets are refused (400 config naming this
	// setting) and sessions bind none.
	Keys []string `koanf:"keys" json:"keys" secret:"true"`
	// MaxPerPrincipal is how many secrets one principal may keep. Default 100.
	MaxPerPrincipal int `koanf:"max_per_principal" json:"max_per_principal"`
}

// ProfileSecret is a secret an operator gives every session of a profile (docs/semantics.md
// §15): its sandboxes see only a placeholder in SANDGATE_SECRET_<NAME>, and the egress proxy
// sends the value to hosts. The value comes from the gateway's environment or a file, never
// from this configuration.
type ProfileSecret struct {
	// Name is the secret's name: 1-63 lower-case letters, digits, '_' or '-', starting with
	// a letter.
	Name string `koanf:"name" json:"name"`
	// Hosts are the host patterns the value may be sent to (api.example.com,
	// *.example.com, api.example.com:443). Required.
	Hosts []string `koanf:"hosts" json:"hosts"`
	// ValueEnv names the gateway's environment variable holding the value.
	ValueEnv string `koanf:"value_env" json:"value_env"`
	// ValueFile is a file holding the value (a trailing newline is dropped); exactly one of
	// value_env and value_file.
	ValueFile string `koanf:"value_file" json:"value_file"`
}

// Egress configures the gateway's egress proxy (internal/egress), which docker sandboxes of
// allowlist policies and of sessions with secrets reach the network through.
type Egress struct {
	// StateDir holds the installation's egress CA (egress-ca.pem, and egress-ca-key.pem with
	// mode 0600), made at the first start that needs it; sandboxes trust its certificate, the
	// key never leaves this folder. Replicas serving one engine's sandboxes should share it.
	// Default: egress/ in `gateway dev`'s data folder; otherwise /var/lib/sandgate/egress for
	// root, else $XDG_STATE_HOME/sandgate/egress or ~/.local/state/sandgate/egress.
	StateDir string `koanf:"state_dir" json:"state_dir"`
	// Hosts maps host names to the address the proxy reaches them at instead of resolving
	// them with the gateway host's resolver: an IP ("10.0.0.5", the requested port kept) or
	// IP:port ("127.0.0.1:8443"). For tests and split-horizon names.
	Hosts map[string]string `koanf:"hosts" json:"hosts"`
	// UpstreamCAFile is a PEM file of the roots that verify upstream servers when the proxy
	// terminates TLS to substitute a secret; default the gateway host's system roots.
	UpstreamCAFile string `koanf:"upstream_ca_file" json:"upstream_ca_file"`
}

// Server is the HTTP listener.
type Server struct {
	// Addr is host:port to listen on. Default ":8080".
	Addr string `koanf:"addr" json:"addr"`
	// PublicURL is the externally visible base URL (used for Location headers and the dev
	// issuer). Default "http://localhost:<port>".
	PublicURL         string   `koanf:"public_url" json:"public_url"`
	ReadHeaderTimeout Duration `koanf:"read_header_timeout" json:"read_header_timeout"` // default 10s
	ReadTimeout       Duration `koanf:"read_timeout" json:"read_timeout"`               // default 15m (large uploads)
	WriteTimeout      Duration `koanf:"write_timeout" json:"write_timeout"`             // default 15m (long waits)
	IdleTimeout       Duration `koanf:"idle_timeout" json:"idle_timeout"`               // default 2m
	ShutdownTimeout   Duration `koanf:"shutdown_timeout" json:"shutdown_timeout"`       // default 30s
	// MaxBodyBytes bounds JSON request bodies. Default 8 MiB. File uploads use
	// sandbox.max_file_bytes instead.
	MaxBodyBytes int64 `koanf:"max_body_bytes" json:"max_body_bytes"`
	// StreamIdleTimeout closes a stream that moves no bytes for this long: a request body
	// (streamed standard input, an upload, any body) that sends none is cut with 408 problem
	// "timeout"; an answer the client reads none of (a download, a preview port's answer) is
	// cut; a preview port's WebSocket that carries nothing either way is closed (close code
	// 1001). Default 2m. Event streams are not cut while they wait: they send a keepalive
	// every 15 s.
	StreamIdleTimeout Duration `koanf:"stream_idle_timeout" json:"stream_idle_timeout"`
	// MCPMaxBatch bounds the messages of one JSON-RPC batch sent to /mcp (MCP 2025-03-26 and
	// earlier; later versions have no batches); each message counts as one request against
	// sandbox.quotas.requests_per_second. Over it, 413. Default 50.
	MCPMaxBatch int `koanf:"mcp_max_batch" json:"mcp_max_batch"`
	// MetricsAddr is host:port of a separate listener serving Prometheus metrics at
	// /metrics, without authentication (gateways and workers alike). Empty (the default): no
	// metrics listener. It is never served on addr, which faces the tenants.
	MetricsAddr string `koanf:"metrics_addr" json:"metrics_addr"`
	// CORS lets browser pages of other origins call the API. Default: no origin.
	CORS CORS `koanf:"cors" json:"cors"`
	// PreviewDomain serves preview ports on origins of their own: a DNS name (optionally
	// with :port) under which port P of session S is the host "P-S.<preview_domain>", with
	// public_url's scheme (and its port when none is given here). Wildcard DNS and a
	// wildcard certificate for *.<preview_domain> are the operator's (README, "Previews on
	// their own domain"). Requests for those hosts reach previews only, never the API or
	// the console; preview paths of the gateway's origin redirect there. Empty (the
	// default): previews are served under the gateway's own origin, sandboxed (CSP), with
	// the headers that could act on that origin removed. Give a domain of its own (best:
	// one on the Public Suffix List), never the console's host or a parent of it.
	PreviewDomain string `koanf:"preview_domain" json:"preview_domain"`
	// TrustedProxies are the addresses (CIDR prefixes, e.g. 10.0.0.0/8, or single
	// addresses) of the reverse proxies in front of the gateway: for a request from one of
	// them, the client is the last address in X-Forwarded-For that is not one of them.
	// Share links are rate-limited per client address. Empty: the peer is the client.
	TrustedProxies []string `koanf:"trusted_proxies" json:"trusted_proxies"`
	// E2B is the E2B door (docs/e2b-door.md): E2B's SDKs run against <public_url>/e2b with a
	// Sandgate API key as their E2B_API_KEY.
	E2B E2BDoor `koanf:"e2b" json:"e2b"`
}

// E2BDoor configures the E2B door.
type E2BDoor struct {
	// Enabled serves the door at /e2b (E2B_API_URL and E2B_SANDBOX_URL). Default false: a
	// gateway told nothing about E2B answers 404 there, which E2B's SDKs report at once.
	Enabled bool `koanf:"enabled" json:"enabled"`
	// Templates maps E2B template names to the profiles that serve them; a template name not
	// listed is taken as a profile's name. Default: E2B's SDKs' own defaults, "base" and
	// "code-interpreter-v1", to sandbox.default_profile.
	Templates map[string]string `koanf:"templates" json:"templates"`
}

// CORS configures cross-origin resource sharing (the Fetch standard's CORS protocol).
type CORS struct {
	// AllowedOrigins are the origins (scheme://host[:port], e.g. https://app.example.com)
	// whose pages may call the API with a bearer token; "*" allows any origin. Empty: none.
	// Cookies are never allowed cross-origin: the API takes bearer tokens only.
	AllowedOrigins []string `koanf:"allowed_origins" json:"allowed_origins"`
	// MaxAge is how long browsers may cache a preflight answer. Default 10m.
	MaxAge Duration `koanf:"max_age" json:"max_age"`
}

// Database is the Postgres connection.
type Database struct {
	// URL is a libpq connection string or postgres:// URL. Required by `serve`; `dev` starts
	// a throwaway Postgres when empty.
	URL      string `koanf:"url" json:"url" secret:"true"`
	MaxConns int32  `koanf:"max_conns" json:"max_conns"` // default 20
	// AutoMigrate applies pending migrations at start (under an advisory lock). Default true.
	AutoMigrate *bool `koanf:"auto_migrate" json:"auto_migrate"`
}

// Log configures log/slog.
type Log struct {
	Level  string `koanf:"level" json:"level"`   // debug | info | warn | error; default info
	Format string `koanf:"format" json:"format"` // json | text; default json
}

// Auth configures bearer-token verification and principal resolution.
type Auth struct {
	Issuers []Issuer `koanf:"issuers" json:"issuers"`
	// AdminGroups are groups whose members may list and destroy every principal's sessions.
	AdminGroups []string `koanf:"admin_groups" json:"admin_groups"`
	// ClockSkew tolerated on exp/nbf/iat. Default 30s; at most 5m.
	ClockSkew Duration `koanf:"clock_skew" json:"clock_skew"`
	// Console names the issuer and public client the web console signs users in with
	// (authorization code + PKCE). Absent: the console says sign-in is not configured.
	Console *Console `koanf:"console" json:"console,omitempty"`
	// APIKeys bounds the API keys signed-in principals make (POST /v1/api-keys).
	APIKeys APIKeys `koanf:"api_keys" json:"api_keys"`
}

// APIKeys bounds API keys: credentials for scripts, CI jobs and servers that authenticate as
// the principal that made them (docs/semantics.md §1 API key).
type APIKeys struct {
	// DefaultTTL is the lifetime of a key made without one. Default 720h (30 days); at most
	// MaxTTL.
	DefaultTTL Duration `koanf:"default_ttl" json:"default_ttl"`
	// MaxTTL is the longest lifetime a key may be given. Default 8760h (365 days); at least
	// 1m.
	MaxTTL Duration `koanf:"max_ttl" json:"max_ttl"`
	// MaxPerPrincipal bounds the live keys (neither revoked nor expired) one principal
	// holds. Default 50; negative: no limit.
	MaxPerPrincipal int `koanf:"max_per_principal" json:"max_per_principal"`
}

// Console is the web console's sign-in. The console sends the issuer's ID token as its bearer
// token, so Issuer should be one of auth.issuers and that issuer's audiences should contain
// ClientID.
type Console struct {
	Issuer   string   `koanf:"issuer" json:"issuer"`
	ClientID string   `koanf:"client_id" json:"client_id"`
	Scopes   []string `koanf:"scopes" json:"scopes"` // default [openid, profile, email]
}

// Issuer is one trusted OIDC issuer, modelled on Kubernetes' structured authentication
// configuration (JWTAuthenticator).
type Issuer struct {
	// URL is the issuer identifier (the `iss` claim); discovery is fetched from
	// URL + "/.well-known/openid-configuration" unless DiscoveryURL is set.
	URL          string `koanf:"url" json:"url"`
	DiscoveryURL string `koanf:"discovery_url" json:"discovery_url"`
	// Audiences: the token's `aud` must contain at least one. Required.
	Audiences []string `koanf:"audiences" json:"audiences"`
	// SigningAlgorithms allowed; default [RS256, ES256]. Never "none"; HMAC algorithms are refused.
	SigningAlgorithms []string `koanf:"signing_algorithms" json:"signing_algorithms"`
	// CAFile is a PEM bundle for the issuer's TLS (e.g. the Kubernetes API server CA).
	CAFile string `koanf:"ca_file" json:"ca_file"`
	// BearerTokenFile is sent when fetching discovery/JWKS (Kubernetes service-account issuer
	// discovery needs an authenticated client in some clusters).
	BearerTokenFile      string                `koanf:"bearer_token_file" json:"bearer_token_file"`
	ClaimMappings        ClaimMappings         `koanf:"claim_mappings" json:"claim_mappings"`
	ClaimValidationRules []ClaimValidationRule `koanf:"claim_validation_rules" json:"claim_validation_rules"`
	// GroupRoles maps a group to user-mode credentials, an alternative to CEL mappings.
	GroupRoles []GroupRole `koanf:"group_roles" json:"group_roles"`
}

// ClaimMappings turn verified claims into principal fields. Each is either a plain claim name
// (Claim) or a CEL expression over `claims` (Expression), never both.
type ClaimMappings struct {
	Username    ClaimOrExpression  `koanf:"username" json:"username"` // default claim "sub"
	Groups      ClaimOrExpression  `koanf:"groups" json:"groups"`     // default claim "groups"
	Email       ClaimOrExpression  `koanf:"email" json:"email"`       // default claim "email"
	Credentials CredentialMappings `koanf:"credentials" json:"credentials"`
}

// CredentialMappings resolve user-mode credentials (seed SandboxPrincipal.credentials).
type CredentialMappings struct {
	KubernetesUser   ClaimOrExpression `koanf:"kubernetes_user" json:"kubernetes_user"`
	KubernetesGroups ClaimOrExpression `koanf:"kubernetes_groups" json:"kubernetes_groups"`
	AWSRoleARN       ClaimOrExpression `koanf:"aws_role_arn" json:"aws_role_arn"`
	RunAs            ClaimOrExpression `koanf:"run_as" json:"run_as"`
}

// ClaimOrExpression names a claim or gives a CEL expression evaluated with `claims` bound to
// the token's claims map.
type ClaimOrExpression struct {
	Claim      string `koanf:"claim" json:"claim"`
	Prefix     string `koanf:"prefix" json:"prefix"`
	Expression string `koanf:"expression" json:"expression"`
}

// ClaimValidationRule is a CEL expression that must evaluate to true for the token to be
// accepted; Message is returned (401) when it does not.
type ClaimValidationRule struct {
	Expression string `koanf:"expression" json:"expression"`
	Message    string `koanf:"message" json:"message"`
}

// GroupRole grants user-mode credentials to members of Group (first match wins per field).
type GroupRole struct {
	Group            string   `koanf:"group" json:"group"`
	KubernetesUser   string   `koanf:"kubernetes_user" json:"kubernetes_user"`
	KubernetesGroups []string `koanf:"kubernetes_groups" json:"kubernetes_groups"`
	AWSRoleARN       string   `koanf:"aws_role_arn" json:"aws_role_arn"`
	RunAs            string   `koanf:"run_as" json:"run_as"`
}

// Sandbox is the seed's `sandbox:` block (docs/semantics.md §5).
type Sandbox struct {
	// Enabled defaults to true in Sandgate (the gateway exists to run sandboxes).
	Enabled            *bool  `koanf:"enabled" json:"enabled"`
	DefaultProfile     string `koanf:"default_profile" json:"default_profile"`             // default "default"
	ToolOutputMaxChars int    `koanf:"tool_output_max_chars" json:"tool_output_max_chars"` // default 8000 (MCP tools)
	// MaxOutputBytes bounds the stdout and stderr each execution keeps (head and tail halves).
	// Default 1 MiB per stream.
	MaxOutputBytes int64 `koanf:"max_output_bytes" json:"max_output_bytes"`
	// MaxFileBytes bounds one file upload. Default 100 MiB.
	MaxFileBytes int64 `koanf:"max_file_bytes" json:"max_file_bytes"`
	// KeptOutputMemoryBytes bounds the memory one gateway process holds of executions'
	// output for followers — the live output of running and recently finished executions,
	// and finished results being replayed; past it the oldest kept output is dropped from
	// memory (followers then read the task's stored result). Default 128 MiB; at least twice
	// MaxOutputBytes.
	KeptOutputMemoryBytes int64              `koanf:"kept_output_memory_bytes" json:"kept_output_memory_bytes"`
	Broker                Broker             `koanf:"broker" json:"broker"`
	Profiles              map[string]Profile `koanf:"profiles" json:"profiles"`
	// Quotas bound what one principal may hold at once, so that no tenant exhausts the
	// gateway for the others.
	Quotas Quotas `koanf:"quotas" json:"quotas"`

	// Single-backend shorthand: when Profiles is empty and Type is set, a profile named
	// DefaultProfile is synthesised from these fields and the provider blocks below.
	Type        string    `koanf:"type" json:"type"`
	Scope       string    `koanf:"scope" json:"scope"`
	Environment string    `koanf:"environment" json:"environment"`
	IdleTimeout int       `koanf:"idle_timeout" json:"idle_timeout"`
	Identity    *Identity `koanf:"identity" json:"identity"`
	Policy      *Policy   `koanf:"policy" json:"policy"`

	// Blocks at this level serve the shorthand only; explicit profiles carry their own.
	Blocks Blocks `koanf:",remain" json:"-"`

	// synthesized records that ApplyDefaults built Profiles[DefaultProfile] from the shorthand,
	// so validation messages can name the keys the user actually wrote (sandbox.scope rather
	// than sandbox.profiles.default.scope).
	synthesized bool
}

// Profile is one workload profile.
type Profile struct {
	Type        string   `koanf:"type" json:"type"`                 // required: a built-in provider name
	Scope       string   `koanf:"scope" json:"scope"`               // per_call | per_session | per_runtime; default per_session
	Environment string   `koanf:"environment" json:"environment"`   // managed | attached; default managed
	IdleTimeout int      `koanf:"idle_timeout" json:"idle_timeout"` // seconds; default 1800
	Identity    Identity `koanf:"identity" json:"identity"`
	Policy      Policy   `koanf:"policy" json:"policy"`
	// AllowedGroups restricts the profile to members of these groups; empty = everyone.
	AllowedGroups []string       `koanf:"allowed_groups" json:"allowed_groups"`
	Params        map[string]any `koanf:"params" json:"params"`
	// Stateful makes code executions of a session share interpreter state: they run in the
	// sandbox's default context unless they name another, so a variable set in one call is
	// there in the next. Needs a provider that keeps contexts (local_subprocess; docker and
	// kubernetes, through sandboxd). Default false: every execution starts a fresh interpreter.
	Stateful bool `koanf:"stateful" json:"stateful"`
	// IdleAction is what happens to a session idle for idle_timeout: reset (destroy the
	// sandbox, the default), pause (freeze it; the provider needs the pause capability) or
	// snapshot (capture the workspace and remove the sandbox; the snapshots capability). The
	// next use resumes or restores it with a notice saying what was kept. Managed
	// per_session and per_runtime profiles only.
	IdleAction string `koanf:"idle_action" json:"idle_action"`
	// AutoResume makes an operation on a paused session resume it (with a notice) instead of
	// answering 409 paused. Default false.
	AutoResume bool `koanf:"auto_resume" json:"auto_resume"`
	// Secrets are secrets every session of the profile binds (docs/semantics.md §15); the
	// profile's provider must route its sandboxes through the egress proxy.
	Secrets []ProfileSecret `koanf:"secrets" json:"secrets"`

	// Blocks are the provider blocks, by type (`docker:`, …); the block named by Type is
	// required unless its backend needs none (local_subprocess).
	Blocks Blocks `koanf:",remain" json:"-"`
}

// Identity chooses whose identity the provider acts with.
type Identity struct {
	Mode string `koanf:"mode" json:"mode"` // agent | user; default agent
}

// Policy is the seed's SandboxPolicy with its defaults.
type Policy struct {
	NetworkEgress string   `koanf:"network_egress" json:"network_egress"` // allow | deny | allowlist; default allow
	NetworkAllow  []string `koanf:"network_allow" json:"network_allow"`
	FSAllowRead   []string `koanf:"fs_allow_read" json:"fs_allow_read"`
	FSAllowWrite  []string `koanf:"fs_allow_write" json:"fs_allow_write"`
	CPU           *float64 `koanf:"cpu" json:"cpu"`             // cores
	MemoryMB      *int     `koanf:"memory_mb" json:"memory_mb"` // MiB
	Timeout       *float64 `koanf:"timeout" json:"timeout"`     // seconds; default 120
	Strict        *bool    `koanf:"strict" json:"strict"`       // default true

	// DiskMB bounds the workspace's size in MiB where the provider can (docker: a
	// loop-mounted ext4 file system, or the engine's storage-opt size; kubernetes: the
	// workspace emptyDir's sizeLimit); unset = unbounded. Under strict a provider that cannot
	// is refused.
	DiskMB *int `koanf:"disk_mb" json:"disk_mb"`
}

// Broker configures how operations reach providers (docs/semantics.md §5 broker block).
type Broker struct {
	Flavor           string   `koanf:"flavor" json:"flavor"`                         // embedded | thread | queue; default thread
	WaitTimeout      *float64 `koanf:"wait_timeout" json:"wait_timeout"`             // seconds; default 60; 0 = always promote
	WaitPollInterval float64  `koanf:"wait_poll_interval" json:"wait_poll_interval"` // seconds; default 0.5
	// InlinePayloadMaxBytes bounds a serialized request on the queue (flavor queue); a larger
	// one (a big stdin or code body) is refused with 413. Results are recorded in the response
	// store and keep max_output_bytes per stream. Default 131072.
	InlinePayloadMaxBytes int      `koanf:"inline_payload_max_bytes" json:"inline_payload_max_bytes"`
	ResponseTTL           int      `koanf:"response_ttl" json:"response_ttl"`                     // seconds finished tasks are kept; default 86400
	SweepInterval         int      `koanf:"sweep_interval" json:"sweep_interval"`                 // seconds; default 300
	WorkerTimeoutCeiling  *float64 `koanf:"worker_timeout_ceiling" json:"worker_timeout_ceiling"` // seconds; unset = none
	// LostAfter is how long a runner may miss heartbeats before its running tasks are
	// reported lost. Default 30s.
	LostAfter Duration `koanf:"lost_after" json:"lost_after"`
	// Spool keeps completions the response store could not take (Postgres down) on this
	// process's disk until it can, so that they outlive a restart.
	Spool         Spool          `koanf:"spool" json:"spool"`
	Queue         *Queue         `koanf:"queue" json:"queue,omitempty"`
	ResponseStore *ResponseStore `koanf:"response_store" json:"response_store,omitempty"`
}

// Spool is where a gateway or worker keeps the completions of executions that finished while
// the response store did not answer, one file per task, until the store takes them — after a
// restart too: the next process on the same folder records them (docs/semantics.md §9
// Completion). Give each host's processes a folder that outlives them (a volume, not a
// container's own file system).
type Spool struct {
	// Dir is the spool's folder, made (mode 0700) when missing; a process that cannot write
	// it refuses to start. Default /var/lib/sandgate/spool; `gateway dev`:
	// <data-dir>/spool.
	Dir string `koanf:"dir" json:"dir"`
	// MaxBytes bounds the bytes the spool holds; a completion that does not fit waits in
	// memory only (logged as an error). Default 1073741824 (1 GiB).
	MaxBytes int64 `koanf:"max_bytes" json:"max_bytes"`
}

// Queue configures the queue flavor's transport (docs/semantics.md §10 queue). Workers
// (`gateway worker`) consume it; the gateway enqueues.
type Queue struct {
	// Type is the transport: postgres (River jobs inserted in the task's own transaction),
	// nats (a JetStream work queue), kafka (a topic keyed by session and a consumer group),
	// sqs (an SQS FIFO queue grouped by session) or in_memory (one process; tests and dev).
	Type string `koanf:"type" json:"type"`
	// MaxReceiveCount bounds how many times one task may start executing (redeliveries after a
	// worker died included) — and, on kafka and sqs, how many times its message may be
	// delivered — before it fails permanently. Default 3.
	MaxReceiveCount int `koanf:"max_receive_count" json:"max_receive_count"`
	// Consumers is how many operations one worker runs at once. Default 5.
	Consumers int `koanf:"consumers" json:"consumers"`
	// RescueAfter (postgres) is how long a job may stay claimed before River offers it again;
	// a job whose worker is still alive is then just deferred. Default 1m.
	RescueAfter Duration   `koanf:"rescue_after" json:"rescue_after"`
	NATS        NATSQueue  `koanf:"nats" json:"nats"`
	Kafka       KafkaQueue `koanf:"kafka" json:"kafka"`
	SQS         SQSQueue   `koanf:"sqs" json:"sqs"`
}

// NATSQueue is the JetStream transport.
type NATSQueue struct {
	URL           string   `koanf:"url" json:"url" secret:"true"`         // default nats://127.0.0.1:4222
	Stream        string   `koanf:"stream" json:"stream"`                 // default SANDGATE_TASKS
	SubjectPrefix string   `koanf:"subject_prefix" json:"subject_prefix"` // default sandgate.tasks
	AckWait       Duration `koanf:"ack_wait" json:"ack_wait"`             // default 30s; kept alive by in-progress heartbeats
}

// KafkaQueue is the Kafka transport: executions are records keyed by session id on one
// input topic (one session's share a partition and keep their order), consumed by the
// workers' consumer group. Completions are recorded in Postgres, so there is no output topic.
type KafkaQueue struct {
	// Brokers are the seed brokers, host:port. Default [127.0.0.1:9092].
	Brokers []string `koanf:"brokers" json:"brokers"`
	// InputTopic carries the executions. It is created with Partitions partitions when it
	// does not exist (an existing topic is used as it is). Default sandgate-tasks.
	InputTopic string `koanf:"input_topic" json:"input_topic"`
	// Partitions of InputTopic when Sandgate creates it: how many sessions' executions can
	// be spread over the workers. Default 12.
	Partitions int `koanf:"partitions" json:"partitions"`
	// GroupID is the workers' consumer group. Default sandgate-workers.
	GroupID string `koanf:"group_id" json:"group_id"`
	// SessionTimeout is how long a worker may miss the group's heartbeats before its
	// partitions move to the other workers: how soon a dead worker's executions are delivered
	// again. The brokers bound it (group.min/max.session.timeout.ms). Default 45s.
	SessionTimeout Duration  `koanf:"session_timeout" json:"session_timeout"`
	TLS            KafkaTLS  `koanf:"tls" json:"tls"`
	SASL           KafkaSASL `koanf:"sasl" json:"sasl"`
}

// KafkaTLS dials the brokers over TLS.
type KafkaTLS struct {
	Enabled bool `koanf:"enabled" json:"enabled"` // default false
	// CAFile is a PEM file of the certificates to trust instead of the system's (needs enabled).
	CAFile string `koanf:"ca_file" json:"ca_file"`
}

// KafkaSASL authenticates to the brokers.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty = no SASL.
	Mechanism string `koanf:"mechanism" json:"mechanism"`
	Username  string `koanf:"username" json:"username"`
	Password  string `koanf:"password" json:"password" secret:"true"`
}

// SQSQueue is the SQS transport: an SQS FIFO queue with MessageGroupId = session id (one
// session's executions in order, one at a time) and MessageDeduplicationId = task id.
// Credentials come from the default AWS chain (environment, shared files, ECS/EKS/instance
// roles). Completions are recorded in Postgres, so there is no output queue.
type SQSQueue struct {
	// InputURL is the FIFO queue's URL (its name ends in .fifo). Required with type sqs.
	InputURL string `koanf:"input_url" json:"input_url"`
	// DeadLetterURL is the dead-letter queue of InputURL's redrive policy: workers read it
	// and record each task SQS moved there as failed. Required when InputURL has a redrive
	// policy (checked at start).
	DeadLetterURL string `koanf:"dead_letter_url" json:"dead_letter_url"`
	// Region is the queues' AWS region; default the AWS configuration's, else the one in
	// InputURL's host.
	Region string `koanf:"region" json:"region"`
	// EndpointURL replaces SQS's endpoint (VPC endpoints, a self-hosted SQS, tests).
	EndpointURL string `koanf:"endpoint_url" json:"endpoint_url"`
	// VisibilityTimeout is how long a received execution stays hidden from other workers;
	// heartbeats extend it while it runs, and a dead worker's execution is delivered again
	// once it lapses. It must exceed every profile's policy timeout. At most 12h; default 5m.
	VisibilityTimeout Duration `koanf:"visibility_timeout" json:"visibility_timeout"`
	// WaitTime is each receive's long-poll wait, at most 20s; a draining worker waits for
	// the receive under way. Default 10s.
	WaitTime Duration `koanf:"wait_time" json:"wait_time"`
}

// ResponseStore names where completions are kept. Sandgate always keeps them in Postgres (the
// tasks table); `in_memory` is accepted only together with the in_memory transport, for
// seed compatibility.
type ResponseStore struct {
	Type string `koanf:"type" json:"type"` // postgres | in_memory
}

// Duration is a time.Duration read from "30s"-style strings or plain seconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Quotas are per-principal limits (across every replica: they are counted in Postgres). Over a
// limit a request answers 429 problem "quota" with Retry-After. A negative value means no
// limit.
type Quotas struct {
	// Sessions bounds the sessions one principal creates (POST /v1/sessions); default
	// sessions count, but a principal's default session is always made. Default 100.
	Sessions int `koanf:"sessions" json:"sessions"`
	// ConcurrentExecutions bounds one principal's unfinished executions — running, or waiting
	// for their session or a worker — tasks included. Default 32.
	ConcurrentExecutions int `koanf:"concurrent_executions" json:"concurrent_executions"`
	// BackgroundProcesses bounds one principal's running background processes
	// ({"background": true} commands, across its sessions). Default 8.
	BackgroundProcesses int `koanf:"background_processes" json:"background_processes"`
	// Contexts bounds the named stateful contexts one principal holds across its sessions
	// (created by POST …/contexts or by code naming a context; each session's default context
	// comes with the session). They end with their sandbox or on DELETE. Default 32.
	Contexts int `koanf:"contexts" json:"contexts"`
	// MCPSessions bounds the MCP sessions one principal holds on one replica (they live in
	// its memory); over it, initialize is refused. Default 16.
	MCPSessions int `koanf:"mcp_sessions" json:"mcp_sessions"`
	// OpenRequests bounds one principal's requests in progress at once on one replica (each
	// holds a connection, from its first byte to its answer's last): REST and MCP requests,
	// streamed standard input, uploads and downloads, event streams, preview-port requests
	// and their WebSockets. Over it, 429 with Retry-After. Default 64.
	OpenRequests int `koanf:"open_requests" json:"open_requests"`
	// RetainedOutputBytes bounds the output (stdout and stderr as kept) of one principal's
	// finished tasks held in the response store until broker.response_ttl. Nothing is
	// refused over it: the oldest results lose their output (the task stays, with a notice)
	// until the rest fits. Default 268435456 (256 MiB).
	RetainedOutputBytes int64 `koanf:"retained_output_bytes" json:"retained_output_bytes"`
	// Snapshots bounds the snapshots one principal keeps (POST /v1/sessions/{id}/snapshots);
	// the captures that park idle sessions are not counted. Default 20.
	Snapshots int `koanf:"snapshots" json:"snapshots"`
	// SnapshotBytes bounds the bytes one principal's snapshots take where their provider
	// keeps them (each snapshot's size_bytes: a compressed archive of the workspace in which
	// sparse files take only their data). The captures that park idle sessions count too,
	// but are never refused; past the limit the principal's own snapshots are. Default
	// 10737418240 (10 GiB).
	SnapshotBytes int64 `koanf:"snapshot_bytes" json:"snapshot_bytes"`
	// RequestsPerSecond bounds one principal's REST requests per replica (a token bucket of
	// RequestsBurst); over it, 429 with Retry-After, and every answer carries RateLimit-*
	// headers. Default 50; RequestsBurst default 100.
	RequestsPerSecond float64 `koanf:"requests_per_second" json:"requests_per_second"`
	RequestsBurst     int     `koanf:"requests_burst" json:"requests_burst"`
	// LinkRequestsPerSecond bounds the requests through one link to a preview port, and
	// those through links from one client address (server.trusted_proxies), per replica:
	// token buckets of LinkRequestsBurst, larger than a principal's since one page load asks
	// for many files. Over it, 429 with Retry-After. Default 200; LinkRequestsBurst default
	// 1000.
	LinkRequestsPerSecond float64 `koanf:"link_requests_per_second" json:"link_requests_per_second"`
	LinkRequestsBurst     int     `koanf:"link_requests_burst" json:"link_requests_burst"`
	// AdminsExempt exempts members of auth.admin_groups. Default true.
	AdminsExempt *bool `koanf:"admins_exempt" json:"admins_exempt"`
}
