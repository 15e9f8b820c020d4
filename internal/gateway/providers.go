package gateway

import (
	"reflect"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/ec2ssm"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// builtinBackends are the provider types this binary ships, in the order messages list them
// (each package owns its block: type, defaults, validation), and the seed's bedrock_agentcore
// block, accepted but served by none.
func builtinBackends() []providers.Backend {
	return []providers.Backend{
		local.Backend(), docker.Backend(), kubernetes.Backend(), ec2ssm.Backend(), e2b.Backend(), daytona.Backend(),
		bedrockBackend(),
	}
}

// Builtin returns a registry of the providers this binary ships: local_subprocess, docker,
// kubernetes, ec2_ssm, e2b and daytona; it also accepts the bedrock_agentcore block, which no
// profile may name (no provider has shipped for it).
func Builtin() *providers.Registry {
	r := providers.NewRegistry()
	for _, b := range builtinBackends() {
		r.Add(b)
	}
	return r
}

// SchemaBlocks describes reg's blocks to config.Schema, in reg's order.
func SchemaBlocks(reg *providers.Registry) []config.SchemaBlock {
	var out []config.SchemaBlock
	for _, b := range reg.Backends() {
		sb := config.SchemaBlock{Name: b.Type, Served: b.Served(), Def: b.SchemaName, Summary: b.Summary, Source: b.BlockSource}
		if b.NewBlock != nil {
			sb.Type = reflect.TypeOf(b.NewBlock())
		}
		out = append(out, sb)
	}
	return out
}

// Schema returns the configuration's JSON Schema (config.Schema) with the blocks of the
// providers this binary ships: what config.schema.json holds and `gateway config schema`
// prints.
func Schema() ([]byte, error) { return config.Schema(SchemaBlocks(Builtin())) }

// CheckProviders refuses a configuration with a profile whose provider type reg does not
// serve — before anything connects, so `gateway config validate` and `serve` agree.
//
// Errors: fault.Config naming each such profile and the served types (docs/semantics.md §6:
// an unknown provider type lists the built-ins).
func CheckProviders(cfg *config.Config, reg *providers.Registry) error {
	served := reg.Names()
	var bad []string
	for name, p := range cfg.Sandbox.Profiles {
		if !slices.Contains(served, p.Type) {
			bad = append(bad, "sandbox.profiles."+name+".type: '"+p.Type+"'")
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fault.New(fault.Config, "this gateway does not serve the provider type of %s; served types: [%s]",
		strings.Join(bad, ", "), strings.Join(served, ", "))
}
