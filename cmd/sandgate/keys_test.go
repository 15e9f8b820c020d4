package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeys: a signed-in user makes a key (only the secret on stdout), the CLI works with
// SANDGATE_API_KEY alone as that user, within the key's profiles, and cannot make keys with
// it; keys are listed without secrets and revoked by id, after which the key is refused.
func TestKeys(t *testing.T) {
	gw := startGateway(t)
	alice := newCLI(t, gw, gw.Token("alice", "dev"))

	r := alice.run(nil, "keys", "create", "ci-deploy", "--ttl", "2d", "--profile", "default")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	secret := strings.TrimSpace(r.stdout)
	require.Regexp(t, `^sgk_[0-9A-Za-z]{49}$`, secret, "stdout is the secret alone")
	assert.Contains(t, r.stderr, "store the secret now: it is not shown again")
	assert.Contains(t, r.stderr, "only default")
	id := regexp.MustCompile(`API key ([0-9a-f]{32}) `).FindStringSubmatch(r.stderr)
	require.NotNil(t, id, "stderr names the key's id: %s", r.stderr)
	keyID := id[1]

	var keys []struct {
		ID        string    `json:"id"`
		Name      string    `json:"name"`
		Prefix    string    `json:"prefix"`
		Status    string    `json:"status"`
		Profiles  []string  `json:"profiles"`
		CreatedAt time.Time `json:"created_at"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	alice.okJSON(&keys, "keys", "ls")
	require.Len(t, keys, 1)
	assert.Equal(t, keyID, keys[0].ID)
	assert.Equal(t, secret[:12], keys[0].Prefix)
	assert.Equal(t, []string{"default"}, keys[0].Profiles)
	assert.Equal(t, 48*time.Hour, keys[0].ExpiresAt.Sub(keys[0].CreatedAt), "--ttl 2d")
	table := alice.ok(nil, "keys", "ls")
	assert.Regexp(t, `(?m)^`+keyID+`\s+ci-deploy\s+`+secret[:12]+`\s+active\s+default\s+.*\snever\s`, table)
	assert.NotContains(t, table, secret)

	// The key alone is the credential: no token, no sign-in.
	ci := newCLI(t, gw, "")
	ci.env["SANDGATE_API_KEY"] = secret
	who := ci.ok(nil, "whoami")
	assert.Regexp(t, `(?m)^alice\s`, who)
	assert.Contains(t, who, "with API key "+keyID+", restricted to the profiles default")
	sid := ci.session()
	assert.Equal(t, "via-key\n", ci.ok(nil, "exec", sid, "--", "echo", "via-key"))
	r = ci.run(nil, "run", "--profile", "oneshot", "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "403 forbidden: this API key may use only the profiles ['default'], not 'oneshot'")
	r = ci.run(nil, "keys", "create", "successor")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "403 forbidden: an API key cannot create API keys")

	// Another user does not see it, and cannot revoke it.
	bob := newCLI(t, gw, gw.Token("bob"))
	assert.NotContains(t, bob.ok(nil, "keys", "ls"), keyID)
	r = bob.run(nil, "keys", "revoke", keyID)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "404 not-found: unknown API key '"+keyID+"'")
	admin := newCLI(t, gw, gw.Token("root", "admins"))
	assert.Regexp(t, `(?m)^`+keyID+`\s.*#alice$`, admin.ok(nil, "keys", "ls", "--all"), "admins see everyone's, with its principal")

	// Revoked by id (a secret is not an id), then refused.
	r = alice.run(nil, "keys", "revoke", secret)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "is a key's secret; revoke takes its id")
	assert.Equal(t, keyID+"\n", alice.ok(nil, "keys", "revoke", keyID))
	r = ci.run(nil, "whoami")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "401 unauthenticated: API key "+secret[:12]+" was revoked at")
	alice.okJSON(&keys, "keys", "ls")
	assert.Equal(t, "revoked", keys[0].Status)

	// Two credentials in the environment are ambiguous; --token says which.
	fresh := alice.ok(nil, "keys", "create", "second")
	both := newCLI(t, gw, gw.Token("alice"))
	both.env["SANDGATE_API_KEY"] = strings.TrimSpace(fresh)
	r = both.run(nil, "whoami")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "both SANDGATE_TOKEN and SANDGATE_API_KEY are set")
	assert.NotContains(t, both.ok(nil, "whoami", "--token", gw.Token("carol")), "with API key", "--token wins")
	assert.Regexp(t, `(?m)^carol\s`, both.ok(nil, "whoami", "--token", gw.Token("carol")))

	// A token in SANDGATE_API_KEY, or a bad --ttl, says what to do instead.
	ci.env["SANDGATE_API_KEY"] = gw.Token("alice")
	r = ci.run(nil, "whoami")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "SANDGATE_API_KEY is not an API key")
	r = alice.run(nil, "keys", "create", "x", "--ttl", "soon")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `--ttl "soon": a duration such as 12h or 90m, or whole days such as 90d`)
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]int{"90d": 90 * 86400, "12h": 12 * 3600, "90m": 5400, "1h30m": 5400} {
		got, err := parseTTL(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0d", "-1d", "1.5d", "d", "0s", "-5m", "500ms", "forever"} {
		_, err := parseTTL(in)
		assert.Error(t, err, in)
	}
}

// TestReadmeKeysCLI runs the README's API key CLI block verbatim, signed in with
// a cached sign-in, with this binary on PATH.
func TestReadmeKeysCLI(t *testing.T) {
	gw := startGateway(t)
	// Signed in as after `sandgate login` (a cached token): with SANDGATE_TOKEN set too, the
	// block's SANDGATE_API_KEY=… would be refused as ambiguous.
	c := newCLI(t, gw, "")
	dir := filepath.Join(c.env["XDG_CONFIG_HOME"], "sandgate")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	writeCache(t, filepath.Join(dir, credentialsFile), &store{Current: gw.URL, Servers: map[string]*signIn{
		gw.URL: {Bearer: gw.Token("dev", "dev"), Expiry: time.Now().Add(time.Hour)},
	}})
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- keys-cli:start -->\\s*```sh\n(.*?)```\\s*<!-- keys-cli:end -->").FindSubmatch(readme)
	require.NotNil(t, m, "README has no API keys CLI block")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", string(m[1]))
	cmd.Dir = c.dir
	for k, v := range c.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the README's API keys CLI block failed:\n%s", out)
	require.Regexp(t, `(?m)^dev\s.*\n\(with API key [0-9a-f]{32}, restricted to the profiles default`, string(out))
	require.Regexp(t, `(?m)^[0-9a-f]{32}\s+ci-deploy\s+sgk_\w{8}\s+active\s+default\s`, string(out))
	require.Regexp(t, `(?m)^[0-9a-f]{32}\n\z`, string(out), "revoke prints the key's id")
	var keys []struct {
		Status string `json:"status"`
	}
	c.okJSON(&keys, "keys", "ls")
	require.Len(t, keys, 1)
	require.Equal(t, "revoked", keys[0].Status)
}
