package sandbox

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/account"
)

// The account room (internal/sandbox/account) owns principals, API keys and the audit log;
// the domain's API keeps speaking of them under its own names and delegates to it.

// API key states (APIKey.Status).
const (
	KeyActive  = account.KeyActive
	KeyExpired = account.KeyExpired
	KeyRevoked = account.KeyRevoked
)

// APIKeyRetention is how long a key that expired or was revoked is kept (account.APIKeyRetention).
const APIKeyRetention = account.APIKeyRetention

// MinAPIKeyTTL is the shortest lifetime a key may be given (account.MinAPIKeyTTL).
const MinAPIKeyTTL = account.MinAPIKeyTTL

// API keys and the audit log as the edges see them (the account room's types).
type (
	APIKeySettings = account.APIKeySettings
	APIKey         = account.APIKey
	NewAPIKey      = account.NewAPIKey
	NewAPIKeyInput = account.NewAPIKeyInput
	APIKeyFilter   = account.APIKeyFilter
	AuditEvent     = account.AuditEvent
	AuditQuery     = account.AuditQuery
)

// CreateAPIKey makes a key for p and answers it with its secret, which is not kept
// (account.Room.CreateAPIKey, which lists the errors).
func (s *Service) CreateAPIKey(ctx context.Context, p principal.Principal, in NewAPIKeyInput) (NewAPIKey, error) {
	return s.account.CreateAPIKey(ctx, p, in)
}

// ListAPIKeys returns a page of p's keys and the cursor of the next page
// (account.Room.ListAPIKeys).
func (s *Service) ListAPIKeys(ctx context.Context, p principal.Principal, f APIKeyFilter) ([]APIKey, string, error) {
	return s.account.ListAPIKeys(ctx, p, f)
}

// GetAPIKey returns key id (account.Room.GetAPIKey).
func (s *Service) GetAPIKey(ctx context.Context, p principal.Principal, id string) (APIKey, error) {
	return s.account.GetAPIKey(ctx, p, id)
}

// RevokeAPIKey revokes key id at once and returns it (account.Room.RevokeAPIKey).
func (s *Service) RevokeAPIKey(ctx context.Context, p principal.Principal, id string) (APIKey, error) {
	return s.account.RevokeAPIKey(ctx, p, id)
}

// Audit returns a page of the audit log, newest first, and the cursor of the next page;
// administrators only (account.Room.Audit).
func (s *Service) Audit(ctx context.Context, p principal.Principal, q AuditQuery) ([]AuditEvent, string, error) {
	return s.account.Audit(ctx, p, q)
}

// AuditRetention is how long audit events are kept (audit.retention).
func (s *Service) AuditRetention() time.Duration { return s.account.AuditRetention() }

// Identify returns p with its stable id and first/last-seen times, recording it at most once
// a minute (account.Room.Identify). Edges call it once per request, after the token is
// verified.
func (s *Service) Identify(ctx context.Context, p principal.Principal) (principal.Principal, error) {
	return s.account.Identify(ctx, p)
}

// OwnerLabel names principal id as "issuer#subject" for administrators' listings; "" when
// unknown.
func (s *Service) OwnerLabel(ctx context.Context, id string) string {
	return s.account.OwnerLabel(ctx, id)
}
