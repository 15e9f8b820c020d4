package api_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/loopdisk"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// quotaOf is one quota of GET /v1/me as tok.
func (e *testEnv) quotaOf(tok, name string) map[string]any {
	e.t.Helper()
	r := e.do(tok, "GET", "/v1/me", nil)
	require.Equal(e.t, 200, r.Status, "%s", r.Body)
	return r.JSON(e.t)["quotas"].(map[string]any)[name].(map[string]any)
}

// Named contexts count against sandbox.quotas.contexts across a principal's sessions,
// whether made by POST …/contexts or by code naming one; the default context does not
// count; deleting one, or destroying its session, frees its place; other principals are
// unaffected.
func TestContextQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.Quotas.Contexts = 2 }})
	alice, bob := e.token("alice"), e.token("bob")
	a, b := e.newSession(alice, "stateful"), e.newSession(alice, "stateful")
	code := func(tok, sid, ctxName, src string) reply {
		t.Helper()
		body := map[string]any{"code": src}
		if ctxName != "" {
			body["context"] = ctxName
		}
		return e.do(tok, "POST", "/v1/sessions/"+sid+"/code", body)
	}
	ok := func(r reply) map[string]any {
		t.Helper()
		require.Equal(t, 200, r.Status, "%s", r.Body)
		return r.JSON(t)
	}
	ok(code(alice, a, "one", "x = 1"))
	r := e.do(alice, "POST", "/v1/sessions/"+b+"/contexts", map[string]any{"name": "two"})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	assert.Equal(t, map[string]any{"used": 2.0, "limit": 2.0}, e.quotaOf(alice, "contexts"))

	r = code(alice, a, "three", "y = 3")
	p := requireProblem(t, r, 429, "quota")
	assert.Contains(t, p["detail"], "sandbox.quotas.contexts")
	assert.Equal(t, "30", r.Header.Get("Retry-After"))
	p = requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+b+"/contexts", map[string]any{"name": "three"}), 429, "quota")
	assert.Contains(t, p["detail"], "sandbox.quotas.contexts")
	list := e.do(alice, "GET", "/v1/sessions/"+b+"/contexts", nil).JSON(t)["contexts"].([]any)
	require.Len(t, list, 1, "nothing was made over the quota")

	assert.Equal(t, "1\n", ok(code(alice, a, "one", "print(x)"))["stdout"], "a context already held runs")
	ok(code(alice, a, "", "z = 'default'")) // the default context is the session's, not counted
	bs := e.newSession(bob, "stateful")
	ok(code(bob, bs, "mine", "w = 1")) // another principal's quota

	r = e.do(alice, "DELETE", "/v1/sessions/"+b+"/contexts/two", nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.EqualValues(t, 1, e.quotaOf(alice, "contexts")["used"])
	ok(code(alice, a, "three", "y = 3"))

	r = e.do(alice, "DELETE", "/v1/sessions/"+a, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.EqualValues(t, 0, e.quotaOf(alice, "contexts")["used"], "a destroyed session's contexts are gone")
	ok(code(alice, b, "four", "v = 4"))
	ok(code(alice, b, "five", "v = 5"))
	requireProblem(t, code(alice, b, "six", "v = 6"), 429, "quota")
}

// Retained output over sandbox.quotas.retained_output_bytes never refuses work: the oldest
// finished results lose their stdout and stderr (output_dropped, with a notice) until the
// newest fit, and the tasks stay.
func TestRetainedOutputQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.Quotas.RetainedOutputBytes = 3000 }})
	alice, bob := e.token("alice"), e.token("bob")
	run := func(tok string, n int) string {
		t.Helper()
		r := e.do(tok, "POST", "/v1/sessions/default/commands", map[string]any{"command": "head -c 1000 /dev/zero | tr '\\0' " + string(rune('a'+n))})
		require.Equal(t, 200, r.Status, "%s", r.Body)
		res := r.JSON(t)
		require.Len(t, res["stdout"], 1000)
		return res["task_id"].(string)
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, run(alice, i))
	}
	bobs := run(bob, 0)

	task := func(tok, id string) map[string]any {
		t.Helper()
		r := e.do(tok, "GET", "/v1/tasks/"+id, nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		return r.JSON(t)
	}
	require.Eventually(t, func() bool {
		return task(alice, ids[1])["result"].(map[string]any)["output_dropped"] == true
	}, 10*time.Second, 50*time.Millisecond, "the oldest results lose their output in the background")
	for i, id := range ids {
		tk := task(alice, id)
		res := tk["result"].(map[string]any)
		if i < 2 {
			assert.Equal(t, "", res["stdout"], "task %d", i)
			assert.Equal(t, true, res["output_dropped"])
			assert.EqualValues(t, 1000, res["stdout_bytes"], "the counts stay")
			assert.EqualValues(t, 0, res["exit_code"])
			assert.Equal(t, "succeeded", tk["status"])
			assert.Contains(t, tk["notice"], "sandbox.quotas.retained_output_bytes")
			assert.Contains(t, res["notice"], "sandbox.quotas.retained_output_bytes")
		} else {
			assert.Equal(t, strings.Repeat(string(rune('a'+i)), 1000), res["stdout"], "task %d keeps its output", i)
			assert.Nil(t, res["output_dropped"])
		}
	}
	assert.Equal(t, map[string]any{"used": 3000.0, "limit": 3000.0}, e.quotaOf(alice, "retained_output_bytes"))
	assert.Len(t, task(bob, bobs)["result"].(map[string]any)["stdout"], 1000, "another principal's results are not touched")
	assert.EqualValues(t, 1000, e.quotaOf(bob, "retained_output_bytes")["used"])
}

// A profile that bounds the workspace (disk_mb) on a provider that cannot: strict refuses with
// 403 policy naming the dimension, non-strict runs with a warning; /v1/profiles shows both.
func TestDiskPolicyWhereItCannotBeEnforced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: dir}}
		c.Sandbox.Profiles["sized"] = config.Profile{Type: local.TypeName, Policy: config.Policy{DiskMB: ptr(64)}, Blocks: lb}
		c.Sandbox.Profiles["sized-lax"] = config.Profile{Type: local.TypeName, Policy: config.Policy{DiskMB: ptr(64), Strict: ptr(false)}, Blocks: lb}
	}})
	tok := e.token("alice")
	p := requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/commands?profile=sized", map[string]any{"command": "true"}), 403, "policy")
	assert.Contains(t, p["detail"], "[disk]")
	r := e.do(tok, "POST", "/v1/sessions/default/commands?profile=sized-lax", map[string]any{"command": "true"})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Contains(t, r.JSON(t)["warnings"].([]any)[0], "[disk]")

	for _, prof := range e.do(tok, "GET", "/v1/profiles", nil).JSON(t)["profiles"].([]any) {
		prof := prof.(map[string]any)
		if prof["name"] == "sized" {
			assert.EqualValues(t, 64, prof["policy"].(map[string]any)["disk_mb"])
			assert.Equal(t, false, prof["capabilities"].(map[string]any)["policy_disk"])
		}
	}
}

// disk_mb on docker, end to end: writing past it inside the sandbox is the program's ENOSPC
// (a non-zero exit, the file system's error on stderr), the gateway stays healthy, and
// destroying the session removes the disk and its loop device.
func TestDiskBoundedWorkspaceOverREST(t *testing.T) {
	t.Parallel()
	for _, why := range []error{dockerMissing(t), loopdisk.Available()} {
		if why != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true and %v", why)
			}
			t.Skip(why)
		}
	}
	state := t.TempDir()
	disks := filepath.Join(state, "disks", "*") // a folder per installation
	t.Cleanup(func() {
		images, _ := filepath.Glob(filepath.Join(disks, "*.img"))
		for _, img := range images {
			_ = loopdisk.Remove(img, strings.TrimSuffix(img, ".img")+".dev")
		}
	})
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.MaxFileBytes = 64 << 20 // over the disk, so the disk is what refuses
		c.Sandbox.Profiles["disk"] = config.Profile{
			Type: docker.TypeName, Policy: config.Policy{DiskMB: ptr(24)},
			Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: dockerTestImage, Pull: docker.PullNever, StateDir: state}},
		}
	}})
	tok := e.token("alice")
	for _, prof := range e.do(tok, "GET", "/v1/profiles", nil).JSON(t)["profiles"].([]any) {
		if prof := prof.(map[string]any); prof["name"] == "disk" {
			assert.EqualValues(t, 24, prof["policy"].(map[string]any)["disk_mb"])
			assert.Equal(t, true, prof["capabilities"].(map[string]any)["policy_disk"])
		}
	}
	sid := e.newSession(tok, "disk")
	cmd := func(command string) map[string]any {
		t.Helper()
		r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": command})
		require.Equal(t, 200, r.Status, "%s", r.Body)
		return r.JSON(t)
	}
	res := cmd("echo kept > state.txt && dd if=/dev/zero of=fill bs=1M count=64")
	assert.NotEqualValues(t, 0, res["exit_code"])
	assert.Contains(t, res["stderr"], "No space left on device")
	images, err := filepath.Glob(filepath.Join(disks, "*.img"))
	require.NoError(t, err)
	require.Len(t, images, 1, "the session's sandbox has its disk")

	r := e.do("", "GET", "/readyz", nil)
	require.Equal(t, 200, r.Status, "the gateway stays healthy: %s", r.Body)
	assert.Equal(t, "kept\n", cmd("rm fill && cat state.txt")["stdout"])

	// An upload the disk cannot hold is the caller's 507 naming disk_mb, and leaves no part.
	const big = 40 << 20
	r = e.put(tok, "/v1/sessions/"+sid+"/files/big.bin", io.LimitReader(zeros{}, big), big, nil)
	require.Equal(t, 507, r.Status, "%s", r.Body)
	p := r.JSON(t)
	assert.Equal(t, "https://sandgate.dev/problems/workspace-full", p["type"])
	assert.Contains(t, p["detail"], "no space left in the sandbox's workspace for 'big.bin'")
	assert.Contains(t, p["detail"], "holds at most 24 MB (policy disk_mb)")
	assert.NotContains(t, p["detail"], "/workspace", "no paths of the sandbox's file system")
	assert.Equal(t, "kept\n", cmd("ls -A | grep -v -e state.txt -e lost+found; cat state.txt")["stdout"], "nothing of the upload is left")

	r = e.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	_, err = os.Stat(images[0])
	assert.True(t, os.IsNotExist(err), "the disk is removed with its sandbox")
	devs, err := loopdisk.Devices(images[0])
	require.NoError(t, err)
	assert.Empty(t, devs, "and its loop device detached")
}

// dockerTestImage is the sandbox image the Docker suites run (scripts/docker-setup.sh).
var dockerTestImage = func() string {
	if v := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE"); v != "" {
		return v
	}
	return "sandgate/sandbox-python:latest"
}()

// dockerMissing says why no Docker engine can run the test (nil when one can).
func dockerMissing(t *testing.T) error {
	if !docker.Available(t.Context(), "") {
		return errNoDocker
	}
	return nil
}

var errNoDocker = errors.New("no Docker engine is reachable (scripts/docker-setup.sh starts one)")

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
