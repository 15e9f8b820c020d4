// Package quota is the domain's quota room: the per-principal limits of config
// sandbox.quotas, the refusals past them, what a principal uses of them (Usage), and the two
// quotas this replica counts itself — the named contexts it recorded (contexts.go) and the
// MCP sessions open here (mcpsessions.go).
//
// Most quotas are counted in Postgres, so they hold across replicas, and checked in the
// statement that would go past them, so they cost no round trip: this room gives the limit
// to pass (Room.Sessions and its kin; 0: none) and the refusal to answer when the store says
// store.ErrQuota. A negative configured limit means none; administrators are exempt unless
// admins_exempt is false. Retained output (sandbox.quotas.retained_output_bytes) is never
// refused: the upkeep room drops old output instead (RetainedOutputBytes gives its limit).
package quota

import (
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/store"
)

// Settings are per-principal limits (config sandbox.quotas), counted in the store so they
// hold across replicas. A negative limit means none; 0 takes the default.
type Settings struct {
	Sessions             int // default 100
	ConcurrentExecutions int // default 32
	BackgroundProcesses  int // default 8
	// Contexts bounds the named stateful contexts a principal holds (contexts.go); default 32.
	Contexts int
	// MCPSessions bounds the MCP sessions a principal holds on this replica (mcpsessions.go);
	// default 16.
	MCPSessions int
	// RetainedOutputBytes bounds the output bytes of a principal's finished tasks kept in the
	// store; past it the oldest results lose their output (the upkeep room). Default 256 MiB.
	RetainedOutputBytes int64
	Snapshots           int // snapshots a principal keeps (idle captures not counted); default 20
	// SnapshotBytes bounds the bytes a principal's snapshots take where their provider keeps
	// them (SnapshotInfo.SizeBytes), idle captures included — those count but are never
	// refused (the park room). Default DefaultSnapshotBytes.
	SnapshotBytes int64
	// AdminsExempt exempts administrators (principal.Admin).
	AdminsExempt bool
}

// DefaultSnapshots is Settings.Snapshots's default (config sandbox.quotas.snapshots).
const DefaultSnapshots = 20

// DefaultSnapshotBytes is Settings.SnapshotBytes's default (config
// sandbox.quotas.snapshot_bytes): 10 GiB.
const DefaultSnapshotBytes = 10 << 30

// WithDefaults returns q with zero fields defaulted.
func (q Settings) WithDefaults() Settings {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&q.Sessions, 100)
	def(&q.ConcurrentExecutions, 32)
	def(&q.BackgroundProcesses, 8)
	def(&q.Contexts, 32)
	def(&q.MCPSessions, 16)
	def(&q.Snapshots, DefaultSnapshots)
	if q.RetainedOutputBytes == 0 {
		q.RetainedOutputBytes = 256 << 20
	}
	if q.SnapshotBytes == 0 {
		q.SnapshotBytes = DefaultSnapshotBytes
	}
	return q
}

// Quota is one limit and what the principal uses of it now; Limit < 0: no limit.
type Quota struct {
	Used, Limit int
}

// Usage is a principal's quotas.
type Usage struct {
	Sessions, ConcurrentExecutions, BackgroundProcesses, Snapshots Quota
	// Contexts counts named contexts in the principal's sessions' current sandboxes.
	Contexts Quota
	// MCPSessions counts the MCP sessions it holds on this replica.
	MCPSessions Quota
	// RetainedOutputBytes is the output its finished tasks keep (Quota.Used in bytes). Over
	// the limit nothing is refused: the oldest results lose their output.
	RetainedOutputBytes Quota
	// SnapshotBytes is what its snapshots take where their providers keep them, idle
	// captures included (Quota.Used in bytes).
	SnapshotBytes Quota
}

// Retry-Afters of refusals: executions end, so a retry soon may pass; sessions and
// snapshots end only when destroyed or deleted, so their hint is long.
const (
	executionRetry  = 5 * time.Second
	sessionRetry    = 60 * time.Second
	snapshotRetry   = 60 * time.Second
	mcpSessionRetry = 60 * time.Second
)

// ContextRetry is the Retry-After of a context over its quota (contexts end when deleted);
// a worker's refusal of one carries it too.
const ContextRetry = 30 * time.Second

// Room is the quota room: the configured limits, and the contexts and MCP sessions this
// replica counts. Build it with New.
type Room struct {
	set      Settings
	store    store.Contexts
	clock    clock.Clock
	log      *slog.Logger
	contexts seenContexts
	mcp      mcpSessions
}

// New returns the room for limits set (defaulted), recording contexts in st.
func New(set Settings, st store.Contexts, c clock.Clock, log *slog.Logger) *Room {
	return &Room{set: set.WithDefaults(), store: st, clock: c, log: log}
}

func (r *Room) exempt(p principal.Principal) bool { return p.Admin && r.set.AdminsExempt }

// limit maps a configured quota to the store's form (≤ 0: none).
func (r *Room) limit(p principal.Principal, configured int64) int64 {
	if r.exempt(p) || configured < 0 {
		return 0
	}
	return configured
}

// Sessions is p's sandbox.quotas.sessions in the store's form (≤ 0: none); so are its kin.
func (r *Room) Sessions(p principal.Principal) int { return int(r.limit(p, int64(r.set.Sessions))) }

// Executions is p's sandbox.quotas.concurrent_executions (≤ 0: none).
func (r *Room) Executions(p principal.Principal) int {
	return int(r.limit(p, int64(r.set.ConcurrentExecutions)))
}

// Background is p's sandbox.quotas.background_processes (≤ 0: none).
func (r *Room) Background(p principal.Principal) int {
	return int(r.limit(p, int64(r.set.BackgroundProcesses)))
}

// Contexts is p's sandbox.quotas.contexts (≤ 0: none).
func (r *Room) Contexts(p principal.Principal) int { return int(r.limit(p, int64(r.set.Contexts))) }

// MCPSessions is p's sandbox.quotas.mcp_sessions (≤ 0: none).
func (r *Room) MCPSessions(p principal.Principal) int {
	return int(r.limit(p, int64(r.set.MCPSessions)))
}

// Snapshots is p's sandbox.quotas.snapshots (≤ 0: none).
func (r *Room) Snapshots(p principal.Principal) int { return int(r.limit(p, int64(r.set.Snapshots))) }

// SnapshotBytes is p's sandbox.quotas.snapshot_bytes (≤ 0: none).
func (r *Room) SnapshotBytes(p principal.Principal) int64 { return r.limit(p, r.set.SnapshotBytes) }

// RetainedOutputBytes is p's sandbox.quotas.retained_output_bytes (≤ 0: none).
func (r *Room) RetainedOutputBytes(p principal.Principal) int64 {
	return r.limit(p, r.set.RetainedOutputBytes)
}

// SnapshotLimits are p's snapshot limits as the store takes them.
func (r *Room) SnapshotLimits(p principal.Principal) store.SnapshotLimits {
	return store.SnapshotLimits{Count: r.Snapshots(p), Bytes: r.SnapshotBytes(p)}
}

// SessionsErr refuses a session of p's past sandbox.quotas.sessions (fault.Quota).
func (r *Room) SessionsErr(p principal.Principal) error {
	return fault.OverQuota(sessionRetry,
		"you own %d sandbox sessions, the limit of sandbox.quotas.sessions", r.Sessions(p)).
		WithHint("destroy one you no longer need (DELETE /v1/sessions/{id}) and try again",
			"destroy one you no longer need (destroy_sandbox_session) and try again")
}

// ExecutionsErr refuses an execution of p's past sandbox.quotas.concurrent_executions.
func (r *Room) ExecutionsErr(p principal.Principal) error {
	return fault.OverQuota(executionRetry,
		"you have %d executions running or waiting, the limit of sandbox.quotas.concurrent_executions", r.Executions(p)).
		WithHint("wait for one to finish (GET /v1/tasks?status=running) or cancel one (POST /v1/tasks/{id}/cancel)",
			"wait for one to finish (check_sandbox_task) and try again")
}

// BackgroundErr refuses a background process of p's past sandbox.quotas.background_processes.
func (r *Room) BackgroundErr(p principal.Principal) error {
	return fault.OverQuota(executionRetry,
		"you have %d background processes running, the limit of sandbox.quotas.background_processes", r.Background(p)).
		WithHint("stop one you no longer need (DELETE /v1/sessions/{id}/processes/{process_id}) and try again",
			"stop one you no longer need and try again")
}

// SnapshotsErr refuses a snapshot of p's past sandbox.quotas.snapshots.
func (r *Room) SnapshotsErr(p principal.Principal) error {
	return fault.OverQuota(snapshotRetry,
		"you have %d snapshots, the limit of sandbox.quotas.snapshots", r.Snapshots(p)).
		WithHint("delete one you no longer need (DELETE /v1/snapshots/{id}) and try again",
			"delete a snapshot you no longer need and try again")
}

// SnapshotBytesErr refuses a snapshot of p's, who holds used bytes of snapshots (< 0:
// unknown), that would take size more (< 0: unknown, nothing was captured).
func (r *Room) SnapshotBytesErr(p principal.Principal, used, size int64) error {
	limit := r.SnapshotBytes(p)
	var err *fault.Error
	switch {
	case size < 0:
		err = fault.OverQuota(snapshotRetry, "your snapshots take %d bytes, the limit of sandbox.quotas.snapshot_bytes is %d (captures that park idle sessions count too)", used, limit)
	case used < 0:
		err = fault.OverQuota(snapshotRetry, "this snapshot takes %d bytes, more than your snapshots may still take under sandbox.quotas.snapshot_bytes (%d; captures that park idle sessions count too); nothing was kept", size, limit)
	default:
		err = fault.OverQuota(snapshotRetry, "this snapshot takes %d bytes and your snapshots already take %d, together more than the limit of sandbox.quotas.snapshot_bytes (%d; captures that park idle sessions count too); nothing was kept", size, used, limit)
	}
	return err.WithHint("delete snapshots you no longer need (DELETE /v1/snapshots/{id}), or use or destroy parked sessions, and try again",
		"delete a snapshot you no longer need and try again")
}

// Usage is p's quotas with what p holds in the store (held) and MCP sessions here.
func (r *Room) Usage(p principal.Principal, held store.Held) Usage {
	shown := func(l int64) int {
		if l <= 0 {
			return -1
		}
		return int(l)
	}
	return Usage{
		Sessions:             Quota{Used: held.Sessions, Limit: shown(int64(r.Sessions(p)))},
		ConcurrentExecutions: Quota{Used: held.Executions, Limit: shown(int64(r.Executions(p)))},
		BackgroundProcesses:  Quota{Used: held.Background, Limit: shown(int64(r.Background(p)))},
		Contexts:             Quota{Used: held.Contexts, Limit: shown(int64(r.Contexts(p)))},
		MCPSessions:          Quota{Used: r.mcp.live(p.Key()), Limit: shown(int64(r.MCPSessions(p)))},
		RetainedOutputBytes:  Quota{Used: int(held.RetainedOutputBytes), Limit: shown(r.RetainedOutputBytes(p))},
		Snapshots:            Quota{Used: held.Snapshots, Limit: shown(int64(r.Snapshots(p)))},
		SnapshotBytes:        Quota{Used: int(held.SnapshotBytes), Limit: shown(r.SnapshotBytes(p))},
	}
}
