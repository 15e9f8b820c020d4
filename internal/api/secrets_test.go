package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/store"
)

// lockedBuffer is a log sink the gateway's goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func secretsKey(t *testing.T) string {
	t.Helper()
	var k [32]byte
	_, _ = rand.Read(k[:])
	return "k1:" + base64.StdEncoding.EncodeToString(k[:])
}

// TestSecretsAPI: /v1/secrets is write-only — created (201) and replaced (200), listed by
// name and hosts, deleted — with problems for bad input, another principal's secret a 404,
// and the value in no answer, audit row or log line. A session binds secrets by name (an
// unknown one is a 404 naming it) and shows their names; a local sandbox refuses them.
func TestSecretsAPI(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	const value = "sk-live-NEVER-SHOWN-0123456789"
	const opValue = "op-token-NEVER-SHOWN-42"
	e := newEnv(t, envOpts{
		logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		getenv: func(k string) string {
			if k == "TEST_PYPI_TOKEN" {
				return opValue
			}
			return ""
		},
		config: func(c *config.Config) {
			c.Secrets.Keys = []string{secretsKey(t)}
			workdir := t.TempDir()
			c.Sandbox.Profiles["ops"] = config.Profile{Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: workdir}},
				Secrets: []config.ProfileSecret{{Name: "pypi", Hosts: []string{"upload.pypi.org"}, ValueEnv: "TEST_PYPI_TOKEN"}}}
		},
	})
	alice, bob := e.token("alice"), e.token("bob")

	r := e.do(alice, "PUT", "/v1/secrets/openai", map[string]any{"value": value, "hosts": []string{"api.openai.com"}})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	require.Equal(t, "/v1/secrets/openai", r.Header.Get("Location"))
	got := r.JSON(t)
	require.Equal(t, "openai", got["name"])
	require.Equal(t, "SANDGATE_SECRET_OPENAI", got["env_name"])
	require.NotContains(t, string(r.Body), value)

	r = e.do(alice, "PUT", "/v1/secrets/openai", map[string]any{"value": value + "2", "hosts": []string{"*.openai.com", "api.openai.com"}})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, []any{"*.openai.com", "api.openai.com"}, r.JSON(t)["hosts"])

	r = e.do(alice, "GET", "/v1/secrets", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Len(t, r.JSON(t)["secrets"], 1)
	require.NotContains(t, string(r.Body), value)
	r = e.do(bob, "GET", "/v1/secrets", nil)
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.JSON(t)["secrets"])

	requireProblem(t, e.do(alice, "PUT", "/v1/secrets/Bad", map[string]any{"value": "v", "hosts": []string{"a.example.com"}}), 400, "validation")
	requireProblem(t, e.do(alice, "PUT", "/v1/secrets/nohosts", map[string]any{"value": "v", "hosts": []string{}}), 400, "validation")
	requireProblem(t, e.do(alice, "PUT", "/v1/secrets/nohosts", map[string]any{"value": "v"}), 400, "validation")
	p := requireProblem(t, e.do(alice, "PUT", "/v1/secrets/badhost", map[string]any{"value": "v", "hosts": []string{"https://a.example.com/x"}}), 400, "validation")
	require.Contains(t, p["detail"], "https://a.example.com/x")
	requireProblem(t, e.do(alice, "PUT", "/v1/secrets/big", map[string]any{"value": strings.Repeat("x", 16385), "hosts": []string{"a.example.com"}}), 400, "validation")
	requireProblem(t, e.do(alice, "PUT", "/v1/secrets/empty", map[string]any{"value": "", "hosts": []string{"a.example.com"}}), 400, "validation")
	requireProblem(t, e.do(bob, "DELETE", "/v1/secrets/openai", nil), 404, "not-found")

	// A session binds it by name; the names show, never the value or the placeholder.
	r = e.do(alice, "POST", "/v1/sessions", map[string]any{"secrets": []string{"openai"}})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	sess := r.JSON(t)
	require.Equal(t, []any{"openai"}, sess["secrets"])
	require.NotContains(t, string(r.Body), "sgs_")
	sid := sess["id"].(string)
	r = e.do(alice, "GET", "/v1/sessions/"+sid, nil)
	require.Equal(t, []any{"openai"}, r.JSON(t)["secrets"])
	// local_subprocess has no egress proxy: its sandbox refuses the secrets (fail closed).
	p = requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "env"}), 403, "policy")
	require.Contains(t, p["detail"], "openai")

	p = requireProblem(t, e.do(bob, "POST", "/v1/sessions", map[string]any{"secrets": []string{"openai"}}), 404, "not-found")
	require.Contains(t, p["detail"], "'openai'")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"secrets": []string{"Openai"}}), 400, "validation")

	// The profile's own secret: every session of it has it, named.
	r = e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "ops"})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	require.Equal(t, []any{"pypi"}, r.JSON(t)["secrets"])
	requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+r.JSON(t)["id"].(string)+"/commands", map[string]any{"command": "env"}), 403, "policy")

	r = e.do(alice, "DELETE", "/v1/secrets/openai", nil)
	require.Equal(t, 204, r.Status, "body: %s", r.Body)
	requireProblem(t, e.do(alice, "DELETE", "/v1/secrets/openai", nil), 404, "not-found")

	events, err := e.store.ListAudit(context.Background(), store.AuditFilter{Limit: 500})
	require.NoError(t, err)
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, ev.Kind+":"+ev.Target)
		for _, f := range []string{ev.Target, ev.Excerpt, ev.Digest, ev.ErrorType} {
			require.NotContains(t, f, "NEVER-SHOWN")
		}
	}
	require.Contains(t, kinds, "secret_set:openai")
	require.Contains(t, kinds, "secret_delete:openai")
	var sealed []byte
	require.NoError(t, e.store.Pool().QueryRow(context.Background(), `SELECT COALESCE(string_agg(sealed, ''), '') FROM secrets`).Scan(&sealed))
	require.False(t, bytes.Contains(sealed, []byte("NEVER-SHOWN")), "sealed at rest")
	require.NotContains(t, logs.String(), "NEVER-SHOWN", "no log line carries a value")
	r = e.do(alice, "GET", "/v1/audit", nil)
	require.NotContains(t, string(r.Body), "NEVER-SHOWN")
}

// Without secrets.keys the gateway serves, and secrets are refused naming the setting.
func TestSecretsWithoutKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice := e.token("alice")
	p := requireProblem(t, e.do(alice, "PUT", "/v1/secrets/openai", map[string]any{"value": "v", "hosts": []string{"api.openai.com"}}), 400, "config")
	require.Contains(t, p["detail"], "secrets.keys")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"secrets": []string{"openai"}}), 400, "config")
	r := e.do(alice, "GET", "/v1/secrets", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
}
