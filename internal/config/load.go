package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	envprovider "github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment override. The rest of the variable name is the key path,
// lower-cased, with "__" between levels: SANDGATE_SANDBOX__BROKER__FLAVOR=embedded sets
// sandbox.broker.flavor.
const EnvPrefix = "SANDGATE_"

// EnvConfigFile is reserved for the command line to name the configuration file; it is not a
// configuration key, so Load skips it instead of reporting an unknown key "config".
const EnvConfigFile = EnvPrefix + "CONFIG"

// notConfig reports whether SANDGATE_ variable name belongs to Sandgate's clients or tooling,
// not to the gateway's configuration: the credentials the CLI and the clients read
// (SANDGATE_URL, SANDGATE_TOKEN, SANDGATE_API_KEY — docs/usage.md, docs/python.md), and the
// set-up scripts' and tests' switches (SANDGATE_CACHE, SANDGATE_SKIP_*, SANDGATE_TEST_*,
// SANDGATE_DOCKER_TEST_IMAGE, SANDGATE_*_E2E*). Load skips them, so a shell set up for the CLI
// or the tests can run the gateway; every other SANDGATE_ variable is configuration, and one
// that names no key (SANDGATE_LOG_LEVEL for SANDGATE_LOG__LEVEL) is still an error. None can
// be a key: they have no level separator, and every top-level key is a section.
func notConfig(name string) bool {
	rest := strings.TrimPrefix(name, EnvPrefix)
	if strings.Contains(rest, envLevelSep) {
		return false
	}
	switch rest {
	case "URL", "TOKEN", "API_KEY", "CACHE", "DOCKER_TEST_IMAGE":
		return true
	}
	return strings.HasPrefix(rest, "SKIP_") || strings.HasPrefix(rest, "TEST_") || strings.Contains(rest, "_E2E")
}

// envLevelSep separates levels in environment variable names.
const envLevelSep = "__"

// removedBrokerKeys are keys of sandbox.broker that the seed removed; old files and
// environments that still set them are accepted and the values dropped (docs/semantics.md §5).
var removedBrokerKeys = []string{"request_queue_url", "object_store_bucket"}

// Load reads the configuration as LoadWith does, keeping provider blocks raw and unchecked
// (no BlockDecoder): for programs that need the rest of it (a database URL). The gateway's
// commands read it with gateway.LoadConfig, which also decodes and checks the blocks.
func Load(path string, environ []string) (*Config, error) {
	return LoadWith(path, environ, nil)
}

// LoadWith reads the configuration: the YAML file at path (skipped when path is ""), then the
// SANDGATE_ overrides found in environ (entries "NAME=value", as os.Environ returns them),
// then applies defaults (ApplyDefaults), decodes the provider blocks (blocks.DecodeBlocks) and
// validates (Validate, then blocks.ValidateBlocks). With blocks nil, provider blocks — and
// every key of a profile, or of sandbox, that this package does not define — stay raw and
// unchecked (see Blocks).
//
// Environment values are strings converted to the key's type; list keys take comma-separated
// values (SANDGATE_AUTH__ADMIN_GROUPS=ops,admins) and lists of objects take indexes as a level
// (SANDGATE_AUTH__ISSUERS__0__URL=…), which replaces the file's whole list. An override beats
// the file. Duration keys accept "30s"-style strings or numbers of seconds.
//
// Decoding is strict: any key the configuration does not define is an error naming its full
// dotted path (and the environment variable when it came from one); a key of a profile, or of
// sandbox, is left to blocks, which knows the provider blocks. The seed's removed keys
// sandbox.broker.request_queue_url and sandbox.broker.object_store_bucket are ignored
// (docs/semantics.md §5). A provider block written without fields (`docker:`) is present, with
// the defaults blocks gives it.
//
// Errors: a missing, unreadable or malformed file is reported with its path. Otherwise the
// error lists every problem, one *FieldError per line, each matching ErrInvalid: first all
// decoding problems (unknown keys, values of the wrong type), sorted by key; when there are
// none, all validation problems.
func LoadWith(path string, environ []string, blocks BlockDecoder) (*Config, error) {
	k := koanf.New(".")
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("config file %s does not exist", path)
			}
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	}

	fromEnv := map[string]string{} // dotted key path → environment variable that set it
	env := envprovider.Provider(envLevelSep, envprovider.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			if name == EnvConfigFile || notConfig(name) {
				return "", nil
			}
			key := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
			if key == "" {
				return "", nil
			}
			fromEnv[strings.ReplaceAll(key, envLevelSep, ".")] = name
			return key, value
		},
	})
	if err := k.Load(env, nil); err != nil {
		return nil, fmt.Errorf("reading %s environment variables: %w", EnvPrefix, err)
	}

	raw := k.Raw()
	normalize(raw)
	cfg := &Config{fromEnv: fromEnv}
	invalid := func(err error) error {
		return fmt.Errorf("invalid configuration (%s):\n%w", describeSources(path, fromEnv), err)
	}
	problems := flattenProblems(decodeInto(raw, cfg, fromEnv, "", nil))
	cfg.ApplyDefaults()
	if blocks != nil {
		problems = append(problems, flattenProblems(blocks.DecodeBlocks(cfg))...)
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { // map order is random
			return problemKey(problems[i]) < problemKey(problems[j])
		})
		return nil, invalid(errors.Join(problems...))
	}
	err := cfg.Validate()
	if blocks != nil {
		err = errors.Join(append(flattenProblems(err), flattenProblems(blocks.ValidateBlocks(cfg))...)...)
	}
	if err != nil {
		return nil, invalid(err)
	}
	return cfg, nil
}

func describeSources(path string, fromEnv map[string]string) string {
	var parts []string
	if path != "" {
		parts = append(parts, "file "+path)
	}
	if len(fromEnv) > 0 || path == "" {
		parts = append(parts, EnvPrefix+"* environment")
	}
	return strings.Join(parts, ", ")
}

// normalize edits the merged raw map before decoding: it drops the seed's removed broker keys.
func normalize(raw map[string]any) {
	sandbox, _ := raw["sandbox"].(map[string]any)
	if sandbox == nil {
		return
	}
	if broker, ok := sandbox["broker"].(map[string]any); ok {
		for _, key := range removedBrokerKeys {
			delete(broker, key)
		}
	}
}

// decodeInto copies raw into out (a pointer to a struct with koanf tags) strictly: unknown keys
// and values of the wrong type are reported as FieldErrors, all at once, sorted by key, under
// prefix (the key raw is written at; "" for the whole file). removed maps keys under prefix
// that earlier versions read to what became of them.
func decodeInto(raw, out any, fromEnv map[string]string, prefix string, removed map[string]string) error {
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			commaListHook,
			indexedMapToSliceHook,
		),
		WeaklyTypedInput: true, // environment values are strings
		ErrorUnused:      true,
		TagName:          "koanf",
		Result:           out,
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(raw); err != nil {
		d := decodeProblems{fromEnv: fromEnv, prefix: prefix, removed: removed}
		d.collect(err)
		sort.SliceStable(d.out, func(i, j int) bool { // map order is random
			return d.out[i].(*FieldError).Key < d.out[j].(*FieldError).Key
		})
		return errors.Join(d.out...)
	}
	return nil
}

// unusedPrefix starts mapstructure's ErrorUnused message ("has invalid keys: a, b").
const unusedPrefix = "has invalid keys: "

// decodeProblems turns mapstructure's errors into FieldErrors with dotted keys under prefix.
type decodeProblems struct {
	fromEnv map[string]string
	prefix  string
	removed map[string]string
	out     []error
}

// under puts the prefix in front of rel, a key relative to it.
func (d *decodeProblems) under(rel string) string {
	switch {
	case d.prefix == "":
		return rel
	case rel == "":
		return d.prefix
	}
	return d.prefix + "." + rel
}

// collect flattens mapstructure's joined errors into FieldErrors: one "unknown key" problem per
// unknown key, naming the environment variable when one set it, and one problem per value that
// does not fit its key's type.
func (d *decodeProblems) collect(err error) {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			d.collect(e)
		}
		return
	}
	de, ok := err.(*mapstructure.DecodeError)
	if !ok {
		if inner := errors.Unwrap(err); inner != nil {
			d.collect(inner) // "decoding failed due to …: %w"
			return
		}
		d.out = append(d.out, &FieldError{Key: d.prefix, Msg: err.Error()})
		return
	}
	parent := dottedKey(de.Name())
	inner := de.Unwrap()
	if names, ok := strings.CutPrefix(inner.Error(), unusedPrefix); ok {
		for _, name := range strings.Split(names, ", ") {
			rel := name
			if parent != "" {
				rel = parent + "." + name
			}
			key := d.under(rel)
			msg, ok := d.removed[rel]
			if !ok {
				msg = unknownKeyMsg(key, d.fromEnv)
			}
			d.out = append(d.out, &FieldError{Key: key, Msg: msg})
		}
		return
	}
	d.out = append(d.out, &FieldError{Key: d.under(parent), Msg: typeProblem(inner)})
}

// unknownKeyMsg says key is unknown, naming the environment variable that set it.
func unknownKeyMsg(key string, fromEnv map[string]string) string {
	msg := "unknown key"
	if env, ok := fromEnv[envLookupKey(key)]; ok {
		msg += fmt.Sprintf(" (set by environment variable %s; levels are separated by %q)", env, envLevelSep)
	}
	return msg
}

// typeProblem words a value that does not fit its key's type.
func typeProblem(err error) string {
	var pe *mapstructure.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("cannot read %q as %s", fmt.Sprint(pe.Value), typeWord(pe.Expected.Type()))
	}
	var ue *mapstructure.UnconvertibleTypeError
	if errors.As(err, &ue) {
		return fmt.Sprintf("expected %s, got %s", typeWord(ue.Expected.Type()), valueWord(ue.Value))
	}
	// A scalar or list where a block belongs: `expected a map or struct, got "slice"`.
	if kind, ok := strings.CutPrefix(err.Error(), "expected a map or struct, got "); ok {
		got := map[string]string{`"slice"`: "a list", `"string"`: "a string", `"bool"`: "true or false"}[kind]
		if got == "" {
			got = "a number"
		}
		return "expected a mapping of keys, got " + got
	}
	return err.Error()
}

func typeWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping of keys"
	}
	return t.String()
}

func valueWord(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%q", fmt.Sprint(v))
}

var bracketRe = regexp.MustCompile(`\[([^\]]*)\]`)

// dottedKey rewrites mapstructure's field names into the file's key paths: map entries
// ("sandbox.profiles[web].scope") become dotted ("sandbox.profiles.web.scope"); list indexes
// keep brackets ("auth.issuers[0].url").
func dottedKey(name string) string {
	return bracketRe.ReplaceAllStringFunc(name, func(m string) string {
		inner := m[1 : len(m)-1]
		if _, err := strconv.Atoi(inner); err == nil {
			return m
		}
		return "." + inner
	})
}

// envLookupKey turns a key path into the form recorded for environment variables
// (brackets become levels: auth.issuers[0].url → auth.issuers.0.url).
func envLookupKey(key string) string {
	return bracketRe.ReplaceAllString(key, ".$1")
}

var stringSliceType = reflect.TypeFor[[]string]()

// commaListHook lets a string fill a []string key: "ops, admins" → ["ops", "admins"]. This is
// how environment variables set lists; blanks around items and empty items are dropped.
func commaListHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to != stringSliceType {
		return data, nil
	}
	out := []string{}
	for _, item := range strings.Split(reflect.ValueOf(data).String(), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out, nil
}

// indexedMapToSliceHook lets a map keyed by indexes fill a list, which is how environment
// variables set lists of objects: {"0": {...}, "1": {...}} → [{...}, {...}]. Indexes must run
// from 0 without gaps.
func indexedMapToSliceHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.Map || to.Kind() != reflect.Slice {
		return data, nil
	}
	m, ok := data.(map[string]any)
	if !ok || len(m) == 0 {
		return data, nil
	}
	out := make([]any, len(m))
	for key, v := range m {
		i, err := strconv.Atoi(key)
		if err != nil {
			return data, nil // not an indexed map; let the decoder report the mismatch
		}
		if i < 0 || i >= len(m) {
			return nil, fmt.Errorf("list index %d out of range: indexes must run from 0 to %d without gaps", i, len(m)-1)
		}
		out[i] = v
	}
	return out, nil
}
