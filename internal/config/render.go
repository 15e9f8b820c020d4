package config

import (
	"bytes"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// RedactedValue is the value that replaces secrets in Redacted's output.
const RedactedValue = "REDACTED"

// Redacted returns a deep copy of c safe to print (`gateway config print`): every
// field tagged `secret:"true"` is replaced by "REDACTED" (for string maps, each value), except
// database.url, where only the password is replaced so the host and database stay visible
// ("postgres://sandgate:REDACTED@db:5432/sandgate"; in key/value form, password=REDACTED).
// A database.url that cannot be parsed is replaced whole. Provider blocks are redacted by the
// secret tags of their backends' types once decoded (gateway.LoadConfig); a block still raw,
// whose secrets this package cannot tell, has every value replaced. c is not modified.
func (c *Config) Redacted() *Config {
	out := deepCopy(reflect.ValueOf(c)).Interface().(*Config)
	out.Database.URL = redactDSN(c.Database.URL)
	return out
}

// deepCopy copies v recursively, redacting secret-tagged struct fields on the way.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(deepCopy(v.Elem()))
		return n
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type()).Elem()
		n.Set(deepCopy(v.Elem()))
		return n
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return n
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(deepCopy(v.Index(i)))
		}
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v) // also carries unexported fields
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			fv := deepCopy(v.Field(i))
			if f.Tag.Get("secret") == "true" {
				fv = redactValue(fv)
			}
			if _, opts, _ := strings.Cut(f.Tag.Get("koanf"), ","); opts == "remain" && !fv.IsNil() {
				redactRawBlocks(fv)
			}
			n.Field(i).Set(fv)
		}
		return n
	}
	return v
}

// redactValue replaces a non-empty string, or each value of a string map or slice.
func redactValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.String:
		if v.Len() > 0 {
			return reflect.ValueOf(RedactedValue).Convert(v.Type())
		}
	case reflect.Map:
		if v.Type().Elem().Kind() == reflect.String {
			for it := v.MapRange(); it.Next(); {
				v.SetMapIndex(it.Key(), reflect.ValueOf(RedactedValue).Convert(v.Type().Elem()))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String {
			for i := range v.Len() {
				v.Index(i).Set(reflect.ValueOf(RedactedValue).Convert(v.Type().Elem()))
			}
		}
	}
	return v
}

// redactRawBlocks replaces every value of each raw block of blocks (a Blocks map, a copy):
// its backend, which would know its secrets, has not decoded it.
func redactRawBlocks(blocks reflect.Value) {
	for it := blocks.MapRange(); it.Next(); {
		if raw, ok := it.Value().Interface().(map[string]any); ok {
			blocks.SetMapIndex(it.Key(), reflect.ValueOf(redactAll(raw)))
		}
	}
}

// redactAll returns v with every scalar replaced by RedactedValue.
func redactAll(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = redactAll(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = redactAll(e)
		}
		return out
	case nil:
		return nil
	}
	return RedactedValue
}

var dsnPasswordRe = regexp.MustCompile(`(?i)\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactDSN hides the password of a postgres:// URL or libpq key/value connection string.
func redactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return RedactedValue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), RedactedValue)
			}
		}
		q := u.Query()
		changed := false
		for key := range q {
			if strings.EqualFold(key, "password") || strings.EqualFold(key, "sslpassword") {
				q.Set(key, RedactedValue)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return dsnPasswordRe.ReplaceAllString(dsn, "${1}"+RedactedValue)
}

// YAML renders c as a configuration file that Load reads back to the same values, keys in
// the order of the structs (provider blocks last in a profile and in sandbox, by name). Unset
// keys are left out: nil pointers, zero values of non-pointer keys (zero means "the default"
// there), empty lists and maps, and blocks left empty by that; a present provider block with
// nothing set is written as {}. Durations are written as "30s"-style strings. YAML does not
// redact; call Redacted first for output a person will see.
func (c *Config) YAML() ([]byte, error) {
	node, err := yamlNode(reflect.ValueOf(c).Elem())
	if err != nil {
		return nil, err
	}
	if node == nil {
		node = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, fmt.Errorf("rendering configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("rendering configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// yamlNode renders v; nil means "unset, leave the key out".
func yamlNode(v reflect.Value) (*yaml.Node, error) {
	if v.Type() == durationType {
		return scalar("!!str", Duration(v.Int()).String()), nil
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, nil
		}
		n, err := yamlNode(v.Elem())
		if n == nil && err == nil && v.Kind() == reflect.Pointer {
			n = emptyOf(v.Elem()) // a present block with nothing set is still present
		}
		return n, err
	case reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if err := appendFields(m, v); err != nil {
			return nil, err
		}
		if len(m.Content) == 0 {
			return nil, nil
		}
		return m, nil
	case reflect.Map:
		if v.Len() == 0 {
			return nil, nil
		}
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			val, err := yamlNode(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			if val == nil {
				val = emptyOf(v.MapIndex(k))
			}
			m.Content = append(m.Content, scalar("!!str", fmt.Sprint(k)), val)
		}
		return m, nil
	case reflect.Slice:
		if v.Len() == 0 {
			return nil, nil
		}
		s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			val, err := yamlNode(v.Index(i))
			if err != nil {
				return nil, err
			}
			if val == nil {
				val = emptyOf(v.Index(i))
			}
			s.Content = append(s.Content, val)
		}
		return s, nil
	case reflect.String:
		if v.Len() == 0 {
			return nil, nil
		}
		return scalar("!!str", v.String()), nil
	case reflect.Bool:
		return scalar("", strconv.FormatBool(v.Bool())), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar("", strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar("", strconv.FormatUint(v.Uint(), 10)), nil
	case reflect.Float32, reflect.Float64:
		return scalar("", strconv.FormatFloat(v.Float(), 'g', -1, 64)), nil
	}
	return nil, fmt.Errorf("rendering configuration: unsupported kind %s", v.Kind())
}

// appendFields adds the exported fields of struct v to mapping m under their koanf names,
// inlining squashed embedded structs.
func appendFields(m *yaml.Node, v reflect.Value) error {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && strings.Contains(opts, "squash") {
			if err := appendFields(m, v.Field(i)); err != nil {
				return err
			}
			continue
		}
		if opts == "remain" {
			if err := appendBlocks(m, v.Field(i)); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fv := v.Field(i)
		if k := fv.Kind(); k != reflect.Pointer && k != reflect.Interface && fv.IsZero() {
			continue // zero means "the default" unless the field is a pointer
		}
		val, err := yamlNode(fv)
		if err != nil {
			return err
		}
		if val != nil {
			m.Content = append(m.Content, scalar("!!str", name), val)
		}
	}
	return nil
}

// appendBlocks adds the entries of blocks (a Blocks map) to mapping m, sorted by key; a
// block with nothing set is written as {}.
func appendBlocks(m *yaml.Node, blocks reflect.Value) error {
	keys := blocks.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		val, err := yamlNode(blocks.MapIndex(k))
		if err != nil {
			return err
		}
		if val == nil {
			val = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
		}
		m.Content = append(m.Content, scalar("!!str", k.String()), val)
	}
	return nil
}

// scalar builds a scalar node. Numbers and booleans pass tag "" (plain, resolved by the
// reader); strings pass "!!str" so the encoder quotes values that would read as another type.
func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// emptyOf renders an element that has nothing to show but must keep its place: {} for
// objects and maps, [] for lists, null otherwise.
func emptyOf(v reflect.Value) *yaml.Node {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return scalar("!!null", "null")
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct, reflect.Map:
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
	case reflect.Slice:
		return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
	case reflect.String:
		return scalar("!!str", "")
	}
	return scalar("!!null", "null")
}
