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
			Type: boxType,
			Blocks: Blocks{
				boxType: &boxBlock{Image: "alpine:3", Env: map[string]string{"TOKEN": "abc"}, Tags: []string{"x"}},
			},
		}}}}
		r := c.Redacted()
		b := r.Sandbox.Profiles["p"].Blocks[boxType].(*boxBlock)
		require.Equal(t, map[string]string{"TOKEN": "REDACTED"}, b.Env, "a decoded block: by its type's secret tags")
		require.Equal(t, "alpine:3", b.Image)
		require.Equal(t, []string{"x"}, b.Tags)
		require.Equal(t, "abc", c.Sandbox.Profiles["p"].Blocks[boxType].(*boxBlock).Env["TOKEN"], "the original is untouched")
	})

	t.Run("raw blocks", func(t *testing.T) {
		t.Parallel()
		raw := map[string]any{"image": "alpine:3", "env": map[string]any{"TOKEN": "abc"}, "tags": []any{"x"}, "none": nil}
		c := &Config{Sandbox: Sandbox{
			Blocks:   Blocks{"docker": raw, "local_subprocess": nil},
			Profiles: map[string]Profile{"p": {Type: "docker", Blocks: Blocks{"docker": raw}}},
		}}
		r := c.Redacted()
		want := map[string]any{"image": "REDACTED", "env": map[string]any{"TOKEN": "REDACTED"}, "tags": []any{"REDACTED"}, "none": nil}
		require.Equal(t, want, r.Sandbox.Blocks["docker"], "a block no backend decoded: every value, its secrets unknown")
		require.Equal(t, want, r.Sandbox.Profiles["p"].Blocks["docker"])
		require.Nil(t, r.Sandbox.Blocks["local_subprocess"])
		require.Equal(t, "abc", raw["env"].(map[string]any)["TOKEN"], "the original is untouched")
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
	c := loadBoxes(t, localProfileYAML+"      box:\ndatabase:\n  url: postgres://u:hunter2@db/sandgate\n")
	out, err := c.Redacted().YAML()
	require.NoError(t, err)
	require.Contains(t, string(out), "url: postgres://u:REDACTED@db/sandgate")
	require.NotContains(t, string(out), "hunter2")
	require.Contains(t, string(out), "      box:\n        image: busybox\n", "a block with its defaults, after the profile's keys")

}
