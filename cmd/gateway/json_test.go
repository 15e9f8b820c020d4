package main

import (
	"encoding/json"
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
