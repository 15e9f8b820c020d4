package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

var keyT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// keyFixture records alice and a key of hers made at keyT0, expiring a day later.
func keyFixture(t *testing.T) (*postgres.Store, store.APIKey) {
	t.Helper()
	st := pgtest.Store(t)
	p, err := st.UpsertPrincipal(context.Background(), store.Principal{Issuer: "https://i", Subject: "alice"}, keyT0)
	require.NoError(t, err)
	h := sha256.Sum256([]byte("sgk_the-secret"))
	k := store.APIKey{ID: "k01", PrincipalID: p.ID, Name: "ci", Prefix: "sgk_abcdefgh", Hash: h[:], Issuer: "https://i", Subject: "alice",
		CreatedAt: keyT0, ExpiresAt: keyT0.Add(24 * time.Hour)}
	require.NoError(t, st.CreateAPIKeyWithin(context.Background(), k, 0))
	return st, k
}

// TestUseAPIKey: a use is recorded at most once a KeyUseInterval, never for a revoked or
// expired key; the key is answered whatever its state (the caller decides).
func TestUseAPIKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, k := keyFixture(t)
	lastUsed := func() *time.Time {
		t.Helper()
		got, err := st.GetAPIKey(ctx, k.ID)
		require.NoError(t, err)
		return got.LastUsedAt
	}

	got, err := st.UseAPIKey(ctx, k.Hash, keyT0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, k.ID, got.ID)
	require.Nil(t, got.LastUsedAt, "answered as it was before this use")
	require.True(t, keyT0.Add(time.Second).Equal(*lastUsed()), "the first use is recorded")

	_, err = st.UseAPIKey(ctx, k.Hash, keyT0.Add(30*time.Second))
	require.NoError(t, err)
	require.True(t, keyT0.Add(time.Second).Equal(*lastUsed()), "not again within a minute")

	got, err = st.UseAPIKey(ctx, k.Hash, keyT0.Add(61*time.Second))
	require.NoError(t, err)
	require.True(t, keyT0.Add(time.Second).Equal(*got.LastUsedAt))
	require.True(t, keyT0.Add(61*time.Second).Equal(*lastUsed()), "a minute later, recorded again")

	_, err = st.RevokeAPIKey(ctx, k.ID, k.PrincipalID, keyT0.Add(2*time.Minute))
	require.NoError(t, err)
	got, err = st.UseAPIKey(ctx, k.Hash, keyT0.Add(10*time.Minute))
	require.NoError(t, err)
	require.NotNil(t, got.RevokedAt, "a revoked key is answered, revoked")
	require.True(t, keyT0.Add(61*time.Second).Equal(*lastUsed()), "a revoked key's use is not recorded")

	h := sha256.Sum256([]byte("sgk_another"))
	_, err = st.UseAPIKey(ctx, h[:], keyT0)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestUseAPIKeyExpiredNotRecorded: an expired key is answered, and its use not recorded.
func TestUseAPIKeyExpiredNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, k := keyFixture(t)
	got, err := st.UseAPIKey(ctx, k.Hash, k.ExpiresAt)
	require.NoError(t, err)
	require.True(t, k.ExpiresAt.Equal(got.ExpiresAt))
	got, err = st.GetAPIKey(ctx, k.ID)
	require.NoError(t, err)
	require.Nil(t, got.LastUsedAt)
}

// TestAPIKeySecretNotStored: the table holds the secret's SHA-256, never the secret.
func TestAPIKeySecretNotStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := keyFixture(t)
	var row string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT row_to_json(k)::text FROM api_keys k`).Scan(&row))
	require.NotContains(t, row, "the-secret")
	var hash []byte
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT secret_hash FROM api_keys`).Scan(&hash))
	want := sha256.Sum256([]byte("sgk_the-secret"))
	require.Equal(t, want[:], hash)
}

// TestUseAPIKeyReadsOneIndex measures UseAPIKey's statement as Postgres runs it (EXPLAIN
// ANALYZE, in a transaction rolled back) over a table of a few thousand keys: nothing is
// read but by index; when no use is due, the only index read is one probe of api_keys_secret
// (the write's primary-key lookup reads no page); when one is due, the primary key too.
func TestUseAPIKeyReadsOneIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, k := keyFixture(t)
	_, err := st.Pool().Exec(ctx, `INSERT INTO api_keys (id, principal_id, name, prefix, secret_hash, issuer, subject, created_at, expires_at)
		SELECT 'x' || n, principal_id, 'bulk', 'sgk_bulk', sha256(('bulk' || n)::bytea), issuer, subject, created_at, expires_at
		  FROM api_keys, generate_series(1, 5000) n WHERE id = $1`, k.ID)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `ANALYZE api_keys`)
	require.NoError(t, err)

	reads := func(now time.Time) map[string]int {
		t.Helper()
		tx, err := st.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		var raw []byte
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+postgres.UseAPIKeySQL,
			k.Hash, now, now.Add(-store.KeyUseInterval)).Scan(&raw))
		require.NoError(t, json.Unmarshal(raw, &plan))
		out := map[string]int{}
		plan[0].Plan.walk(func(n planNode) {
			switch {
			case n.Relation != "api_keys":
			case n.Index != "":
				// Index probes that read pages (a lookup of a NULL key reads none).
				if n.SharedHit+n.SharedRead > 0 {
					out[n.Index] += n.Loops
				}
			case n.Type == "ModifyTable":
				if n.SharedHit+n.SharedRead > 0 {
					out["write"]++
				}
			default:
				t.Fatalf("api_keys read by a %s, not an index: %s", n.Type, raw)
			}
		})
		return out
	}
	require.Equal(t, map[string]int{"api_keys_secret": 1, "api_keys_pkey": 1, "write": 1}, reads(keyT0.Add(time.Second)),
		"a use is due: one probe, and the write's own lookup by primary key")
	_, err = st.UseAPIKey(ctx, k.Hash, keyT0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"api_keys_secret": 1}, reads(keyT0.Add(2*time.Second)),
		"no use due: one index probe, nothing else read or written")
}

// planNode is the part of a Postgres JSON plan node this test reads.
type planNode struct {
	Type       string     `json:"Node Type"`
	Relation   string     `json:"Relation Name"`
	Index      string     `json:"Index Name"`
	Loops      int        `json:"Actual Loops"`
	SharedHit  int        `json:"Shared Hit Blocks"`
	SharedRead int        `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}
