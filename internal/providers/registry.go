package providers

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/egress"
	"github.com/sandgate/sandgate/internal/fault"
)

// Factory builds one provider for one profile (docs/semantics.md §6) from its BuildContext. It
// reads its settings from ctx.Options, the backend's own options value (see OptionsOf), never
// from the configuration. Bad or missing settings should be a fault.Config error; Build
// classifies any other error as fault.Config too.
type Factory func(ctx BuildContext) (Provider, error)

// BuildContext is everything a Factory gets. It holds no configuration type: the composition
// root (internal/gateway) maps a profile onto it, and its block onto the backend's options
// (Block.Options).
type BuildContext struct {
	// Type is the profile's provider type; it selects the factory.
	Type string
	// Profile is the profile's name, for messages and logs.
	Profile string
	// Options is the backend's own options value (docker.Options, …): what the profile's
	// block of its type, decoded by the composition root, returns from Block.Options; nil
	// when the type has no block (a provider registered by a test, which reads Params
	// instead). The fields those options share with this context (the profile's name,
	// policy, logger, …) are left zero there: the factory takes them from here.
	Options any
	// Params are the profile's free-form provider parameters (its params block); nil when it
	// has none.
	Params map[string]any
	// Policy is the profile's policy, converted from its policy block once, by the
	// composition root (the domain enforces the same value).
	Policy Policy
	// IdleTimeout is the profile's idle timeout (seed: e2b, daytona and kubernetes receive it).
	IdleTimeout time.Duration
	// Stateful says the profile has stateful: true; Build refuses a provider that keeps no
	// interpreter state between executions.
	Stateful bool
	// Installation is the id of the installation the gateway belongs to (its database's; see
	// NewInstallationID), which the provider labels its objects with and keeps its sweeps,
	// pools and attaches to. Docker and kubernetes require it.
	Installation string
	// Logger is the provider's logger; Build defaults it to slog.Default() and adds the
	// attributes profile and provider.
	Logger *slog.Logger
	// Egress is the gateway's egress proxy (nil: none), for the providers that route a
	// sandbox's traffic through it (docker).
	Egress *egress.Proxy
}

// OptionsOf returns ctx.Options as the options type T of the backend typ, for its Factory.
//
// Errors: fault.Config when ctx.Options is nil (the profile has no typ block;
// docs/semantics.md §6: a built-in provider whose block is missing raises); fault.Internal when
// it holds another type (the composition root wired the wrong mapping).
func OptionsOf[T any](ctx BuildContext, typ string) (T, error) {
	var zero T
	if ctx.Options == nil {
		return zero, fault.New(fault.Config, "sandbox profile '%s' has type %s but no %s block", ctx.Profile, typ, typ)
	}
	opts, ok := ctx.Options.(T)
	if !ok {
		return zero, fault.New(fault.Internal, "provider factory '%s' was handed options of type %T, not %T", typ, ctx.Options, zero)
	}
	return opts, nil
}

// Registry maps provider type names ("local_subprocess", "docker", …) to their Backends: the
// factory, and the configuration block the composition root decodes for it. It is safe for
// concurrent use; a process usually fills one at start-up and only builds afterwards.
type Registry struct {
	mu       sync.RWMutex
	backends map[string]Backend
	order    []string // types in the order they were added
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{backends: make(map[string]Backend)}
}

// Register adds a type without a configuration block: factory f builds it from the profile's
// params (a type a test registers). Its profiles create sandboxes (environment: managed). Like
// database/sql.Register it panics when name is empty, f is nil or name is already registered:
// those are wiring bugs.
func (r *Registry) Register(name string, f Factory) {
	if f == nil {
		panic("providers: Register of a nil factory for " + name)
	}
	r.Add(Backend{Type: name, Factory: f, Provisions: true})
}

// Add adds backend b under b.Type. It panics when b.Type is empty or already registered, and
// when b has neither a factory nor a block (it would serve nothing and accept nothing).
func (r *Registry) Add(b Backend) {
	if b.Type == "" {
		panic("providers: Add of a backend without a type")
	}
	if b.Factory == nil && b.NewBlock == nil {
		panic("providers: Add of backend " + b.Type + " without a factory or a block")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.backends[b.Type]; dup {
		panic("providers: Register called twice for " + b.Type)
	}
	r.backends[b.Type] = b
	r.order = append(r.order, b.Type)
}

// Backend returns the backend of type typ, served or reserved.
func (r *Registry) Backend(typ string) (Backend, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.backends[typ]
	return b, ok
}

// Backends returns every backend, served and reserved, in the order they were added.
func (r *Registry) Backends() []Backend {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Backend, len(r.order))
	for i, typ := range r.order {
		out[i] = r.backends[typ]
	}
	return out
}

// Types returns the served type names (those with a factory) in the order they were added,
// the order messages list them in.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for _, typ := range r.order {
		if r.backends[typ].Served() {
			out = append(out, typ)
		}
	}
	return out
}

// Names returns the served type names (those with a factory), sorted.
func (r *Registry) Names() []string {
	names := r.Types()
	slices.Sort(names)
	return names
}

// Build builds the provider of type ctx.Type.
//
// Errors: an empty or unregistered type is fault.Config naming the registered types, sorted
// (docs/semantics.md §6: "unknown provider type … lists the built-ins"); a factory's classified
// error is returned as is, an unclassified one wrapped as fault.Config. A factory that returns
// a nil provider, a provider reporting another Type, or capabilities without a valid isolation
// tier (docs/semantics.md §1: isolation is required) is a fault.Internal error.
func (r *Registry) Build(ctx BuildContext) (Provider, error) {
	typ := ctx.Type
	b, _ := r.Backend(typ)
	f := b.Factory
	if f == nil {
		known := "[" + strings.Join(r.Names(), ", ") + "]"
		if typ == "" {
			return nil, fault.New(fault.Config, "sandbox profile '%s' has no provider type; registered types: %s", ctx.Profile, known)
		}
		return nil, fault.New(fault.Config, "unknown sandbox provider type '%s' in profile '%s'; registered types: %s", typ, ctx.Profile, known)
	}
	if ctx.Logger == nil {
		ctx.Logger = slog.Default()
	}
	ctx.Logger = ctx.Logger.With("profile", ctx.Profile, "provider", typ)

	p, err := f(ctx)
	if err != nil {
		var classified *fault.Error
		if !errors.As(err, &classified) {
			return nil, fault.Wrap(fault.Config, err, "building provider '%s' for profile '%s'", typ, ctx.Profile)
		}
		return nil, err
	}
	if p == nil {
		return nil, fault.New(fault.Internal, "provider factory '%s' returned no provider", typ)
	}
	if got := p.Type(); got != typ {
		return nil, fault.New(fault.Internal, "provider factory '%s' built a provider of type '%s'", typ, got)
	}
	caps := p.Capabilities()
	if iso := caps.Isolation; !iso.Valid() {
		return nil, fault.New(fault.Internal, "provider '%s' declares no valid isolation tier (%q)", typ, string(iso))
	}
	if ctx.Stateful && !caps.Stateful {
		// Fail closed: a stateful profile whose provider silently forgets state would lose an
		// agent's work between calls.
		if c, ok := p.(interface{ Close() error }); ok {
			_ = c.Close()
		}
		return nil, fault.New(fault.Config, "sandbox profile '%s' says stateful: true but its provider '%s' keeps no interpreter state between executions", ctx.Profile, typ)
	}
	return p, nil
}
