package config

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// boxSchema is Schema with the test block "box" served and "crate" accepted as a block only.
func boxSchema(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile("helpers_test.go")
	require.NoError(t, err)
	out, err := Schema([]SchemaBlock{
		{Name: boxType, Served: true, Type: reflect.TypeFor[*boxBlock](), Def: "Box", Summary: "Box runs boxes.", Source: src},
		{Name: "crate", Type: reflect.TypeFor[boxLimits](), Def: "Crate", Summary: "Crate is only a block.", Source: src},
		{Name: "bare", Served: true},
	})
	require.NoError(t, err)
	return out
}

// Each block is a key of every profile and of sandbox, defined from its own type and
// described by its own source's comments; a profile's type is one of the served names.
func TestSchemaBlocks(t *testing.T) {
	t.Parallel()
	var doc struct {
		Defs map[string]struct {
			Description string `json:"description"`
			Properties  map[string]struct {
				Ref         string   `json:"$ref"`
				Description string   `json:"description"`
				Enum        []string `json:"enum"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(boxSchema(t), &doc))
	box := doc.Defs["Box"]
	require.Equal(t, "Box runs boxes.", box.Description)
	require.Equal(t, "default busybox", box.Properties["image"].Description, "a trailing comment")
	require.Equal(t, "Crate is only a block.", doc.Defs["Crate"].Description)
	for _, def := range []string{"Profile", "Sandbox"} {
		props := doc.Defs[def].Properties
		require.Equal(t, "#/$defs/Box", props["box"].Ref, def)
		require.Equal(t, "#/$defs/Crate", props["crate"].Ref, def)
		require.NotContains(t, props, "bare", "a type without a block has no key")
		require.Equal(t, []string{"box", "bare"}, props["type"].Enum, def)
	}

	s := compileSchema(t, boxSchema(t))
	require.NoError(t, s.Validate(yamlInstance(t, []byte("sandbox:\n  type: box\n  box: {image: a, limits: {cpu: 1}}\n  profiles:\n    web: {type: bare, crate: {cpu: 2}}\n"))))
	for name, text := range map[string]string{
		"unknown key in a block": "sandbox:\n  profiles:\n    web: {type: box, box: {colour: red}}\n",
		"wrong type in a block":  "sandbox:\n  profiles:\n    web: {type: box, box: {size: big}}\n",
		"unserved type":          "sandbox:\n  profiles:\n    web: {type: crate, crate: {}}\n",
		"unknown block":          "sandbox:\n  profiles:\n    web: {type: box, docker: {}}\n",
	} {
		require.Error(t, s.Validate(yamlInstance(t, []byte(text))), name)
	}
}

// compileSchema compiles a schema with a real JSON Schema validator.
func compileSchema(t *testing.T, raw []byte) *santhosh.Schema {
	t.Helper()
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
	s := compileSchema(t, boxSchema(t))
	for name, text := range map[string]string{
		"unknown key":    "sandbox:\n  broker:\n    flavour: queue\n",
		"bad enum":       "sandbox:\n  profiles:\n    p:\n      type: box\n      scope: sometimes\n",
		"bad duration":   "auth:\n  clock_skew: soon\n",
		"profile name":   "sandbox:\n  profiles:\n    Web:\n      type: box\n",
		"missing type":   "sandbox:\n  profiles:\n    web:\n      scope: per_call\n",
		"hmac algorithm": "auth:\n  issuers:\n    - url: https://x\n      signing_algorithms: [HS256]\n",
	} {
		require.Error(t, s.Validate(yamlInstance(t, []byte(text))), name)
	}
	require.NoError(t, s.Validate(yamlInstance(t, []byte("auth:\n  clock_skew: 45\nserver:\n  idle_timeout: 1h30m\n"))))
}
