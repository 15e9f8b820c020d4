package main

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// TestSecrets: secrets set from standard input or a file (never argv), listed without values,
// bound to a session by --secret (its names shown), and removed.
func TestSecrets(t *testing.T) {
	var k [32]byte
	_, _ = rand.Read(k[:])
	workdir := t.TempDir()
	gw := gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, Config: func(c *config.Config) {
		c.Secrets.Keys = []string{"k1:" + base64.StdEncoding.EncodeToString(k[:])}
		c.Sandbox.Profiles = map[string]config.Profile{"default": {Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}}}
	}})
	alice := newCLI(t, gw, gw.Token("alice"))

	const value = "sk-cli-NEVER-SHOWN"
	assert.Equal(t, "openai\n", alice.ok(strings.NewReader(value+"\n"), "secrets", "set", "openai", "--host", "api.openai.com"))
	file := filepath.Join(t.TempDir(), "gh")
	require.NoError(t, os.WriteFile(file, []byte("ghp_NEVER-SHOWN\n"), 0o600))
	alice.ok(nil, "secrets", "set", "github", "--host", "api.github.com", "--host", "*.github.com", "--from-file", file)

	table := alice.ok(nil, "secrets", "ls")
	assert.Regexp(t, `(?m)^openai\s+api\.openai\.com\s+SANDGATE_SECRET_OPENAI`, table)
	assert.Regexp(t, `(?m)^github\s+\*\.github\.com,api\.github\.com`, table)
	assert.NotContains(t, table, "NEVER-SHOWN")
	assert.NotContains(t, alice.ok(nil, "secrets", "ls", "-o", "json"), "NEVER-SHOWN")

	r := alice.run(strings.NewReader("v"), "secrets", "set", "nohost")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "--host")
	r = alice.run(strings.NewReader(""), "secrets", "set", "empty", "--host", "a.example.com")
	assert.NotEqual(t, 0, r.code)

	var sess struct {
		ID      string   `json:"id"`
		Secrets []string `json:"secrets"`
	}
	alice.okJSON(&sess, "sessions", "new", "--secret", "openai", "--secret", "github")
	require.NotEmpty(t, sess.ID)
	assert.Equal(t, []string{"github", "openai"}, sess.Secrets)
	r = alice.run(nil, "sessions", "new", "--secret", "nosuch")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "nosuch")

	assert.Equal(t, "openai\n", alice.ok(nil, "secrets", "rm", "openai"))
	r = alice.run(nil, "secrets", "rm", "openai")
	assert.NotEqual(t, 0, r.code)
	assert.NotContains(t, alice.ok(nil, "secrets", "ls"), "openai")
}
