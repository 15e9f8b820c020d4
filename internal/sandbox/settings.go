package sandbox

import (
	"time"
)

// Settings are the domain's knobs: config `sandbox.*`, mapped and defaulted by the composition
// root (internal/gateway). A zero field takes the default named beside it.
type Settings struct {
	// DefaultProfile names the profile used when a request names none. Default "default".
	DefaultProfile string
	// MaxOutputBytes bounds the stdout and stderr each execution keeps, per stream (head and
	// tail halves). Default 1 MiB.
	MaxOutputBytes int64
	// MaxFileBytes bounds one file upload. Default 100 MiB.
	MaxFileBytes int64
	// KeptOutputMemoryBytes bounds the memory this replica holds of its executions' output
	// for followers: live logs of running and recently finished executions, and results
	// being replayed (kept.go). Default DefaultKeptOutputMemoryBytes.
	KeptOutputMemoryBytes int64
	// Quotas are the per-principal limits (sandbox.quotas).
	Quotas Quotas
	// WaitTimeout bounds how long a call waits for its execution before promoting it to a
	// task; 0 always promotes (no default: the composition root resolves config's, which is
	// DefaultWaitTimeout).
	WaitTimeout time.Duration
	// ResponseTTL is how long finished tasks are kept. Default 24 h.
	ResponseTTL time.Duration
	// SweepInterval is how often idle sessions, expired tasks and orphans are swept.
	// Default 5 min.
	SweepInterval time.Duration
	// LostAfter is how long a runner may miss heartbeats before its running tasks are lost.
	// Default 30 s.
	LostAfter time.Duration
	// Queue holds the queue flavor's limits (only read when Options.Queue is set).
	Queue QueueSettings
	// AdminGroups are auth.admin_groups: a principal read back from the store (the maker of a
	// share link, re-checked on each use) is an administrator when it is in one of them, as
	// the token's mapping decides for a caller.
	AdminGroups []string
	// AuditRetention is how long audit events are kept (config audit.retention); the sweeper
	// deletes older ones (docs/semantics.md §14). Default DefaultAuditRetention.
	AuditRetention time.Duration
	// APIKeys bound API keys (config auth.api_keys; apikeys.go).
	APIKeys APIKeySettings
	// ExecGrace is how long past an execution's timeout the gateway waits for its provider
	// to report its end before it ends the execution itself (guard.go). Default
	// DefaultExecGrace; not configurable (tests shorten it).
	ExecGrace time.Duration
}

// DefaultExecGrace is Settings.ExecGrace's default.
const DefaultExecGrace = 10 * time.Second

// DefaultAuditRetention is Settings.AuditRetention's default: 90 days.
const DefaultAuditRetention = 90 * 24 * time.Hour

// QueueSettings are the queue flavor's limits (config sandbox.broker, docs/semantics.md §10 queue).
type QueueSettings struct {
	// WorkerTimeoutCeiling refuses executions whose effective timeout is longer; 0 = none.
	WorkerTimeoutCeiling time.Duration
	// InlinePayloadMaxBytes bounds a serialized request on the queue; 0 = none.
	InlinePayloadMaxBytes int
	// WaitPoll is how often a waiting caller re-reads the response store when no
	// notification arrives. Default 500 ms.
	WaitPoll time.Duration
	// MaxReceiveCount bounds how often one task may start. Default 3.
	MaxReceiveCount int
}

// Quotas are per-principal limits, counted in the store so they hold across replicas. A
// negative limit means none; 0 takes the default.
type Quotas struct {
	Sessions             int // default 100
	ConcurrentExecutions int // default 32
	BackgroundProcesses  int // default 8
	// Contexts bounds the named stateful contexts a principal holds (contexts.go); default 32.
	Contexts int
	// MCPSessions bounds the MCP sessions a principal holds on this replica (mcpsessions.go);
	// default 16.
	MCPSessions int
	// RetainedOutputBytes bounds the output bytes of a principal's finished tasks kept in the
	// store; past it the oldest results lose their output (retained.go). Default 256 MiB.
	RetainedOutputBytes int64
	Snapshots           int // snapshots a principal keeps (idle captures not counted); default 20
	// SnapshotBytes bounds the bytes a principal's snapshots take where their provider keeps
	// them (SnapshotInfo.SizeBytes), idle captures included — those count but are never
	// refused (snapshots.go). Default DefaultSnapshotBytesQuota.
	SnapshotBytes int64
	// AdminsExempt exempts administrators (principal.Admin).
	AdminsExempt bool
}

// DefaultSnapshotQuota is Quotas.Snapshots's default (config sandbox.quotas.snapshots).
const DefaultSnapshotQuota = 20

// DefaultSnapshotBytesQuota is Quotas.SnapshotBytes's default (config
// sandbox.quotas.snapshot_bytes): 10 GiB.
const DefaultSnapshotBytesQuota = 10 << 30

// DefaultWaitTimeout is Settings.WaitTimeout's default (config sandbox.broker.wait_timeout).
const DefaultWaitTimeout = 60 * time.Second

// withDefaults returns s with zero fields defaulted.
func (s Settings) withDefaults() Settings {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if s.DefaultProfile == "" {
		s.DefaultProfile = "default"
	}
	if s.MaxOutputBytes <= 0 {
		s.MaxOutputBytes = 1 << 20
	}
	if s.MaxFileBytes <= 0 {
		s.MaxFileBytes = 100 << 20
	}
	if s.KeptOutputMemoryBytes <= 0 {
		s.KeptOutputMemoryBytes = DefaultKeptOutputMemoryBytes
	}
	if s.Quotas.Sessions == 0 {
		s.Quotas.Sessions = 100
	}
	if s.Quotas.ConcurrentExecutions == 0 {
		s.Quotas.ConcurrentExecutions = 32
	}
	if s.Quotas.BackgroundProcesses == 0 {
		s.Quotas.BackgroundProcesses = 8
	}
	if s.Quotas.Contexts == 0 {
		s.Quotas.Contexts = 32
	}
	if s.Quotas.MCPSessions == 0 {
		s.Quotas.MCPSessions = 16
	}
	if s.Quotas.RetainedOutputBytes == 0 {
		s.Quotas.RetainedOutputBytes = 256 << 20
	}
	if s.Quotas.Snapshots == 0 {
		s.Quotas.Snapshots = DefaultSnapshotQuota
	}
	if s.Quotas.SnapshotBytes == 0 {
		s.Quotas.SnapshotBytes = DefaultSnapshotBytesQuota
	}
	def(&s.ExecGrace, DefaultExecGrace)
	def(&s.ResponseTTL, 24*time.Hour)
	def(&s.SweepInterval, 5*time.Minute)
	def(&s.LostAfter, 30*time.Second)
	def(&s.Queue.WaitPoll, 500*time.Millisecond)
	def(&s.AuditRetention, DefaultAuditRetention)
	s.APIKeys = s.APIKeys.withDefaults()
	if s.Queue.MaxReceiveCount <= 0 {
		s.Queue.MaxReceiveCount = 3
	}
	return s
}
