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
	"strings"
	"sync"

	"github.com/invopop/jsonschema"
)

//go:generate go run ./schemagen ../../config.schema.json

// SchemaFile is the repository path of the committed schema that Schema generates; editors
// find it through the `# yaml-language-server: $schema=` line of a configuration file.
const SchemaFile = "config.schema.json"

// Schema returns the JSON Schema (draft 2020-12) of the configuration file, indented and
// ending in a newline, as committed in config.schema.json. Properties use the file's key
// names; descriptions come from the comments in types.go; enumerated keys list their allowed
// values (the same tables Validate uses). Unknown keys are disallowed, as Load disallows them.
// The schema cannot express the cross-key rules (see Validate), so a file that matches it may
// still be refused at start-up.
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{
		Anonymous:                  true,
		RequiredFromJSONSchemaTags: true,
		LookupComment:              lookupComment,
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
	if err := refine(s.Definitions); err != nil {
		return nil, fmt.Errorf("building the configuration schema: %w", err)
	}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the configuration schema: %w", err)
	}
	return append(out, '\n'), nil
}

// refine adds what reflection cannot see: allowed values, required keys, name patterns.
func refine(defs jsonschema.Definitions) error {
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
		enum(def, "type", BuiltinProviders())
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
var typeComments = sync.OnceValue(func() map[string]string {
	out := map[string]string{}
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", typesSource, parser.ParseComments)
	if err != nil {
		return out // descriptions are a convenience; the schema stays valid without them
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
})

func commentText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

var configPkgPath = reflect.TypeFor[Config]().PkgPath()

// lookupComment feeds jsonschema.Reflector the comments of types.go.
func lookupComment(t reflect.Type, field string) string {
	if t.PkgPath() != configPkgPath {
		return ""
	}
	key := t.Name()
	if field != "" {
		key += "." + field
	}
	return typeComments()[key]
}
