package postgres

import (
	"context"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

// UpsertPrincipal records that (issuer, subject) was seen at now, refreshing its username,
// email and groups, and returns the stored row with its id and first-seen time.
func (s *Store) UpsertPrincipal(ctx context.Context, p store.Principal, now time.Time) (store.Principal, error) {
	if p.Groups == nil {
		p.Groups = []string{}
	}
	row := s.pool.QueryRow(ctx, `
INSERT INTO principals (issuer, subject, username, email, groups, first_seen_at, last_seen_at)
VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (issuer, subject) DO UPDATE
   SET username = EXCLUDED.username, email = EXCLUDED.email, groups = EXCLUDED.groups,
       last_seen_at = GREATEST(principals.last_seen_at, EXCLUDED.last_seen_at)
RETURNING id::text, first_seen_at, last_seen_at`,
		p.Issuer, p.Subject, p.Username, p.Email, p.Groups, now)
	if err := row.Scan(&p.ID, &p.FirstSeenAt, &p.LastSeenAt); err != nil {
		return store.Principal{}, err
	}
	return p, nil
}

// GetPrincipal returns principal id as last recorded (its groups are those of its latest
// token). Errors: ErrNotFound for an unknown id; an id that is not a uuid is an error.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	var p store.Principal
	err := s.pool.QueryRow(ctx, `
SELECT id::text, issuer, subject, username, email, groups, first_seen_at, last_seen_at
  FROM principals WHERE id = $1`, id).Scan(&p.ID, &p.Issuer, &p.Subject, &p.Username, &p.Email, &p.Groups, &p.FirstSeenAt, &p.LastSeenAt)
	if err != nil {
		return store.Principal{}, notFound(err)
	}
	return p, nil
}

// PrincipalLabel returns "issuer subject" names for principal ids (for admin listings).
func (s *Store) PrincipalLabel(ctx context.Context, id string) (string, error) {
	var iss, sub string
	err := s.pool.QueryRow(ctx, `SELECT issuer, subject FROM principals WHERE id = $1`, id).Scan(&iss, &sub)
	if err != nil {
		return "", notFound(err)
	}
	return iss + "#" + sub, nil
}

// SeenPrincipal records that principal id was seen at now without changing its claims (a
// request with an API key carries its maker's claims as they were, not news of them), and
// returns the row. Errors: store.ErrNotFound for an unknown id.
func (s *Store) SeenPrincipal(ctx context.Context, id string, now time.Time) (store.Principal, error) {
	var p store.Principal
	err := s.pool.QueryRow(ctx, `
UPDATE principals SET last_seen_at = GREATEST(last_seen_at, $2) WHERE id = $1
RETURNING id::text, issuer, subject, username, email, groups, first_seen_at, last_seen_at`, id, now).
		Scan(&p.ID, &p.Issuer, &p.Subject, &p.Username, &p.Email, &p.Groups, &p.FirstSeenAt, &p.LastSeenAt)
	if err != nil {
		return store.Principal{}, notFound(err)
	}
	return p, nil
}
