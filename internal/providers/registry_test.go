package providers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// stub is a minimal provider for registry tests.
type stub struct {
	providers.NoAttach
	typ string
	iso providers.IsolationTier
}

func (s stub) Type() string { return s.typ }
func (s stub) Capabilities() providers.Capabilities {
	return providers.Capabilities{Isolation: s.iso, Languages: []string{"python"}}
}
func (s stub) Create(context.Context, providers.Principal, providers.Policy) (providers.Sandbox, error) {
	return nil, fault.New(fault.Provision, "stub")
}
func (s stub) Destroy(context.Context, string) error { return nil }

func factoryOf(p providers.Provider, err error) providers.Factory {
	return func(providers.BuildContext) (providers.Provider, error) { return p, err }
}

func build(r *providers.Registry, typ string) (providers.Provider, error) {
	return r.Build(providers.BuildContext{Type: typ, Profile: "prof"})
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := providers.NewRegistry()
	assert.Empty(t, r.Names())
	var got providers.BuildContext
	r.Register("zeta", func(ctx providers.BuildContext) (providers.Provider, error) {
		got = ctx
		return stub{typ: "zeta", iso: providers.IsolationContainer}, nil
	})
	r.Register("alpha", factoryOf(stub{typ: "alpha", iso: providers.IsolationNone}, nil))
	assert.Equal(t, []string{"alpha", "zeta"}, r.Names())

	p, err := r.Build(providers.BuildContext{Type: "zeta", Profile: "prof", IdleTimeout: 5 * time.Second, Params: map[string]any{"k": "v"}})
	require.NoError(t, err)
	assert.Equal(t, "zeta", p.Type())
	assert.Equal(t, "prof", got.Profile)
	assert.Equal(t, 5*time.Second, got.IdleTimeout)
	assert.Equal(t, map[string]any{"k": "v"}, got.Params)
	assert.NotNil(t, got.Logger, "a logger is always provided")

	_, err = build(r, "nope")
	require.Error(t, err)
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "'nope'")
	assert.Contains(t, err.Error(), "[alpha, zeta]")

	_, err = build(r, "")
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "[alpha, zeta]")

	assert.Panics(t, func() { r.Register("alpha", factoryOf(nil, nil)) }, "duplicate")
	assert.Panics(t, func() { r.Register("", factoryOf(nil, nil)) }, "empty name")
	assert.Panics(t, func() { r.Register("nil", nil) }, "nil factory")
}

// A registry keeps each backend whole (factory and block), in the order added; a backend
// without a factory reserves its type: its block is known, but no profile may name it.
func TestRegistryBackends(t *testing.T) {
	t.Parallel()
	r := providers.NewRegistry()
	r.Add(providers.Backend{Type: "zeta", Factory: factoryOf(stub{typ: "zeta", iso: providers.IsolationContainer}, nil), Attaches: true, AttachTarget: "a box"})
	r.Add(providers.Backend{Type: "reserved", NewBlock: func() providers.Block { return nil }})
	r.Register("alpha", factoryOf(stub{typ: "alpha", iso: providers.IsolationNone}, nil))

	assert.Equal(t, []string{"zeta", "alpha"}, r.Types(), "served types, in the order added")
	assert.Equal(t, []string{"alpha", "zeta"}, r.Names(), "served types, sorted")
	var all []string
	for _, b := range r.Backends() {
		all = append(all, b.Type)
	}
	assert.Equal(t, []string{"zeta", "reserved", "alpha"}, all)
	b, ok := r.Backend("zeta")
	require.True(t, ok)
	assert.True(t, b.Served())
	assert.Equal(t, "a box", b.AttachTarget)
	alpha, _ := r.Backend("alpha")
	assert.True(t, alpha.Provisions, "a registered type creates sandboxes")
	assert.Nil(t, alpha.NewBlock, "and has no block: its factory reads params")

	_, err := build(r, "reserved")
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "[alpha, zeta]", "a reserved type is not offered")

	assert.Panics(t, func() { r.Add(providers.Backend{Type: "zeta", Factory: factoryOf(nil, nil)}) }, "duplicate")
	assert.Panics(t, func() { r.Add(providers.Backend{Type: "idle"}) }, "neither a factory nor a block")
	assert.Panics(t, func() { r.Add(providers.Backend{Factory: factoryOf(nil, nil)}) }, "no type")
}

// Problems words what a block refuses; Enum names the allowed values.
func TestProblems(t *testing.T) {
	t.Parallel()
	var ps providers.Problems
	ps.Add("docker.pids_limit", "must be greater than 0 (got %d)", -1)
	ps.Enum("docker.pull", "always", []string{"missing", "never"})
	ps.Enum("docker.pull", "never", []string{"missing", "never"})
	require.Len(t, ps, 2)
	assert.Equal(t, "docker.pids_limit: must be greater than 0 (got -1)", ps[0].String())
	assert.Equal(t, `docker.pull: "always" is not allowed; use one of: missing, never`, ps[1].String())
}

func TestRegistryBuildErrors(t *testing.T) {
	t.Parallel()
	r := providers.NewRegistry()
	r.Register("plain-error", factoryOf(nil, errors.New("boom")))
	r.Register("classified", factoryOf(nil, fault.New(fault.Policy, "no")))
	r.Register("nil", factoryOf(nil, nil))
	r.Register("liar", factoryOf(stub{typ: "other", iso: providers.IsolationNone}, nil))
	r.Register("no-isolation", factoryOf(stub{typ: "no-isolation"}, nil))

	for typ, kind := range map[string]fault.Kind{
		"plain-error":  fault.Config,
		"classified":   fault.Policy,
		"nil":          fault.Internal,
		"liar":         fault.Internal,
		"no-isolation": fault.Internal,
	} {
		_, err := build(r, typ)
		require.Error(t, err, typ)
		assert.Equal(t, kind, fault.KindOf(err), "%s: %v", typ, err)
	}
	_, err := build(r, "plain-error")
	assert.Contains(t, err.Error(), "boom")
}

// statefulStub keeps interpreter state when stateful is set.
type statefulStub struct {
	stub
	stateful bool
	closed   *bool
}

func (s statefulStub) Capabilities() providers.Capabilities {
	c := s.stub.Capabilities()
	c.Stateful = s.stateful
	return c
}

func (s statefulStub) Close() error { *s.closed = true; return nil }

func TestRegistryBuildRefusesAStatefulProfileOnAStatelessProvider(t *testing.T) {
	t.Parallel()
	var closed bool
	r := providers.NewRegistry()
	r.Register("plain", factoryOf(statefulStub{stub: stub{typ: "plain", iso: providers.IsolationNone}, closed: &closed}, nil))
	r.Register("keeps", factoryOf(statefulStub{stub: stub{typ: "keeps", iso: providers.IsolationNone}, stateful: true, closed: &closed}, nil))

	_, err := r.Build(providers.BuildContext{Type: "plain", Profile: "prof", Stateful: true})
	require.Error(t, err)
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "says stateful: true")
	assert.True(t, closed, "the refused provider is closed")

	_, err = r.Build(providers.BuildContext{Type: "plain", Profile: "prof"})
	require.NoError(t, err)
	_, err = r.Build(providers.BuildContext{Type: "keeps", Profile: "prof", Stateful: true})
	require.NoError(t, err)
}

type opts struct{ N int }

func TestOptionsOf(t *testing.T) {
	t.Parallel()
	got, err := providers.OptionsOf[opts](providers.BuildContext{Profile: "p", Options: opts{N: 3}}, "thing")
	require.NoError(t, err)
	assert.Equal(t, 3, got.N)

	_, err = providers.OptionsOf[opts](providers.BuildContext{Profile: "p"}, "thing")
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.EqualError(t, err, "sandbox profile 'p' has type thing but no thing block")

	_, err = providers.OptionsOf[opts](providers.BuildContext{Profile: "p", Options: &opts{}}, "thing")
	assert.Equal(t, fault.Internal, fault.KindOf(err), "a wiring bug: %v", err)
}

func TestUnsupportedHelpers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nf := providers.NoFiles{Subject: "x"}
	_, err := nf.WriteFile(ctx, "a", nil, 1)
	assertCap(t, err, "files")
	_, err = nf.ReadFile(ctx, "a")
	assertCap(t, err, "files")
	_, err = nf.ListFiles(ctx, "a")
	assertCap(t, err, "files")
	assertCap(t, nf.RemoveFile(ctx, "a"), "files")
	_, err = providers.NoPackageInstall{Subject: "x"}.InstallPackages(ctx, []string{"p"}, providers.Output{})
	assertCap(t, err, "package_install")
	_, err = providers.NoAttach{Subject: "x"}.Attach(ctx, "id", providers.Principal{}, providers.Policy{})
	assertCap(t, err, "attach")
}

func assertCap(t *testing.T, err error, capability string) {
	t.Helper()
	var fe *fault.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fault.Capability, fe.Kind)
	assert.Equal(t, capability, fe.Capability)
	assert.Equal(t, "x does not support capability: "+capability, fe.Error())
}
