// Package account is the domain's account room: who the callers are and what they did —
// the principals the edges identify (recorded at most once a minute each), their API keys
// (made, listed, revoked, swept), and the audit log (recorded, read by administrators,
// swept past its retention).
package account

import (
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/store"
)

// Store is what the account room keeps in the store.
type Store interface {
	store.Principals
	store.APIKeys
	store.AuditLog
}

// Options build a Room.
type Options struct {
	Store Store
	// Profiles are the configured profiles: a key restricted to some is checked against them.
	Profiles *profile.Set
	// Keys bound API keys (defaulted by New).
	Keys APIKeySettings
	// AuditRetention is how long audit events are kept.
	AuditRetention time.Duration
	// AdminGroups make a principal read back from the store an administrator (Principal).
	AdminGroups []string
	Clock       clock.Clock
	NewID       func() string
	Log         *slog.Logger
	// KeyRevoked, when set, is told the id of each key revoked here, after the store recorded
	// it; it must not block.
	KeyRevoked func(id string)
	// KeyCreated, when set, is told the SHA-256 of each key's secret made here, after the
	// store recorded it and before the secret is answered; it must not block.
	KeyCreated func(hash [32]byte)
}

// Room is the account room. Build it with New.
type Room struct {
	store       Store
	profiles    *profile.Set
	keys        APIKeySettings
	retention   time.Duration
	adminGroups []string
	clock       clock.Clock
	newID       func() string
	log         *slog.Logger
	keyRevoked  func(id string)
	keyCreated  func(hash [32]byte)
	principals  *principalRecorder
}

// New returns the room.
func New(o Options) *Room {
	return &Room{
		store: o.Store, profiles: o.Profiles, keys: o.Keys.WithDefaults(), retention: o.AuditRetention,
		adminGroups: o.AdminGroups, clock: o.Clock, newID: o.NewID, log: o.Log, keyRevoked: o.KeyRevoked, keyCreated: o.KeyCreated,
		principals: newPrincipalRecorder(o.Store, o.Clock.Now),
	}
}
