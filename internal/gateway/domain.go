package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/e2bdoor"
	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/mcp"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
)

// settings maps config sandbox.* (validated, defaults applied) to the domain's Settings.
func settings(c config.Sandbox) sandbox.Settings {
	s := sandbox.Settings{
		DefaultProfile:        c.DefaultProfile,
		MaxOutputBytes:        c.MaxOutputBytes,
		MaxFileBytes:          c.MaxFileBytes,
		KeptOutputMemoryBytes: c.KeptOutputMemoryBytes,
		Quotas: sandbox.Quotas{
			Sessions: c.Quotas.Sessions, ConcurrentExecutions: c.Quotas.ConcurrentExecutions,
			BackgroundProcesses: c.Quotas.BackgroundProcesses,
			Contexts:            c.Quotas.Contexts, MCPSessions: c.Quotas.MCPSessions,
			RetainedOutputBytes: c.Quotas.RetainedOutputBytes, Snapshots: c.Quotas.Snapshots,
			SnapshotBytes: c.Quotas.SnapshotBytes,
			AdminsExempt:  adminsExempt(c.Quotas),
		},
		WaitTimeout:   sandbox.DefaultWaitTimeout,
		ResponseTTL:   time.Duration(c.Broker.ResponseTTL) * time.Second,
		SweepInterval: time.Duration(c.Broker.SweepInterval) * time.Second,
		LostAfter:     c.Broker.LostAfter.D(),
		Queue: sandbox.QueueSettings{
			InlinePayloadMaxBytes: c.Broker.InlinePayloadMaxBytes,
			WaitPoll:              seconds(c.Broker.WaitPollInterval),
		},
	}
	if w := c.Broker.WaitTimeout; w != nil {
		s.WaitTimeout = seconds(*w)
	}
	if w := c.Broker.WorkerTimeoutCeiling; w != nil {
		s.Queue.WorkerTimeoutCeiling = seconds(*w)
	}
	if q := c.Broker.Queue; q != nil {
		s.Queue.MaxReceiveCount = q.MaxReceiveCount
	}
	return s
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// adminsExempt is sandbox.quotas.admins_exempt (default true), for the domain's quotas and the
// edge's request rate alike.
func adminsExempt(q config.Quotas) bool { return q.AdminsExempt == nil || *q.AdminsExempt }

// policy is the one conversion of a profile's policy block (docs/semantics.md §7): egress
// allow, a 120 s timeout and strict enforcement unless the block says otherwise.
func policy(c config.Policy) providers.Policy {
	p := providers.Policy{
		NetworkEgress: c.NetworkEgress, NetworkAllow: c.NetworkAllow, FSAllowRead: c.FSAllowRead, FSAllowWrite: c.FSAllowWrite,
		Timeout: seconds(config.DefaultPolicyTimeout), Strict: true,
	}
	if p.NetworkEgress == "" {
		p.NetworkEgress = providers.EgressAllow
	}
	if c.CPU != nil {
		p.CPU = *c.CPU
	}
	if c.MemoryMB != nil {
		p.MemoryMB = *c.MemoryMB
	}
	if c.DiskMB != nil {
		p.DiskMB = *c.DiskMB
	}
	if c.Timeout != nil {
		p.Timeout = seconds(*c.Timeout)
	}
	if c.Strict != nil {
		p.Strict = *c.Strict
	}
	return p
}

// buildProfiles builds every profile's provider through reg, sorted by name, for installation,
// from the blocks d decoded. On an error the providers already built are closed.
//
// Errors: the registry's (fault.Config for configuration a provider rejects), prefixed with
// the profile's key.
func buildProfiles(cfg *config.Config, d decoded, reg *providers.Registry, installation string, proxy *egress.Proxy, getenv func(string) string, log *slog.Logger) (_ []sandbox.ProfileSpec, err error) {
	c := cfg.Sandbox
	names := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []sandbox.ProfileSpec
	defer func() {
		if err != nil {
			closeProviders(out, log)
		}
	}()
	for _, name := range names {
		pc := c.Profiles[name]
		bc := buildContext(cfg, d, name, installation, log)
		secrets, err := profileSecrets(name, pc.Secrets, getenv)
		if err != nil {
			return nil, err
		}
		bc.Egress = proxy
		prov, err := reg.Build(bc)
		if err != nil {
			return nil, fmt.Errorf("sandbox.profiles.%s: %w", name, err)
		}
		out = append(out, sandbox.ProfileSpec{
			Name: name, Scope: pc.Scope, Stateful: pc.Stateful, AllowedGroups: pc.AllowedGroups,
			IdentityMode: pc.Identity.Mode, Attached: pc.Environment == config.EnvironmentAttached,
			Policy: bc.Policy, IdleTimeout: bc.IdleTimeout, IdleAction: pc.IdleAction, AutoResume: pc.AutoResume, Provider: prov,
			Secrets: secrets,
		})
	}
	return out, nil
}

func closeProviders(specs []sandbox.ProfileSpec, log *slog.Logger) {
	for _, s := range specs {
		if c, ok := s.Provider.(interface{ Close() error }); ok {
			if err := c.Close(); err != nil {
				log.Warn("closing provider", "profile", s.Name, "err", err)
			}
		}
	}
}

// mcpOptions maps the configuration the MCP edge reads.
func mcpOptions(cfg *config.Config, svc *sandbox.Service, log *slog.Logger, version string) mcp.Options {
	o := mcp.Options{
		PublicURL: cfg.Server.PublicURL, Disabled: cfg.Sandbox.Enabled != nil && !*cfg.Sandbox.Enabled,
		ToolOutputMaxChars: cfg.Sandbox.ToolOutputMaxChars, DefaultProfile: cfg.Sandbox.DefaultProfile,
		MaxBodyBytes: cfg.Server.MaxBodyBytes, MaxBatch: cfg.Server.MCPMaxBatch, Sandbox: svc, Logger: log, Version: version,
	}
	for _, is := range cfg.Auth.Issuers {
		o.Issuers = append(o.Issuers, is.URL)
	}
	return o
}

// e2bMount is the E2B door at e2bdoor.Path (docs/e2b-door.md), behind the same
// authentication, rate and open-request limits as /v1, reading the caller's API key where
// E2B's SDKs send it; its refusals carry E2B's {code, message} too. With server.e2b.enabled
// false it answers 404 saying so, which E2B's SDKs report at once.
func e2bMount(cfg *config.Config, svc *sandbox.Service, log *slog.Logger) api.Mount {
	m := api.Mount{Path: e2bdoor.Path + "/*", ProblemMembers: true}
	if !cfg.Server.E2B.Enabled {
		m.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			api.WriteProblem(w, r, http.StatusNotFound, "not-found", "Not found",
				"this gateway does not serve E2B's API: its operator has not enabled the E2B door (server.e2b.enabled; docs/e2b-door.md)")
		})
		return m
	}
	door := e2bdoor.New(e2bdoor.Options{Sandbox: svc, Templates: cfg.Server.E2B.Templates, ProblemTypeBase: api.ProblemTypeBase, Logger: log})
	m.Handler, m.Authenticated, m.Credential = http.StripPrefix(e2bdoor.Path, door), true, e2bdoor.Credential
	return m
}
