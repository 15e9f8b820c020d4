package sandbox

import (
	"context"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/quota"
)

// The quota room (internal/sandbox/quota) owns the per-principal limits (config
// sandbox.quotas), their refusals, the contexts and MCP sessions this replica counts, and
// what a principal uses; the domain's API speaks of them under its own names.

// Quotas are per-principal limits (quota.Settings).
type Quotas = quota.Settings

// Quota is one limit and what the principal uses of it now (quota.Quota).
type Quota = quota.Quota

// Usage is a principal's quotas (quota.Usage).
type Usage = quota.Usage

// DefaultSnapshotQuota is Quotas.Snapshots's default (config sandbox.quotas.snapshots).
const DefaultSnapshotQuota = quota.DefaultSnapshots

// DefaultSnapshotBytesQuota is Quotas.SnapshotBytes's default (config
// sandbox.quotas.snapshot_bytes): 10 GiB.
const DefaultSnapshotBytesQuota = quota.DefaultSnapshotBytes

// Usage reports p's quotas and what p uses of them.
func (s *Service) Usage(ctx context.Context, p principal.Principal) (Usage, error) {
	held, err := s.store.Usage(ctx, p.ID)
	if err != nil {
		return Usage{}, err
	}
	return s.quota.Usage(p, held), nil
}

// HoldMCPSession counts an MCP session that p opens on this replica against p's
// sandbox.quotas.mcp_sessions (quota.Room.HoldMCPSession): alive reports whether it is still
// open; release gives the place back at once. Errors: fault.Quota (Retry-After 60 s).
func (s *Service) HoldMCPSession(p principal.Principal, alive func() bool) (release func(), err error) {
	return s.quota.HoldMCPSession(p, alive)
}

// contextRetry is the Retry-After of a context over its quota (quota.ContextRetry).
const contextRetry = quota.ContextRetry
