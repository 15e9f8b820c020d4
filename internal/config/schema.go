package config

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/invopop/jsonschema"
)

//go:generate go run ./schemagen ../../config.schema.json

// SchemaFile is the repository path of the committed schema that Schema generates; editors
// find it through the `# yaml-language-server: $schema=` line of a configuration file.
const SchemaFile = "config.schema.json"

// SchemaBlock is one provider type for Schema, as the provider registry describes it (this
// package knows no provider; gateway.SchemaBlocks makes the list).
type SchemaBlock struct {
	// Name is the provider type: a value of a profile's type key, and the key of its block.
	Name string
	// Served: profiles may name the type. A type that is not is only accepted as a block.
	Served bool
	// Type is the block's type, a struct (or a pointer to one) whose json tags spell the keys;
	// nil when the type has no block.
	Type reflect.Type
	// Def names the block's definition ("Docker"); a type the block nests is Def followed by
	// its Go name without the suffix "Block" ("DockerWarmPool" for WarmPoolBlock).
	Def string
	// Summary is the block's description.
	Summary string
	// Source is the Go source declaring the block's types: the doc (or trailing) comments of
	// their fields are the keys' descriptions; a nested type's doc comment, its name replaced
	// by its definition's, is the type's.
	Source []byte
}

// Schema returns the JSON Schema (draft 2020-12) of the configuration file, indented and
// ending in a newline, as committed in config.schema.json. Properties use the file's key
// names; descriptions come from the comments in types.go and in the blocks' sources;
// enumerated keys list their allowed values (the same tables Validate uses; a profile's type
// is one of the served blocks' names, in their order). Each block is a key of every profile
// and of sandbox (the shorthand). Unknown keys are disallowed, as Load disallows them. The
// schema cannot express the cross-key rules (see Validate and BlockDecoder), so a file that
// matches it may still be refused at start-up.
func Schema(blocks []SchemaBlock) ([]byte, error) {
	sb := newSchemaBlocks(blocks)
	r := &jsonschema.Reflector{
		Anonymous:                  true,
		RequiredFromJSONSchemaTags: true,
		LookupComment:              sb.lookupComment,
		Namer:                      sb.name,
		AdditionalFields:           sb.fields,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == durationType {
				return &jsonschema.Schema{Ref: "#/$defs/Duration"}
			}
			return nil
		},
	}
	s := r.Reflect(&Config{})
	s.Title = "Sandgate configuration"
	s.Description = "The gateway's configuration file (sandgate.yaml). Every key can also be set with an environment variable: SANDGATE_ + the key path in upper case with __ between levels, e.g. SANDGATE_SANDBOX__BROKER__FLAVOR."
	s.Definitions["Duration"] = &jsonschema.Schema{
		Description: "A duration: a string such as \"30s\", \"2m\" or \"1h30m\", or a number of seconds.",
		OneOf: []*jsonschema.Schema{
			{Type: "string", Pattern: `^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+$`},
			{Type: "number"},
		},
	}
	if err := refine(s.Definitions, sb.served()); err != nil {
		return nil, fmt.Errorf("building the configuration schema: %w", err)
	}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the configuration schema: %w", err)
	}
	return append(out, '\n'), nil
}

// schemaBlocks answers the reflector's questions about the provider blocks.
type schemaBlocks struct {
	list     []SchemaBlock
	roots    map[reflect.Type]*SchemaBlock
	pkgs     map[string]*SchemaBlock // by the package path of the block's type
	comments map[string]map[string]string
}

func newSchemaBlocks(blocks []SchemaBlock) *schemaBlocks {
	sb := &schemaBlocks{list: blocks, roots: map[reflect.Type]*SchemaBlock{}, pkgs: map[string]*SchemaBlock{}, comments: map[string]map[string]string{}}
	for i := range blocks {
		b := &blocks[i]
		if b.Type == nil {
			continue
		}
		t := b.Type
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		sb.roots[t] = b
		if _, ok := sb.pkgs[t.PkgPath()]; !ok {
			sb.pkgs[t.PkgPath()] = b
			sb.comments[t.PkgPath()] = parseComments(b.Source)
		}
	}
	return sb
}

// served returns the served types' names, in order.
func (sb *schemaBlocks) served() []string {
	var out []string
	for _, b := range sb.list {
		if b.Served {
			out = append(out, b.Name)
		}
	}
	return out
}

// name names the definitions of the blocks' types; "" leaves the Go name.
func (sb *schemaBlocks) name(t reflect.Type) string {
	if b, ok := sb.roots[t]; ok {
		return b.Def
	}
	if b, ok := sb.pkgs[t.PkgPath()]; ok && t.PkgPath() != configPkgPath && t.Name() != "" {
		return b.Def + strings.TrimSuffix(t.Name(), "Block")
	}
	return ""
}

// fields adds each block as a key of Profile and of Sandbox.
func (sb *schemaBlocks) fields(t reflect.Type) []reflect.StructField {
	if t != profileType && t != sandboxType {
		return nil
	}
	var out []reflect.StructField
	for i, b := range sb.list {
		if b.Type == nil {
			continue
		}
		bt := b.Type
		if bt.Kind() != reflect.Pointer {
			bt = reflect.PointerTo(bt)
		}
		out = append(out, reflect.StructField{
			Name: "Block" + strconv.Itoa(i), Type: bt,
			Tag: reflect.StructTag(`json:"` + b.Name + `,omitempty"`),
		})
	}
	return out
}

// lookupComment feeds the reflector the comments of the blocks' sources and of types.go: a
// block's own type is described by its Summary, a type it nests by its doc comment with its
// name replaced by its definition's.
func (sb *schemaBlocks) lookupComment(t reflect.Type, field string) string {
	if b, ok := sb.roots[t]; ok && field == "" {
		return b.Summary
	}
	key := t.Name()
	if field != "" {
		key += "." + field
	}
	if doc, ok := sb.comments[t.PkgPath()][key]; ok {
		if def := sb.name(t); field == "" && def != "" {
			if rest, ok := strings.CutPrefix(doc, t.Name()+" "); ok {
				return def + " " + rest
			}
		}
		return doc
	}
	if t.PkgPath() == configPkgPath {
		return typeComments()[key]
	}
	return ""
}

var (
	profileType = reflect.TypeFor[Profile]()
	sandboxType = reflect.TypeFor[Sandbox]()
)

// refine adds what reflection cannot see: allowed values, required keys, name patterns.
// types are the values of a profile's type key.
func refine(defs jsonschema.Definitions, types []string) error {
	var errs []error
	prop := func(def, name string) *jsonschema.Schema {
		d, ok := defs[def]
		if !ok {
			errs = append(errs, fmt.Errorf("no definition %s", def))
			return &jsonschema.Schema{}
		}
		p, ok := d.Properties.Get(name)
		if !ok {
			errs = append(errs, fmt.Errorf("definition %s has no property %s", def, name))
			return &jsonschema.Schema{}
		}
		return p
	}
	enum := func(def, name string, values []string) {
		p := prop(def, name)
		p.Enum = make([]any, len(values))
		for i, v := range values {
			p.Enum[i] = v
		}
	}
	for _, def := range []string{"Sandbox", "Profile"} {
		enum(def, "type", types)
		enum(def, "scope", scopes)
		enum(def, "environment", environments)
	}
	defs["Profile"].Required = []string{"type"}
	prop("Sandbox", "profiles").PropertyNames = &jsonschema.Schema{Pattern: profileNamePattern}
	enum("Identity", "mode", identityModes)
	enum("Profile", "idle_action", idleActions)
	enum("Policy", "network_egress", egressModes)
	enum("Broker", "flavor", brokerFlavors)
	enum("Queue", "type", queueTypes)
	enum("KafkaSASL", "mechanism", append([]string{""}, kafkaSASLMechanisms...))
	enum("Log", "level", logLevels)
	enum("Log", "format", logFormats)
	algs := prop("Issuer", "signing_algorithms")
	if algs.Items != nil {
		algs.Items.Enum = make([]any, len(signingAlgs))
		for i, v := range signingAlgs {
			algs.Items.Enum[i] = v
		}
	}
	for _, block := range []string{"queue", "response_store"} {
		p := prop("Broker", block)
		p.Properties = jsonschema.NewProperties()
		p.Properties.Set("type", &jsonschema.Schema{Type: "string", Description: "The implementation, e.g. postgres, nats, kafka, sqs, in_memory (in_memory queue and store only together)."})
	}
	prop("Broker", "queue").Required = []string{"type"}
	return errors.Join(errs...)
}

//go:embed types.go
var typesSource []byte

// typeComments maps "Type" and "Type.Field" of types.go to their doc (or trailing) comments.
var typeComments = sync.OnceValue(func() map[string]string { return parseComments(typesSource) })

// parseComments maps "Type" and "Type.Field" of the Go source src to their doc (or trailing)
// comments; an empty map when src does not parse (descriptions are a convenience; the schema
// stays valid without them).
func parseComments(src []byte) map[string]string {
	out := map[string]string{}
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ParseComments)
	if err != nil {
		return out
	}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			doc := ts.Doc
			if doc == nil {
				doc = gd.Doc
			}
			out[ts.Name.Name] = commentText(doc)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, field := range st.Fields.List {
				text := commentText(field.Doc)
				if text == "" {
					text = commentText(field.Comment)
				}
				for _, name := range field.Names {
					out[ts.Name.Name+"."+name.Name] = text
				}
			}
		}
	}
	return out
}

func commentText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

var configPkgPath = reflect.TypeFor[Config]().PkgPath()
