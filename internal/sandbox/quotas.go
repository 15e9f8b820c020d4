package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
)

// Per-principal quotas (config sandbox.quotas): counted in Postgres, so they hold across
// replicas, and checked in the statement that would go past them, so they cost no round
// trip. A negative limit means none; admins are exempt unless admins_exempt is false. Three
// have their own file: contexts (contextquota.go), MCP sessions (mcpsessions.go, counted per
// replica) and retained output (retained.go, which drops old output instead of refusing).

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
	// the limit nothing is refused: the oldest results lose their output (retained.go).
	RetainedOutputBytes Quota
	// SnapshotBytes is what its snapshots take where their providers keep them, idle
	// captures included (Quota.Used in bytes; snapshots.go).
	SnapshotBytes Quota
}

// executionRetry is the Retry-After of an execution over its quota: executions end, so a
// retry soon may pass.
const executionRetry = 5 * time.Second

// sessionRetry is the Retry-After of a session over its quota (sessions end only when
// destroyed, so the hint is long).
const sessionRetry = 60 * time.Second

func (s *Service) exempt(p principal.Principal) bool {
	return p.Admin && s.cfg.Quotas.AdminsExempt
}

// limit maps a configured quota to the store's form (≤ 0: none).
func (s *Service) limit(p principal.Principal, configured int) int {
	if s.exempt(p) || configured < 0 {
		return 0
	}
	return configured
}

func (s *Service) executionLimit(p principal.Principal) int {
	return s.limit(p, s.cfg.Quotas.ConcurrentExecutions)
}

func (s *Service) backgroundLimit(p principal.Principal) int {
	return s.limit(p, s.cfg.Quotas.BackgroundProcesses)
}

func (s *Service) backgroundQuotaErr(p principal.Principal) error {
	return fault.OverQuota(executionRetry,
		"you have %d background processes running, the limit of sandbox.quotas.background_processes", s.backgroundLimit(p)).
		WithHint("stop one you no longer need (DELETE /v1/sessions/{id}/processes/{process_id}) and try again",
			"stop one you no longer need and try again")
}

func (s *Service) snapshotLimit(p principal.Principal) int {
	return s.limit(p, s.cfg.Quotas.Snapshots)
}

// snapshotRetry is the Retry-After of a snapshot over its quota (snapshots go only when
// deleted).
const snapshotRetry = 60 * time.Second

// snapshotBytesLimit is p's sandbox.quotas.snapshot_bytes (≤ 0: none).
func (s *Service) snapshotBytesLimit(p principal.Principal) int64 {
	if s.exempt(p) || s.cfg.Quotas.SnapshotBytes < 0 {
		return 0
	}
	return s.cfg.Quotas.SnapshotBytes
}

// snapshotBytesQuotaErr refuses a snapshot of p's, who holds used bytes of snapshots (< 0:
// unknown), that would take size more (< 0: unknown, nothing was captured).
func (s *Service) snapshotBytesQuotaErr(p principal.Principal, used, size int64) error {
	limit := s.snapshotBytesLimit(p)
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

func (s *Service) snapshotQuotaErr(p principal.Principal) error {
	return fault.OverQuota(snapshotRetry,
		"you have %d snapshots, the limit of sandbox.quotas.snapshots", s.snapshotLimit(p)).
		WithHint("delete one you no longer need (DELETE /v1/snapshots/{id}) and try again",
			"delete a snapshot you no longer need and try again")
}

func (s *Service) sessionLimit(p principal.Principal) int {
	return s.limit(p, s.cfg.Quotas.Sessions)
}

func (s *Service) executionQuotaErr(p principal.Principal) error {
	return fault.OverQuota(executionRetry,
		"you have %d executions running or waiting, the limit of sandbox.quotas.concurrent_executions", s.executionLimit(p)).
		WithHint("wait for one to finish (GET /v1/tasks?status=running) or cancel one (POST /v1/tasks/{id}/cancel)",
			"wait for one to finish (check_sandbox_task) and try again")
}

func (s *Service) sessionQuotaErr(p principal.Principal) error {
	return fault.OverQuota(sessionRetry,
		"you own %d sandbox sessions, the limit of sandbox.quotas.sessions", s.sessionLimit(p)).
		WithHint("destroy one you no longer need (DELETE /v1/sessions/{id}) and try again",
			"destroy one you no longer need (destroy_sandbox_session) and try again")
}

// Usage reports p's quotas and what p uses of them.
func (s *Service) Usage(ctx context.Context, p principal.Principal) (Usage, error) {
	held, err := s.store.Usage(ctx, p.ID)
	if err != nil {
		return Usage{}, err
	}
	shown := func(l int) int {
		if l <= 0 {
			return -1
		}
		return l
	}
	return Usage{
		Sessions:             Quota{Used: held.Sessions, Limit: shown(s.sessionLimit(p))},
		ConcurrentExecutions: Quota{Used: held.Executions, Limit: shown(s.executionLimit(p))},
		BackgroundProcesses:  Quota{Used: held.Background, Limit: shown(s.backgroundLimit(p))},
		Contexts:             Quota{Used: held.Contexts, Limit: shown(s.contextLimit(p))},
		MCPSessions:          Quota{Used: s.mcpSessions.live(p.Key()), Limit: shown(s.mcpSessionLimit(p))},
		RetainedOutputBytes:  Quota{Used: int(held.RetainedOutputBytes), Limit: shown(int(s.retainedLimit(p)))},
		Snapshots:            Quota{Used: held.Snapshots, Limit: shown(s.snapshotLimit(p))},
		SnapshotBytes:        Quota{Used: int(held.SnapshotBytes), Limit: shown(int(s.snapshotBytesLimit(p)))},
	}, nil
}
