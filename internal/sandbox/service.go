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

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Scopes (docs/semantics.md §8).
const (
	ScopePerCall    = "per_call"
	ScopePerSession = "per_session"
	ScopePerRuntime = "per_runtime"
)

// Options builds a Service.
type Options struct {
	Settings Settings
	// Profiles are the configured profiles with their built providers.
	Profiles []ProfileSpec
	// Store is the response store (internal/store): Postgres in production, the memory
	// store in domain tests.
	Store store.Store
	// Broker runs executions on this process (thread or embedded flavor).
	Broker broker.Broker
	// Spool keeps completions the Store refused until it takes them, across restarts
	// (completion.go); nil: they wait in this process's memory only.
	Spool Spool
	// Queue, when set, sends executions to `gateway worker` processes instead (flavor
	// queue). Workers set it too (to know their own flavor); they run deliveries through
	// RunDelivered on Broker.
	Queue Queue
	// RunnerID identifies this process in task rows and heartbeats; default a random id.
	RunnerID string
	Hostname string
	Clock    Clock         // default the system clock
	NewID    func() string // default 32 random hex digits
	Logger   *slog.Logger
	// Observer is told of finished executions and failed provider calls (metrics); default
	// none.
	Observer Observer
	// Tracer makes the domain's spans (docs/semantics.md §14); default a no-op provider.
	Tracer trace.TracerProvider
	// KeyRevoked, when set, is told the id of each API key this process revokes, after the
	// store recorded it (the gateway's authentication forgets it at once); it must not block.
	KeyRevoked func(id string)
}

// Service is the sandbox domain. Build it with New; call Maintain in the background.
type Service struct {
	cfg      Settings
	store    store.Store
	spool    Spool
	broker   broker.Broker
	queue    Queue
	runnerID string
	hostname string
	now      func() time.Time
	newID    func() string
	log      *slog.Logger
	observer Observer
	tracer   trace.Tracer
	// keyRevoked is Options.KeyRevoked.
	keyRevoked func(id string)

	profiles map[string]*Profile
	names    []string

	sessionIDs *sessionIdentities // what never changes about a session, by id (sessionids.go)

	principals *principalRecorder

	contexts seenContexts  // named contexts this replica recorded (contextquota.go)
	trimmer  outputTrimmer // trims retained output over its quota (retained.go)
	// mcpSessions counts the MCP sessions each principal holds on this replica (mcpsessions.go).
	mcpSessions mcpSessions

	warnOnce sync.Map // provider+profile → struct{}

	mu        sync.Mutex
	cancelled map[string]string // tasks cancelled by a caller (vs. shutdown), with why

	kept     *keptOutputs   // the output of executions kept in memory for followers (kept.go)
	adopting sync.WaitGroup // tasks of stopped runners being followed to their end (adopt.go)

	linkKeyCache // the share links' key (preview.go)

	// Completions the store refused are retried in the background (completion.go) until
	// Close: closing stops them, retrying counts them.
	closing   chan struct{}
	closeOnce sync.Once
	retrying  sync.WaitGroup
	badSpool  sync.Map // task id → struct{}: spool records found unreadable (said once)

	// outage is how this replica saw the store lately (sweeper.go): a sweep reports no
	// runner lost until every runner had lost_after to beat again after an outage.
	outage outageWatch
}

// New builds every profile's provider (failing on configuration the providers reject) and
// returns the Service.
func New(opts Options) (*Service, error) {
	s := &Service{
		cfg: opts.Settings.withDefaults(), store: opts.Store, spool: opts.Spool, broker: opts.Broker, queue: opts.Queue, runnerID: opts.RunnerID, hostname: opts.Hostname,
		newID: opts.NewID, log: opts.Logger, profiles: map[string]*Profile{}, sessionIDs: newSessionIdentities(),
		cancelled: map[string]string{}, closing: make(chan struct{}), observer: opts.Observer, tracer: newTracer(opts.Tracer),
		keyRevoked: opts.KeyRevoked,
	}
	if s.observer == nil {
		s.observer = nopObserver{}
	}
	s.now = time.Now
	if opts.Clock != nil {
		s.now = opts.Clock.Now
	}
	if s.newID == nil {
		s.newID = randomID
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.runnerID == "" {
		s.runnerID = "runner-" + s.newID()[:12]
	}
	for _, spec := range opts.Profiles {
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
		if _, dup := s.profiles[spec.Name]; dup {
			return nil, fault.New(fault.Internal, "sandbox profile '%s' given twice", spec.Name)
		}
		s.profiles[spec.Name] = &Profile{ProfileSpec: spec, Default: spec.Name == s.cfg.DefaultProfile, Caps: caps}
		s.names = append(s.names, spec.Name)
	}
	sort.Strings(s.names)
	s.principals = newPrincipalRecorder(s.store, s.now)
	s.kept = newKeptOutputs(s.cfg.KeptOutputMemoryBytes, s.cfg.MaxOutputBytes, s.storedEnd)
	return s, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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

// allowed reports whether p may use prof: its credential allows it (an API key may be
// restricted to some profiles, administrators' too), and its groups do.
func (s *Service) allowed(p principal.Principal, prof *Profile) bool {
	return p.MayUseProfile(prof.Name) && (len(prof.AllowedGroups) == 0 || p.Admin || p.InAnyGroup(prof.AllowedGroups))
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
	if err := keyRefusal(p, name); err != nil {
		return nil, err
	}
	if !s.allowed(p, prof) {
		return nil, fault.New(fault.Forbidden, "profile '%s' is restricted to members of %v; ask an administrator for access", name, prof.AllowedGroups)
	}
	return prof, nil
}

// checks enforces the seed's fail-closed identity and policy rules (docs/semantics.md §9 steps
// 3–4) before any provider call, and returns the warnings of a non-strict policy.
func (s *Service) checks(prof *Profile, p principal.Principal) ([]string, error) {
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
	if _, seen := s.warnOnce.LoadOrStore(prof.Provider.Type()+"\x00"+prof.Name, struct{}{}); !seen {
		s.log.Warn(msg, "profile", prof.Name, "provider", prof.Provider.Type())
	}
	return []string{msg}, nil
}

// providerPrincipal is whom the provider acts for: the caller in user mode, the gateway
// itself in agent mode (seed: AgentPrincipalResolver).
func providerPrincipal(prof *Profile, p principal.Principal) providers.Principal {
	if prof.IdentityMode != IdentityUser {
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

// Close stops the broker, draining running work until ctx ends, gives completions still being
// retried until ctx ends to reach the store, then releases providers that hold resources of
// their own (warm-pool refillers, connections).
func (s *Service) Close(ctx context.Context) error {
	err := s.broker.Close(ctx)
	s.stopRetries(ctx)
	s.adopting.Wait() // stopRetries closed s.closing: adopted tasks stop being followed
	s.waitTrims()
	s.kept.close()
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
