package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// API keys, as the Postgres store (../postgres/apikeys.go) keeps them.

// cloneKey is a copy of k that shares no slice or pointer with it, with its times as
// timestamptz columns give them back.
func cloneKey(k store.APIKey) store.APIKey {
	k.Hash = bytes.Clone(k.Hash)
	k.Groups = slices.Clone(k.Groups)
	if k.Groups == nil {
		k.Groups = []string{}
	}
	k.Credentials.KubernetesGroups = slices.Clone(k.Credentials.KubernetesGroups)
	if k.Profiles != nil {
		k.Profiles = slices.Clone(k.Profiles)
	}
	k.CreatedAt, k.ExpiresAt = ts(k.CreatedAt), ts(k.ExpiresAt)
	if k.LastUsedAt != nil {
		t := ts(*k.LastUsedAt)
		k.LastUsedAt = &t
	}
	if k.RevokedAt != nil {
		t := ts(*k.RevokedAt)
		k.RevokedAt = &t
	}
	return k
}

// live: neither revoked nor expired at now.
func live(k *store.APIKey, now time.Time) bool { return k.RevokedAt == nil && k.ExpiresAt.After(now) }

// CreateAPIKeyWithin inserts k unless its principal holds limit live keys at k.CreatedAt
// (store.ErrQuota; limit ≤ 0: none). The principal must exist; a duplicate id or hash is an
// error.
func (s *Store) CreateAPIKeyWithin(ctx context.Context, k store.APIKey, limit int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, err := s.owner("api_keys", k.PrincipalID)
	if err != nil {
		return err
	}
	k = cloneKey(k)
	k.PrincipalID, k.LastUsedAt, k.RevokedAt, k.RevokedBy = owner, nil, nil, ""
	held := 0
	for _, o := range s.apiKeys {
		if o.ID == k.ID || bytes.Equal(o.Hash, k.Hash) {
			return fmt.Errorf("sandboxtest: duplicate key value violates unique constraint of api_keys (%s)", k.ID)
		}
		if o.PrincipalID == owner && live(o, k.CreatedAt) {
			held++
		}
	}
	if limit > 0 && held >= limit {
		return store.ErrQuota
	}
	s.apiKeys[k.ID] = &k
	return nil
}

// GetAPIKey returns key id; store.ErrNotFound when unknown.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	if err := ctx.Err(); err != nil {
		return store.APIKey{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.apiKeys[id]
	if !ok {
		return store.APIKey{}, store.ErrNotFound
	}
	return cloneKey(*k), nil
}

// ListAPIKeys returns the owner's keys (every one with f.All; none for no owner without it),
// newest first, after the keyset cursor, at most f.Limit (which must be positive).
func (s *Store) ListAPIKeys(ctx context.Context, f store.APIKeyFilter) ([]store.APIKey, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.Limit <= 0 {
		return nil, errors.New("store: ListAPIKeys needs a positive limit")
	}
	if !f.All && f.OwnerID == "" {
		return []store.APIKey{}, nil
	}
	owner := ""
	if !f.All {
		u, err := uuidText(f.OwnerID)
		if err != nil {
			return nil, err
		}
		owner = u
	}
	after := ts(f.AfterCreated)
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []store.APIKey
	for _, k := range s.apiKeys {
		if (!f.All && k.PrincipalID != owner) || (f.AfterID != "" && !before(k.CreatedAt, k.ID, after, f.AfterID)) {
			continue
		}
		rows = append(rows, cloneKey(*k))
	}
	slices.SortFunc(rows, func(a, b store.APIKey) int { return newestFirst(a.CreatedAt, a.ID, b.CreatedAt, b.ID) })
	out := []store.APIKey{}
	return append(out, rows[:min(len(rows), f.Limit)]...), nil
}

// RevokeAPIKey marks key id revoked by principal by at at, unless it was revoked before, and
// returns it; store.ErrNotFound when unknown.
func (s *Store) RevokeAPIKey(ctx context.Context, id, by string, at time.Time) (store.APIKey, error) {
	if err := ctx.Err(); err != nil {
		return store.APIKey{}, err
	}
	u, err := uuidText(by)
	if err != nil {
		return store.APIKey{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.apiKeys[id]
	if !ok {
		return store.APIKey{}, store.ErrNotFound
	}
	if k.RevokedAt == nil {
		t := ts(at)
		k.RevokedAt, k.RevokedBy = &t, u
	}
	return cloneKey(*k), nil
}

// DeleteEndedAPIKeys removes the keys that expired or were revoked before cutoff.
func (s *Store) DeleteEndedAPIKeys(ctx context.Context, cutoff time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cutoff = ts(cutoff)
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, k := range s.apiKeys {
		if k.ExpiresAt.Before(cutoff) || (k.RevokedAt != nil && k.RevokedAt.Before(cutoff)) {
			delete(s.apiKeys, id)
			n++
		}
	}
	return n, nil
}
