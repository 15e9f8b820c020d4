package account

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/store"
)

// principalRecorder records each authenticated principal in Postgres (first/last seen) without
// writing on every request: one issuer and subject is written at most once per refresh
// interval (a minute), whatever its tokens carry. Two tokens of one subject with different
// groups (two clients signed in at different times) therefore cost one write a minute, not
// one per request; the row's username, e-mail, groups and last_seen_at are accurate to that
// interval. A request decides with its own token's claims; only what acts without a token —
// a share link re-checking its maker (Room.Principal) — reads the recorded groups, so a lost
// group takes effect there within the interval of the maker's next request. A request with
// an API key carries its maker's claims as they were when the key was made: it refreshes
// last_seen_at only (SeenPrincipal), never the recorded claims. The cache is bounded; when
// full it is cleared.
type principalRecorder struct {
	store   store.Principals
	now     func() time.Time
	refresh time.Duration
	max     int

	mu   sync.Mutex
	seen map[string]recorded
}

type recorded struct {
	row     store.Principal
	written time.Time
}

func newPrincipalRecorder(st store.Principals, now func() time.Time) *principalRecorder {
	return &principalRecorder{store: st, now: now, refresh: time.Minute, max: 10000, seen: map[string]recorded{}}
}

// record returns p with its store id and first/last-seen times.
func (r *principalRecorder) record(ctx context.Context, p principal.Principal) (principal.Principal, error) {
	now := r.now()
	key := p.Key()
	r.mu.Lock()
	c, ok := r.seen[key]
	r.mu.Unlock()
	if ok && now.Sub(c.written) < r.refresh {
		p.ID, p.FirstSeenAt, p.LastSeenAt = c.row.ID, c.row.FirstSeenAt, c.row.LastSeenAt
		return p, nil
	}
	var row store.Principal
	var err error
	if p.APIKeyID != "" && p.ID != "" {
		// An API key's claims are its maker's as they were: not news of the principal.
		row, err = r.store.SeenPrincipal(ctx, p.ID, now)
	} else {
		row, err = r.store.UpsertPrincipal(ctx, store.Principal{Issuer: p.Issuer, Subject: p.Subject, Username: p.Username, Email: p.Email, Groups: slices.Clone(p.Groups)}, now)
	}
	if err != nil {
		return p, err
	}
	r.mu.Lock()
	if len(r.seen) >= r.max {
		clear(r.seen)
	}
	r.seen[key] = recorded{row: row, written: now}
	r.mu.Unlock()
	p.ID, p.FirstSeenAt, p.LastSeenAt = row.ID, row.FirstSeenAt, row.LastSeenAt
	return p, nil
}

// Identify returns p with its stable id and first/last-seen times, recording it (seed
// principal resolution: one row per issuer and subject). Edges call it once per request,
// after the token is verified; the write happens at most once a minute per unchanged
// principal.
func (a *Room) Identify(ctx context.Context, p principal.Principal) (principal.Principal, error) {
	return a.principals.record(ctx, p)
}

// OwnerLabel names principal id as "issuer#subject" for administrators' listings; "" when
// unknown.
func (a *Room) OwnerLabel(ctx context.Context, id string) string {
	l, _ := a.store.PrincipalLabel(ctx, id)
	return l
}

// Principal reads principal id back as its latest token described it — for what acts
// without a token: a share link re-checking its maker, the sweeper acting for a session's
// owner; an administrator when in one of the admin groups. Errors: the store's
// (store.ErrNotFound for a principal no longer recorded).
func (a *Room) Principal(ctx context.Context, id string) (principal.Principal, error) {
	row, err := a.store.GetPrincipal(ctx, id)
	if err != nil {
		return principal.Principal{}, err
	}
	p := principal.Principal{ID: row.ID, Issuer: row.Issuer, Subject: row.Subject, Username: row.Username, Email: row.Email,
		Groups: row.Groups, FirstSeenAt: row.FirstSeenAt, LastSeenAt: row.LastSeenAt}
	p.Admin = p.InAnyGroup(a.adminGroups)
	return p, nil
}
