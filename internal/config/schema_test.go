package config

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the repository's config.schema.json from Schema()")

var schemaPath = filepath.Join("..", "..", SchemaFile)

func TestSchema(t *testing.T) {
	t.Parallel()
	got, err := Schema()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(schemaPath, got, 0o644))
		return
	}
	want, err := os.ReadFile(schemaPath)
	require.NoError(t, err, "run: go generate ./internal/config")
	require.Equal(t, string(want), string(got),
		"%s is out of date with the config types; run: go generate ./internal/config", SchemaFile)
}

// compiledSchema compiles Schema() with a real JSON Schema validator.
func compiledSchema(t *testing.T) *santhosh.Schema {
	t.Helper()
	raw, err := Schema()
	require.NoError(t, err)
	doc, err := santhosh.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := santhosh.NewCompiler()
	require.NoError(t, c.AddResource(SchemaFile, doc))
	s, err := c.Compile(SchemaFile)
	require.NoError(t, err)
	return s
}

// yamlInstance reads YAML into the JSON value model the validator expects.
func yamlInstance(t *testing.T, text []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(text, &v))
	js, err := json.Marshal(v)
	require.NoError(t, err)
	inst, err := santhosh.UnmarshalJSON(bytes.NewReader(js))
	require.NoError(t, err)
	return inst
}

func TestSchemaValidatesFiles(t *testing.T) {
	t.Parallel()
	s := compiledSchema(t)

	example, err := os.ReadFile(filepath.Join("..", "..", "sandgate.example.yaml"))
	require.NoError(t, err)
	require.NoError(t, s.Validate(yamlInstance(t, example)), "the example must match the schema")

	for name, text := range map[string]string{
		"unknown key":    "sandbox:\n  broker:\n    flavour: queue\n",
		"bad enum":       "sandbox:\n  profiles:\n    p:\n      type: docker\n      scope: sometimes\n",
		"bad duration":   "auth:\n  clock_skew: soon\n",
		"profile name":   "sandbox:\n  profiles:\n    Web:\n      type: docker\n",
		"missing type":   "sandbox:\n  profiles:\n    web:\n      scope: per_call\n",
		"hmac algorithm": "auth:\n  issuers:\n    - url: https://x\n      signing_algorithms: [HS256]\n",
	} {
		require.Error(t, s.Validate(yamlInstance(t, []byte(text))), name)
	}
	require.NoError(t, s.Validate(yamlInstance(t, []byte("auth:\n  clock_skew: 45\nserver:\n  idle_timeout: 1h30m\n"))))
}
