package api_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

func TestHealthDocsAndContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	require.Equal(t, 200, e.do("", "GET", "/healthz", nil).Status)
	r := e.do("", "GET", "/readyz", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Contains(t, string(r.Body), "version")
	r = e.do("", "GET", "/openapi.yaml", nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, string(r.Body), "openapi: 3.1.0")
	r = e.do("", "GET", "/docs/", nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, string(r.Body), "swagger")

	// Every error is problem+json: unknown route, wrong method, no token.
	requireProblem(t, e.do("", "GET", "/nope", nil), 404, "not-found")
	r405 := e.do(e.token("alice"), "PATCH", "/v1/me", nil)
	requireProblem(t, r405, 405, "method-not-allowed")
	require.Equal(t, "GET, HEAD", r405.Header.Get("Allow"))
	r405 = e.do(e.token("alice"), "DELETE", "/v1/tasks/abc", nil)
	requireProblem(t, r405, 405, "method-not-allowed")
	require.Equal(t, "GET, HEAD", r405.Header.Get("Allow"), "cancelling is POST /v1/tasks/{id}/cancel")
	r = e.do("", "GET", "/v1/sessions", nil)
	requireProblem(t, r, 401, "unauthenticated")
	require.Equal(t, `Bearer realm="sandgate"`, r.Header.Get("WWW-Authenticate"))
}

func TestMeAndBadTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	r := e.do(e.token("alice", "dev", "admins"), "GET", "/v1/me", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	me := r.JSON(t)
	require.Equal(t, "alice", me["subject"])
	require.Equal(t, "alice", me["username"])
	require.Equal(t, true, me["admin"])
	require.Equal(t, []any{"dev", "admins"}, me["groups"])
	require.Equal(t, e.issuer.URL(), me["issuer"])
	require.NotEmpty(t, me["first_seen_at"])

	tok := e.token("alice")
	for name, bad := range map[string]string{
		"garbage":  "not-a-jwt",
		"tampered": tok[:len(tok)-4] + "AAAA",
		"alg none": base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + strings.Split(tok, ".")[1] + ".",
	} {
		r := e.do(bad, "GET", "/v1/me", nil)
		requireProblem(t, r, 401, "unauthenticated")
		require.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`, name)
	}
}

func TestCommandAndCodeResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")

	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "python3 -c 'print(6*7)'"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	m := r.JSON(t)
	require.Equal(t, "completed", m["status"])
	require.Equal(t, "42\n", m["stdout"])
	require.EqualValues(t, 0, m["exit_code"])
	require.Equal(t, id, m["session_id"])

	// A failing program is a result, never an error; streams stay separate.
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	require.Equal(t, 200, r.Status)
	m = r.JSON(t)
	require.EqualValues(t, 3, m["exit_code"])
	require.Equal(t, "out\n", m["stdout"])
	require.Equal(t, "err\n", m["stderr"])

	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "definitely-not-a-command-xyz"})
	m = r.JSON(t)
	require.EqualValues(t, 127, m["exit_code"])
	require.NotEmpty(t, m["stderr"])

	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "kill -9 $$"})
	m = r.JSON(t)
	require.EqualValues(t, 137, m["exit_code"])
	require.Equal(t, "SIGKILL", m["signal"])

	// State persists within the session; env is passed natively, never interpreted.
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{
		"command": `echo "$X" > x.txt; cat x.txt`, "env": map[string]string{"X": `$(touch pwned) "q" ;`},
	})
	require.Equal(t, "$(touch pwned) \"q\" ;\n", r.JSON(t)["stdout"])
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/code", map[string]any{"code": "import os\nprint(os.path.exists('x.txt'), os.path.exists('pwned'))", "language": "python"})
	require.Equal(t, "True False\n", r.JSON(t)["stdout"])
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/code", map[string]any{"code": "echo $((2+3))", "language": "bash"})
	require.Equal(t, "5\n", r.JSON(t)["stdout"])

	// Stdin is empty unless given.
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "cat"})
	require.Equal(t, "", r.JSON(t)["stdout"])
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "cat", "stdin": "fed"})
	require.Equal(t, "fed", r.JSON(t)["stdout"])

	// Bad input: a clear 400 or 422 before anything runs.
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"cmd": "ls"}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "env", "env": map[string]string{"BAD-NAME": "x"}}), 400, "validation")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/code", map[string]any{"code": "puts 1", "language": "ruby"}), 422, "capability")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "pwd", "cwd": "../.."}), 403, "policy")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+strings.Repeat("a", 32)+"/commands", map[string]any{"command": "ls"}), 404, "not-found")
	requireProblem(t, e.do(tok, "POST", "/v1/sessions/not-an-id/commands", map[string]any{"command": "ls"}), 400, "validation")
}

func TestTimeoutKeepsPartialOutputAndKillsTree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	start := time.Now()
	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{
		"command": "echo before; (sleep 3; touch survived) & sleep 30", "timeout_s": 1,
	})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	m := r.JSON(t)
	require.Equal(t, "timed_out", m["status"])
	require.Nil(t, m["exit_code"])
	require.Equal(t, "before\n", m["stdout"])
	require.Less(t, time.Since(start), 20*time.Second)
	time.Sleep(4 * time.Second)
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "ls"})
	require.NotContains(t, r.JSON(t)["stdout"], "survived", "a background grandchild outlived the timeout")

	// The task records the timeout.
	task := e.waitTask(tok, m["task_id"].(string))
	require.Equal(t, "timed_out", task["status"])
}

func TestBackgroundChildDoesNotHang(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	start := time.Now()
	r := e.do(tok, "POST", "/v1/sessions/default/commands", map[string]any{"command": "sleep 30 & echo started"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "started\n", r.JSON(t)["stdout"])
	require.Less(t, time.Since(start), 15*time.Second)
}

func TestOutputBoundsAndEncodings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.MaxOutputBytes = 64 << 10 }})
	tok := e.token("alice")
	r := e.do(tok, "POST", "/v1/sessions/default/code", map[string]any{
		"code": "import sys\nsys.stdout.write('h' + 'é'*3000000 + 't')\nsys.stdout.flush()\nsys.exit(4)",
	})
	require.Equal(t, 200, r.Status)
	m := r.JSON(t)
	require.EqualValues(t, 4, m["exit_code"])
	require.Equal(t, true, m["stdout_truncated"])
	require.EqualValues(t, 6000002, m["stdout_bytes"])
	require.Equal(t, "utf-8", m["encoding"])
	out := m["stdout"].(string)
	require.True(t, strings.HasPrefix(out, "hé") && strings.HasSuffix(out, "ét"))
	require.LessOrEqual(t, len(out), 64<<10)

	r = e.do(tok, "POST", "/v1/sessions/default/code", map[string]any{"code": "import sys\nsys.stdout.buffer.write(bytes([0xff, 0xfe, 0x00, 0x41]))"})
	m = r.JSON(t)
	require.Equal(t, "base64", m["encoding"])
	b, err := base64.StdEncoding.DecodeString(m["stdout"].(string))
	require.NoError(t, err)
	require.Equal(t, []byte{0xff, 0xfe, 0x00, 0x41}, b)

	r = e.do(tok, "POST", "/v1/sessions/default/commands", map[string]any{"command": "printf hi", "output": "base64"})
	m = r.JSON(t)
	require.Equal(t, "base64", m["encoding"])
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte("hi")), m["stdout"])

	// The session is still usable.
	require.Equal(t, "ok\n", e.do(tok, "POST", "/v1/sessions/default/commands", map[string]any{"command": "echo ok"}).JSON(t)["stdout"])
}

func TestFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	base := "/v1/sessions/" + id + "/files/"

	// Before the sandbox exists: empty listing, missing file.
	r := e.do(tok, "GET", "/v1/sessions/"+id+"/files", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Empty(t, r.JSON(t)["entries"])
	requireProblem(t, e.do(tok, "GET", base+"nothing.bin", nil), 404, "not-found")

	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := make([]byte, 300<<10)
	_, _ = rand.Read(big)
	for name, content := range map[string][]byte{"bytes.bin": all, "deep/er/big.bin": big, "empty.bin": {}} {
		r := e.do(tok, "PUT", base+name, content)
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		sum := sha256.Sum256(content)
		require.Equal(t, hex.EncodeToString(sum[:]), r.JSON(t)["sha256"])
		require.EqualValues(t, len(content), r.JSON(t)["size"])
		got := e.do(tok, "GET", base+name, nil)
		require.Equal(t, 200, got.Status)
		require.True(t, bytes.Equal(content, got.Body), name)
	}
	// Escaped slashes address the same file.
	require.True(t, bytes.Equal(big, e.do(tok, "GET", base+"deep%2Fer%2Fbig.bin", nil).Body))

	// Unusual names.
	for _, name := range []string{"with space.txt", "ünïcødé.txt", "emoji-🚀.txt", "-leading-dash"} {
		r := e.do(tok, "PUT", base+urlPath(name), []byte(name))
		require.Equal(t, 200, r.Status, "%s: %s", name, r.Body)
		require.Equal(t, name, string(e.do(tok, "GET", base+urlPath(name), nil).Body))
	}
	r = e.do(tok, "GET", "/v1/sessions/"+id+"/files?dir=.", nil)
	names := []string{}
	for _, en := range r.JSON(t)["entries"].([]any) {
		names = append(names, en.(map[string]any)["name"].(string))
	}
	require.Contains(t, names, "emoji-🚀.txt")
	require.Contains(t, names, "deep")

	// Escapes are refused, also through a symlink made by a command.
	e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "ln -s / root-link; ln -s .. up-link"})
	for _, p := range []string{"..%2Fescape", "root-link/etc/passwd", "up-link%2Fx", "a/..%2F..%2Fx"} {
		requireProblem(t, e.do(tok, "GET", base+p, nil), 403, "policy")
		requireProblem(t, e.do(tok, "PUT", base+p, []byte("x")), 403, "policy")
	}
	// Over the limit: 413 and nothing left behind.
	requireProblem(t, e.do(tok, "PUT", base+"huge.bin", make([]byte, 2<<20)), 413, "too-large")
	requireProblem(t, e.do(tok, "GET", base+"huge.bin", nil), 404, "not-found")

	require.Equal(t, 204, e.do(tok, "DELETE", base+"bytes.bin", nil).Status)
	requireProblem(t, e.do(tok, "GET", base+"bytes.bin", nil), 404, "not-found")
	require.Equal(t, 204, e.do(tok, "DELETE", base+"bytes.bin", nil).Status)
}

func urlPath(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll((&urlEsc{}).esc(s), "+", "%20"), "%2F", "/")
}

type urlEsc struct{}

func (urlEsc) esc(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, bob := e.token("alice"), e.token("bob")
	id := e.newSession(alice, "default")
	r := e.do(alice, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo secret > s.txt", "wait_s": 0})
	require.Equal(t, 202, r.Status)
	taskID := r.JSON(t)["id"].(string)

	requireProblem(t, e.do(bob, "GET", "/v1/sessions/"+id, nil), 404, "not-found")
	requireProblem(t, e.do(bob, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "cat s.txt"}), 404, "not-found")
	requireProblem(t, e.do(bob, "GET", "/v1/sessions/"+id+"/files/s.txt", nil), 404, "not-found")
	requireProblem(t, e.do(bob, "PUT", "/v1/sessions/"+id+"/files/s.txt", []byte("x")), 404, "not-found")
	requireProblem(t, e.do(bob, "GET", "/v1/tasks/"+taskID, nil), 404, "not-found")
	requireProblem(t, e.do(bob, "POST", "/v1/tasks/"+taskID+"/cancel", nil), 404, "not-found")
	require.Empty(t, e.do(bob, "GET", "/v1/sessions", nil).JSON(t)["sessions"])
	require.Empty(t, e.do(bob, "GET", "/v1/tasks", nil).JSON(t)["tasks"])
	// Bob's delete is a no-op on alice's session.
	require.Equal(t, 200, e.do(bob, "DELETE", "/v1/sessions/"+id, nil).Status)
	e.waitTask(alice, taskID)
	require.Equal(t, "secret", string(e.do(alice, "GET", "/v1/sessions/"+id+"/files/s.txt", nil).Body[:6]))

	// Admins may list everyone's sessions; others may not ask.
	requireProblem(t, e.do(bob, "GET", "/v1/sessions?all=true", nil), 403, "forbidden")
	r = e.do(e.token("root", "admins"), "GET", "/v1/sessions?all=true", nil)
	require.Equal(t, 200, r.Status)
	require.Len(t, r.JSON(t)["sessions"], 1)
}

func TestPromotionPollAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 1; echo late", "wait_s": 0.1})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	task := r.JSON(t)
	require.Equal(t, "/v1/tasks/"+task["id"].(string), r.Header.Get("Location"))
	require.Contains(t, []any{"pending", "running"}, task["status"])
	done := e.waitTask(tok, task["id"].(string))
	require.Equal(t, "succeeded", done["status"])
	require.Equal(t, "late\n", done["result"].(map[string]any)["stdout"])

	// Cancel stops the run.
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 60", "wait_s": 0})
	require.Equal(t, 202, r.Status)
	tid := r.JSON(t)["id"].(string)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	r = e.do(tok, "POST", "/v1/tasks/"+tid+"/cancel", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	require.Equal(t, "cancelled", e.waitTask(tok, tid)["status"])
	require.Less(t, time.Since(start), 20*time.Second)

	// Listing filters.
	r = e.do(tok, "GET", "/v1/tasks?status=cancelled", nil)
	require.Len(t, r.JSON(t)["tasks"], 1)
	requireProblem(t, e.do(tok, "GET", "/v1/tasks/"+strings.Repeat("0", 32), nil), 404, "not-found")
	requireProblem(t, e.do(tok, "GET", "/v1/tasks?cursor=bogus", nil), 400, "validation")
}

func TestScopes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, bob := e.token("alice"), e.token("bob")

	// Default session: created on first use, reused after.
	r := e.do(alice, "POST", "/v1/sessions/default/commands", map[string]any{"command": "echo hi > h.txt"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	sid := r.JSON(t)["session_id"].(string)
	r = e.do(alice, "GET", "/v1/sessions/default", nil)
	require.Equal(t, sid, r.JSON(t)["id"])
	require.Equal(t, true, r.JSON(t)["default"])
	require.Equal(t, "hi\n", e.do(alice, "POST", "/v1/sessions/default/commands", map[string]any{"command": "cat h.txt"}).JSON(t)["stdout"])
	// Another profile named for this session: config problem naming both.
	m := requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+sid+"/commands?profile=shared", map[string]any{"command": "ls"}), 400, "config")
	require.Contains(t, m["detail"], "omit profile")

	// per_call: fresh sandbox each run, gone afterwards.
	r = e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "oneshot", "command": "pwd; touch mark"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	dir := strings.TrimSpace(r.JSON(t)["stdout"].(string))
	_, err := os.Stat(dir)
	require.True(t, os.IsNotExist(err), "per_call sandbox %s survived its run", dir)
	r = e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "oneshot", "command": "sleep 0.5; pwd", "wait_s": 0})
	require.Equal(t, 202, r.Status)
	done := e.waitTask(alice, r.JSON(t)["id"].(string))
	dir = strings.TrimSpace(done["result"].(map[string]any)["stdout"].(string))
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "promoted per_call sandbox %s survived", dir)
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "default", "command": "ls"}), 409, "conflict")
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "oneshot"}), 400, "validation")
	noProfile := requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"command": "ls"}), 409, "conflict")
	require.Contains(t, noProfile["detail"], `name one with "profile" (oneshot)`, "without a profile, the per_call ones are named")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "oneshot"}), 409, "conflict")

	// per_runtime: one shared session for everyone allowed.
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "shared"}), 409, "conflict")
	e.do(alice, "POST", "/v1/sessions/default/commands?profile=shared", map[string]any{"command": "echo from-alice > note"})
	r = e.do(bob, "POST", "/v1/sessions/default/commands?profile=shared", map[string]any{"command": "cat note"})
	require.Equal(t, "from-alice\n", r.JSON(t)["stdout"])
	listed := e.do(bob, "GET", "/v1/sessions?profile=shared", nil).JSON(t)["sessions"].([]any)
	require.Len(t, listed, 1)
	require.Equal(t, true, listed[0].(map[string]any)["shared"])
	// Everyone works in it, so only an administrator destroys it.
	shared := listed[0].(map[string]any)["id"].(string)
	requireProblem(t, e.do(bob, "DELETE", "/v1/sessions/"+shared, nil), 403, "forbidden")
	requireProblem(t, e.do(alice, "DELETE", "/v1/sessions/default?profile=shared", nil), 403, "forbidden")
	require.Equal(t, "from-alice\n", e.do(bob, "POST", "/v1/sessions/default/commands?profile=shared", map[string]any{"command": "cat note"}).JSON(t)["stdout"])
	require.Equal(t, 200, e.do(e.token("root", "admins"), "DELETE", "/v1/sessions/"+shared, nil).Status)
	for _, prof := range e.do(bob, "GET", "/v1/profiles", nil).JSON(t)["profiles"].([]any) {
		pm := prof.(map[string]any)
		require.Equal(t, pm["scope"] == "per_runtime", pm["shared"], pm["name"])
	}

	// Unknown profile names the configured ones.
	m = requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "nope"}), 400, "config")
	require.Contains(t, m["detail"], "default")

	// Destroy is idempotent and resets the default session.
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/sessions/default", nil).Status)
	require.Equal(t, 200, e.do(alice, "DELETE", "/v1/sessions/default", nil).Status)
	r = e.do(alice, "POST", "/v1/sessions/default/commands", map[string]any{"command": "ls h.txt"})
	require.NotEqualValues(t, 0, r.JSON(t)["exit_code"])
}

func TestPolicyAndGroups(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	alice, mlUser := e.token("alice"), e.token("mia", "ml")

	m := requireProblem(t, e.do(alice, "POST", "/v1/sessions/default/commands?profile=nonet", map[string]any{"command": "touch ran"}), 403, "policy")
	require.Contains(t, m["detail"], "network_egress")
	require.Empty(t, dirEntries(t, e.workdir), "a refused policy must not reach the provider")

	r := e.do(alice, "POST", "/v1/sessions/default/commands?profile=nonet-lax", map[string]any{"command": "echo ran"})
	require.Equal(t, 200, r.Status)
	require.Contains(t, r.JSON(t)["warnings"].([]any)[0], "network_egress")

	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "restricted"}), 403, "forbidden")
	require.Equal(t, 201, e.do(mlUser, "POST", "/v1/sessions", map[string]any{"profile": "restricted"}).Status)
	names := func(tok string) []string {
		var out []string
		for _, p := range e.do(tok, "GET", "/v1/profiles", nil).JSON(t)["profiles"].([]any) {
			out = append(out, p.(map[string]any)["name"].(string))
		}
		return out
	}
	require.NotContains(t, names(alice), "restricted")
	require.Contains(t, names(mlUser), "restricted")
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestIdleResetAndSelfHeal(t *testing.T) {
	t.Parallel()
	clock := sandboxtest.NewClock(time.Now())
	e := newEnv(t, envOpts{now: clock.Now})
	tok := e.token("alice")
	id := e.newSession(tok, "short-idle")
	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo a > keep.txt"})
	require.Equal(t, 200, r.Status)
	require.Empty(t, r.JSON(t)["notice"])
	clock.Advance(2100 * time.Millisecond) // past short-idle's idle_timeout of 1 s
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "ls keep.txt"})
	m := r.JSON(t)
	require.Contains(t, m["notice"], "idle")
	require.Contains(t, m["notice"], "discarded")
	require.NotEqualValues(t, 0, m["exit_code"])

	// Self-heal: the sandbox vanishes behind the gateway's back.
	id = e.newSession(tok, "default")
	e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "true"})
	sb := e.do(tok, "GET", "/v1/sessions/"+id, nil).JSON(t)["sandbox_id"].(string)
	require.NoError(t, os.RemoveAll(sb))
	r = e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo back"})
	m = r.JSON(t)
	require.Equal(t, "back\n", m["stdout"])
	require.Contains(t, m["notice"], "recreated empty")
}

func TestPerSessionOrdering(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "true"})
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": fmt.Sprintf("echo start-%d >> log; sleep 0.2; echo end-%d >> log", i, i)})
			require.Equal(t, 200, r.Status)
		}()
	}
	wg.Wait()
	requireSerial(t, string(e.do(tok, "GET", "/v1/sessions/"+id+"/files/log", nil).Body), 6)
}

// requireSerial checks a log of start-i/end-i lines never interleaves two executions.
func requireSerial(t *testing.T, log string, n int) {
	t.Helper()
	lines := strings.Fields(log)
	require.Len(t, lines, 2*n, log)
	for i := 0; i < len(lines); i += 2 {
		require.Equal(t, strings.Replace(lines[i], "start", "end", 1), lines[i+1], "interleaved executions:\n%s", log)
	}
}

func TestTwoReplicasShareOneDatabase(t *testing.T) {
	t.Parallel()
	a := newEnv(t, envOpts{})
	b := newEnv(t, envOpts{dbURL: a.dbURL, trust: a.issuer.URL(), workdir: a.workdir})
	tok := a.token("alice") // trusted by both replicas: one principal

	id := a.newSession(tok, "default")
	r := a.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 0.5; echo via-a", "wait_s": 0})
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	done := b.waitTask(tok, r.JSON(t)["id"].(string)) // polled through the other replica
	require.Equal(t, "succeeded", done["status"])
	require.Equal(t, "via-a\n", done["result"].(map[string]any)["stdout"])
	require.Equal(t, id, b.do(tok, "GET", "/v1/sessions/"+id, nil).JSON(t)["id"])

	// Executions on one session through both replicas run one at a time.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := a
			if i%2 == 1 {
				e = b
			}
			r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": fmt.Sprintf("echo start-%d >> log; sleep 0.2; echo end-%d >> log", i, i)})
			require.Equal(t, 200, r.Status, "body: %s", r.Body)
		}()
	}
	wg.Wait()
	requireSerial(t, string(b.do(tok, "GET", "/v1/sessions/"+id+"/files/log", nil).Body), 6)

	// Cancelling through the replica that does not run the task still stops it.
	r = a.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 60", "wait_s": 0})
	tid := r.JSON(t)["id"].(string)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 200, b.do(tok, "POST", "/v1/tasks/"+tid+"/cancel", nil).Status)
	require.Equal(t, "cancelled", a.waitTask(tok, tid)["status"])
}

func TestListPaginationAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	want := map[string]bool{}
	for i := range 7 {
		r := e.do(tok, "POST", "/v1/sessions", map[string]any{"name": fmt.Sprintf("s%d", i), "labels": map[string]string{"conversation": fmt.Sprintf("c%d", i%2)}})
		require.Equal(t, 201, r.Status)
		want[r.JSON(t)["id"].(string)] = true
	}
	got := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		path := "/v1/sessions?limit=3"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		m := e.do(tok, "GET", path, nil).JSON(t)
		pages++
		for _, s := range m["sessions"].([]any) {
			id := s.(map[string]any)["id"].(string)
			require.False(t, got[id], "session %s listed twice", id)
			got[id] = true
		}
		if cursor = m["next_cursor"].(string); cursor == "" {
			break
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)
	require.Len(t, e.do(tok, "GET", "/v1/sessions?conversation=c1", nil).JSON(t)["sessions"], 3)
	requireProblem(t, e.do(tok, "GET", "/v1/sessions?limit=0", nil), 400, "validation")
	requireProblem(t, e.do(tok, "GET", "/v1/sessions?status=bogus", nil), 400, "validation")
}

func TestUserModeNeedsAProviderThatCanActAsTheUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		p := c.Sandbox.Profiles["default"]
		p.Identity.Mode = "user"
		c.Sandbox.Profiles["as-user"] = p
	}})
	m := requireProblem(t, e.do(e.token("alice"), "POST", "/v1/sessions/default/commands?profile=as-user", map[string]any{"command": "touch ran"}), 422, "capability")
	require.Contains(t, m["detail"], "principal_user")
}

func TestDestroyStopsRunningWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	id := e.newSession(tok, "default")
	r := e.do(tok, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 60", "wait_s": 0})
	require.Equal(t, 202, r.Status)
	tid := r.JSON(t)["id"].(string)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	require.Equal(t, 200, e.do(tok, "DELETE", "/v1/sessions/"+id, nil).Status)
	require.Less(t, time.Since(start), 15*time.Second, "destroy waited for the running command")
	require.Equal(t, "cancelled", e.waitTask(tok, tid)["status"])
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+id, nil), 404, "not-found")
}

// TestManyConcurrentExecutionsOnASmallPool guards against a deadlock found by the benchmark:
// session locks once held query-pool connections, so max_conns concurrent executions starved
// the queries their own executions needed.
func TestManyConcurrentExecutionsOnASmallPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{conns: 4})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := e.token(fmt.Sprintf("user%d", i))
			r := e.do(tok, "POST", "/v1/sessions/default/commands", map[string]any{"command": "sleep 0.3; echo ok"})
			require.Equal(t, 200, r.Status, "body: %s", r.Body)
			require.Equal(t, "ok\n", r.JSON(t)["stdout"])
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("concurrent executions deadlocked")
	}
}
