package gateway

import (
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

// builtin is one provider type this binary ships: its factory, and the mapping of a profile
// onto the backend's own options (provideroptions.go).
type builtin struct {
	factory providers.Factory
	options func(config.Profile) any
}

// builtins are the providers this binary ships, by type name.
var builtins = map[string]builtin{
	local.TypeName:      {local.Factory, func(p config.Profile) any { return withBlock(p.LocalSubprocess, p, localOptions) }},
	docker.TypeName:     {docker.Factory, func(p config.Profile) any { return withBlock(p.Docker, p, dockerOptions) }},
	ec2ssm.TypeName:     {ec2ssm.Factory, func(p config.Profile) any { return withBlock(p.EC2SSM, p, ec2ssmOptions) }},
	e2b.TypeName:        {e2b.Factory, func(p config.Profile) any { return withBlock(p.E2B, p, e2bOptions) }},
	kubernetes.TypeName: {kubernetes.Factory, func(p config.Profile) any { return withBlock(p.Kubernetes, p, kubernetesOptions) }},
	daytona.TypeName:    {daytona.Factory, func(p config.Profile) any { return withBlock(p.Daytona, p, daytonaOptions) }},
}

// Builtin returns a registry of the providers this binary ships: local_subprocess, docker,
// kubernetes, ec2_ssm, e2b and daytona.
func Builtin() *providers.Registry {
	r := providers.NewRegistry()
	for name, b := range builtins {
		r.Register(name, b.factory)
	}
	return r
}

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
