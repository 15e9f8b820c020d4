package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedacted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, want string
	}{
		{"url password", "postgres://sandgate:s3cret@db.internal:5432/sandgate?sslmode=require",
			"postgres://sandgate:REDACTED@db.internal:5432/sandgate?sslmode=require"},
		{"url without password", "postgres://sandgate@db/sandgate", "postgres://sandgate@db/sandgate"},
		{"password in query", "postgresql://db/sandgate?user=u&password=s3cret",
			"postgresql://db/sandgate?password=REDACTED&user=u"},
		{"key/value", "host=db dbname=sandgate user=u password=s3cret sslmode=disable",
			"host=db dbname=sandgate user=u password=REDACTED sslmode=disable"},
		{"key/value quoted", "host=db password='a b\\' c' dbname=x", "host=db password=REDACTED dbname=x"},
		{"unparsable url", "postgres://u:p@[::1", "REDACTED"},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &Config{Database: Database{URL: tc.url}}
			require.Equal(t, tc.want, c.Redacted().Database.URL)
			require.Equal(t, tc.url, c.Database.URL, "the original is untouched")
		})
	}

	t.Run("secret-tagged fields", func(t *testing.T) {
		t.Parallel()
		c := &Config{Sandbox: Sandbox{Profiles: map[string]Profile{"p": {
			Type: ProviderKubernetes,
			ProviderBlocks: ProviderBlocks{
				Kubernetes: &Kubernetes{Env: map[string]string{"TOKEN": "abc"}, Labels: map[string]string{"app": "x"}},
				Daytona:    &Daytona{EnvVars: map[string]string{"KEY": "v"}, APIKeyEnv: "DAYTONA_API_KEY"},
				E2B:        &E2B{EnvVars: map[string]string{"SECRET": "s"}, APIKeyEnv: "E2B_API_KEY"},
			},
		}}}}
		r := c.Redacted()
		p := r.Sandbox.Profiles["p"]
		require.Equal(t, map[string]string{"TOKEN": "REDACTED"}, p.Kubernetes.Env)
		require.Equal(t, map[string]string{"app": "x"}, p.Kubernetes.Labels)
		require.Equal(t, map[string]string{"KEY": "REDACTED"}, p.Daytona.EnvVars)
		require.Equal(t, "DAYTONA_API_KEY", p.Daytona.APIKeyEnv, "names of variables are not secret")
		require.Equal(t, map[string]string{"SECRET": "REDACTED"}, p.E2B.EnvVars)
		require.Equal(t, "E2B_API_KEY", p.E2B.APIKeyEnv)
		require.Equal(t, "abc", c.Sandbox.Profiles["p"].Kubernetes.Env["TOKEN"], "the original is untouched")
	})
}

func TestYAMLRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("..", "..", "sandgate.example.yaml"), nil)
	require.NoError(t, err)
	out, err := c.YAML()
	require.NoError(t, err)
	again, err := Load(writeConfig(t, string(out)), nil)
	require.NoError(t, err, "rendered:\n%s", out)
	require.Equal(t, c, again)

	text := string(out)
	require.True(t, strings.HasPrefix(text, "server:\n  addr: :8080\n"), text)
	require.Contains(t, text, "clock_skew: 30s\n")
	require.Contains(t, text, "read_timeout: 15m\n")
	require.Contains(t, text, "expression: claims.email_verified == true\n")
}

func TestYAMLRedactedPrint(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, localProfileYAML+"database:\n  url: postgres://u:hunter2@db/sandgate\n")
	out, err := c.Redacted().YAML()
	require.NoError(t, err)
	require.Contains(t, string(out), "url: postgres://u:REDACTED@db/sandgate")
	require.NotContains(t, string(out), "hunter2")
	require.Contains(t, string(out), "local_subprocess:\n")
}
