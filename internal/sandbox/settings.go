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
	// APIKeys bound API keys (config auth.api_keys; the account room).
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
	s.Quotas = s.Quotas.WithDefaults()
	def(&s.ExecGrace, DefaultExecGrace)
	def(&s.ResponseTTL, 24*time.Hour)
	def(&s.SweepInterval, 5*time.Minute)
	def(&s.LostAfter, 30*time.Second)
	def(&s.Queue.WaitPoll, 500*time.Millisecond)
	def(&s.AuditRetention, DefaultAuditRetention)
	s.APIKeys = s.APIKeys.WithDefaults()
	if s.Queue.MaxReceiveCount <= 0 {
		s.Queue.MaxReceiveCount = 3
	}
	return s
}
