package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/store"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// pgStore opens the database named by the config file at cfgPath (test inspection only).
func pgStore(t *testing.T, cfgPath string) *store.Store {
	t.Helper()
	cfg, err := config.Load(cfgPath, nil)
	require.NoError(t, err)
	st, err := store.Open(t.Context(), cfg.Database.URL, 2)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// `config validate` checks provider types as serve does, before anything connects: a type
// the configuration format knows but no provider of this binary serves is refused.
func TestConfigValidateRefusesAnUnservedProvider(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte("sandbox:\n  type: e2b\n  e2b: {}\n"), 0o600))
	var out bytes.Buffer
	err := run(t.Context(), []string{"config", "validate", "--config", path}, nil, &out, io.Discard)
	require.Error(t, err)
	require.Contains(t, err.Error(), "'e2b'")
	require.Contains(t, err.Error(), "served types: [daytona, docker, ec2_ssm, kubernetes, local_subprocess]")
	require.NotContains(t, out.String(), "valid")

	require.NoError(t, os.WriteFile(path, []byte("sandbox:\n  type: local_subprocess\n  local_subprocess: {}\n"), 0o600))
	require.NoError(t, run(t.Context(), []string{"config", "validate", "--config", path}, nil, &out, io.Discard))
	require.Contains(t, out.String(), "configuration is valid")

	out.Reset()
	require.NoError(t, os.WriteFile(path, []byte("sandbox:\n  profiles:\n    default: {type: daytona, stateful: true, daytona: {target: eu}}\n"), 0o600))
	require.NoError(t, run(t.Context(), []string{"config", "validate", "--config", path}, nil, &out, io.Discard), "daytona is served")
	require.Contains(t, out.String(), "configuration is valid")
}

// gateway token refuses the admin groups unless --allow-admin is given.
func TestTokenRefusesAdminGroupsWithoutAllowAdmin(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := run(t.Context(), []string{"token", "--data-dir", dir, "--sub", "ops", "--groups", "dev,admins"}, nil, &out, io.Discard)
	require.Error(t, err)
	require.Contains(t, err.Error(), "--allow-admin")
	require.NoError(t, run(t.Context(), []string{"token", "--data-dir", dir, "--sub", "ops", "--groups", "dev,admins", "--allow-admin"}, nil, &out, io.Discard))
	require.NotEmpty(t, strings.TrimSpace(out.String()))
}
