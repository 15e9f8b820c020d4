package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// newKey makes an API key as tok with body and returns the answer's JSON (the secret in it).
func (e *testEnv) newKey(tok string, body map[string]any) map[string]any {
	e.t.Helper()
	r := e.do(tok, "POST", "/v1/api-keys", body)
	require.Equal(e.t, 201, r.Status, "body: %s", r.Body)
	return r.JSON(e.t)
}

func keyList(t *testing.T, r reply) []string {
	t.Helper()
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	var ids []string
	for _, k := range r.JSON(t)["api_keys"].([]any) {
		ids = append(ids, k.(map[string]any)["id"].(string))
	}
	return ids
}

// TestAPIKeysOverREST: make, use, list and revoke keys; another principal's key is 404;
// admins see and revoke everyone's.
func TestAPIKeysOverREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, bob, admin := e.token("alice", "dev"), e.token("bob"), e.token("root", "admins")

	r := e.do(alice, "POST", "/v1/api-keys", map[string]any{"name": "ci-deploy", "ttl_s": 3600})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"), "the answer carries a secret")
	k := r.JSON(t)
	id, secret := k["id"].(string), k["secret"].(string)
	require.Equal(t, "/v1/api-keys/"+id, r.Header.Get("Location"))
	require.Regexp(t, `^sgk_[0-9A-Za-z]{49}$`, secret)
	require.Equal(t, secret[:12], k["prefix"])
	require.Equal(t, "active", k["status"])
	require.NotContains(t, k, "profiles", "no restriction")

	// The key authenticates as alice, with the groups her token had.
	me := e.do(secret, "GET", "/v1/me", nil).JSON(t)
	require.Equal(t, "alice", me["subject"])
	require.Equal(t, []any{"dev"}, me["groups"])
	require.Equal(t, map[string]any{"id": id}, me["api_key"])
	require.NotContains(t, e.do(alice, "GET", "/v1/me", nil).JSON(t), "api_key")

	// Listed, never with the secret; by a sign-in and by the key itself.
	list := e.do(alice, "GET", "/v1/api-keys", nil)
	require.Equal(t, []string{id}, keyList(t, list))
	require.NotContains(t, string(list.Body), secret)
	require.NotContains(t, string(list.Body), "secret")
	require.Equal(t, []string{id}, keyList(t, e.do(secret, "GET", "/v1/api-keys", nil)))
	one := e.do(alice, "GET", "/v1/api-keys/"+id, nil).JSON(t)
	require.Equal(t, "ci-deploy", one["name"])
	require.NotEmpty(t, one["last_used_at"], "its use was recorded")

	// Another principal's key does not exist for bob.
	requireProblem(t, e.do(bob, "GET", "/v1/api-keys/"+id, nil), 404, "not-found")
	requireProblem(t, e.do(bob, "DELETE", "/v1/api-keys/"+id, nil), 404, "not-found")
	require.Empty(t, keyList(t, e.do(bob, "GET", "/v1/api-keys", nil)))
	requireProblem(t, e.do(bob, "GET", "/v1/api-keys?all=true", nil), 403, "forbidden")
	bobs := e.newKey(bob, map[string]any{"name": "bob's"})

	// Administrators list everyone's and revoke any.
	require.ElementsMatch(t, []string{id, bobs["id"].(string)}, keyList(t, e.do(admin, "GET", "/v1/api-keys?all=true", nil)))
	rv := e.do(admin, "DELETE", "/v1/api-keys/"+bobs["id"].(string), nil)
	require.Equal(t, 200, rv.Status, "body: %s", rv.Body)
	require.Equal(t, "revoked", rv.JSON(t)["status"])
	p := requireProblem(t, e.do(bobs["secret"].(string), "GET", "/v1/me", nil), 401, "unauthenticated")
	require.Contains(t, p["detail"], "was revoked at")

	// Revoked by its owner: refused at once, with a clear message; still listed.
	rv = e.do(alice, "DELETE", "/v1/api-keys/"+id, nil)
	require.Equal(t, 200, rv.Status, "body: %s", rv.Body)
	require.Equal(t, "revoked", rv.JSON(t)["status"])
	require.NotEmpty(t, rv.JSON(t)["revoked_at"])
	p = requireProblem(t, e.do(secret, "GET", "/v1/me", nil), 401, "unauthenticated")
	require.Contains(t, p["detail"], "API key "+secret[:12]+" was revoked at")
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/api-keys/"+id, nil).Status, "revoking again changes nothing")
	require.Equal(t, []string{id}, keyList(t, e.do(alice, "GET", "/v1/api-keys", nil)))

	// Unknown keys and ids reveal nothing.
	requireProblem(t, e.do(alice, "GET", "/v1/api-keys/0123456789abcdef0123456789abcdef", nil), 404, "not-found")
	p = requireProblem(t, e.do(secret[:len(secret)-2]+"zz", "GET", "/v1/me", nil), 401, "unauthenticated")
	require.Contains(t, p["detail"], "malformed API key")
}

// TestAPIKeyCannotMintKeys: a key may not make keys, nor act on other principals' keys, even
// an administrator's; it may revoke itself.
func TestAPIKeyCannotMintKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	admin := e.token("root", "admins")
	key := e.newKey(admin, map[string]any{"name": "automation"})
	secret := key["secret"].(string)
	bobs := e.newKey(e.token("bob"), map[string]any{"name": "bob's"})

	p := requireProblem(t, e.do(secret, "POST", "/v1/api-keys", map[string]any{"name": "successor"}), 403, "forbidden")
	assert.Contains(t, p["detail"], "an API key cannot create API keys: sign in")
	p = requireProblem(t, e.do(secret, "GET", "/v1/api-keys?all=true", nil), 403, "forbidden")
	assert.Contains(t, p["detail"], "sign in")
	requireProblem(t, e.do(secret, "DELETE", "/v1/api-keys/"+bobs["id"].(string), nil), 403, "forbidden")
	require.Equal(t, 200, e.do(secret, "GET", "/v1/audit", nil).Status, "an admin's key is an admin")

	r := e.do(secret, "DELETE", "/v1/api-keys/"+key["id"].(string), nil)
	require.Equal(t, 200, r.Status, "a key may revoke itself: %s", r.Body)
	requireProblem(t, e.do(secret, "GET", "/v1/me", nil), 401, "unauthenticated")
}

func TestAPIKeyRequestChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{}, "name"},
		{map[string]any{"name": ""}, "name"},
		{map[string]any{"name": "tab\there"}, `API key name "tab\there" contains the control character U+0009`},
		{map[string]any{"name": "k", "ttl_s": 59}, "ttl_s"},
		{map[string]any{"name": "k", "ttl_s": 400 * 24 * 3600}, "between 60 and 31536000 seconds"},
		{map[string]any{"name": "k", "profiles": []string{}}, "profiles"},
		{map[string]any{"name": "k", "secret": "sgk_mine"}, "secret"},
	} {
		p := requireProblem(t, e.do(alice, "POST", "/v1/api-keys", c.body), 400, "validation")
		assert.Contains(t, p["detail"], c.want)
	}
	requireProblem(t, e.do(alice, "POST", "/v1/api-keys", map[string]any{"name": "k", "profiles": []string{"nope"}}), 400, "config")
	p := requireProblem(t, e.do(alice, "POST", "/v1/api-keys", map[string]any{"name": "k", "profiles": []string{"default", "restricted"}}), 403, "forbidden")
	assert.Contains(t, p["detail"], "'restricted'")
	requireProblem(t, e.do(alice, "GET", "/v1/api-keys/not-an-id", nil), 400, "validation")
}

// TestAPIKeyExpires: a key past its expiry is refused, saying when it expired.
func TestAPIKeyExpires(t *testing.T) {
	t.Parallel()
	clock := sandboxtest.NewClock(time.Now())
	e := newEnv(t, envOpts{now: clock.Now})
	alice := e.token("alice")
	key := e.newKey(alice, map[string]any{"name": "short", "ttl_s": 60})
	secret := key["secret"].(string)
	require.Equal(t, 200, e.do(secret, "GET", "/v1/me", nil).Status)

	clock.Advance(time.Minute)
	p := requireProblem(t, e.do(secret, "GET", "/v1/me", nil), 401, "unauthenticated")
	exp, err := time.Parse(time.RFC3339, key["expires_at"].(string))
	require.NoError(t, err)
	assert.Contains(t, p["detail"], "expired at "+exp.UTC().Format(time.RFC3339))
	assert.Equal(t, "expired", e.do(alice, "GET", "/v1/api-keys/"+key["id"].(string), nil).JSON(t)["status"])
}

// TestAPIKeyRevokedOnEveryReplica: two gateways on one database (and one clock). A key the
// second replica has just accepted — and so remembers — is refused there once
// auth.KeyRecheck has passed after its revocation on the first, and at once on the first.
func TestAPIKeyRevokedOnEveryReplica(t *testing.T) {
	t.Parallel()
	clock := sandboxtest.NewClock(time.Now())
	a := newEnv(t, envOpts{now: clock.Now})
	b := newEnv(t, envOpts{now: clock.Now, dbURL: a.dbURL, trust: a.issuer.URL(), workdir: a.workdir})
	alice := a.token("alice")
	key := a.newKey(alice, map[string]any{"name": "everywhere"})
	secret := key["secret"].(string)
	require.Equal(t, 200, b.do(secret, "GET", "/v1/me", nil).Status, "the second replica reads the key")
	require.Equal(t, 200, a.do(secret, "GET", "/v1/me", nil).Status)

	require.Equal(t, 200, a.do(alice, "DELETE", "/v1/api-keys/"+key["id"].(string), nil).Status)
	requireProblem(t, a.do(secret, "GET", "/v1/me", nil), 401, "unauthenticated")

	clock.Advance(auth.KeyRecheck)
	p := requireProblem(t, b.do(secret, "GET", "/v1/me", nil), 401, "unauthenticated")
	assert.Contains(t, p["detail"], "was revoked at")
}

// TestAPIKeyStoresOnlyAHash reads every table a key's life touches: its secret is nowhere.
func TestAPIKeyStoresOnlyAHash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	key := e.newKey(alice, map[string]any{"name": "hashed", "profiles": []string{"default"}})
	secret := key["secret"].(string)
	require.Equal(t, 200, e.do(secret, "POST", "/v1/sessions/default/commands", map[string]any{"command": "echo hi"}).Status)
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/api-keys/"+key["id"].(string), nil).Status)

	ctx := context.Background()
	var hash []byte
	require.NoError(t, e.store.Pool().QueryRow(ctx, `SELECT secret_hash FROM api_keys WHERE id = $1`, key["id"]).Scan(&hash))
	require.Len(t, hash, 32)
	rows, err := e.store.Pool().Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, tables, "api_keys")
	for _, table := range tables {
		var dump string
		require.NoError(t, e.store.Pool().QueryRow(ctx, `SELECT COALESCE(string_agg(row_to_json(t)::text, E'\n'), '') FROM "`+table+`" t`).Scan(&dump))
		require.NotContains(t, dump, secret, "table %s holds the secret", table)
		require.NotContains(t, dump, secret[12:], "table %s holds the secret's undisplayed part", table)
	}
}

// TestAPIKeyProfileRestriction: a key restricted to profiles reaches no other one, nor the
// principal's sessions in it; GET /v1/profiles lists its profiles only.
func TestAPIKeyProfileRestriction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice", "ml")
	other := e.newSession(alice, "restricted")
	key := e.newKey(alice, map[string]any{"name": "ci", "profiles": []string{"default", "oneshot"}})
	require.Equal(t, []any{"default", "oneshot"}, key["profiles"])
	secret := key["secret"].(string)

	var names []string
	for _, p := range e.do(secret, "GET", "/v1/profiles", nil).JSON(t)["profiles"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	require.Equal(t, []string{"default", "oneshot"}, names)
	require.Equal(t, map[string]any{"id": key["id"], "profiles": []any{"default", "oneshot"}}, e.do(secret, "GET", "/v1/me", nil).JSON(t)["api_key"])

	r := e.do(secret, "POST", "/v1/sessions/default/commands", map[string]any{"command": "echo in-default"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "in-default\n", r.JSON(t)["stdout"])
	forbidden := func(r reply) {
		t.Helper()
		p := requireProblem(t, r, 403, "forbidden")
		require.Contains(t, p["detail"], "this API key may use only the profiles ['default', 'oneshot']")
	}
	forbidden(e.do(secret, "POST", "/v1/sessions", map[string]any{"profile": "restricted"}))
	forbidden(e.do(secret, "POST", "/v1/sessions/default/commands?profile=shared", map[string]any{"command": "true"}))
	forbidden(e.do(secret, "GET", "/v1/sessions/"+other, nil))
	forbidden(e.do(secret, "POST", "/v1/sessions/"+other+"/commands", map[string]any{"command": "true"}))
	forbidden(e.do(secret, "PUT", "/v1/sessions/"+other+"/files/a.txt", []byte("x")))
	forbidden(e.do(secret, "DELETE", "/v1/sessions/"+other, nil))
	require.Equal(t, 200, e.do(alice, "GET", "/v1/sessions/"+other, nil).Status, "her sign-in still may")
}

// TestAPIKeyUseAudited: what a key's requests do is audited with its id, and so are the
// key's creation and revocation.
func TestAPIKeyUseAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, admin := e.token("alice"), e.token("root", "admins")
	key := e.newKey(alice, map[string]any{"name": "audited"})
	id, secret := key["id"].(string), key["secret"].(string)
	sid := e.newSession(secret, "default")
	require.Equal(t, 200, e.do(secret, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo audited"}).Status)
	require.Equal(t, 200, e.do(secret, "PUT", "/v1/sessions/"+sid+"/files/f.txt", []byte("x")).Status)
	require.Equal(t, 200, e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo signed-in"}).Status)
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/api-keys/"+id, nil).Status)

	events := e.do(admin, "GET", "/v1/audit?api_key_id="+id, nil).JSON(t)["events"].([]any)
	var kinds []string
	for _, ev := range events {
		m := ev.(map[string]any)
		require.Equal(t, id, m["api_key_id"])
		kinds = append(kinds, m["kind"].(string))
	}
	require.Equal(t, []string{"file_write", "execution", "session_create"}, kinds, "the key's requests, newest first")

	all := e.do(admin, "GET", "/v1/audit?principal="+sandboxIssuer(e)+"%23alice", nil).JSON(t)["events"].([]any)
	var seen []string
	for _, ev := range all {
		m := ev.(map[string]any)
		entry := m["kind"].(string)
		if m["target"] == id {
			entry += " " + id
		}
		if k, ok := m["api_key_id"]; ok {
			entry += " with " + k.(string)
		}
		seen = append(seen, entry)
	}
	require.Equal(t, []string{
		"api_key_revoke " + id,
		"execution",
		"file_write with " + id,
		"execution with " + id,
		"session_create with " + id,
		"api_key_create " + id,
	}, seen)
}

// sandboxIssuer is the development issuer's URL, query-escaped enough for a principal label.
func sandboxIssuer(e *testEnv) string {
	return strings.NewReplacer(":", "%3A", "/", "%2F").Replace(e.issuer.URL())
}
