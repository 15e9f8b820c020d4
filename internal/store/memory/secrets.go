package memory

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/internal/store"
)

// Secrets, as the Postgres store (../postgres/secrets.go) keeps them.

type secretKey struct{ owner, name string }

func cloneSecret(s store.Secret) store.Secret {
	s.Hosts = slices.Clone(s.Hosts)
	if s.Hosts == nil {
		s.Hosts = []string{}
	}
	s.Sealed = bytes.Clone(s.Sealed)
	s.CreatedAt, s.UpdatedAt = ts(s.CreatedAt), ts(s.UpdatedAt)
	return s
}

// PutSecretWithin inserts or replaces s (store.Secrets).
func (s *Store) PutSecretWithin(ctx context.Context, sec store.Secret, limit int) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, err := s.owner("secrets", sec.OwnerID)
	if err != nil {
		return false, err
	}
	sec = cloneSecret(sec)
	sec.OwnerID = owner
	k := secretKey{owner, sec.Name}
	if old, ok := s.secrets[k]; ok {
		old.Hosts, old.KeyID, old.Sealed, old.UpdatedAt = sec.Hosts, sec.KeyID, sec.Sealed, sec.UpdatedAt
		return false, nil
	}
	if limit > 0 {
		held := 0
		for k := range s.secrets {
			if k.owner == owner {
				held++
			}
		}
		if held >= limit {
			return false, store.ErrQuota
		}
	}
	sec.CreatedAt = sec.UpdatedAt
	s.secrets[k] = &sec
	return true, nil
}

// GetSecret returns owner's secret name (store.Secrets).
func (s *Store) GetSecret(ctx context.Context, owner, name string) (store.Secret, error) {
	if err := ctx.Err(); err != nil {
		return store.Secret{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, err := uuidText(owner); err == nil {
		if sec, ok := s.secrets[secretKey{u, name}]; ok {
			return cloneSecret(*sec), nil
		}
	}
	return store.Secret{}, store.ErrNotFound
}

// ListSecrets returns owner's secrets by name (store.Secrets).
func (s *Store) ListSecrets(ctx context.Context, owner string) ([]store.Secret, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.Secret{}
	u, err := uuidText(owner)
	if err != nil {
		return out, nil
	}
	for k, sec := range s.secrets {
		if k.owner == u {
			out = append(out, cloneSecret(*sec))
		}
	}
	slices.SortFunc(out, func(a, b store.Secret) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteSecret removes owner's secret name (store.Secrets).
func (s *Store) DeleteSecret(ctx context.Context, owner, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := uuidText(owner)
	if err != nil {
		return store.ErrNotFound
	}
	if _, ok := s.secrets[secretKey{u, name}]; !ok {
		return store.ErrNotFound
	}
	delete(s.secrets, secretKey{u, name})
	return nil
}

// SecretsSealedWithout returns up to limit secrets not sealed under keyID (store.Secrets),
// oldest update first.
func (s *Store) SecretsSealedWithout(ctx context.Context, keyID string, limit int) ([]store.Secret, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.Secret{}
	for _, sec := range s.secrets {
		if sec.KeyID != keyID {
			out = append(out, cloneSecret(*sec))
		}
	}
	slices.SortFunc(out, func(a, b store.Secret) int {
		if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.OwnerID, b.OwnerID); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// ResealSecret replaces the key and sealed value of a secret still sealed under fromKey
// (store.Secrets).
func (s *Store) ResealSecret(ctx context.Context, owner, name, fromKey, keyID string, sealed []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := uuidText(owner)
	if err != nil {
		return false, nil
	}
	sec, ok := s.secrets[secretKey{u, name}]
	if !ok || sec.KeyID != fromKey {
		return false, nil
	}
	sec.KeyID, sec.Sealed = keyID, bytes.Clone(sealed)
	return true, nil
}
