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

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// pgStore opens the database named by the config file at cfgPath (test inspection only).
func pgStore(t *testing.T, cfgPath string) *postgres.Store {
	t.Helper()
	cfg, err := config.Load(cfgPath, nil)
	require.NoError(t, err)
	st, err := postgres.Open(t.Context(), cfg.Database.URL, 2)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// `config validate` checks provider types as serve does, before anything connects: a type
// whose block the registry accepts but no provider of this binary serves (bedrock_agentcore),
// or one it does not know, is refused, naming the served types.
func TestConfigValidateRefusesAnUnservedProvider(t *testing.T) {
	reg := gateway.Builtin()
	served := reg.Types()
	var unserved []string
	for _, b := range reg.Backends() {
		if !b.Served() {
			unserved = append(unserved, b.Type)
		}
	}
	require.Contains(t, unserved, "bedrock_agentcore")
	path := filepath.Join(t.TempDir(), "sandgate.yaml")
	var out bytes.Buffer
	for _, file := range []string{
		"sandbox:\n  type: " + unserved[0] + "\n  " + unserved[0] + ": {}\n",
		"sandbox:\n  type: firecracker\n",
	} {
		require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
		err := run(t.Context(), []string{"config", "validate", "--config", path}, nil, &out, io.Discard)
		require.Error(t, err, file)
		require.Contains(t, err.Error(), "sandbox.type: ")
		require.Contains(t, err.Error(), strings.Join(served, ", "))
		require.NotContains(t, out.String(), "valid")
	}
	cfg := &config.Config{}
	cfg.Sandbox.Profiles = map[string]config.Profile{}
	for _, typ := range served {
		cfg.Sandbox.Profiles[typ] = config.Profile{Type: typ}
	}
	require.NoError(t, gateway.CheckProviders(cfg, reg))
	cfg.Sandbox.Profiles["cloud"] = config.Profile{Type: "bedrock_agentcore"}
	require.ErrorContains(t, gateway.CheckProviders(cfg, reg), "served types: ["+strings.Join(reg.Names(), ", ")+"]")
	require.Contains(t, served, "e2b", "e2b is served")
	require.NoError(t, os.WriteFile(path, []byte("sandbox:\n  default_profile: cloud\n  profiles:\n    cloud:\n      type: e2b\n      stateful: true\n      e2b: {template: code-interpreter-v1}\n"), 0o600))
	require.NoError(t, run(t.Context(), []string{"config", "validate", "--config", path}, nil, &out, io.Discard))
	require.Contains(t, out.String(), "configuration is valid")

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
	// The data folder of a dev gateway that is not running (pid 0): its key and its record.
	_, err := devissuer.Open("http://127.0.0.1:1/dev/oidc", filepath.Join(dir, devKeyFile))
	require.NoError(t, err)
	rec, err := json.Marshal(devState{DataDir: dir, PublicURL: "http://127.0.0.1:1", Issuer: "http://127.0.0.1:1/dev/oidc", AdminGroups: []string{"admins"}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, devStateFile), rec, 0o600))
	var out bytes.Buffer
	err = run(t.Context(), []string{"token", "--data-dir", dir, "--sub", "ops", "--groups", "dev,admins"}, nil, &out, io.Discard)
	require.Error(t, err)
	require.Contains(t, err.Error(), "--allow-admin")
	require.NoError(t, run(t.Context(), []string{"token", "--data-dir", dir, "--sub", "ops", "--groups", "dev,admins", "--allow-admin"}, nil, &out, io.Discard))
	require.NotEmpty(t, strings.TrimSpace(out.String()))
}
