package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/sandgate/sandgate/internal/apikey"
	"github.com/sandgate/sandgate/internal/principal"
)

// APIKey is an API key as the gateway's store keeps it (docs/semantics.md §1 API key): the
// SHA-256 of its secret, and the principal it authenticates as — its maker, with the claims
// its maker's token carried when the key was made.
type APIKey struct {
	ID string
	// Hash is the SHA-256 of the secret.
	Hash []byte
	// Display is the secret's first characters ("sgk_3fQx9LmA"), for messages.
	Display string
	// Principal is the maker as recorded (ID, Issuer, Subject, Username, Email, Groups,
	// Credentials); Admin is decided anew from its groups.
	Principal principal.Principal
	// Profiles, when not nil, are the only profiles the key may use.
	Profiles  []string
	ExpiresAt time.Time
	RevokedAt time.Time // zero: not revoked
}

// KeyLookup reads the key whose secret hashes to hash and records its use at now (the store
// writes that at most once a minute per key). ErrUnknownKey when there is none; any other
// error is the store failing. It must answer revoked and expired keys too.
type KeyLookup func(ctx context.Context, hash [32]byte, now time.Time) (APIKey, error)

// ErrUnknownKey is KeyLookup's answer for a hash no key has.
var ErrUnknownKey = errors.New("unknown API key")

// ErrKeysUnavailable means an API key could not be checked (its store did not answer): the
// key was neither accepted nor refused (the edge answers 503).
var ErrKeysUnavailable = errors.New("API keys cannot be checked")

// KeyRecheck is how long a key read from the store is trusted before it is read again:
// revoking a key takes effect within it on every replica (at once on the replica that
// revoked it: ForgetAPIKey), and expiry at once everywhere (it is checked on every request).
const KeyRecheck = time.Second

// UnknownKeyRecheck is how long a secret no key has (a well-formed one: its checksum holds) is
// refused without reading the store again, so that a client retrying a deleted or made-up key
// costs one read per UnknownKeyRecheck per replica. A key made on this replica is never
// refused by it (ForgetUnknownAPIKey); one made elsewhere could only be refused here if its
// secret had been tried before it existed, which 256 random bits rule out.
const UnknownKeyRecheck = 10 * time.Second

// keysMax bounds the keys remembered; unknownMax the unknown secrets, apart, so that a flood
// of made-up secrets does not push the keys in use out (each new one still costs a read:
// bounding those is the rate limiter's work, not the cache's).
const (
	keysMax    = 10000
	unknownMax = 4096
)

// keyVerifier authenticates API keys: a store read per key at most once per KeyRecheck per
// replica, per unknown secret at most once per UnknownKeyRecheck (concurrent requests with
// one secret share the read).
type keyVerifier struct {
	lookup  KeyLookup
	now     func() time.Time
	cache   *lru.Cache[[32]byte, keyEntry]
	unknown *lru.Cache[[32]byte, time.Time] // when no key had the hash
	reads   singleflight.Group
	// made counts ForgetUnknownAPIKey calls: a read that started before one does not
	// remember its "unknown", which may predate the key. mu orders them with what reads add
	// to unknown.
	mu   sync.Mutex
	made uint64
}

// keyEntry is a key as read at read; unknown when no key had the hash.
type keyEntry struct {
	key     APIKey
	unknown bool
	read    time.Time
}

// WithAPIKeys makes the Authenticator accept API keys (internal/apikey) wherever it accepts
// tokens, reading them with lookup and judging their expiry by now — the clock the keys'
// expiry was set by (the domain's). Without it, a key is refused as an unknown credential.
func WithAPIKeys(lookup KeyLookup, now func() time.Time) Option {
	return func(a *Authenticator) {
		c, err := lru.New[[32]byte, keyEntry](keysMax)
		if err != nil {
			panic(err) // only for a size ≤ 0
		}
		u, err := lru.New[[32]byte, time.Time](unknownMax)
		if err != nil {
			panic(err)
		}
		if now == nil {
			now = time.Now
		}
		a.keys = &keyVerifier{lookup: lookup, now: now, cache: c, unknown: u}
	}
}

// AuthenticateAPIKey checks raw, an API key (the whole secret), and returns the principal it
// authenticates as: its maker's issuer, subject, id and claims as they were when it was made,
// Admin from those groups, APIKeyID and KeyProfiles set. For edges that take a key outside
// `Authorization: Bearer` (the E2B door's X-API-KEY); Authenticate calls it for bearer
// credentials that look like keys.
//
// Errors: *Error (401) for a malformed, unknown, revoked or expired key — saying which, and
// when for the last two, but never naming a key's id; ErrKeysUnavailable (503) when the
// store does not answer.
func (a *Authenticator) AuthenticateAPIKey(ctx context.Context, raw string) (principal.Principal, error) {
	k, err := apikey.Parse(raw)
	if err != nil {
		return principal.Principal{}, invalid(ReasonMalformed, "%v", err)
	}
	v := a.keys
	if v == nil {
		return principal.Principal{}, invalid(ReasonUnknownKey, "this gateway does not accept API keys; send an OIDC token")
	}
	e, err := v.get(ctx, k.Hash)
	if err != nil {
		return principal.Principal{}, err
	}
	// The store found the row by this hash; compare anyway, in constant time.
	if e.unknown || subtle.ConstantTimeCompare(e.key.Hash, k.Hash[:]) != 1 {
		return principal.Principal{}, invalid(ReasonUnknownKey,
			"unknown API key %s: no key of this gateway has this secret (ended keys are deleted after a while); create one with POST /v1/api-keys or `sandgate keys create` while signed in", k.Display)
	}
	now := v.now()
	if !e.key.RevokedAt.IsZero() {
		return principal.Principal{}, invalid(ReasonRevoked,
			"API key %s was revoked at %s; create a new one with POST /v1/api-keys or `sandgate keys create` while signed in", k.Display, e.key.RevokedAt.UTC().Format(time.RFC3339))
	}
	if !now.Before(e.key.ExpiresAt) {
		return principal.Principal{}, invalid(ReasonExpired,
			"API key %s expired at %s; create a new one with POST /v1/api-keys or `sandgate keys create` while signed in", k.Display, e.key.ExpiresAt.UTC().Format(time.RFC3339))
	}
	p := e.key.Principal
	p.Groups = slices.Clone(p.Groups)
	p.Credentials.KubernetesGroups = slices.Clone(p.Credentials.KubernetesGroups)
	p.Admin = p.InAnyGroup(a.adminGroups)
	p.APIKeyID = e.key.ID
	p.KeyProfiles = slices.Clone(e.key.Profiles) // nil stays nil: no restriction
	p.Token = ""                                 // never a key: providers exchange tokens with clouds
	return p, nil
}

// ForgetAPIKey drops what this replica remembers of key id, so that its revocation takes
// effect here at once (other replicas read it again within KeyRecheck).
func (a *Authenticator) ForgetAPIKey(id string) {
	if a.keys == nil {
		return
	}
	for _, h := range a.keys.cache.Keys() {
		if e, ok := a.keys.cache.Peek(h); ok && e.key.ID == id {
			a.keys.cache.Remove(h)
		}
	}
}

// ForgetUnknownAPIKey drops what this replica remembers of hash as no key's, and keeps a read
// under way from remembering it so: the domain calls it when it has made a key of that hash.
func (a *Authenticator) ForgetUnknownAPIKey(hash [32]byte) {
	if a.keys == nil {
		return
	}
	v := a.keys
	v.mu.Lock()
	defer v.mu.Unlock()
	v.made++
	v.unknown.Remove(hash)
}

// within reports whether now is less than d after read (a clock set back is not within).
func within(now, read time.Time, d time.Duration) bool {
	return now.Sub(read) < d && !now.Before(read)
}

// get returns the key of hash as read within KeyRecheck (an unknown one within
// UnknownKeyRecheck), reading it when not.
func (v *keyVerifier) get(ctx context.Context, hash [32]byte) (keyEntry, error) {
	now := v.now()
	if e, ok := v.cache.Get(hash); ok && within(now, e.read, KeyRecheck) {
		return e, nil
	}
	if read, ok := v.unknown.Get(hash); ok && within(now, read, UnknownKeyRecheck) {
		return keyEntry{unknown: true, read: read}, nil
	}
	r, err, _ := v.reads.Do(string(hash[:]), func() (any, error) {
		// A read that one request started is not cut short by that request's end.
		ctx := context.WithoutCancel(ctx)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v.mu.Lock()
		made := v.made
		v.mu.Unlock()
		read := v.now()
		k, err := v.lookup(ctx, hash, read)
		switch {
		case errors.Is(err, ErrUnknownKey):
			v.cache.Remove(hash) // deleted since it was read
			v.mu.Lock()
			if v.made == made {
				v.unknown.Add(hash, read)
			}
			v.mu.Unlock()
			return keyEntry{unknown: true, read: read}, nil
		case err != nil:
			return keyEntry{}, fmt.Errorf("%w: %v", ErrKeysUnavailable, err)
		}
		e := keyEntry{key: k, read: read}
		v.cache.Add(hash, e)
		return e, nil
	})
	if err != nil {
		return keyEntry{}, err
	}
	return r.(keyEntry), nil
}
