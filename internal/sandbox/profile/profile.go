// Package profile is the domain's room for workload profiles (docs/semantics.md §5, §8, §9):
// the configured profiles with their built providers, which of them a principal may use, and
// the fail-closed identity and policy checks that run before any provider call. It knows
// nothing of sessions, the store or the broker; internal/sandbox re-exports its types
// (sandbox.Profile, sandbox.ProfileSpec) for the edges.
package profile

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
)

// Scopes (docs/semantics.md §8).
const (
	ScopePerCall    = "per_call"
	ScopePerSession = "per_session"
	ScopePerRuntime = "per_runtime"
)

// Identity modes (docs/semantics.md §9).
const (
	IdentityAgent = "agent"
	IdentityUser  = "user"
)

// What the idle sweeper does with a session idle past its profile's idle_timeout
// (Spec.IdleAction, config idle_action; docs/semantics.md §8).
const (
	// IdleReset destroys the sandbox (the seed's behaviour): the next use starts afresh.
	IdleReset = "reset"
	// IdlePause freezes the sandbox (capability pause); the next use resumes it.
	IdlePause = "pause"
	// IdleSnapshot captures the workspace and removes the sandbox (capability snapshots);
	// the next use restores the capture: files kept, processes and variables gone.
	IdleSnapshot = "snapshot"
)

// Spec is one workload profile as the composition root hands it to the domain: its rules
// and its provider, already built (docs/semantics.md §5).
type Spec struct {
	Name string
	// Scope is per_call, per_session or per_runtime.
	Scope string
	// Stateful asks for interpreter contexts that keep state between executions.
	Stateful bool
	// AllowedGroups restricts the profile to members of any of these groups (admins always
	// pass); empty = everyone.
	AllowedGroups []string
	// IdentityMode is IdentityAgent (the gateway's own) or IdentityUser (the caller's).
	IdentityMode string
	// Attached profiles bind to an environment they never provision or destroy.
	Attached bool
	// Policy is the profile's sandbox policy (the one conversion from config lives in
	// internal/gateway).
	Policy      providers.Policy
	IdleTimeout time.Duration
	// IdleAction is IdleReset (""), IdlePause or IdleSnapshot; attached and per_call
	// profiles always reset.
	IdleAction string
	// AutoResume makes an operation on a session paused by its caller resume it (with a
	// notice) instead of answering fault.Paused.
	AutoResume bool
	Provider   providers.Provider
	// Secrets are the profile's own secrets, set by an operator (Name, Hosts, Value): every
	// session of the profile binds them (internal/sandbox/secret).
	Secrets []providers.SecretBinding
}

// Profile is a configured workload profile with its provider.
type Profile struct {
	Spec
	Default bool
	Caps    providers.Capabilities
}

// EgressEnforcement says how the profile's network egress is enforced: proxy, provider or
// none (providers.EgressEnforcement).
func (p *Profile) EgressEnforcement() string {
	return providers.EgressEnforcement(p.Provider, p.Caps, p.Policy)
}

// Attached reports whether the profile binds to an environment it never provisions.
func (p *Profile) Attached() bool { return p.Spec.Attached }

// EffectiveIdleAction is what happens to the profile's idle sessions: its IdleAction, and
// IdleReset when unset and always for attached and per_call profiles.
func (p *Profile) EffectiveIdleAction() string {
	if p.Attached() || p.Scope == ScopePerCall || p.IdleAction == "" {
		return IdleReset
	}
	return p.IdleAction
}

// checkIdleAction refuses an idle_action the profile cannot have: fault.Config.
func checkIdleAction(spec Spec, caps providers.Capabilities) error {
	switch spec.IdleAction {
	case "", IdleReset:
		return nil
	case IdlePause, IdleSnapshot:
	default:
		return fault.New(fault.Config, "sandbox.profiles.%s.idle_action: '%s' is not one of reset, pause, snapshot", spec.Name, spec.IdleAction)
	}
	if spec.Attached || spec.Scope == ScopePerCall {
		return fault.New(fault.Config, "sandbox.profiles.%s.idle_action: %s needs a managed per_session or per_runtime profile; attached environments and per_call sandboxes are reset", spec.Name, spec.IdleAction)
	}
	if spec.IdleAction == IdlePause && !caps.Pause {
		return fault.New(fault.Config, "sandbox.profiles.%s.idle_action: provider %s cannot pause sandboxes (capability pause); use reset or snapshot", spec.Name, spec.Provider.Type())
	}
	if spec.IdleAction == IdleSnapshot && !caps.Snapshots {
		return fault.New(fault.Config, "sandbox.profiles.%s.idle_action: provider %s cannot snapshot sandboxes (capability snapshots); use reset or pause", spec.Name, spec.Provider.Type())
	}
	return nil
}

// Set is the configured profiles, by name. Build it with NewSet; it is safe for concurrent
// use.
type Set struct {
	byName map[string]*Profile
	names  []string // sorted
	deflt  string   // the default profile's name
	log    *slog.Logger
	warned sync.Map // provider+profile → struct{}: the non-strict policy warning was logged
}

// NewSet checks specs (each with a provider declaring a valid isolation tier and an idle
// action it can carry out, no name twice: fault.Config or fault.Internal) and returns them
// as a Set whose default profile is named deflt.
func NewSet(specs []Spec, deflt string, log *slog.Logger) (*Set, error) {
	set := &Set{byName: map[string]*Profile{}, deflt: deflt, log: log}
	for _, spec := range specs {
		if spec.Provider == nil {
			return nil, fault.New(fault.Internal, "sandbox profile '%s' has no provider", spec.Name)
		}
		caps := spec.Provider.Capabilities()
		if !caps.Isolation.Valid() {
			return nil, fault.New(fault.Config, "sandbox.profiles.%s: provider %s declares no valid isolation tier", spec.Name, spec.Provider.Type())
		}
		if err := checkIdleAction(spec, caps); err != nil {
			return nil, err
		}
		if _, dup := set.byName[spec.Name]; dup {
			return nil, fault.New(fault.Internal, "sandbox profile '%s' given twice", spec.Name)
		}
		set.byName[spec.Name] = &Profile{Spec: spec, Default: spec.Name == deflt, Caps: caps}
		set.names = append(set.names, spec.Name)
	}
	sort.Strings(set.names)
	return set, nil
}

// Get returns profile name, or nil when this gateway has none of that name.
func (s *Set) Get(name string) *Profile { return s.byName[name] }

// Lookup returns profile name and whether this gateway has it.
func (s *Set) Lookup(name string) (*Profile, bool) {
	prof, ok := s.byName[name]
	return prof, ok
}

// All returns every profile, sorted by name.
func (s *Set) All() []*Profile {
	out := make([]*Profile, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}

// Usable returns the profiles p may use, sorted by name.
func (s *Set) Usable(p principal.Principal) []*Profile {
	var out []*Profile
	for _, prof := range s.All() {
		if Allowed(p, prof) {
			out = append(out, prof)
		}
	}
	return out
}

// Allowed reports whether p may use prof: its credential allows it (an API key may be
// restricted to some profiles, administrators' too), and its groups do.
func Allowed(p principal.Principal, prof *Profile) bool {
	return p.MayUseProfile(prof.Name) && (len(prof.AllowedGroups) == 0 || p.Admin || p.InAnyGroup(prof.AllowedGroups))
}

// Resolve returns profile name ("" = the default profile) for p: unknown → fault.Config
// naming the profiles p may use; not allowed → fault.Forbidden.
func (s *Set) Resolve(p principal.Principal, name string) (*Profile, error) {
	if name == "" {
		name = s.deflt
	}
	prof, ok := s.byName[name]
	if !ok {
		// Only the profiles p may use are named: restricted ones stay hidden from others.
		var usable []string
		for _, u := range s.Usable(p) {
			usable = append(usable, u.Name)
		}
		return nil, fault.New(fault.Config, "unknown sandbox profile '%s'; configured profiles: [%s]", name, strings.Join(usable, " "))
	}
	if err := KeyRefusal(p, name); err != nil {
		return nil, err
	}
	if !Allowed(p, prof) {
		return nil, fault.New(fault.Forbidden, "profile '%s' is restricted to members of %v; ask an administrator for access", name, prof.AllowedGroups)
	}
	return prof, nil
}

// KeyRefusal is fault.Forbidden when p signed in with an API key restricted to other
// profiles than prof; nil otherwise.
func KeyRefusal(p principal.Principal, prof string) error {
	if p.MayUseProfile(prof) {
		return nil
	}
	return fault.New(fault.Forbidden, "this API key may use only the profiles %s, not '%s'; use a key made for '%s', or your own sign-in",
		quoteList(p.KeyProfiles), prof, prof)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("'%s'", n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Checks enforces the seed's fail-closed identity and policy rules (docs/semantics.md §9
// steps 3–4) before any provider call, and returns the warnings of a non-strict policy
// (logged once per provider and profile). Errors: fault.Capability when user identity is
// asked of a provider that cannot act as the user; fault.Policy when no user identity is
// available, or a strict policy has dimensions the provider cannot enforce.
func (s *Set) Checks(prof *Profile, p principal.Principal) ([]string, error) {
	if prof.IdentityMode == IdentityUser {
		if !prof.Caps.PrincipalUser {
			return nil, fault.Unsupported(prof.Provider.Type(), "principal_user")
		}
		if p.Subject == "" {
			return nil, fault.New(fault.Policy, "profile '%s' requires user identity, but no user identity is available for this request", prof.Name)
		}
	}
	var dims []string
	pol, caps := prof.Policy, prof.Caps
	if pol.NetworkEgress != providers.EgressAllow && !caps.PolicyNetwork {
		dims = append(dims, "network_egress")
	}
	if (len(pol.FSAllowRead) > 0 || len(pol.FSAllowWrite) > 0) && !caps.PolicyFilesystem {
		dims = append(dims, "filesystem")
	}
	if (pol.CPU > 0 || pol.MemoryMB > 0) && !caps.PolicyResources {
		dims = append(dims, "resources")
	}
	if pol.DiskMB > 0 && !caps.PolicyDisk {
		dims = append(dims, "disk")
	}
	if len(dims) == 0 {
		return nil, nil
	}
	if pol.Strict {
		return nil, fault.New(fault.Policy, "provider '%s' cannot enforce policy dimensions %v of profile '%s' (strict); relax the policy or set strict: false",
			prof.Provider.Type(), dims, prof.Name)
	}
	msg := fmt.Sprintf("provider '%s' cannot enforce policy dimensions %v of profile '%s'; running without them because strict is false",
		prof.Provider.Type(), dims, prof.Name)
	if _, seen := s.warned.LoadOrStore(prof.Provider.Type()+"\x00"+prof.Name, struct{}{}); !seen {
		s.log.Warn(msg, "profile", prof.Name, "provider", prof.Provider.Type())
	}
	return []string{msg}, nil
}

// ProviderPrincipal is whom the provider acts for: the caller in user mode, the gateway
// itself in agent mode (seed: AgentPrincipalResolver).
func ProviderPrincipal(prof *Profile, p principal.Principal) providers.Principal {
	if prof.IdentityMode != IdentityUser {
		return Agent
	}
	return providers.Principal{
		Mode: "user", Subject: p.Username, Groups: slices.Clone(p.Groups),
		Credentials: providers.Credentials{
			User: p.Credentials.KubernetesUser, Groups: p.Credentials.KubernetesGroups,
			RoleARN: p.Credentials.AWSRoleARN, RunAs: p.Credentials.RunAs,
			WebIdentityToken: p.Token,
		},
	}
}

// Agent is the gateway acting for itself (agent identity mode, adoption).
var Agent = providers.Principal{Mode: "agent", Subject: "sandgate"}

// CheckResources refuses the CPU (cores) and memory (MiB) a session asks for at create when
// profile p cannot give them (docs/usage.md "Session options"): more than p's policy sets
// (fault.Policy), or a provider that cannot bound resources (Capabilities.PolicyResources
// false: fault.Policy, whatever p's strict says — the caller asked for a bound by name, and a
// bound that is not kept is none). Negative values are fault.Validation; 0 asks for nothing.
func (p *Profile) CheckResources(cpu float64, memoryMB int) error {
	if cpu < 0 || memoryMB < 0 {
		return fault.New(fault.Validation, "cpu and memory_mb must be positive, not %g and %d", cpu, memoryMB)
	}
	if cpu == 0 && memoryMB == 0 {
		return nil
	}
	if !p.Caps.PolicyResources {
		return fault.New(fault.Policy, "profile '%s' cannot bound a sandbox's cpu or memory (provider '%s' does not enforce resource limits); create the session without cpu and memory_mb, or use a profile whose provider has capabilities.policy_resources",
			p.Name, p.Provider.Type())
	}
	if limit := p.Policy.CPU; limit > 0 && cpu > limit {
		return fault.New(fault.Policy, "cpu %g is over profile '%s''s policy of %g cores; ask for at most %g", cpu, p.Name, limit, limit)
	}
	if limit := p.Policy.MemoryMB; limit > 0 && memoryMB > limit {
		return fault.New(fault.Policy, "memory_mb %d is over profile '%s''s policy of %d MiB; ask for at most %d", memoryMB, p.Name, limit, limit)
	}
	return nil
}

// PolicyWithin is the policy a session's sandboxes are created, attached and restored with:
// p's, with the CPU (cores) and memory (MiB) the session asked for at create (0: p's own;
// CheckResources kept them within p's).
func (p *Profile) PolicyWithin(cpu float64, memoryMB int) providers.Policy {
	pol := p.Policy
	if cpu > 0 {
		pol.CPU = cpu
	}
	if memoryMB > 0 {
		pol.MemoryMB = memoryMB
	}
	return pol
}
