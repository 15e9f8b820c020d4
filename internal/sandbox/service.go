package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Scopes (seed-semantics §8).
const (
	ScopePerCall    = "per_call"
	ScopePerSession = "per_session"
	ScopePerRuntime = "per_runtime"
)

// Options builds a Service.
type Options struct {
	Config   config.Sandbox // validated, defaults applied
	Store    *store.Store
	Registry *providers.Registry
	Broker   broker.Broker
	// Queue, when set, sends executions to `gateway worker` processes (flavor queue); Watcher
	// then tells when they finish. Workers set Queue too (to know their own flavor).
	Queue   queue.Transport
	Watcher *store.TaskWatcher
	// RunnerID identifies this process in task rows and heartbeats; default a random id.
	RunnerID string
	Hostname string
	Now      func() time.Time // default time.Now
	NewID    func() string    // default 32 random hex digits
	Logger   *slog.Logger
}

// Profile is a configured workload profile with its built provider.
type Profile struct {
	Name        string
	Default     bool
	Config      config.Profile
	Provider    providers.Provider
	Caps        providers.Capabilities
	Policy      providers.Policy
	IdleTimeout time.Duration
}

// Attached reports whether the profile binds to an environment it never provisions.
func (p *Profile) Attached() bool { return p.Config.Environment == "attached" }

// Service is the sandbox domain. Build it with New; call Run in the background.
type Service struct {
	cfg      config.Sandbox
	store    *store.Store
	broker   broker.Broker
	queue    queue.Transport
	watcher  *store.TaskWatcher
	runnerID string
	hostname string
	now      func() time.Time
	newID    func() string
	log      *slog.Logger

	profiles map[string]*Profile
	names    []string
	locks    *fifoLocks

	warnOnce sync.Map // provider+profile → struct{}

	mu        sync.Mutex
	cancelled map[string]bool // tasks cancelled by a caller (vs. shutdown)
}

// New builds every profile's provider (failing on configuration the providers reject) and
// returns the Service.
func New(opts Options) (*Service, error) {
	s := &Service{
		cfg: opts.Config, store: opts.Store, broker: opts.Broker, queue: opts.Queue, watcher: opts.Watcher, runnerID: opts.RunnerID, hostname: opts.Hostname,
		now: opts.Now, newID: opts.NewID, log: opts.Logger, profiles: map[string]*Profile{}, locks: newFIFOLocks(),
		cancelled: map[string]bool{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.newID == nil {
		s.newID = randomID
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.queue != nil && s.watcher == nil {
		s.watcher = opts.Store.NewTaskWatcher(s.log)
	}
	if s.runnerID == "" {
		s.runnerID = "runner-" + s.newID()[:12]
	}
	for name, pc := range opts.Config.Profiles {
		idle := time.Duration(pc.IdleTimeout) * time.Second
		prov, err := opts.Registry.Build(providers.BuildContext{Profile: name, Config: pc, IdleTimeout: idle, Logger: s.log})
		if err != nil {
			return nil, fmt.Errorf("sandbox.profiles.%s: %w", name, err)
		}
		caps := prov.Capabilities()
		if !caps.Isolation.Valid() {
			return nil, fault.New(fault.Config, "sandbox.profiles.%s: provider %s declares no valid isolation tier", name, prov.Type())
		}
		s.profiles[name] = &Profile{
			Name: name, Default: name == opts.Config.DefaultProfile, Config: pc, Provider: prov, Caps: caps,
			Policy: toPolicy(pc.Policy), IdleTimeout: idle,
		}
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func toPolicy(c config.Policy) providers.Policy {
	p := providers.Policy{
		NetworkEgress: c.NetworkEgress, NetworkAllow: c.NetworkAllow, FSAllowRead: c.FSAllowRead, FSAllowWrite: c.FSAllowWrite,
		Timeout: 120 * time.Second, Strict: true,
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
	if c.Timeout != nil {
		p.Timeout = time.Duration(*c.Timeout * float64(time.Second))
	}
	if c.Strict != nil {
		p.Strict = *c.Strict
	}
	return p
}

// RunnerID is this process's runner id.
func (s *Service) RunnerID() string { return s.runnerID }

// Profiles returns the profiles p may use, sorted by name.
func (s *Service) Profiles(p principal.Principal) []*Profile {
	var out []*Profile
	for _, n := range s.names {
		if prof := s.profiles[n]; s.allowed(p, prof) {
			out = append(out, prof)
		}
	}
	return out
}

func (s *Service) allowed(p principal.Principal, prof *Profile) bool {
	return len(prof.Config.AllowedGroups) == 0 || p.Admin || p.InAnyGroup(prof.Config.AllowedGroups)
}

// profile resolves name ("" = the default profile) for p: unknown → fault.Config naming the
// configured profiles; not allowed → fault.Forbidden.
func (s *Service) profile(p principal.Principal, name string) (*Profile, error) {
	if name == "" {
		name = s.cfg.DefaultProfile
	}
	prof, ok := s.profiles[name]
	if !ok {
		// Only the profiles p may use are named: restricted ones stay hidden from others.
		var usable []string
		for _, n := range s.names {
			if s.allowed(p, s.profiles[n]) {
				usable = append(usable, n)
			}
		}
		return nil, fault.New(fault.Config, "unknown sandbox profile '%s'; configured profiles: [%s]", name, strings.Join(usable, " "))
	}
	if !s.allowed(p, prof) {
		return nil, fault.New(fault.Forbidden, "profile '%s' is restricted to members of %v; ask an administrator for access", name, prof.Config.AllowedGroups)
	}
	return prof, nil
}

// checks enforces the seed's fail-closed identity and policy rules (seed-semantics §9 steps
// 3–4) before any provider call, and returns the warnings of a non-strict policy.
func (s *Service) checks(prof *Profile, p principal.Principal) ([]string, error) {
	if prof.Config.Identity.Mode == "user" {
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
	if len(dims) == 0 {
		return nil, nil
	}
	if pol.Strict {
		return nil, fault.New(fault.Policy, "provider '%s' cannot enforce policy dimensions %v of profile '%s' (strict); relax the policy or set strict: false",
			prof.Provider.Type(), dims, prof.Name)
	}
	msg := fmt.Sprintf("provider '%s' cannot enforce policy dimensions %v of profile '%s'; running without them because strict is false",
		prof.Provider.Type(), dims, prof.Name)
	if _, seen := s.warnOnce.LoadOrStore(prof.Provider.Type()+"\x00"+prof.Name, struct{}{}); !seen {
		s.log.Warn(msg, "profile", prof.Name, "provider", prof.Provider.Type())
	}
	return []string{msg}, nil
}

// providerPrincipal is whom the provider acts for: the caller in user mode, the gateway
// itself in agent mode (seed: AgentPrincipalResolver).
func providerPrincipal(prof *Profile, p principal.Principal) providers.Principal {
	if prof.Config.Identity.Mode != "user" {
		return agentPrincipal
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

var agentPrincipal = providers.Principal{Mode: "agent", Subject: "sandgate"}

// Close stops the broker, draining running work until ctx ends, then releases providers that
// hold resources of their own (warm-pool refillers, connections).
func (s *Service) Close(ctx context.Context) error {
	err := s.broker.Close(ctx)
	for _, n := range s.names {
		if c, ok := s.profiles[n].Provider.(io.Closer); ok {
			if cerr := c.Close(); cerr != nil {
				s.log.Warn("closing provider", "profile", n, "err", cerr)
			}
		}
	}
	return err
}

// orphanSweeper is implemented by providers that can find sandboxes nobody owns any more
// (e.g. containers left by a crashed gateway). keep reports whether an id is still in use.
type orphanSweeper interface {
	SweepOrphans(ctx context.Context, keep func(id string) bool) ([]string, error)
}
