package session

import (
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sandgate/sandgate/internal/store"
)

// identitiesSize bounds each of identities' two caches (entries; least recently used
// go first).
const identitiesSize = 1 << 16

// identities remembers what never changes about a session — its id, owner, profile,
// provider, scope and environment — so that an execution resolves its session without a round trip (the
// hot path of docs/benchmarks.md). Ids are random and never reused, so an entry can only be
// stale by the session being gone, and the BeginTask every execution starts with checks
// that in the same round trip: an execution of a gone session forgets it and resolves again.
// Nothing mutable (the sandbox, status, notices, last use) is kept here.
type identities struct {
	byID *lru.Cache[string, store.Session]
	// defaults maps (owner or "" for the shared one, profile) to the default session's id.
	defaults *lru.Cache[defaultKey, string]
}

type defaultKey struct{ owner, profile string }

func newIdentities() *identities {
	byID, _ := lru.New[string, store.Session](identitiesSize) // errors only for a size ≤ 0
	defaults, _ := lru.New[defaultKey, string](identitiesSize)
	return &identities{byID: byID, defaults: defaults}
}

// remember records sess's identity (its environment too: set once, when it was made) (and, for a default session, that it is its owner's —
// unless it is closed: no longer a default).
func (c *identities) remember(sess store.Session) {
	isDefault := sess.IsDefault && sess.Status != store.SessionClosed
	c.byID.Add(sess.ID, store.Session{ID: sess.ID, OwnerID: sess.OwnerID, Profile: sess.Profile, Provider: sess.Provider, Scope: sess.Scope, IsDefault: isDefault, Env: sess.Env, Secrets: sess.Secrets})
	if isDefault {
		c.defaults.Add(defaultKey{sess.OwnerID, sess.Profile}, sess.ID)
	}
}

// get returns the identity of session id, if remembered.
func (c *identities) get(id string) (store.Session, bool) { return c.byID.Get(id) }

// defaultOf returns the identity of owner's default session of profile, if remembered.
func (c *identities) defaultOf(owner, profile string) (store.Session, bool) {
	id, ok := c.defaults.Get(defaultKey{owner, profile})
	if !ok {
		return store.Session{}, false
	}
	return c.byID.Get(id)
}

// forget drops session id (destroyed, or found gone).
func (c *identities) forget(id string) {
	if sess, ok := c.byID.Peek(id); ok && sess.IsDefault {
		c.defaults.Remove(defaultKey{sess.OwnerID, sess.Profile})
	}
	c.byID.Remove(id)
}
