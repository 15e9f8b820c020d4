package docker

import (
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// specInstallation is the installation of the providers the unit tests build (no engine).
const specInstallation = "0123456789abcdef"

func testProvider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	p, err := New(Options{Installation: specInstallation, Profile: "Unit Test/Profile", Config: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestSpecMapsPolicy(t *testing.T) {
	p := testProvider(t, Config{Runtime: "runsc", User: "1000:1000", PidsLimit: 99})
	base := p.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.Equal(t, []string{sandboxBin, "serve"}, []string(base.cfg.Entrypoint), "sandboxd, never the image's own entrypoint")
	assert.Equal(t, Workspace, base.cfg.WorkingDir)
	assert.Equal(t, DefaultImage, base.cfg.Image, "the production default stays")
	assert.Equal(t, sandboxdRoot, base.cfg.User, "sandboxd runs as root in the container…")
	assert.Equal(t, []string{"--run-as", "1000:1000"}, []string(base.cfg.Cmd), "…and the programs as docker.user")
	assert.True(t, *base.hc.Init)
	assert.Equal(t, []string{"no-new-privileges"}, base.hc.SecurityOpt)
	assert.Equal(t, []string{"ALL"}, []string(base.hc.CapDrop))
	assert.Equal(t, sandboxdCaps, []string(base.hc.CapAdd), "with only the capabilities to run programs as their user")
	assert.Equal(t, int64(99), *base.hc.PidsLimit)
	assert.Equal(t, OOMScoreAdj, base.hc.OomScoreAdj, "the host's OOM killer ends sandboxes first")
	assert.Equal(t, "runsc", base.hc.Runtime)
	assert.Empty(t, string(base.hc.NetworkMode))
	assert.True(t, base.hc.ReadonlyRootfs, "sandboxd's containers always have a read-only root")
	assert.Zero(t, base.hc.Memory)

	full := p.spec(providers.Policy{NetworkEgress: providers.EgressDeny, CPU: 1.5, MemoryMB: 256, FSAllowRead: []string{"/data"}})
	assert.Equal(t, container.NetworkMode("none"), full.hc.NetworkMode)
	assert.Equal(t, int64(1.5e9), full.hc.NanoCPUs)
	assert.Equal(t, int64(256<<20), full.hc.Memory)
	assert.Equal(t, full.hc.Memory, full.hc.MemorySwap)
	assert.True(t, full.hc.ReadonlyRootfs)
	assert.True(t, hasMount(full.hc.Mounts, Workspace))
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
	assert.True(t, c.Stateful, "sandboxd keeps contexts in every managed sandbox")
	assert.False(t, c.PrincipalUser)
	assert.Equal(t, []string{"python", "bash"}, c.Languages)
	attached, err := New(Options{Installation: specInstallation, Profile: "x", AttachTo: "box"})
	require.NoError(t, err)
	defer attached.Close()
	assert.False(t, attached.Capabilities().Stateful, "an attach_to target runs no sandboxd between calls")
}

func TestFactory(t *testing.T) {
	_, err := Factory(providers.BuildContext{Type: TypeName, Profile: "p"})
	require.True(t, fault.IsKind(err, fault.Config), "a missing block: %v", err)
	assert.Contains(t, err.Error(), "no docker block")

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Options: Config{}})
	require.True(t, fault.IsKind(err, fault.Internal), "options of another type: %v", err)

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Options: Options{}})
	require.True(t, fault.IsKind(err, fault.Config), "no installation id: %v", err)
	assert.Contains(t, err.Error(), "no installation id")
	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Installation: "../x", Options: Options{}})
	require.True(t, fault.IsKind(err, fault.Config), "a malformed installation id: %v", err)

	prov, err := Factory(providers.BuildContext{Type: TypeName, Profile: "p", Installation: specInstallation, Options: Options{AttachTo: "box"}})
	require.NoError(t, err)
	defer prov.(*Provider).Close()
	assert.Equal(t, "box", prov.(*Provider).attachTo)
	assert.Equal(t, "p", prov.(*Provider).profile, "the profile's name from the context")
	assert.Equal(t, specInstallation, prov.(*Provider).installation, "the installation from the context")

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Installation: specInstallation, Options: Options{AttachTo: "box", Config: Config{WarmPoolSize: 2}}})
	require.True(t, fault.IsKind(err, fault.Config), "a pool on an attached profile: %v", err)

	_, err = Factory(providers.BuildContext{Type: TypeName, Profile: "p", Installation: specInstallation, Stateful: true, Options: Options{AttachTo: "box"}})
	require.True(t, fault.IsKind(err, fault.Config), "stateful (from the context) on an attached profile: %v", err)
}

// The host paths a container's labels lead to stay in its installation's folders; containers
// made before installation ids keep theirs; a label that is not an id leads nowhere.
func TestInstallationFolders(t *testing.T) {
	m, err := newAgent("web", specInstallation, SandboxdConfig{Transport: TransportSocket, SocketDir: "/run/sd"}, "", "unix:///var/run/docker.sock")
	require.NoError(t, err)
	assert.Equal(t, "/run/sd/"+specInstallation+"/web", m.sockDir, "this installation's socket folders")
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{LabelSandboxd: "0123456789ab", LabelProfile: "web", LabelInstallation: "fedcba9876543210"}, "/run/sd/fedcba9876543210/web/0123456789ab"},
		{map[string]string{LabelSandboxd: "0123456789ab", LabelProfile: "web"}, "/run/sd/web/0123456789ab"},
		{map[string]string{LabelSandboxd: "0123456789ab", LabelProfile: "web", LabelInstallation: "../../etc"}, ""},
		{map[string]string{LabelSandboxd: "../x", LabelProfile: "web", LabelInstallation: specInstallation}, ""},
	} {
		got, ok := m.folder(tc.labels)
		assert.Equal(t, tc.want, got, "%v", tc.labels)
		assert.Equal(t, tc.want != "", ok)
	}

	d := newDisks("/var/lib/sg", specInstallation, "tcp://remote:2376", "", false)
	img, link := d.paths("0123456789abcdef0123")
	assert.Equal(t, "/var/lib/sg/disks/"+specInstallation+"/0123456789abcdef0123.img", img, "new disks in this installation's folder")
	assert.Equal(t, "/var/lib/sg/disks/"+specInstallation+"/0123456789abcdef0123.dev", link)
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{LabelDisk: "0123456789abcdef0123", LabelInstallation: "fedcba9876543210"}, "/var/lib/sg/disks/fedcba9876543210/0123456789abcdef0123.img"},
		{map[string]string{LabelDisk: "0123456789abcdef0123"}, "/var/lib/sg/disks/0123456789abcdef0123.img"},
		{map[string]string{LabelDisk: "0123456789abcdef0123", LabelInstallation: "x/../.."}, ""},
		{map[string]string{LabelDisk: "../../x", LabelInstallation: specInstallation}, ""},
	} {
		got, _, ok := d.pathsOf(tc.labels)
		assert.Equal(t, tc.want, got, "%v", tc.labels)
		assert.Equal(t, tc.want != "", ok)
	}
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

func TestSpecSandboxdMode(t *testing.T) {
	p := testProvider(t, Config{Sandboxd: SandboxdConfig{Transport: TransportSocket, SocketDir: t.TempDir()}})
	s := p.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.Equal(t, []string{sandboxBin, "serve"}, []string(s.cfg.Entrypoint))
	assert.Equal(t, []string{"--run-as", DefaultProgramUser}, []string(s.cfg.Cmd), "programs run as non-root by default")
	assert.Equal(t, sandboxdRoot, s.cfg.User)
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
	assert.False(t, hasMount(s.hc.Mounts, sandboxRun), "socket: the host folder is bind-mounted at creation")
	// docker.user wins over sandboxd's default.
	p = testProvider(t, Config{User: "1000:1000", Sandboxd: SandboxdConfig{SocketDir: t.TempDir()}})
	assert.Equal(t, []string{"--run-as", "1000:1000"}, []string(p.spec(providers.Policy{NetworkEgress: providers.EgressAllow}).cfg.Cmd))
	// A non-root sandboxd cannot switch users: programs run as it, no capability is added.
	p = testProvider(t, Config{Sandboxd: SandboxdConfig{SocketDir: t.TempDir(), User: "7:7"}})
	same := p.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.Equal(t, "7:7", same.cfg.User)
	assert.Empty(t, same.cfg.Cmd)
	assert.Empty(t, same.hc.CapAdd)
	_, err := New(Options{Profile: "x", Config: Config{User: "8", Sandboxd: SandboxdConfig{User: "7:7"}}})
	require.True(t, fault.IsKind(err, fault.Config), "programs as another user than a non-root sandboxd: %v", err)
	// Programs as root would hold sandboxd's capabilities: none are added.
	p = testProvider(t, Config{User: "root", Sandboxd: SandboxdConfig{SocketDir: t.TempDir()}})
	asRoot := p.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.Equal(t, "root", asRoot.cfg.User)
	assert.Empty(t, asRoot.cfg.Cmd)
	assert.Empty(t, asRoot.hc.CapAdd)

	// exec: sandboxd's folder is on a volume of the container, under sd/.
	e := testProvider(t, Config{Sandboxd: SandboxdConfig{Transport: TransportExec}})
	es := e.spec(providers.Policy{NetworkEgress: providers.EgressAllow})
	assert.True(t, hasMount(es.hc.Mounts, sandboxRun))
	assert.Contains(t, es.cfg.Env, "SANDBOXD_SOCKET="+sandboxRun+"/"+execRunDir+"/"+socketName)
	assert.NotEqual(t, s.hash, es.hash, "the transport is part of the configuration")

	_, err = New(Options{Installation: specInstallation, Profile: "x", Config: Config{Sandboxd: SandboxdConfig{Transport: "ssh"}}})
	require.True(t, fault.IsKind(err, fault.Config), "%v", err)
}

func TestTransportFollowsTheEngineAddress(t *testing.T) {
	for host, want := range map[string]Transport{
		"unix:///var/run/docker.sock": TransportSocket,
		"tcp://10.0.0.5:2376":         TransportExec,
		"ssh://me@build-host":         TransportExec,
	} {
		m, err := newAgent("p", specInstallation, SandboxdConfig{SocketDir: t.TempDir()}, "", host)
		require.NoError(t, err)
		assert.Equal(t, want, m.transport, host)
	}
	m, err := newAgent("p", specInstallation, SandboxdConfig{Transport: TransportExec}, "", "unix:///var/run/docker.sock")
	require.NoError(t, err)
	assert.Equal(t, TransportExec, m.transport, "the configured transport wins")
	assert.Empty(t, m.sockDir, "exec needs no host folder")
}
