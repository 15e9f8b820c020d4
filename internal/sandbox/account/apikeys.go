package account

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/apikey"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/names"
	"github.com/sandgate/sandgate/internal/sandbox/page"
	"github.com/sandgate/sandgate/internal/store"
)

// API keys (docs/semantics.md §1 API key): a signed-in principal makes keys for scripts, CI
// jobs and servers; a key authenticates (internal/auth) as its maker with the claims the
// maker's token carried when it was made, optionally restricted to some profiles. Only the
// SHA-256 of a key's secret is stored; the secret is answered once, by CreateAPIKey.
//
// Rules:
//   - Only a sign-in makes keys: a request authenticated with a key may not create one, nor
//     list or revoke other principals' keys (fault.Forbidden) — a leaked key cannot make
//     itself a successor that outlives its revocation. It may list and revoke its maker's
//     keys, itself included.
//   - Another principal's key is fault.NotFound, as for sessions; administrators (by
//     auth.admin_groups) list (All) and revoke everyone's.
//   - A key restricted to profiles makes every other profile fault.Forbidden (profile.KeyRefusal),
//     for every use of it: its sessions, tasks and snapshots too, destroying included.

// API key states (APIKey.Status).
const (
	KeyActive  = "active"
	KeyExpired = "expired"
	KeyRevoked = "revoked"
)

// APIKeyRetention is how long a key that expired or was revoked is kept (listed as such)
// before the sweeper deletes it; a request with it is then refused as unknown.
const APIKeyRetention = 30 * 24 * time.Hour

// MinAPIKeyTTL is the shortest lifetime a key may be given.
const MinAPIKeyTTL = time.Minute

// maxKeyName bounds a key's name, in characters.
const maxKeyName = 100

// APIKeySettings bound API keys (config auth.api_keys). Zero fields take their defaults.
type APIKeySettings struct {
	// DefaultTTL is the lifetime of a key made without one; default 30 days (at most MaxTTL).
	DefaultTTL time.Duration
	// MaxTTL is the longest lifetime a key may be given; default 365 days.
	MaxTTL time.Duration
	// MaxPerPrincipal bounds the live keys (neither revoked nor expired) a principal holds;
	// default 50; negative: no limit. Administrators are not exempt.
	MaxPerPrincipal int
}

// WithDefaults returns k with zero fields defaulted.
func (k APIKeySettings) WithDefaults() APIKeySettings {
	if k.MaxTTL <= 0 {
		k.MaxTTL = 365 * 24 * time.Hour
	}
	if k.DefaultTTL <= 0 {
		k.DefaultTTL = min(30*24*time.Hour, k.MaxTTL)
	}
	if k.MaxPerPrincipal == 0 {
		k.MaxPerPrincipal = 50
	}
	return k
}

// APIKey is an API key as its owner (or an administrator) sees it: never its secret.
type APIKey struct {
	ID   string
	Name string
	// Prefix is the secret's first characters ("sgk_3fQx9LmA"), to tell keys apart.
	Prefix string
	// PrincipalID and Principal ("issuer#subject") name the key's maker, whom it
	// authenticates as.
	PrincipalID string
	Principal   string
	// Profiles, when not nil, are the only profiles the key may use.
	Profiles   []string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastUsedAt *time.Time // accurate to a minute
	RevokedAt  *time.Time
	// Status is KeyActive, KeyExpired or KeyRevoked, now.
	Status string
}

// NewAPIKey is a key just made: its Secret is shown this once.
type NewAPIKey struct {
	APIKey
	Secret string
}

// NewAPIKeyInput describes a key to make.
type NewAPIKeyInput struct {
	Name string
	// TTL is the key's lifetime; 0: APIKeySettings.DefaultTTL.
	TTL time.Duration
	// Profiles, when not nil, restricts the key to these profiles, each one the maker may use.
	Profiles []string
}

// APIKeyFilter selects keys for ListAPIKeys.
type APIKeyFilter struct {
	All    bool // administrators: every principal's keys
	Limit  int  // default 50
	Cursor string
}

// signInNeeded is the refusal of what only a sign-in may do, to a request made with a key.
func signInNeeded(what string) error {
	return fault.New(fault.Forbidden,
		"an API key cannot %s: sign in with your identity provider (the console, or `sandgate login`) and do it with that sign-in — a key that could would let a leaked key outlive its revocation", what)
}

// CreateAPIKey makes a key for p and answers it with its secret, which is not kept.
//
// Errors: fault.Forbidden when p authenticated with a key, or may not use one of in.Profiles
// (fault.Config when one is not configured); fault.Validation for a bad name, lifetime or
// profile list; fault.Quota when p holds APIKeySettings.MaxPerPrincipal live keys.
func (a *Room) CreateAPIKey(ctx context.Context, p principal.Principal, in NewAPIKeyInput) (NewAPIKey, error) {
	if p.APIKeyID != "" {
		return NewAPIKey{}, signInNeeded("create API keys")
	}
	name, err := keyName(in.Name)
	if err != nil {
		return NewAPIKey{}, err
	}
	cfg := a.keys
	ttl := in.TTL
	if ttl == 0 {
		ttl = cfg.DefaultTTL
	}
	if ttl < MinAPIKeyTTL || ttl > cfg.MaxTTL {
		return NewAPIKey{}, fault.New(fault.Validation, "an API key's lifetime (ttl_s) must be between %d and %d seconds (auth.api_keys.max_ttl: %s), not %d",
			int64(MinAPIKeyTTL/time.Second), int64(cfg.MaxTTL/time.Second), cfg.MaxTTL, int64(ttl/time.Second))
	}
	var profiles []string
	if in.Profiles != nil {
		if len(in.Profiles) == 0 {
			return NewAPIKey{}, fault.New(fault.Validation, "profiles is empty, which would let the key use no profile; omit it for a key that may use every profile you may")
		}
		profiles = []string{}
		for _, n := range in.Profiles {
			if slices.Contains(profiles, n) {
				continue
			}
			if n == "" {
				return NewAPIKey{}, fault.New(fault.Validation, "profiles names an empty profile")
			}
			if _, err := a.profiles.Resolve(p, n); err != nil {
				return NewAPIKey{}, err
			}
			profiles = append(profiles, n)
		}
	}
	k := apikey.New()
	now := a.clock.Now()
	c := p.Credentials
	row := store.APIKey{
		ID: a.newID(), PrincipalID: p.ID, Name: name, Prefix: k.Display, Hash: k.Hash[:],
		Issuer: p.Issuer, Subject: p.Subject, Username: p.Username, Email: p.Email, Groups: slices.Clone(p.Groups),
		Credentials: store.KeyCredentials{KubernetesUser: c.KubernetesUser, KubernetesGroups: slices.Clone(c.KubernetesGroups), AWSRoleARN: c.AWSRoleARN, RunAs: c.RunAs},
		Profiles:    profiles, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	limit := max(cfg.MaxPerPrincipal, 0)
	if err := a.store.CreateAPIKeyWithin(ctx, row, limit); errors.Is(err, store.ErrQuota) {
		return NewAPIKey{}, fault.OverQuota(0, "you hold %d live API keys, the most auth.api_keys.max_per_principal allows; revoke one you no longer need (DELETE /v1/api-keys/{id}, `sandgate keys revoke`)", limit)
	} else if err != nil {
		return NewAPIKey{}, err
	}
	if a.keyCreated != nil {
		a.keyCreated(k.Hash)
	}
	a.Record(ctx, p, store.AuditEvent{Kind: store.AuditAPIKeyCreate, Target: row.ID})
	a.log.Info("API key created", "key_id", row.ID, "principal", p.Key(), "expires_at", row.ExpiresAt, "profiles", profiles)
	return NewAPIKey{APIKey: a.keyView(row), Secret: k.Secret}, nil
}

// keyName checks a key's name: 1 to maxKeyName characters, printable, trimmed.
func keyName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", fault.New(fault.Validation, "an API key needs a name that says where it is used (e.g. \"ci-deploy\")")
	case utf8.RuneCountInString(name) > maxKeyName:
		return "", fault.New(fault.Validation, "an API key's name is at most %d characters", maxKeyName)
	}
	return name, names.Printable("API key name", name)
}

// ListAPIKeys returns a page of p's keys (every principal's for an administrator with All),
// newest first, revoked and expired ones included until APIKeyRetention has passed, and the
// cursor of the next page ("" on the last).
//
// Errors: fault.Forbidden for All without an admin group, or with a key.
func (a *Room) ListAPIKeys(ctx context.Context, p principal.Principal, f APIKeyFilter) ([]APIKey, string, error) {
	if f.All && !p.Admin {
		return nil, "", fault.New(fault.Forbidden, "all=true lists every principal's API keys and needs membership of an admin group (auth.admin_groups)")
	}
	if f.All && p.APIKeyID != "" {
		return nil, "", signInNeeded("list other principals' API keys")
	}
	t, id, err := page.Decode(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := a.store.ListAPIKeys(ctx, store.APIKeyFilter{OwnerID: p.ID, All: f.All, Limit: f.Limit + 1, AfterCreated: t, AfterID: id})
	if err != nil {
		return nil, "", err
	}
	out := []APIKey{}
	for _, r := range rows[:min(len(rows), f.Limit)] {
		out = append(out, a.keyView(r))
	}
	next := ""
	if len(rows) > f.Limit {
		last := rows[f.Limit-1]
		next = page.Encode(last.CreatedAt, last.ID)
	}
	return out, next, nil
}

// GetAPIKey returns key id. Errors: those of apiKey.
func (a *Room) GetAPIKey(ctx context.Context, p principal.Principal, id string) (APIKey, error) {
	r, err := a.apiKey(ctx, p, id)
	if err != nil {
		return APIKey{}, err
	}
	return a.keyView(r), nil
}

// RevokeAPIKey revokes key id at once (every replica refuses it within a second; see
// internal/auth.KeyRecheck) and returns it; revoking a revoked key changes nothing.
// Errors: those of apiKey.
func (a *Room) RevokeAPIKey(ctx context.Context, p principal.Principal, id string) (APIKey, error) {
	r, err := a.apiKey(ctx, p, id)
	if err != nil {
		return APIKey{}, err
	}
	if r.RevokedAt != nil {
		return a.keyView(r), nil
	}
	r, err = a.store.RevokeAPIKey(ctx, id, p.ID, a.clock.Now())
	if err != nil {
		return APIKey{}, a.keyErr(err, id)
	}
	if a.keyRevoked != nil {
		a.keyRevoked(id)
	}
	a.Record(ctx, p, store.AuditEvent{Kind: store.AuditAPIKeyRevoke, Target: id})
	a.log.Info("API key revoked", "key_id", id, "principal", p.Key(), "owner", r.Issuer+"#"+r.Subject)
	return a.keyView(r), nil
}

// apiKey returns key id when p may see it: its maker's, or an administrator's by a sign-in.
// Errors: fault.NotFound for an unknown key or another principal's (an administrator's key
// gets fault.Forbidden for those: it saw them exist by its groups, but only a sign-in may
// act on them).
func (a *Room) apiKey(ctx context.Context, p principal.Principal, id string) (store.APIKey, error) {
	r, err := a.store.GetAPIKey(ctx, id)
	if err != nil {
		return store.APIKey{}, a.keyErr(err, id)
	}
	if r.PrincipalID == p.ID {
		return r, nil
	}
	if !p.Admin {
		return store.APIKey{}, a.keyErr(store.ErrNotFound, id)
	}
	if p.APIKeyID != "" {
		return store.APIKey{}, signInNeeded("act on other principals' API keys")
	}
	return r, nil
}

func (a *Room) keyErr(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return fault.New(fault.NotFound, "unknown API key '%s' (ended keys are deleted %s after they end)", id, APIKeyRetention)
	}
	return err
}

func (a *Room) keyView(r store.APIKey) APIKey {
	v := APIKey{
		ID: r.ID, Name: r.Name, Prefix: r.Prefix, PrincipalID: r.PrincipalID, Principal: r.Issuer + "#" + r.Subject,
		Profiles: r.Profiles, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, LastUsedAt: r.LastUsedAt, RevokedAt: r.RevokedAt,
		Status: KeyActive,
	}
	switch {
	case r.RevokedAt != nil:
		v.Status = KeyRevoked
	case !a.clock.Now().Before(r.ExpiresAt):
		v.Status = KeyExpired
	}
	return v
}

// SweepAPIKeys deletes the keys that ended (expired or revoked) more than APIKeyRetention ago.
func (a *Room) SweepAPIKeys(ctx context.Context) error {
	n, err := a.store.DeleteEndedAPIKeys(ctx, a.clock.Now().Add(-APIKeyRetention))
	if n > 0 {
		a.log.Info("API keys that ended deleted", "count", n, "after", APIKeyRetention.String())
	}
	return err
}
