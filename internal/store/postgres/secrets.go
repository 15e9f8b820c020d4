package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/store"
)

// Secrets (migrations/00018_secrets.sql): one row per principal and name, the value sealed.

const secretCols = `principal_id::text, name, hosts, key_id, sealed, created_at, updated_at`

func scanSecret(row pgx.Row) (store.Secret, error) {
	var s store.Secret
	err := row.Scan(&s.OwnerID, &s.Name, &s.Hosts, &s.KeyID, &s.Sealed, &s.CreatedAt, &s.UpdatedAt)
	return s, notFound(err)
}

// PutSecretWithin inserts s, or replaces the hosts, key, sealed value and updated time of its
// owner's secret of that name (its created time stays). A new name is refused with
// store.ErrQuota when the owner already holds limit secrets (limit ≤ 0: no limit), checked
// in the same statement. created says whether the row is new.
func (st *Store) PutSecretWithin(ctx context.Context, s store.Secret, limit int) (bool, error) {
	if s.Hosts == nil {
		s.Hosts = []string{}
	}
	var created bool
	err := st.pool.QueryRow(ctx, `
INSERT INTO secrets (principal_id, name, hosts, key_id, sealed, created_at, updated_at)
SELECT $1, $2, $3, $4, $5, $6, $6
 WHERE $7::int <= 0
    OR EXISTS (SELECT 1 FROM secrets WHERE principal_id = $1 AND name = $2)
    OR (SELECT count(*) FROM secrets WHERE principal_id = $1) < $7
ON CONFLICT (principal_id, name) DO UPDATE
   SET hosts = EXCLUDED.hosts, key_id = EXCLUDED.key_id, sealed = EXCLUDED.sealed, updated_at = EXCLUDED.updated_at
RETURNING xmax = 0`,
		s.OwnerID, s.Name, s.Hosts, s.KeyID, s.Sealed, s.UpdatedAt, limit).Scan(&created)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, store.ErrQuota
	}
	return created, err
}

// GetSecret returns owner's secret name. Errors: store.ErrNotFound.
func (st *Store) GetSecret(ctx context.Context, owner, name string) (store.Secret, error) {
	return scanSecret(st.pool.QueryRow(ctx, `SELECT `+secretCols+` FROM secrets WHERE principal_id = $1 AND name = $2`, owner, name))
}

// ListSecrets returns owner's secrets by name.
func (st *Store) ListSecrets(ctx context.Context, owner string) ([]store.Secret, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+secretCols+` FROM secrets WHERE principal_id = $1 ORDER BY name`, owner)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Secret, error) { return scanSecret(r) })
}

// DeleteSecret removes owner's secret name. Errors: store.ErrNotFound.
func (st *Store) DeleteSecret(ctx context.Context, owner, name string) error {
	tag, err := st.pool.Exec(ctx, `DELETE FROM secrets WHERE principal_id = $1 AND name = $2`, owner, name)
	if err == nil && tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return err
}

// SecretsSealedWithout returns up to limit secrets not sealed under keyID, oldest update first.
func (st *Store) SecretsSealedWithout(ctx context.Context, keyID string, limit int) ([]store.Secret, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+secretCols+` FROM secrets WHERE key_id <> $1 ORDER BY updated_at, principal_id, name LIMIT $2`, keyID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Secret, error) { return scanSecret(r) })
}

// ResealSecret replaces the key and sealed value of owner's secret name while it is still
// sealed under fromKey; false when it no longer is (a concurrent PUT sealed it anew) or is gone.
// The updated time stays: the value did not change.
func (st *Store) ResealSecret(ctx context.Context, owner, name, fromKey, keyID string, sealed []byte) (bool, error) {
	tag, err := st.pool.Exec(ctx, `UPDATE secrets SET key_id = $4, sealed = $5 WHERE principal_id = $1 AND name = $2 AND key_id = $3`,
		owner, name, fromKey, keyID, sealed)
	return err == nil && tag.RowsAffected() == 1, err
}
