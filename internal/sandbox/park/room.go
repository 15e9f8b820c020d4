// Package park is the domain's park room: what keeps a session's sandbox without running it
// and what reaches it from outside (docs/semantics.md §8) — pause and resume, idle parking
// (pause, or a snapshot and removal) and waking on the next use, session lifetimes and their
// expiry, snapshots (taken, listed, deleted, forked from, parked in), and preview ports with
// their share links (signed with a key shared through the store).
//
// What it needs of the rest of the domain — resolving a caller's session, the lease to a
// session's sandbox, a sandbox's removal, a session's destruction when its lifetime ends —
// it is handed as functions at construction (Options): the room never reaches the facade.
package park

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/account"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/sandbox/quota"
	"github.com/sandgate/sandgate/internal/store"
)

// Options build a Room. Every field is required.
type Options struct {
	Store    store.Store
	Profiles *profile.Set
	Quota    *quota.Room
	Account  *account.Room
	Clock    clock.Clock
	NewID    func() string
	Log      *slog.Logger

	// Resolve finds session id (or the default one) for p, checking ownership, the profile
	// asked for and that p may use it; ephemeral: a per_call profile's unsaved session.
	Resolve func(ctx context.Context, p principal.Principal, id, profile string) (sess store.Session, prof *profile.Profile, ephemeral bool, err error)
	// Visible reports whether p may see sess (its own, a shared one it may use, an admin).
	Visible func(p principal.Principal, sess store.Session) bool
	// LockSession takes session id's lock (in arrival order with its other work).
	LockSession func(ctx context.Context, id string) (unlock func(), err error)
	// Hold takes sess in its line (the session lock) and readies it — a parked one restored,
	// a paused one left paused — without reaching its sandbox; release gives the line back.
	// A session destroyed meanwhile is fault.NotFound.
	Hold func(ctx context.Context, p principal.Principal, prof *profile.Profile, sess store.Session) (cur store.Session, release func(), err error)
	// Ready readies sess for a use that waits for no running work: a paused one woken (or
	// fault.Paused), a parked one restored.
	Ready func(ctx context.Context, p principal.Principal, prof *profile.Profile, sess store.Session) (store.Session, error)
	// Reach reaches sess's sandbox as it is bound (fault.Gone when it vanished); release
	// lets it go.
	Reach func(ctx context.Context, p principal.Principal, prof *profile.Profile, sess store.Session) (sb providers.Sandbox, release func(), err error)
	// DestroyBackend removes a managed sandbox under the gateway's own identity; a failure is
	// logged and returned.
	DestroyBackend func(ctx context.Context, prof *profile.Profile, sessionID, sandboxID string) error
	// Expire destroys sess, whose lifetime passed, as its owner's DestroySession would;
	// pending: removing its sandbox failed and is retried (notice says so).
	Expire func(ctx context.Context, owner principal.Principal, prof *profile.Profile, sess store.Session) (pending bool, notice string, err error)
	// Policy is the policy sess's sandbox is made, attached or restored with: the profile's,
	// lowered by the session's cpu and memory, with the session's secrets bound.
	Policy func(ctx context.Context, prof *profile.Profile, sess store.Session) (providers.Policy, error)
}

// Room is the park room. Build it with New.
type Room struct {
	Options
	linkKeyMu  sync.Mutex
	linkKeyVal []byte // the share links' key once read (linkKey)
}

// New returns the room.
func New(o Options) *Room { return &Room{Options: o} }

// sessionErr maps a store error about session id.
func sessionErr(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fault.New(fault.NotFound, "unknown sandbox session '%s'", id)
	}
	return err
}

// SessionErr maps a store error about session id: store.ErrNotFound is fault.NotFound.
func SessionErr(err error, id string) error { return sessionErr(err, id) }

// classify keeps a fault's kind, or files an unclassified error under kind.
func classify(err error, kind fault.Kind) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	return fault.Wrap(kind, err, "%s", "sandbox operation failed")
}

// isDefault: the caller's default session ("default", or no id).
func isDefault(id string) bool { return id == DefaultSessionID || id == "" }

// DefaultSessionID addresses the caller's default session of a profile.
const DefaultSessionID = "default"
