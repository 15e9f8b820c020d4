package docker

import (
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

func testProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New(Options{Profile: "Unit Test/Profile", Config: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestSpecMapsPolicy(t *testing.T) {
	p := testProvider(t, Config{Runtime: "runsc", User: "1000:1000", PidsLimit: 99})
	base := p.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.Equal(t, []string{"sleep", "infinity"}, []string(base.cfg.Entrypoint), "the image's entrypoint never runs")
	assert.Empty(t, base.cfg.Cmd)
	assert.Equal(t, Workspace, base.cfg.WorkingDir)
	assert.Equal(t, DefaultImage, base.cfg.Image, "the production default stays")
	assert.Equal(t, "1000:1000", base.cfg.User)
	assert.True(t, *base.hc.Init)
	assert.Equal(t, []string{"no-new-privileges"}, base.hc.SecurityOpt)
	assert.Equal(t, []string{"ALL"}, []string(base.hc.CapDrop))
	assert.Empty(t, base.hc.CapAdd)
	assert.Equal(t, int64(99), *base.hc.PidsLimit)
	assert.Equal(t, OOMScoreAdj, base.hc.OomScoreAdj, "the host's OOM killer ends sandboxes first")
	assert.Equal(t, "runsc", base.hc.Runtime)
	assert.Empty(t, string(base.hc.NetworkMode))
	assert.False(t, base.hc.ReadonlyRootfs)
	assert.Zero(t, base.hc.Memory)

	full := p.spec(providers.Policy{NetworkEgress: providers.EgressDeny, CPU: 1.5, MemoryMB: 256, FSAllowRead: []string{"/data"}})
	assert.Equal(t, container.NetworkMode("none"), full.hc.NetworkMode)
	assert.Equal(t, int64(1.5e9), full.hc.NanoCPUs)
	assert.Equal(t, int64(256<<20), full.hc.Memory)
	assert.Equal(t, full.hc.Memory, full.hc.MemorySwap)
	assert.True(t, full.hc.ReadonlyRootfs)
	assert.Equal(t, []mount.Mount{{Type: mount.TypeVolume, Target: Workspace}}, full.hc.Mounts)
	assert.Contains(t, full.hc.Tmpfs, "/tmp")
	assert.NotEqual(t, base.hash, full.hash, "the hash tells configurations apart")
	assert.Equal(t, base.hash, p.spec(providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: 5}).hash, "the timeout is no part of a container")

	d := testProvider(t, Config{Runtime: "docker"})
	assert.Empty(t, d.spec(providers.Policy{}).hc.Runtime, "docker means the engine's default runtime")
	assert.Equal(t, int64(DefaultPidsLimit), *d.spec(providers.Policy{}).hc.PidsLimit)
}

func TestCapabilities(t *testing.T) {
	c := testProvider(t, Config{}).Capabilities()
	assert.Equal(t, providers.IsolationContainer, c.Isolation)
	assert.True(t, c.Shell && c.Files && c.PackageInstall && c.Attach && c.Provisions && c.AttachesExternal)
	assert.True(t, c.PolicyNetwork && c.PolicyFilesystem && c.PolicyResources)
	assert.False(t, c.Stateful || c.PrincipalUser)
	assert.Equal(t, []string{"python", "bash"}, c.Languages)
}

func TestFactory(t *testing.T) {
	_, err := Factory(providers.BuildContext{Type: TypeName, Profile: "p"})
	require.True(t, fault.IsKind(err, fault.Config), "a missing block: %v", err)
	assert.Contains(t, err.Error(), "no docker block")

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Options: Config{}})
	require.True(t, fault.IsKind(err, fault.Internal), "options of another type: %v", err)

	prov, err := Factory(providers.BuildContext{Type: TypeName, Profile: "p", Options: Options{AttachTo: "box"}})
	require.NoError(t, err)
	defer prov.(*Provider).Close()
	assert.Equal(t, "box", prov.(*Provider).attachTo)
	assert.Equal(t, "p", prov.(*Provider).profile, "the profile's name from the context")

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Options: Options{AttachTo: "box", Config: Config{WarmPoolSize: 2}}})
	require.True(t, fault.IsKind(err, fault.Config), "a pool on an attached profile: %v", err)

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Stateful: true, Options: Options{AttachTo: "box"}})
	require.True(t, fault.IsKind(err, fault.Config), "stateful (from the context) on an attached profile: %v", err)
}

func TestUnenforced(t *testing.T) {
	ins := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{HostConfig: &container.HostConfig{}}}
	pol := providers.Policy{NetworkEgress: providers.EgressDeny, MemoryMB: 64, CPU: 1, FSAllowWrite: []string{"/x"}}
	assert.Equal(t, []string{"network_egress", "filesystem", "resources"}, unenforced(ins, pol))
	ins.HostConfig.NetworkMode = "none"
	ins.HostConfig.ReadonlyRootfs = true
	ins.HostConfig.Memory = 32 << 20
	ins.HostConfig.NanoCPUs = 5e8
	assert.Empty(t, unenforced(ins, pol))
	ins.HostConfig.Memory = 128 << 20
	assert.Equal(t, []string{"resources"}, unenforced(ins, pol), "a looser limit does not enforce the policy")
}

func TestNames(t *testing.T) {
	assert.Equal(t, "unit-test-profile", slug("Unit Test/Profile"))
	assert.Equal(t, "profile", slug(""))
	assert.LessOrEqual(t, len(slug(string(make([]byte, 100)))), 41)
	id := "0123456789abcdef0123"
	assert.Equal(t, "sandgate-p-w0123456789ab", claimedName("p", id))
	assert.Equal(t, "a", primaryName([]string{"/other/alias", "/a"}))
	for user, want := range map[string][3]int{"1000": {1000, 0, 1}, "1000:2000": {1000, 2000, 1}, "app": {0, 0, 0}, "1000:staff": {0, 0, 0}} {
		uid, gid, ok := numericUser(user)
		okInt := 0
		if ok {
			okInt = 1
		}
		assert.Equal(t, want, [3]int{uid, gid, okInt}, user)
	}
}

func TestPreambleAndHelpers(t *testing.T) {
	var out limitedBuffer
	out.max = 100
	pre := &preamble{w: &out}
	_, _ = pre.Write([]byte{0})
	_, _ = pre.Write([]byte("hello"))
	assert.True(t, pre.started)
	assert.False(t, pre.failed)
	assert.Equal(t, "hello", out.String())

	pre = &preamble{w: &out}
	_, _ = pre.Write([]byte("\x01escape"))
	assert.True(t, pre.failed)
	assert.Equal(t, "escape", pre.status())
	assert.True(t, fault.IsKind(dirStatus("escape", "x"), fault.Policy))
	assert.True(t, fault.IsKind(dirStatus("notfound", "x"), fault.NotFound))
	assert.True(t, fault.IsKind(dirStatus("notdir", "x"), fault.Validation))
	assert.True(t, fault.IsKind(pathStatus("isdir", "x"), fault.Conflict))
	assert.NoError(t, pathStatus("ok", "x"))
	assert.Equal(t, "SIGKILL", signalName(9))
}

func TestSpecSandboxdMode(t *testing.T) {
	p := testProvider(t, Config{Sandboxd: SandboxdConfig{Enabled: true, SocketDir: t.TempDir()}})
	require.True(t, p.Capabilities().Stateful)
	s := p.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.Equal(t, []string{sandboxBin, "serve"}, []string(s.cfg.Entrypoint))
	assert.Empty(t, s.cfg.Cmd)
	assert.Equal(t, DefaultSandboxdUser, s.cfg.User, "non-root by default")
	assert.True(t, s.hc.ReadonlyRootfs)
	assert.True(t, hasMount(s.hc.Mounts, Workspace), "a writable workspace volume")
	assert.Contains(t, s.hc.Tmpfs, "/tmp")
	assert.Contains(t, s.hc.Tmpfs["/tmp"], ",size=512m", "a tmpfs is never unbounded")
	limited := providers.Policy{NetworkEgress: providers.EgressAllow}
	limited.MemoryMB = 256
	assert.Contains(t, p.spec(limited).hc.Tmpfs["/tmp"], ",size=128m", "half the memory limit")
	assert.Contains(t, s.cfg.Env, "SANDBOXD_SOCKET="+sandboxRun+"/"+socketName)
	assert.Contains(t, s.cfg.Env, "SANDBOXD_TOKEN_FILE="+sandboxRun+"/"+tokenFileName)
	for _, kv := range s.cfg.Env {
		assert.False(t, strings.HasPrefix(kv, tokenEnv+"="), "the secret is never in the environment: %s", kv)
	}
	// docker.user wins over sandboxd's default.
	p = testProvider(t, Config{User: "1000:1000", Sandboxd: SandboxdConfig{Enabled: true, SocketDir: t.TempDir()}})
	assert.Equal(t, "1000:1000", p.spec(providers.Policy{NetworkEgress: providers.EgressAllow}).cfg.User)
	// An attached profile cannot run sandboxd.
	_, err := New(Options{Profile: "x", AttachTo: "some-container", Config: Config{Sandboxd: SandboxdConfig{Enabled: true}}})
	require.Error(t, err)
}
