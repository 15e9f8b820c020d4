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

// This package knows no provider; its tests decode blocks with testBlocks, a BlockDecoder
// that knows one block type, "box" (internal/gateway's decoder, over the provider registry,
// is tested there).
const boxType = "box"

// boxBlock is the "box" block: a key of each kind the file can write.
type boxBlock struct {
	Image  string            `koanf:"image" json:"image"` // default busybox
	Size   int               `koanf:"size" json:"size"`
	Tags   []string          `koanf:"tags" json:"tags"`
	Env    map[string]string `koanf:"env" json:"env" secret:"true"`
	Limits *boxLimits        `koanf:"limits" json:"limits,omitempty"`
}

type boxLimits struct {
	CPU float64 `koanf:"cpu" json:"cpu"`
}

// testBlocks decodes "box" blocks; any other key of a profile, or of sandbox, is unknown. A
// profile of type box needs its block; size must not be negative.
type testBlocks struct{}

var boxRemoved = map[string]string{"legacy": "removed: delete this key"}

func (testBlocks) DecodeBlocks(c *Config) error {
	var errs []error
	decode := func(prefix string, blocks Blocks) {
		for typ, raw := range blocks {
			if typ != boxType {
				errs = append(errs, c.UnknownKey(prefix+"."+typ))
				continue
			}
			b := new(boxBlock)
			if err := c.DecodeBlock(prefix+"."+typ, raw, b, boxRemoved); err != nil {
				errs = append(errs, err)
				continue
			}
			if b.Image == "" {
				b.Image = "busybox"
			}
			blocks[typ] = b
		}
	}
	if !c.Sandbox.Synthesized() {
		decode("sandbox", c.Sandbox.Blocks)
	}
	for _, name := range sortedKeys(c.Sandbox.Profiles) {
		decode(c.Sandbox.ProfileKey(name), c.Sandbox.Profiles[name].Blocks)
	}
	return errors.Join(errs...)
}

func (testBlocks) ValidateBlocks(c *Config) error {
	var p problems
	for _, name := range sortedKeys(c.Sandbox.Profiles) {
		prof, key := c.Sandbox.Profiles[name], c.Sandbox.ProfileKey(name)
		b, _ := prof.Blocks[boxType].(*boxBlock)
		switch {
		case prof.Type == boxType && b == nil:
			p.add(key+".box", "missing")
		case b != nil && b.Size < 0:
			p.add(key+".box.size", "must not be negative (got %d)", b.Size)
		}
	}
	return errors.Join(p...)
}

// loadBoxes loads content (plus environ) with testBlocks and requires success.
func loadBoxes(t *testing.T, content string, environ ...string) *Config {
	t.Helper()
	cfg, err := LoadWith(writeConfig(t, content), environ, testBlocks{})
	require.NoError(t, err)
	return cfg
}

// boxOf is profile name's decoded box block.
func boxOf(t *testing.T, c *Config, name string) *boxBlock {
	t.Helper()
	b, ok := c.Sandbox.Profiles[name].Blocks[boxType].(*boxBlock)
	require.True(t, ok, "profile %s: block box is %T", name, c.Sandbox.Profiles[name].Blocks[boxType])
	return b
}
