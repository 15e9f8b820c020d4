package docker_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// baseImage is the sandbox image without sandboxd (build.sh's first layer): the provider must
// copy its own binary in.
var baseImage = envOr("SANDGATE_DOCKER_TEST_BASE_IMAGE", "")

// sandboxdProvider builds a provider in sandboxd mode with its socket folders in a folder of
// the test's.
func sandboxdProvider(t *testing.T, mutate ...func(*docker.Options)) (*docker.Provider, string) {
	t.Helper()
	// Short: Unix socket paths are limited to 107 bytes.
	sockDir, err := os.MkdirTemp("", "sgd")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	p := newProvider(t, append([]func(*docker.Options){func(o *docker.Options) {
		o.Stateful = true
		o.Config.Sandboxd = docker.SandboxdConfig{SocketDir: sockDir, Binary: sandboxdBinary(t)}
	}}, mutate...)...)
	return p, sockDir
}

var (
	sdBinOnce sync.Once
	sdBin     string
	sdBinErr  error
)

// sandboxdBinary builds cmd/sandboxd once per test binary, static.
func sandboxdBinary(t *testing.T) string {
	t.Helper()
	sdBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandboxd-bin")
		if err != nil {
			sdBinErr = err
			return
		}
		sdBin = filepath.Join(dir, "sandboxd")
		cmd := exec.Command("go", "build", "-o", sdBin, "github.com/sandgate/sandgate/cmd/sandboxd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			sdBinErr = err
			t.Logf("go build: %s", out)
		}
	})
	require.NoError(t, sdBinErr, "building sandboxd")
	return sdBin
}

// TestContractOverExec runs the whole contract suite, stateful tests included, on containers
// whose sandboxd the provider reaches through the engine's exec API (`sandboxd proxy`), as
// for a remote engine.
func TestContractOverExec(t *testing.T) {
	requireEngine(t)
	p, _ := sandboxdProvider(t, func(o *docker.Options) { o.Config.Sandboxd.Transport = docker.TransportExec })
	require.True(t, p.Capabilities().Stateful)
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   testGrace,
		RichResults: true,
	})
}

// TestSandboxdCopiedIntoImagesWithoutIt runs sandboxd in an image that does not ship it: the
// provider copies its binary into the created container before starting it.
func TestSandboxdCopiedIntoImagesWithoutIt(t *testing.T) {
	requireEngine(t)
	img := baseImage
	if img == "" {
		img = findBaseImage(t)
	}
	p, _ := sandboxdProvider(t, func(o *docker.Options) { o.Config.Image = img })
	sb := create(t, p, allowPol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, []string{"/.sandgate/bin/sandboxd", "serve"}, []string(ins.Config.Entrypoint))
	r := run(t, sb, providers.ExecSpec{Code: "x = 41", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	r = run(t, sb, providers.ExecSpec{Code: "print(x + 1)", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.Equal(t, "42\n", r.stdout)
}

// findBaseImage returns build.sh's base image (sandgate/sandbox-base:*).
func findBaseImage(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "sandgate/sandbox-base").Output()
	require.NoError(t, err)
	for _, line := range strings.Fields(string(out)) {
		if strings.HasPrefix(line, "sandgate/sandbox-base:") {
			return line
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no sandgate/sandbox-base image: scripts/docker-setup.sh builds it")
	}
	t.Skip("no sandgate/sandbox-base image (scripts/docker-setup.sh builds it)")
	return ""
}

// TestSandboxdHardening: sandboxd mode runs as a non-root user on a read-only root file
// system with a writable workspace, and programs never see the secret.
func TestSandboxdHardening(t *testing.T) {
	requireEngine(t)
	p, _ := sandboxdProvider(t)
	sb := create(t, p, allowPol)
	assert.Equal(t, "65532\n", sh(t, sb, "id -u"))
	r := run(t, sb, providers.ExecSpec{Command: "touch /usr/evil"})
	require.NoError(t, r.err)
	assert.NotEqual(t, 0, r.st.ExitCode, "the root file system must be read-only")
	sh(t, sb, "echo ok > /workspace/w && echo ok > /tmp/t")
	assert.Equal(t, "524288\n", sh(t, sb, "df -k /tmp | awk 'NR==2 {print $2}'"), "/tmp is a bounded tmpfs (512 MiB without a memory limit)")
	assert.NotContains(t, sh(t, sb, "env; cat /proc/self/environ | tr '\\0' '\\n'"), "SANDBOXD_TOKEN")

	// The secret is nowhere a program can read: not in the environment of PID 1 (docker's
	// init) or of any other process, not in sandboxd's memory, not in the socket folder.
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	secret := ins.Config.Labels[docker.LabelSandboxdToken]
	require.Len(t, secret, 64)
	for _, kv := range ins.Config.Env {
		assert.NotContains(t, kv, secret, "the container's environment")
	}
	seen := sh(t, sb, "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /.sandgate/run/*; do cat $f 2>/dev/null; echo; done; ls -la /.sandgate/run; exit 0")
	assert.NotContains(t, seen, secret)
	assert.Equal(t, "gone\n", sh(t, sb, "test -e /.sandgate/run/token || echo gone"), "the secret file is removed once sandboxd answers")
	sdPID := strings.TrimSpace(sh(t, sb, "pgrep -o sandboxd || pidof sandboxd"))
	r = run(t, sb, providers.ExecSpec{Command: "cat /proc/" + sdPID + "/environ; head -c 1 /proc/" + sdPID + "/mem"})
	require.NoError(t, r.err)
	assert.NotEqual(t, 0, r.st.ExitCode, "sandboxd is not dumpable: %s", r.stdout)
	assert.NotContains(t, r.stdout, secret)
}

// TestSandboxdSecretRequired: the socket answers probes to anyone but the runtime API only
// with the container's secret.
func TestSandboxdSecretRequired(t *testing.T) {
	requireEngine(t)
	p, sockDir := sandboxdProvider(t)
	sb := create(t, p, allowPol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	folder := ins.Config.Labels[docker.LabelSandboxd]
	require.NotEmpty(t, folder)
	sock := filepath.Join(sockDir, filepath.Base(sockDir), folder, "sd.sock")
	if _, err := os.Stat(sock); err != nil {
		// The profile's folder is named after its slug.
		matches, _ := filepath.Glob(filepath.Join(sockDir, testInstallation, "*", folder, "sd.sock"))
		require.Len(t, matches, 1, "socket of %s under %s", folder, sockDir)
		sock = matches[0]
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	get := func(path, token string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://sandboxd"+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 200, get("/healthz", ""))
	assert.Equal(t, 401, get("/v1/contexts", ""))
	assert.Equal(t, 401, get("/v1/contexts", "not-the-secret"))
	secret := ins.Config.Labels[docker.LabelSandboxdToken]
	require.NotEmpty(t, secret)
	assert.Equal(t, 200, get("/v1/contexts", secret))
}

// TestSandboxdReattachAfterRestart: a new provider (a restarted gateway) reaches the same
// sandboxd and its contexts; a stopped container is started again with a fresh interpreter,
// and the first execution in the lost context says so (ContextReset).
func TestSandboxdReattachAfterRestart(t *testing.T) {
	requireEngine(t)
	p, sockDir := sandboxdProvider(t)
	sb := create(t, p, allowPol)
	r := run(t, sb, providers.ExecSpec{Code: "kept = 'across gateways'", Language: "python", Context: "default"})
	require.NoError(t, r.err)

	p2 := newProvider(t, func(o *docker.Options) {
		o.Profile = profileOf(t, sb.ID())
		o.Stateful = true
		o.Config.Sandboxd = docker.SandboxdConfig{SocketDir: sockDir, User: "65532:65532"}
	})
	again, err := p2.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err)
	r = run(t, again, providers.ExecSpec{Code: "print(kept)", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.Equal(t, "across gateways\n", r.stdout)

	cli := engineClient(t)
	defer cli.Close()
	timeout := 1
	require.NoError(t, cli.ContainerStop(t.Context(), sb.ID(), container.StopOptions{Timeout: &timeout}))
	again, err = p2.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err, "attach starts a stopped sandbox")
	r = run(t, again, providers.ExecSpec{Code: "print('kept' in globals())", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.Equal(t, "False\n", r.stdout)
	assert.True(t, r.st.ContextReset, "the lost context is reported, not silently replaced")
	assert.Contains(t, r.stderr, "was lost when the sandbox restarted")
	r = run(t, again, providers.ExecSpec{Code: "print(1)", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.False(t, r.st.ContextReset, "reported once")
}

// TestSandboxdDestroyRemovesSocketFolder: nothing is left on the host.
func TestSandboxdDestroyRemovesSocketFolder(t *testing.T) {
	requireEngine(t)
	p, sockDir := sandboxdProvider(t)
	sb, err := p.Create(t.Context(), agent, allowPol)
	require.NoError(t, err)
	matches, _ := filepath.Glob(filepath.Join(sockDir, testInstallation, "*", "*", "sd.sock"))
	require.Len(t, matches, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, p.Destroy(ctx, sb.ID()))
	_, err = os.Stat(filepath.Dir(matches[0]))
	assert.True(t, os.IsNotExist(err), "socket folder left behind: %v", err)
}

func profileOf(t *testing.T, id string) string {
	t.Helper()
	ins, err := inspect(t, id)
	require.NoError(t, err)
	return ins.Config.Labels[docker.LabelProfile]
}

// TestSandboxdSecretFileFollowsNoLink: the socket folder is writable from inside the
// container, so links planted there must not make the gateway write the secret anywhere else
// on the host when it delivers the secret for a restart.
func TestSandboxdSecretFileFollowsNoLink(t *testing.T) {
	requireEngine(t)
	p, _ := sandboxdProvider(t)
	sb := create(t, p, allowPol)
	victim := filepath.Join(t.TempDir(), "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o600))
	missing := filepath.Join(t.TempDir(), "created-by-the-sandbox")
	sh(t, sb, "ln -s "+victim+" /.sandgate/run/token && ln -s "+missing+" /.sandgate/run/.token")

	cli := engineClient(t)
	defer cli.Close()
	timeout := 1
	require.NoError(t, cli.ContainerStop(t.Context(), sb.ID(), container.StopOptions{Timeout: &timeout}))
	again, err := p.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err, "the secret is delivered beside the links, and sandboxd starts")
	assert.Equal(t, "ok\n", sh(t, again, "echo ok"))

	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(b), "a link's target is never written")
	_, err = os.Lstat(missing)
	assert.True(t, os.IsNotExist(err), "nothing is created through a link")
}

// TestSandboxdSocketCannotBeReplaced: programs run as another user than sandboxd, and its
// socket (root's, in a sticky folder) cannot be renamed or removed. Where they run as
// sandboxd's own user (a non-root docker.sandboxd.user) they can rename it and listen in its
// place; the gateway checks who listens (SO_PEERCRED) before it sends a byte, so such a
// listener never receives the secret; and instead of failing every later call, the gateway
// restarts the container, whose own sandboxd then answers with the workspace kept.
func TestSandboxdSocketCannotBeReplaced(t *testing.T) {
	requireEngine(t)
	protected, _ := sandboxdProvider(t)
	r := run(t, create(t, protected, allowPol), providers.ExecSpec{Language: "python", Code: `
import os
for f in (os.rename, lambda a, b: os.remove(a)):
    try:
        f('/.sandgate/run/sd.sock', '/.sandgate/run/sd.real')
        print('replaced')
    except OSError as e:
        print(e.strerror)`})
	require.NoError(t, r.err)
	assert.Equal(t, "Operation not permitted\nOperation not permitted\n", r.stdout, r.stderr)

	sameUser := func(o *docker.Options) { o.Config.Sandboxd.User = "65532:65532" }
	p, sockDir := sandboxdProvider(t, sameUser)
	sb := create(t, p, allowPol)
	sh(t, sb, "echo kept > /workspace/kept.txt")
	r = run(t, sb, providers.ExecSpec{Language: "python", Context: "mitm", Code: `
import os, socket, threading
run = '/.sandgate/run'
os.rename(run + '/sd.sock', run + '/sd.real')
srv = socket.socket(socket.AF_UNIX)
srv.bind(run + '/sd.sock')
srv.listen(8)
def serve():
    while True:
        c, _ = srv.accept()
        with open('/workspace/captured', 'ab') as f:
            f.write(c.recv(65536) or b'(nothing)')
        c.close()
threading.Thread(target=serve, daemon=True).start()
print('listening')`})
	require.NoError(t, r.err)
	require.Equal(t, "listening\n", r.stdout, r.stderr)

	// A restarted gateway dials the socket afresh.
	p2 := newProvider(t, func(o *docker.Options) {
		o.Profile = profileOf(t, sb.ID())
		o.Stateful = true
		o.Config.Sandboxd = docker.SandboxdConfig{SocketDir: sockDir, User: "65532:65532"}
	})
	again, err := p2.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err, "the impostor is refused, the container restarted, and its sandboxd answers")
	assert.Equal(t, "kept\n", sh(t, again, "cat /workspace/kept.txt"), "the workspace survives the restart")

	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	secret := ins.Config.Labels[docker.LabelSandboxdToken]
	captured := run(t, again, providers.ExecSpec{Command: "cat /workspace/captured 2>/dev/null; true"})
	require.NoError(t, captured.err)
	assert.NotContains(t, captured.stdout, secret)
	assert.NotContains(t, captured.stdout, "Bearer")
	require.NoError(t, again.Close())
}

// TestFillingTmpDoesNotKillSandboxd: under a memory limit, /tmp (a tmpfs, charged to the
// limit but to no process) is half the limit, so filling it fails the writer with ENOSPC
// instead of making the OOM killer take sandboxd.
func TestFillingTmpDoesNotKillSandboxd(t *testing.T) {
	requireEngine(t)
	p, _ := sandboxdProvider(t)
	pol := allowPol
	pol.MemoryMB = 128
	sb := create(t, p, pol)
	r := run(t, sb, providers.ExecSpec{Command: "head -c 200000000 /dev/zero > /tmp/fill"})
	require.NoError(t, r.err)
	assert.NotEqual(t, 0, r.st.ExitCode)
	assert.Contains(t, r.stderr, "No space left")
	assert.False(t, r.st.OOMKilled)
	assert.Equal(t, "alive\n", sh(t, sb, "rm /tmp/fill; echo alive"))
}

// TestExecTransport: with transport exec nothing of the sandbox is on the gateway's host; the
// secret file is emptied once sandboxd answers; a restarted gateway reaches the same sandboxd
// and its contexts; a stopped container is started again with its secret delivered anew.
func TestExecTransport(t *testing.T) {
	requireEngine(t)
	exec := func(o *docker.Options) { o.Config.Sandboxd.Transport = docker.TransportExec }
	p, sockDir := sandboxdProvider(t, exec)
	sb := create(t, p, allowPol)
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, string(docker.TransportExec), ins.Config.Labels[docker.LabelSandboxdTransport])
	assert.Empty(t, ins.Config.Labels[docker.LabelSandboxd], "no socket folder")
	for _, m := range ins.Mounts {
		assert.NotEqual(t, "bind", string(m.Type), "nothing is bind-mounted from the gateway's host: %+v", m)
	}
	entries, _ := os.ReadDir(sockDir)
	assert.Empty(t, entries)
	secret := ins.Config.Labels[docker.LabelSandboxdToken]
	require.Len(t, secret, 64)
	assert.Equal(t, "0\n", engineSh(t, sb.ID(), "stat -c %s /.sandgate/run/sd/token"), "the secret file is emptied")
	r := run(t, sb, providers.ExecSpec{Command: "grep -rl " + secret + " /.sandgate /workspace /tmp /etc 2>/dev/null; echo done"})
	require.NoError(t, r.err)
	assert.Equal(t, "done\n", r.stdout, "no file a program can read holds the secret")

	r = run(t, sb, providers.ExecSpec{Code: "kept = 'over exec'", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	again := newProvider(t, func(o *docker.Options) {
		o.Profile = profileOf(t, sb.ID())
		o.Stateful = true
		exec(o)
	})
	sb2, err := again.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err)
	r = run(t, sb2, providers.ExecSpec{Code: "print(kept)", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.Equal(t, "over exec\n", r.stdout, "a restarted gateway reaches the same sandboxd")

	cli := engineClient(t)
	defer cli.Close()
	zero := 0
	require.NoError(t, cli.ContainerStop(t.Context(), sb.ID(), container.StopOptions{Timeout: &zero}))
	sb3, err := again.Attach(t.Context(), sb.ID(), agent, allowPol)
	require.NoError(t, err, "started again with its secret")
	r = run(t, sb3, providers.ExecSpec{Code: "print('fresh')", Language: "python", Context: "default"})
	require.NoError(t, r.err)
	assert.True(t, r.st.ContextReset, "the lost context is reported")
	assert.Equal(t, "0\n", engineSh(t, sb.ID(), "stat -c %s /.sandgate/run/sd/token"))
}

// TestAttachedTargetWithoutSandboxd: a container the gateway did not start, from an image
// without sandboxd, gets the gateway's binary copied in and runs each connection's programs
// under `sandboxd stdio`; it keeps no contexts.
func TestAttachedTargetWithoutSandboxd(t *testing.T) {
	requireEngine(t)
	img := baseImage
	if img == "" {
		img = findBaseImage(t)
	}
	cli := engineClient(t)
	defer cli.Close()
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: img, Entrypoint: []string{"sleep", "infinity"}, WorkingDir: "/srv"},
		&container.HostConfig{Init: new(true), NetworkMode: "none"}, nil, nil, "sandgate-test-plain-"+randomSuffix())
	require.NoError(t, err)
	t.Cleanup(func() {
		cli := engineClient(t)
		defer cli.Close()
		_ = cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
	})
	require.NoError(t, cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}))
	p := newProvider(t, func(o *docker.Options) {
		o.AttachTo = resp.ID
		o.Config.Sandboxd.Binary = sandboxdBinary(t)
	})
	assert.False(t, p.Capabilities().Stateful)
	deny := allowPol
	deny.NetworkEgress = providers.EgressDeny
	sb := create(t, p, deny)
	assert.Equal(t, "/srv\n", sh(t, sb, "pwd"))
	r := run(t, sb, providers.ExecSpec{Command: "echo out; echo err >&2; exit 7"})
	require.NoError(t, r.err)
	assert.Equal(t, 7, r.st.ExitCode)
	assert.Equal(t, "out\n", r.stdout)
	assert.Equal(t, "err\n", r.stderr)
	r = run(t, sb, providers.ExecSpec{Command: "sleep 30", Timeout: 500 * time.Millisecond})
	require.NoError(t, r.err)
	assert.True(t, r.st.TimedOut)
	_, err = sb.WriteFile(t.Context(), "in.txt", strings.NewReader("attached"), 100)
	require.NoError(t, err)
	assert.Equal(t, "attached", sh(t, sb, "cat /srv/in.txt"))
	_, err = sb.WriteFile(t.Context(), "../etc/evil", strings.NewReader("x"), 100)
	assert.True(t, fault.IsKind(err, fault.Policy), "%v", err)
	assert.Equal(t, "/.sandgate/bin/sandboxd\n", engineSh(t, resp.ID, "ls /.sandgate/bin/sandboxd"))
	assert.Equal(t, "0\n", engineSh(t, resp.ID, "ps -eo args | grep -c '[s]andboxd serve' || true"), "no daemon stays behind")
	r = run(t, sb, providers.ExecSpec{Code: "x = 1", Language: "python", Context: "default"})
	assert.True(t, fault.IsKind(r.err, fault.Capability), "no contexts without a daemon: %v", r.err)
}

// engineSh runs command in container id as its user with `docker exec`, not through the
// provider, and returns its output.
func engineSh(t *testing.T, id, command string) string {
	t.Helper()
	out, err := exec.Command("docker", "exec", id, "sh", "-c", command).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}
