package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/account"
	"github.com/sandgate/sandgate/internal/sandbox/observe"
	"github.com/sandgate/sandgate/internal/sandbox/park"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/sandbox/quota"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
	"github.com/sandgate/sandgate/internal/sandbox/session"
	"github.com/sandgate/sandgate/internal/sandbox/upkeep"
	"github.com/sandgate/sandgate/internal/store"
)

// Options builds a Service.
type Options struct {
	Settings Settings
	// Profiles are the configured profiles with their built providers.
	Profiles []ProfileSpec
	// Store is the response store (internal/store): Postgres in production, the memory
	// store in domain tests.
	Store store.Store
	// Broker is the flavor of the broker that runs executions on this process
	// (broker.FlavorThread, the default, or broker.FlavorEmbedded).
	Broker string
	// Spool keeps completions the Store refused until it takes them, across restarts
	// (completion.go); nil: they wait in this process's memory only.
	Spool Spool
	// Queue, when set, sends executions to `gateway worker` processes instead (flavor
	// queue). Workers set it too (to know their own flavor); their queue handler submits
	// deliveries to Service.Broker.
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
	// KeyCreated, when set, is told the SHA-256 of each API key's secret this process makes,
	// after the store recorded it and before the secret is answered (the gateway's
	// authentication forgets having found no key of it); it must not block.
	KeyCreated func(hash [32]byte)
	// SecretKeys seal and open secret values (secret.ParseKeys); nil or empty: secrets are
	// refused (secret.NoKey) and only sessions binding none are made.
	SecretKeys *secret.Keyring
	// SecretLimit is how many secrets a principal may keep (0: secret.DefaultLimit).
	SecretLimit int
}

// Service is the sandbox domain. Build it with New; call Maintain in the background.
type Service struct {
	cfg      Settings
	store    store.Store
	runs     *executions // the execution room: route, job, output, completion, cancellations, adoption (route.go)
	clock    Clock
	log      *slog.Logger
	obs      *observe.Room   // the Observer, spans, provider calls (observe/)
	profiles *profile.Set    // the configured profiles, the fail-closed checks (profile/)
	sessions *session.Room   // sessions made, found, listed, destroyed; their identities (session/)
	account  *account.Room   // principals, API keys, the audit log (account/)
	quota    *quota.Room     // limits, refusals, contexts and MCP sessions counted here (quota/)
	secrets  *secret.Room    // principals' and profiles' secrets, sessions' bindings (secret/)
	park     *park.Room      // pause, resume, idle parking, lifetimes, snapshots, preview links (park/)
	upkeep   *upkeep.Sweeper // heartbeat, outage watch, sweeps, retained-output trims (upkeep/)
}

// New builds every profile's provider (failing on configuration the providers reject) and
// returns the Service.
func New(opts Options) (*Service, error) {
	s := &Service{
		cfg: opts.Settings.withDefaults(), store: opts.Store, log: opts.Logger, clock: opts.Clock,
		obs: observe.New(opts.Observer, opts.Tracer),
	}
	if s.clock == nil {
		s.clock = SystemClock{}
	}
	newID := opts.NewID
	if newID == nil {
		newID = randomID
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	runnerID := opts.RunnerID
	if runnerID == "" {
		runnerID = "runner-" + newID()[:12]
	}
	profiles, err := profile.NewSet(opts.Profiles, s.cfg.DefaultProfile, s.log)
	if err != nil {
		return nil, err
	}
	s.runs = &executions{
		s: s, jobs: map[string]*execJob{}, spool: opts.Spool, runnerID: runnerID, newID: newID,
		cancelled: map[string]string{}, closing: make(chan struct{}),
	}
	if s.runs.broker, err = broker.New(opts.Broker, s.runs); err != nil {
		return nil, err
	}
	s.runs.route = newRoute(s, opts.Queue)
	s.profiles = profiles
	s.account = account.New(account.Options{
		Store: s.store, Profiles: profiles, Keys: s.cfg.APIKeys, AuditRetention: s.cfg.AuditRetention,
		AdminGroups: s.cfg.AdminGroups, Clock: s.clock, NewID: newID, Log: s.log, KeyRevoked: opts.KeyRevoked, KeyCreated: opts.KeyCreated,
	})
	s.secrets = secret.New(secret.Options{
		Store: s.store, Keys: opts.SecretKeys, Limit: opts.SecretLimit, Clock: s.clock, Record: s.account.Record, Log: s.log,
	})
	s.quota = quota.New(s.cfg.Quotas, s.store, s.clock, s.log)
	sessions := &session.Options{
		Store: s.store, Profiles: profiles, Quota: s.quota, Account: s.account, Clock: s.clock, NewID: newID, Log: s.log,
		Secrets: s.sessionSecrets, Call: s.obs.Call, StartSpan: s.obs.Span, EndSpan: endSpan, CancelTask: s.runs.cancelTask,
	}
	s.sessions = session.New(sessions)
	s.park = park.New(parkOptions(s, newID))
	sessions.Park = s.park // the two rooms use each other: the park room is built with the session room's functions
	s.upkeep = upkeep.New(upkeep.Options{
		Store: s.store, Profiles: profiles, RunnerID: runnerID, Hostname: opts.Hostname, LostAfter: s.cfg.LostAfter,
		SweepInterval: s.cfg.SweepInterval, TaskTTL: s.cfg.ResponseTTL, Clock: s.clock, Log: s.log, Hooks: upkeepHooks(s),
	})
	s.runs.kept = newKeptOutputs(s.cfg.KeptOutputMemoryBytes, s.cfg.MaxOutputBytes, s.runs.storedEnd, s.clock)
	return s, nil
}

// now is the time on the Service's clock.
func (s *Service) now() time.Time { return s.clock.Now() }

// since is the time elapsed on the Service's clock since t.
func (s *Service) since(t time.Time) time.Duration { return s.clock.Now().Sub(t) }

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Broker is the broker that runs executions on this process. A queue worker's delivery
// handler submits the requests it receives to it (broker.Queued.Handler).
func (s *Service) Broker() broker.Broker { return s.runs.broker }

// RunnerID is this process's runner id.
func (s *Service) RunnerID() string { return s.runs.runnerID }

// Profiles returns the profiles p may use, sorted by name.
func (s *Service) Profiles(p principal.Principal) []*Profile { return s.profiles.Usable(p) }

// Close stops the broker, draining running work until ctx ends, gives completions still being
// retried until ctx ends to reach the store, then releases providers that hold resources of
// their own (warm-pool refillers, connections).
func (s *Service) Close(ctx context.Context) error {
	err := s.runs.broker.Close(ctx)
	s.runs.stopRetries(ctx)
	s.runs.adopting.Wait() // stopRetries closed s.runs.closing: adopted tasks stop being followed
	s.upkeep.CloseTrims()
	s.runs.kept.close()
	for _, prof := range s.profiles.All() {
		if c, ok := prof.Provider.(io.Closer); ok {
			if cerr := c.Close(); cerr != nil {
				s.log.Warn("closing provider", "profile", prof.Name, "err", cerr)
			}
		}
	}
	return err
}
