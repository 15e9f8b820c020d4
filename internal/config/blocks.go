package config

import (
	"errors"
	"fmt"
	"reflect"
)

// Blocks are provider blocks by name, the provider type each configures (`docker:`,
// `kubernetes:`, …). This package keeps them raw and knows no provider (dex's storages map is
// the model): a value is the block's keys as the file and the environment gave them (a map,
// or nil for a block written without keys) until the composition root decodes it through the
// provider registry (a BlockDecoder; gateway.LoadConfig) into the backend's own block type — a
// pointer to docker.Block, … —, which is also what a configuration built in code may give.
//
// Every key of a profile, or of sandbox, that this package does not define is kept here, so a
// misspelt key is reported by that decoding ("unknown key"), not by Load alone.
type Blocks map[string]any

// BlockDecoder decodes and checks the provider blocks that Load keeps raw. This package knows
// no provider: the composition root implements it with the provider registry
// (internal/gateway, whose LoadConfig passes one to LoadWith).
type BlockDecoder interface {
	// DecodeBlocks replaces each raw block of c (Sandbox.Blocks and every profile's, defaults
	// already applied to the rest of c) by its backend's value, with the block's defaults
	// applied, and adds the block of a type that needs none when a profile lacks it. Its
	// problems — unknown keys, values of the wrong type — are *FieldError, every one of them
	// (DecodeBlock words them as Load does).
	DecodeBlocks(c *Config) error
	// ValidateBlocks reports, as *FieldError each, what Validate cannot see: each profile's
	// type (one its registry serves), a missing block, the block's own rules and the
	// managed/attached matrix (docs/semantics.md §6).
	ValidateBlocks(c *Config) error
}

// Synthesized reports whether ApplyDefaults built the profile named DefaultProfile from the
// single-backend shorthand (sandbox.type and the keys beside it).
func (s *Sandbox) Synthesized() bool { return s.synthesized }

// ProfileKey is the key path profile name's keys are written under: "sandbox.profiles.<name>",
// or "sandbox" for the profile the shorthand describes (the keys the user wrote).
func (s *Sandbox) ProfileKey(name string) string {
	if s.synthesized && name == s.DefaultProfile {
		return "sandbox"
	}
	return "sandbox.profiles." + name
}

// DecodeBlock decodes raw, the provider block written at key ("sandbox.profiles.web.docker"),
// into into, a pointer to a zero value of the block's type whose fields carry koanf tags. It
// decodes strictly, as Load decodes the rest of the file: environment values are strings
// converted to the key's type, list keys take comma-separated values, and every unknown key
// and every value of the wrong type is a *FieldError under key, naming the environment
// variable that set it. removed maps keys under key that earlier versions read ("sandboxd.enabled")
// to what became of them, said instead of "unknown key".
//
// raw nil (a block written without keys) leaves into zero. A raw value of into's type, or a
// pointer to one (a configuration built in code), is copied into it.
//
// Errors: the problems, joined; nil when raw fits.
func (c *Config) DecodeBlock(key string, raw, into any, removed map[string]string) error {
	out := reflect.ValueOf(into)
	if out.Kind() != reflect.Pointer || out.IsNil() || out.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: DecodeBlock of %s into %T, not a pointer to a struct", key, into)
	}
	if raw == nil {
		return nil
	}
	rv := reflect.ValueOf(raw)
	switch {
	case rv.Type() == out.Type():
		if !rv.IsNil() {
			out.Elem().Set(rv.Elem())
		}
		return nil
	case rv.Type() == out.Type().Elem():
		out.Elem().Set(rv)
		return nil
	case rv.Kind() == reflect.Struct || rv.Kind() == reflect.Pointer:
		return &FieldError{Key: key, Msg: fmt.Sprintf("holds a %T where the block's keys or a %s belong", raw, out.Type())}
	}
	return decodeInto(raw, into, c.fromEnv, key, removed)
}

// UnknownKey is the problem of key, which no part of the configuration defines: "unknown key",
// naming the environment variable that set it.
func (c *Config) UnknownKey(key string) error {
	return &FieldError{Key: key, Msg: unknownKeyMsg(key, c.fromEnv)}
}

// flattenProblems flattens err (joined) into its problems.
func flattenProblems(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenProblems(e)...)
		}
		return out
	}
	return []error{err}
}

// problemKey is the key a problem names, for sorting; "" for an error that is no *FieldError.
func problemKey(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Key
	}
	return ""
}
