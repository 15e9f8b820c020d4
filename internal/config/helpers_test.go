package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeConfig writes content to a fresh sandgate.yaml and returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// loadYAML loads content (plus environ) and requires success.
func loadYAML(t *testing.T, content string, environ ...string) *Config {
	t.Helper()
	cfg, err := Load(writeConfig(t, content), environ)
	require.NoError(t, err)
	return cfg
}

// fieldErrors flattens the joined errors Load and Validate return.
func fieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if e := errors.Unwrap(err); e != nil {
			walk(e)
		}
	}
	walk(err)
	return out
}

// requireProblem asserts that err reports key with a message containing every word.
func requireProblem(t *testing.T, err error, key string, words ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalid)
	var keys []string
	for _, fe := range fieldErrors(err) {
		if fe.Key != key {
			keys = append(keys, fe.Key)
			continue
		}
		for _, w := range words {
			require.Contains(t, fe.Msg, w, "message of %s", key)
		}
		return
	}
	require.Failf(t, "missing problem", "no problem reported for %s; got keys %s\n%v", key, strings.Join(keys, ", "), err)
}
