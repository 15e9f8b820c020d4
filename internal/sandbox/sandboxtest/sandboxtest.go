package sandboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
	"github.com/sandgate/sandgate/internal/store/memory"
)

// T0 is when a Clock made by New starts.
var T0 = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// Issuer is the issuer of the principals Env.Principal records.
const Issuer = "https://issuer.sandboxtest.invalid"

// Options configure New. Every field is optional.
type Options struct {
	// Settings are the domain's settings. WaitTimeout 0 is taken as "not set" and becomes
	// sandbox.DefaultWaitTimeout (calls wait for their execution, as with the gateway's
	// default configuration); set AlwaysPromote for the domain's WaitTimeout 0.
	Settings      sandbox.Settings
	AlwaysPromote bool
	// Profiles default to Profile("default", sandbox.ScopePerSession, nil).
	Profiles []sandbox.ProfileSpec
	// Broker is the broker flavor (broker.FlavorThread by default).
	Broker string
	// Store and Clock default to new ones (the clock at T0). Share a Store between two
	// Envs to model two replicas of one gateway.
	Store *memory.Store
	Clock *Clock
	// RunnerID defaults to "runner-1".
	RunnerID string
	// Spool keeps completions the Store refuses (sandbox.Options.Spool); default none.
	Spool sandbox.Spool
	// Observer is told of finished executions and failed provider calls; default none.
	Observer sandbox.Observer
	// KeyRevoked is told of the API keys the service revokes (sandbox.Options.KeyRevoked).
	KeyRevoked func(id string)
	// KeyCreated is told of the API keys the service makes (sandbox.Options.KeyCreated).
	KeyCreated func(hash [32]byte)
	// SecretKeys seal secrets (sandbox.Options.SecretKeys); nil: none configured.
	SecretKeys *secret.Keyring
}

// Env is a domain service on in-memory ports.
type Env struct {
	Service *sandbox.Service
	Store   *memory.Store
	Clock   *Clock
	Broker  broker.Broker
	// Profiles are the profiles the service was built with.
	Profiles []sandbox.ProfileSpec
}

// New builds a *sandbox.Service on a memory store (internal/store/memory), a manual Clock and the profiles' (fake)
// providers, with sequential ids ("0000…0001", …), records this runner's heartbeat at the
// clock's time, and closes the service when t ends (running executions are cancelled).
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	env, err := Build(t, opts)
	if err != nil {
		t.Fatalf("sandboxtest: sandbox.New: %v", err)
	}
	return env
}

// Build is New, returning the error of sandbox.New (a configuration the domain refuses)
// instead of failing the test.
func Build(t testing.TB, opts Options) (*Env, error) {
	t.Helper()
	st, clock := opts.Store, opts.Clock
	if st == nil {
		st = memory.New()
	}
	if clock == nil {
		clock = NewClock(T0)
	}
	settings := opts.Settings
	switch {
	case opts.AlwaysPromote:
		settings.WaitTimeout = 0
	case settings.WaitTimeout == 0:
		settings.WaitTimeout = sandbox.DefaultWaitTimeout
	}
	profiles := opts.Profiles
	if profiles == nil {
		profiles = []sandbox.ProfileSpec{Profile("default", sandbox.ScopePerSession, nil)}
	}
	runnerID := opts.RunnerID
	if runnerID == "" {
		runnerID = "runner-1"
	}
	var ids atomic.Int64
	svc, err := sandbox.New(sandbox.Options{
		Settings: settings, Profiles: profiles, Store: st, Spool: opts.Spool, Broker: opts.Broker, RunnerID: runnerID, Hostname: "sandboxtest",
		Clock: clock, NewID: func() string { return fmt.Sprintf("%s%028x", idPrefix(runnerID), ids.Add(1)) },
		Logger: slog.New(slog.DiscardHandler), Observer: opts.Observer, KeyRevoked: opts.KeyRevoked, KeyCreated: opts.KeyCreated, SecretKeys: opts.SecretKeys,
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // do not drain: cancel what still runs and wait for it to return
		_ = svc.Close(ctx)
	})
	if err := svc.Heartbeat(context.Background()); err != nil {
		t.Fatalf("sandboxtest: heartbeat: %v", err)
	}
	return &Env{Service: svc, Store: st, Clock: clock, Broker: svc.Broker(), Profiles: profiles}, nil
}

// idPrefix gives each runner's ids their own first four hex digits, so that two Envs on one
// Store do not mint the same ids.
func idPrefix(runnerID string) string {
	var h uint16
	for i := 0; i < len(runnerID); i++ {
		h = h*31 + uint16(runnerID[i])
	}
	return fmt.Sprintf("%04x", h)
}

// Profile is a profile spec on a new fake provider (DefaultCapabilities when caps is nil):
// egress allowed, a one-minute timeout, strict policy, a ten-minute idle timeout.
func Profile(name, scope string, caps *providers.Capabilities) sandbox.ProfileSpec {
	opts := ProviderOptions{}
	if caps != nil {
		opts.Capabilities = *caps
	}
	return sandbox.ProfileSpec{
		Name: name, Scope: scope, IdentityMode: sandbox.IdentityAgent, IdleTimeout: 10 * time.Minute,
		Policy:   providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true},
		Provider: NewProvider(opts),
	}
}

// Provider returns the fake provider of profile name; it fails the test when the profile is
// unknown or its provider is no *Provider.
func (e *Env) Provider(t testing.TB, name string) *Provider {
	t.Helper()
	for _, p := range e.Profiles {
		if p.Name == name {
			if fp, ok := p.Provider.(*Provider); ok {
				return fp
			}
			t.Fatalf("sandboxtest: profile %q has a %T provider, not a fake", name, p.Provider)
		}
	}
	t.Fatalf("sandboxtest: no profile %q", name)
	return nil
}

// Principal records (through Service.Identify) and returns the principal subject of Issuer,
// member of groups.
func (e *Env) Principal(t testing.TB, subject string, groups ...string) principal.Principal {
	t.Helper()
	p, err := e.Service.Identify(context.Background(), principal.Principal{
		Issuer: Issuer, Subject: subject, Username: subject, Groups: groups,
	})
	if err != nil {
		t.Fatalf("sandboxtest: identify %s: %v", subject, err)
	}
	return p
}
