package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/apikey"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// keyClock is the manual clock the key tests judge expiry and rechecks by.
type keyClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *keyClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *keyClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// keyEnv is an Authenticator reading API keys from a real Postgres store, counting reads.
type keyEnv struct {
	t     *testing.T
	st    *postgres.Store
	clock *keyClock
	a     *auth.Authenticator
	reads atomic.Int64
	fail  atomic.Bool // the store "does not answer"
	// afterRead, when set, runs after the store was read, before the read is answered.
	afterRead func()
	alice     store.Principal
}

func newKeyEnv(t *testing.T) *keyEnv {
	t.Helper()
	e := &keyEnv{t: t, st: pgtest.Store(t), clock: &keyClock{now: testNow}}
	lookup := func(ctx context.Context, hash [32]byte, now time.Time) (auth.APIKey, error) {
		e.reads.Add(1)
		if e.fail.Load() {
			return auth.APIKey{}, errors.New("connection refused")
		}
		k, err := e.st.UseAPIKey(ctx, hash[:], now)
		if e.afterRead != nil {
			e.afterRead()
		}
		if errors.Is(err, store.ErrNotFound) {
			return auth.APIKey{}, auth.ErrUnknownKey
		}
		if err != nil {
			return auth.APIKey{}, err
		}
		out := auth.APIKey{ID: k.ID, Hash: k.Hash, Display: k.Prefix, Profiles: k.Profiles, ExpiresAt: k.ExpiresAt,
			Principal: principal.Principal{ID: k.PrincipalID, Issuer: k.Issuer, Subject: k.Subject, Username: k.Username, Email: k.Email, Groups: k.Groups,
				Credentials: principal.Credentials{KubernetesUser: k.Credentials.KubernetesUser, RunAs: k.Credentials.RunAs}}}
		if k.RevokedAt != nil {
			out.RevokedAt = *k.RevokedAt
		}
		return out, nil
	}
	cfg := config.Auth{Issuers: []config.Issuer{{URL: "https://issuer.keys.test", Audiences: []string{testAudience}}}, AdminGroups: []string{"admins"}}
	e.a = newAuthenticator(t, cfg, auth.WithAPIKeys(lookup, e.clock.Now))
	var err error
	e.alice, err = e.st.UpsertPrincipal(context.Background(), store.Principal{Issuer: "https://issuer.keys.test", Subject: "alice"}, testNow)
	require.NoError(t, err)
	return e
}

// key records a key of alice's with groups and profiles, expiring ttl from now, and returns
// its secret.
func (e *keyEnv) key(id string, ttl time.Duration, groups, profiles []string) string {
	e.t.Helper()
	k := apikey.New()
	e.record(id, k, ttl, groups, profiles)
	return k.Secret
}

// record records k as a key of alice's (key).
func (e *keyEnv) record(id string, k apikey.Key, ttl time.Duration, groups, profiles []string) {
	e.t.Helper()
	require.NoError(e.t, e.st.CreateAPIKeyWithin(context.Background(), store.APIKey{
		ID: id, PrincipalID: e.alice.ID, Name: id, Prefix: k.Display, Hash: k.Hash[:], Issuer: e.alice.Issuer, Subject: "alice",
		Username: "al", Email: "alice@example.test", Groups: groups, Credentials: store.KeyCredentials{RunAs: "alice"}, Profiles: profiles,
		CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(ttl),
	}, 0))
}

func TestAPIKeyAuthenticates(t *testing.T) {
	t.Parallel()
	e := newKeyEnv(t)
	secret := e.key("k1", time.Hour, []string{"dev", "admins"}, []string{"default"})

	p, err := e.a.Authenticate(context.Background(), secret)
	require.NoError(t, err)
	require.Equal(t, e.alice.ID, p.ID)
	require.Equal(t, "https://issuer.keys.test", p.Issuer)
	require.Equal(t, "alice", p.Subject)
	require.Equal(t, "al", p.Username)
	require.Equal(t, "alice@example.test", p.Email)
	require.Equal(t, []string{"dev", "admins"}, p.Groups)
	require.Equal(t, "alice", p.Credentials.RunAs)
	require.True(t, p.Admin, "admin status follows the key's groups")
	require.Equal(t, "k1", p.APIKeyID)
	require.Equal(t, []string{"default"}, p.KeyProfiles)
	require.Empty(t, p.Token, "a key is never handed on as a token")

	plain := e.key("k2", time.Hour, nil, nil)
	p, err = e.a.AuthenticateAPIKey(context.Background(), plain)
	require.NoError(t, err)
	require.False(t, p.Admin)
	require.Nil(t, p.KeyProfiles, "no restriction")
	require.Empty(t, p.Groups)
}

func TestAPIKeyRefused(t *testing.T) {
	t.Parallel()
	e := newKeyEnv(t)
	ctx := context.Background()
	refused := func(secret, reason string, fragments ...string) {
		t.Helper()
		_, err := e.a.Authenticate(ctx, secret)
		ae := requireAuthError(t, err, "invalid_token", fragments...)
		require.Equal(t, reason, ae.Reason)
	}

	good := e.key("k1", time.Hour, nil, nil)
	before := e.reads.Load()
	refused(good[:len(good)-1]+"x", auth.ReasonMalformed, "malformed API key", "checksum")
	refused("sgk_short", auth.ReasonMalformed, "malformed API key", "53 characters")
	require.Equal(t, before, e.reads.Load(), "a malformed key costs no read")

	unknown := apikey.New()
	refused(unknown.Secret, auth.ReasonUnknownKey, "unknown API key "+unknown.Display)

	revoked := e.key("k2", time.Hour, nil, nil)
	_, err := e.st.RevokeAPIKey(ctx, "k2", e.alice.ID, testNow.Add(time.Minute))
	require.NoError(t, err)
	refused(revoked, auth.ReasonRevoked, "was revoked at 2030-03-01T12:01:00Z", "create a new one")

	expired := e.key("k3", time.Minute, nil, nil)
	e.clock.advance(time.Minute)
	refused(expired, auth.ReasonExpired, "expired at 2030-03-01T12:01:00Z", "create a new one")
	for _, ae := range []string{revoked, expired, unknown.Secret} {
		_, err := e.a.Authenticate(ctx, ae)
		require.NotContains(t, err.Error(), "k2", "no key id is named")
		require.NotContains(t, err.Error(), "k3", "no key id is named")
	}

	none := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{{URL: "https://issuer.keys.test", Audiences: []string{testAudience}}}})
	_, err = none.Authenticate(ctx, good)
	ae := requireAuthError(t, err, "invalid_token", "does not accept API keys")
	require.Equal(t, auth.ReasonUnknownKey, ae.Reason)
}

// TestAPIKeyRecheck: a key is read at most once per auth.KeyRecheck; a revocation is seen by
// the next read, and at once where ForgetAPIKey is called; expiry is judged on every request.
func TestAPIKeyRecheck(t *testing.T) {
	t.Parallel()
	e := newKeyEnv(t)
	ctx := context.Background()
	secret := e.key("k1", time.Hour, nil, nil)

	for range 5 {
		_, err := e.a.Authenticate(ctx, secret)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, e.reads.Load(), "one read within the recheck interval")

	_, err := e.st.RevokeAPIKey(ctx, "k1", e.alice.ID, testNow)
	require.NoError(t, err)
	e.clock.advance(auth.KeyRecheck)
	_, err = e.a.Authenticate(ctx, secret)
	requireAuthError(t, err, "invalid_token", "revoked")
	require.EqualValues(t, 2, e.reads.Load())

	other := e.key("k2", time.Hour, nil, nil)
	_, err = e.a.Authenticate(ctx, other)
	require.NoError(t, err)
	_, err = e.st.RevokeAPIKey(ctx, "k2", e.alice.ID, e.clock.Now())
	require.NoError(t, err)
	e.a.ForgetAPIKey("k2")
	_, err = e.a.Authenticate(ctx, other)
	requireAuthError(t, err, "invalid_token", "revoked")

	short := e.key("k3", time.Hour, nil, nil)
	e.clock.advance(time.Hour - time.Millisecond)
	_, err = e.a.Authenticate(ctx, short)
	require.NoError(t, err)
	reads := e.reads.Load()
	e.clock.advance(time.Millisecond)
	_, err = e.a.Authenticate(ctx, short)
	requireAuthError(t, err, "invalid_token", "expired")
	require.Equal(t, reads, e.reads.Load(), "expiry needs no read")
}

// TestAPIKeyUnknownRemembered: a well-formed secret no key has is read once per
// auth.UnknownKeyRecheck, apart from the keys in use; a key made of it afterwards
// (ForgetUnknownAPIKey, as the domain calls on making one) is accepted at once, also when
// the read that found none was still under way.
func TestAPIKeyUnknownRemembered(t *testing.T) {
	t.Parallel()
	e := newKeyEnv(t)
	ctx := context.Background()
	good := e.key("k1", 2*time.Hour, nil, nil)
	_, err := e.a.Authenticate(ctx, good)
	require.NoError(t, err)

	unknown := apikey.New()
	before := e.reads.Load()
	for range 5 {
		_, err := e.a.Authenticate(ctx, unknown.Secret)
		requireAuthError(t, err, "invalid_token", "unknown API key")
	}
	require.Equal(t, before+1, e.reads.Load(), "one read for the unknown secret within the recheck")
	e.clock.advance(auth.UnknownKeyRecheck - time.Millisecond)
	_, err = e.a.Authenticate(ctx, unknown.Secret)
	requireAuthError(t, err, "invalid_token", "unknown API key")
	require.Equal(t, before+1, e.reads.Load())
	e.clock.advance(time.Millisecond)
	_, err = e.a.Authenticate(ctx, unknown.Secret)
	requireAuthError(t, err, "invalid_token", "unknown API key")
	require.Equal(t, before+2, e.reads.Load(), "read again once the recheck passed")

	// Made now (the secret was tried before, as only a test can): accepted at once.
	e.record("k2", unknown, time.Hour, nil, nil)
	e.a.ForgetUnknownAPIKey(unknown.Hash)
	p, err := e.a.Authenticate(ctx, unknown.Secret)
	require.NoError(t, err)
	require.Equal(t, "k2", p.APIKeyID)

	// Made while a read that found none is under way: that read's answer is not remembered.
	late := apikey.New()
	e.afterRead = func() {
		e.afterRead = nil
		e.record("k3", late, time.Hour, nil, nil)
		e.a.ForgetUnknownAPIKey(late.Hash)
	}
	_, err = e.a.Authenticate(ctx, late.Secret)
	requireAuthError(t, err, "invalid_token", "unknown API key")
	p, err = e.a.Authenticate(ctx, late.Secret)
	require.NoError(t, err, "the unknown read before the key was made is not remembered")
	require.Equal(t, "k3", p.APIKeyID)

	// A key deleted from the store since it was read is unknown at its next read.
	_, err = e.st.Pool().Exec(ctx, "DELETE FROM api_keys WHERE id = 'k1'")
	require.NoError(t, err)
	e.clock.advance(auth.KeyRecheck)
	_, err = e.a.Authenticate(ctx, good)
	requireAuthError(t, err, "invalid_token", "unknown API key")
}

// TestAPIKeyStoreDown: a key that cannot be read is neither accepted nor refused: 503.
func TestAPIKeyStoreDown(t *testing.T) {
	t.Parallel()
	e := newKeyEnv(t)
	secret := e.key("k1", time.Hour, nil, nil)
	e.fail.Store(true)
	_, err := e.a.Authenticate(context.Background(), secret)
	require.ErrorIs(t, err, auth.ErrKeysUnavailable)

	var pr problemRecorder
	next := &nextHandler{}
	h := e.a.Middleware(nil, pr.write)(next)
	req := httptest.NewRequest(http.MethodGet, "/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.False(t, next.called)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "5", rec.Header().Get("Retry-After"))
	call := pr.only(t)
	require.Equal(t, "unavailable", call.kind)
	require.Contains(t, call.detail, "the API key could not be checked")
	require.NotContains(t, call.detail, "connection refused", "the cause is logged, not shown")

	e.fail.Store(false)
	_, err = e.a.Authenticate(context.Background(), secret)
	require.NoError(t, err, "a failed read is not remembered")
}

// TestAPIKeyMiddleware: a key in `Authorization: Bearer` authenticates like a token; the
// handler sees the key's principal, without a Token.
func TestAPIKeyMiddleware(t *testing.T) {
	t.Parallel()
	e := newKeyEnv(t)
	secret := e.key("k1", time.Hour, []string{"dev"}, nil)
	var pr problemRecorder
	next := &nextHandler{}
	h := e.a.Middleware(nil, pr.write)(next)
	req := httptest.NewRequest(http.MethodGet, "/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusNoContent, rec.Code)
	require.True(t, next.ok)
	require.Equal(t, "k1", next.p.APIKeyID)
	require.Equal(t, "alice", next.p.Subject)
	require.Empty(t, next.p.Token)

	revoked := e.key("k2", time.Hour, nil, nil)
	_, err := e.st.RevokeAPIKey(context.Background(), "k2", e.alice.ID, testNow)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+revoked)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Contains(t, rec.Header().Get("WWW-Authenticate"), `error="invalid_token"`)
	require.Contains(t, pr.only(t).detail, "was revoked at")
}
