package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

const apiKeyCols = `id, principal_id::text, name, prefix, secret_hash, issuer, subject, username, email, groups, credentials,
	profiles, created_at, expires_at, last_used_at, revoked_at, COALESCE(revoked_by::text, '')`

func scanAPIKey(row pgx.Row) (store.APIKey, error) {
	var k store.APIKey
	err := row.Scan(&k.ID, &k.PrincipalID, &k.Name, &k.Prefix, &k.Hash, &k.Issuer, &k.Subject, &k.Username, &k.Email, &k.Groups,
		&k.Credentials, &k.Profiles, &k.CreatedAt, &k.ExpiresAt, &k.LastUsedAt, &k.RevokedAt, &k.RevokedBy)
	return k, notFound(err)
}

// CreateAPIKeyWithin inserts k unless its principal already holds limit live keys (neither
// revoked nor expired at k.CreatedAt; limit ≤ 0: no limit): then store.ErrQuota and nothing
// inserted, checked in the same statement. The principal must be a recorded one; a duplicate
// id or secret hash is an error.
func (st *Store) CreateAPIKeyWithin(ctx context.Context, k store.APIKey, limit int) error {
	if k.Groups == nil {
		k.Groups = []string{}
	}
	var n int
	err := st.pool.QueryRow(ctx, `WITH ins AS (
		INSERT INTO api_keys (id, principal_id, name, prefix, secret_hash, issuer, subject, username, email, groups, credentials, profiles, created_at, expires_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14
		 WHERE $15::int <= 0 OR (SELECT count(*) FROM api_keys
		        WHERE principal_id = $2 AND revoked_at IS NULL AND expires_at > $13) < $15
		RETURNING 1)
		SELECT count(*) FROM ins`,
		k.ID, k.PrincipalID, k.Name, k.Prefix, k.Hash, k.Issuer, k.Subject, k.Username, k.Email, k.Groups, k.Credentials, k.Profiles,
		k.CreatedAt, k.ExpiresAt, limit).Scan(&n)
	if err == nil && n == 0 {
		return store.ErrQuota
	}
	return err
}

// GetAPIKey returns key id. Errors: store.ErrNotFound.
func (st *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	return scanAPIKey(st.pool.QueryRow(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE id = $1`, id))
}

// ListAPIKeys returns the filter's keys (the owner's, or every principal's with f.All),
// newest first (created_at, then id).
func (st *Store) ListAPIKeys(ctx context.Context, f store.APIKeyFilter) ([]store.APIKey, error) {
	if f.Limit <= 0 {
		return nil, errors.New("store: ListAPIKeys needs a positive limit")
	}
	if !f.All && f.OwnerID == "" {
		return []store.APIKey{}, nil
	}
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if !f.All {
		where = append(where, "principal_id = "+arg(f.OwnerID))
	}
	if f.AfterID != "" {
		where = append(where, "(created_at, id) < ("+arg(f.AfterCreated)+", "+arg(f.AfterID)+")")
	}
	q := `SELECT ` + apiKeyCols + ` FROM api_keys`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC LIMIT " + arg(f.Limit)
	rows, err := st.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.APIKey, error) { return scanAPIKey(r) })
}

// RevokeAPIKey records that principal by revoked key id at at, and returns the key. A key
// revoked before keeps its first revocation (the call changes nothing). Errors: store.ErrNotFound.
func (st *Store) RevokeAPIKey(ctx context.Context, id, by string, at time.Time) (store.APIKey, error) {
	return scanAPIKey(st.pool.QueryRow(ctx, `WITH upd AS (
		UPDATE api_keys SET revoked_at = $3, revoked_by = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING `+apiKeyCols+`)
		SELECT * FROM upd UNION ALL SELECT `+apiKeyCols+` FROM api_keys WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM upd)`,
		id, by, at))
}

// DeleteEndedAPIKeys removes the keys that expired or were revoked before cutoff, and
// returns how many.
func (st *Store) DeleteEndedAPIKeys(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := st.pool.Exec(ctx, `DELETE FROM api_keys WHERE expires_at < $1 OR revoked_at < $1`, cutoff)
	return tag.RowsAffected(), err
}

// UseAPIKey returns the key whose secret hashes to hash — revoked and expired ones too: the
// caller decides — and records its use at now when the last recorded one is store.KeyUseInterval
// or more before (at most one write a minute per key, whichever replica sees it; a revoked
// or expired key's use is not recorded). The key answered is as it was before this use was
// recorded. Errors: store.ErrNotFound.
//
// Cost: one statement, whose only index read is one probe of the unique index on
// secret_hash — the primary key is read too, for the write, once a minute per key.
func (st *Store) UseAPIKey(ctx context.Context, hash []byte, now time.Time) (store.APIKey, error) {
	return scanAPIKey(st.pool.QueryRow(ctx, useAPIKeySQL, hash, now, now.Add(-store.KeyUseInterval)))
}

// useAPIKeySQL is UseAPIKey's statement: the key is read once (k, materialized), and the
// write's own read of the row by its primary key happens only when a use is due (the scalar
// subquery is NULL otherwise, which no index probe looks up). The write re-checks
// last_used_at on the row it locks, so of two replicas that both saw an old use, one writes.
const useAPIKeySQL = `WITH k AS MATERIALIZED (SELECT ` + apiKeyCols + ` FROM api_keys WHERE secret_hash = $1),
	used AS (UPDATE api_keys SET last_used_at = $2
	          WHERE id = (SELECT id FROM k WHERE revoked_at IS NULL AND expires_at > $2 AND (last_used_at IS NULL OR last_used_at <= $3))
	            AND (last_used_at IS NULL OR last_used_at <= $3))
	SELECT * FROM k`
