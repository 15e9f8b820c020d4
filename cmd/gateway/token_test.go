package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
)

// TestVersionIsStamped: the version given at build time (-ldflags -X main.version) is what
// `gateway version` prints.
func TestVersionIsStamped(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(gatewayBin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "sandgate gateway "+testVersion+"\n", string(out))
}

// gatewayToken runs `gateway token args…` in folder dir with cache as XDG_CACHE_HOME (where
// dev gateways record themselves) and no configuration from the environment.
func gatewayToken(t *testing.T, dir, cache string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(gatewayBin, append([]string{"token"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CACHE_HOME=" + cache}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// TestDevTokenFromAnyFolder: `gateway token` run outside the dev gateway's folder finds the
// running gateway (its key and public URL) and mints a token it accepts; where nothing can
// be found it says what is missing and creates no key; a folder whose key is not the
// running gateway's is refused. The banner names the folder given with --data-dir, and
// /healthz the stamped version.
func TestDevTokenFromAnyFolder(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	dir := dataDir(t)
	g := startDev(t, dir, freeAddr(t))
	state := filepath.Join(dir, "state")
	cache := filepath.Join(dir, "cache")

	assert.Contains(t, g.banner, "data folder: "+state+" (")
	assert.Contains(t, g.banner, "gateway token --data-dir "+state)
	assert.Contains(t, g.banner, "a local Postgres under "+filepath.Join(state, "pg"))
	assert.NotContains(t, g.banner, ".sandgate/dev")

	c := &client{t: t, base: g.base, token: g.token}
	health := c.json("GET", "/healthz", "", 200)
	assert.Equal(t, testVersion, health["version"])

	elsewhere := t.TempDir()
	// Found through the record the dev gateway left in the user's cache folder.
	tok, stderr, err := gatewayToken(t, elsewhere, cache, "--sub", "alice", "--groups", "dev,ml")
	require.NoError(t, err, stderr)
	require.Empty(t, stderr)
	c.token = strings.TrimSpace(tok)
	me := c.json("GET", "/v1/me", "", 200)
	assert.Equal(t, "alice", me["subject"])
	assert.Equal(t, g.base+"/dev/oidc", me["issuer"])
	// And through --data-dir, with no record at all.
	tok, stderr, err = gatewayToken(t, elsewhere, t.TempDir(), "--data-dir", state, "--sub", "bob")
	require.NoError(t, err, stderr)
	c.token = strings.TrimSpace(tok)
	assert.Equal(t, "bob", c.json("GET", "/v1/me", "", 200)["subject"])
	// A stale dev folder in the working folder (a key, no running gateway) loses to the
	// running gateway, and it says so.
	stale := t.TempDir()
	_, err = devissuer.Open("http://127.0.0.1:1/dev/oidc", filepath.Join(stale, defaultDataDir, devKeyFile))
	require.NoError(t, err)
	tok, stderr, err = gatewayToken(t, stale, cache, "--sub", "carol")
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "belongs to no running gateway")
	c.token = strings.TrimSpace(tok)
	assert.Equal(t, "carol", c.json("GET", "/v1/me", "", 200)["subject"])
	// The admin groups are the running gateway's.
	_, stderr, err = gatewayToken(t, elsewhere, cache, "--groups", "admins")
	require.Error(t, err)
	assert.Contains(t, stderr, "administrator group")

	// Nothing to find: it says where it looked and what to pass, and makes no key.
	empty := t.TempDir()
	_, stderr, err = gatewayToken(t, empty, filepath.Join(empty, "no-cache"), "--sub", "alice")
	require.Error(t, err)
	assert.Contains(t, stderr, "no development gateway found")
	assert.Contains(t, stderr, "--data-dir")
	_, stderr, err = gatewayToken(t, empty, cache, "--data-dir", filepath.Join(empty, "nothing"))
	require.Error(t, err)
	assert.Contains(t, stderr, filepath.Join(empty, "nothing")+" holds no development issuer key")
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries, "no key, no folder was created")

	// Another folder's key, recorded as serving at the running gateway's URL: the gateway
	// would refuse its tokens, so none is minted.
	other := filepath.Join(t.TempDir(), "other")
	iss, err := devissuer.Open(g.base+"/dev/oidc", filepath.Join(other, devKeyFile))
	require.NoError(t, err)
	rec, err := json.Marshal(devState{DataDir: other, PublicURL: g.base, Issuer: iss.URL(), PID: os.Getpid(), StartedAt: time.Now()})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(other, devStateFile), rec, 0o600))
	_, stderr, err = gatewayToken(t, elsewhere, cache, "--data-dir", other)
	require.Error(t, err)
	assert.Contains(t, stderr, "signs with another key")
}
