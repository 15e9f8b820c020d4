package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// TestUsageErrors: a command line sandgate cannot read exits 2 with the reason and where to
// find the usage on stderr, and nothing on stdout, whether or not a gateway is there.
func TestUsageErrors(t *testing.T) {
	c := &cli{t: t, dir: t.TempDir(), env: map[string]string{"HOME": t.TempDir(), "SANDGATE_URL": "http://127.0.0.1:1"}}
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"sessions", "nosuch"},
		{"tasks", "nosuch", "x"},
		{"snapshots", "bogus"},
		{"completion", "tcsh"},
		{"files", "ls"},
		{"ports", "share", "s"},
		{"ports", "share", "s", "http"},
		{"token", "extra"},
		{"--output", "xml", "profiles"},
	} {
		r := c.run(nil, args...)
		assert.Equal(t, exitUsage, r.code, "sandgate %s: %+v", strings.Join(args, " "), r)
		assert.Empty(t, r.stdout, "sandgate %s", strings.Join(args, " "))
		assert.Regexp(t, `(?s)^sandgate: .+\nRun 'sandgate.* --help' for usage\.\n$`, r.stderr, "sandgate %s", strings.Join(args, " "))
	}
	assert.Contains(t, c.run(nil, "nosuchcommand").stderr, `unknown command "nosuchcommand"`)
	assert.Contains(t, c.run(nil, "sessions", "nosuch").stderr, `unknown command "nosuch" for "sandgate sessions"`)
	// A group alone still shows its help.
	out := c.ok(nil, "sessions")
	assert.Contains(t, out, "Available Commands:")
	// shell runs a program: its own failures, a bad command line too, are 125 (as exec's);
	// it refuses to run without a terminal before it asks the gateway anything.
	r := c.run(nil, "shell")
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Contains(t, r.stderr, "requires at least 1 arg")
	r = c.run(strings.NewReader(""), "shell", "s")
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Contains(t, r.stderr, "shell needs a terminal")
}

// TestNamesAndOutputs: a session is named by its id or its name wherever a command takes
// one; --output table, json, yaml and name show the same answer.
func TestNamesAndOutputs(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	other := newCLI(t, gw, gw.Token("bob", "dev"))

	web := c.session("--name", "web", "--label", "team=ml", "--label", "env=dev")
	twin1 := c.session("--name", "twin")
	twin2 := c.session("--name", "twin")
	bobs := other.session("--name", "bobs")

	assert.Equal(t, "hi\n", c.ok(nil, "exec", "web", "--", "echo", "hi"))
	assert.Equal(t, "hi\n", c.ok(nil, "exec", web, "--", "echo", "hi"), "ids still work")
	r := c.run(nil, "exec", "twin", "--", "true")
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Contains(t, r.stderr, `2 sessions are named "twin"`)
	assert.Contains(t, r.stderr, twin1)
	assert.Contains(t, r.stderr, twin2)
	r = c.run(nil, "exec", "bobs", "--", "true")
	assert.Equal(t, exitOwnFailure, r.code, "another principal's session is not found by name")
	assert.Contains(t, r.stderr, `no session named "bobs"`)
	assert.NotContains(t, r.stderr, bobs)
	r = c.run(nil, "files", "ls", "nosuch")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, `no session named "nosuch"`)

	// Only the sessions with every label asked for.
	assert.Equal(t, web+"\n", c.ok(nil, "-o", "name", "sessions", "ls", "--label", "team=ml"))
	assert.Equal(t, web+"\n", c.ok(nil, "-o", "name", "sessions", "ls", "-l", "team=ml,env=dev"))
	assert.Empty(t, c.ok(nil, "-o", "name", "sessions", "ls", "-l", "team=ml", "-l", "env=prod"))

	// Labels in the table, sorted by key.
	assert.Regexp(t, `(?m)^`+web+`\s+web\s+default\s.*\senv=dev,team=ml$`, c.ok(nil, "sessions", "ls"))

	// The same list as JSON, YAML, and ids alone.
	var fromJSON, fromYAML []map[string]any
	c.okJSON(&fromJSON, "sessions", "ls")
	require.NoError(t, yaml.Unmarshal([]byte(c.ok(nil, "-o", "yaml", "sessions", "ls")), &fromYAML))
	assert.Equal(t, fromJSON, fromYAML)
	require.Len(t, fromYAML, 3)
	assert.Equal(t, map[string]any{"team": "ml", "env": "dev"}, fromYAML[2]["labels"])
	assert.ElementsMatch(t, []string{web, twin1, twin2}, strings.Fields(c.ok(nil, "-o", "name", "sessions", "ls")))
	assert.Regexp(t, `(?m)^subject: alice$`, c.ok(nil, "-o", "yaml", "whoami"))
	id := strings.TrimSpace(c.ok(nil, "-o", "name", "sessions", "new", "--name", "by-name"))
	assert.Regexp(t, `^[0-9a-f]{32}$`, id)

	// files ls and rm, by name.
	c.ok(strings.NewReader("one"), "cp", "-", "web:dir/a.txt")
	c.ok(strings.NewReader("two"), "cp", "-", "web:b.txt")
	assert.Regexp(t, `(?m)^\S+\s+3\s+.+\sb\.txt$`, c.ok(nil, "files", "ls", "web"))
	assert.Regexp(t, `(?m)\sdir/$`, c.ok(nil, "files", "ls", "web"))
	assert.Equal(t, "dir/a.txt\n", c.ok(nil, "-o", "name", "files", "ls", "web", "dir"))
	assert.Equal(t, "one", c.ok(nil, "cp", "web:dir/a.txt", "-"))
	assert.Equal(t, "dir/a.txt\ndir\n", c.ok(nil, "files", "rm", "web", "dir/a.txt", "dir"))
	assert.Equal(t, "b.txt\n", c.ok(nil, "-o", "name", "files", "ls", "web"))
	r = c.run(nil, "cp", "web:dir/a.txt", "-")
	assert.Equal(t, exitFailure, r.code)
	r = c.run(nil, "files", "rm", "web", "../outside")
	assert.Equal(t, exitFailure, r.code, "the gateway confines paths: %+v", r)

	// tasks ls --session takes a name too; sessions rm does.
	var tasks []struct {
		SessionID string `json:"session_id"`
	}
	c.okJSON(&tasks, "tasks", "ls", "--session", "web")
	require.NotEmpty(t, tasks)
	for _, task := range tasks {
		assert.Equal(t, web, task.SessionID)
	}
	assert.Equal(t, id+"\n", c.ok(nil, "sessions", "rm", "by-name"))
}

// TestToken: sandgate token prints the credential the other commands send: one that
// works with curl (here: net/http) against the REST API.
func TestToken(t *testing.T) {
	gw := startGateway(t)
	tok := gw.Token("alice", "dev")
	c := newCLI(t, gw, tok)
	assert.Equal(t, tok+"\n", c.ok(nil, "token"))
	assert.Equal(t, "other\n", c.ok(nil, "token", "--token", "other"))

	req, err := http.NewRequest(http.MethodGet, gw.URL+"/v1/me", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(c.ok(nil, "token")))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var me struct {
		Subject string `json:"subject"`
	}
	require.NoError(t, json.Unmarshal(body, &me))
	assert.Equal(t, "alice", me.Subject)

	// Not signed in: the same error as any command, exit 1.
	r := newCLI(t, gw, "").run(nil, "token")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "not signed in")
	assert.Empty(t, r.stdout)
}

// TestCompletion: the shell scripts are there, and a SESSION argument completes with the
// caller's session ids and names.
func TestCompletion(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	for _, sh := range []string{"bash", "zsh", "fish"} {
		assert.Contains(t, c.ok(nil, "completion", sh), "sandgate", sh)
	}
	web := c.session("--name", "web")
	other := c.session()
	newCLI(t, gw, gw.Token("bob", "dev")).session("--name", "wobble")

	out := c.ok(nil, "__complete", "exec", "")
	assert.Contains(t, out, web+"\tweb (default)\n")
	assert.Contains(t, out, other+"\t- (default)\n")
	assert.Contains(t, out, "web\t"+web+"\n")
	assert.NotContains(t, out, "wobble", "only the caller's sessions")
	out = c.ok(nil, "__complete", "shell", "we")
	assert.Contains(t, out, "web\t"+web+"\n")
	assert.NotContains(t, out, other)
	assert.Contains(t, c.ok(nil, "__complete", "tasks", "ls", "--session", ""), "web\t")
	assert.Contains(t, c.ok(nil, "__complete", "-o", ""), "yaml\n")
}

// startLifecycleGateway is startGateway with a lenient profile besides (policy strict
// false: what the local provider cannot do, pause, is held rather than refused).
func startLifecycleGateway(t *testing.T) *gatewaytest.Env {
	t.Helper()
	workdir := t.TempDir()
	lenient := false
	return gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, Config: func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: "local_subprocess", Stateful: true, Blocks: lb},
			"lenient": {Type: "local_subprocess", Stateful: true, Blocks: lb, Policy: config.Policy{Strict: &lenient}},
		}
	}})
}

// TestSnapshotsPauseAndPorts: snapshot a session by name, restore it into a new session,
// list and delete snapshots; pause and resume; links to ports.
func TestSnapshotsPauseAndPorts(t *testing.T) {
	gw := startLifecycleGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	src := c.session("--name", "src")
	c.ok(strings.NewReader("kept"), "cp", "-", "src:note.txt")

	snap := strings.TrimSpace(c.ok(nil, "snapshots", "create", "src", "--name", "first"))
	require.Regexp(t, `^[0-9a-f]+$`, snap)
	assert.Regexp(t, `(?m)^`+snap+`\s+first\s+`+src+`\s+default\s+user\s`, c.ok(nil, "snapshots", "ls"))
	assert.Equal(t, snap+"\n", c.ok(nil, "-o", "name", "snapshots", "ls", "--session", "src"))
	restored := strings.TrimSpace(c.ok(nil, "snapshots", "restore", snap, "--name", "copy", "--label", "from=snap"))
	require.Regexp(t, `^[0-9a-f]{32}$`, restored)
	assert.NotEqual(t, src, restored)
	assert.Equal(t, "kept", c.ok(nil, "cp", "copy:note.txt", "-"))
	assert.Equal(t, snap+"\n", c.ok(nil, "snapshots", "rm", snap))
	assert.Empty(t, c.ok(nil, "-o", "name", "snapshots", "ls"))
	r := c.run(nil, "snapshots", "restore", snap)
	assert.Equal(t, exitFailure, r.code, "a deleted snapshot restores nothing: %+v", r)

	// The local provider cannot pause: refused on a strict profile, held on a lenient one.
	c.ok(nil, "exec", "src", "--", "true")
	r = c.run(nil, "pause", "src")
	assert.Equal(t, exitFailure, r.code)
	assert.Regexp(t, `^sandgate: 422 capability: .+\n$`, r.stderr)
	held := c.session("--profile", "lenient", "--name", "held")
	c.ok(nil, "exec", "held", "--", "true")
	r = c.run(nil, "pause", "held")
	require.Equal(t, 0, r.code, "%+v", r)
	assert.Equal(t, held+"\tpaused\n", r.stdout)
	assert.Contains(t, r.stderr, "warning: ", "the lenient profile says what it could not do")
	var sessions []struct {
		State string `json:"state"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(c.ok(nil, "-o", "yaml", "resume", "held")), &sessions))
	require.Len(t, sessions, 1)
	assert.Equal(t, "running", sessions[0].State)

	// A link to a port, to share (printed) or personal (printed with --no-browser); it
	// works without a token: nothing listens on the port, so the sandbox side fails, not
	// the link.
	share := strings.TrimSpace(c.ok(nil, "ports", "share", "src", "8000", "--ttl", "10m"))
	assert.Regexp(t, `^`+regexp.QuoteMeta(gw.URL)+`/preview/\S+/$`, share)
	var link struct {
		Port      int    `json:"port"`
		SessionID string `json:"session_id"`
		Personal  bool   `json:"personal"`
	}
	c.okJSON(&link, "ports", "open", "--no-browser", "src", "8000")
	assert.Equal(t, 8000, link.Port)
	assert.Equal(t, src, link.SessionID)
	assert.True(t, link.Personal)
	resp, err := http.Get(share)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.NotEqual(t, http.StatusUnauthorized, resp.StatusCode)
	assert.NotEqual(t, http.StatusForbidden, resp.StatusCode)
	r = c.run(nil, "ports", "share", "src", "0")
	assert.Equal(t, exitUsage, r.code)
	r = c.run(nil, "ports", "share", "src", "80", "--ttl", "1.5s")
	assert.Equal(t, exitUsage, r.code)
}

// Session options at create (issue 37): the environment every program of the session sees,
// a lifetime; and a session renamed, relabelled and given a new lifetime by name (PATCH). The
// label filter of sessions ls is the gateway's.
func TestSessionOptionsAndEdit(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	other := newCLI(t, gw, gw.Token("bob", "dev"))

	id := c.session("--name", "opts", "--label", "team=ml", "--env", "GREETING=hello there", "-e", "LEVEL=3", "--timeout", "1h")
	assert.Equal(t, "hello there 3\n", c.ok(nil, "exec", "opts", "--", "sh", "-c", `echo "$GREETING $LEVEL"`))
	assert.Equal(t, "override\n", c.ok(nil, "exec", "opts", "--env", "GREETING=override", "--", "sh", "-c", `echo "$GREETING"`),
		"a run's own env wins")

	var got []struct {
		ID        string            `json:"id"`
		Name      string            `json:"name"`
		Labels    map[string]string `json:"labels"`
		EnvNames  []string          `json:"env_names"`
		ExpiresAt *time.Time        `json:"expires_at"`
	}
	c.okJSON(&got, "sessions", "ls", "--label", "team=ml")
	require.Len(t, got, 1)
	assert.Equal(t, id, got[0].ID)
	assert.Equal(t, []string{"GREETING", "LEVEL"}, got[0].EnvNames, "names only: values may be secrets")
	require.NotNil(t, got[0].ExpiresAt)
	assert.WithinDuration(t, time.Now().Add(time.Hour), *got[0].ExpiresAt, 5*time.Minute)

	assert.Equal(t, id+"\n", c.ok(nil, "sessions", "edit", "opts", "--name", "renamed", "--label", "stage=2", "--unlabel", "team", "--timeout", "0"))
	got = nil
	c.okJSON(&got, "sessions", "ls")
	require.Len(t, got, 1)
	assert.Equal(t, "renamed", got[0].Name)
	assert.Equal(t, map[string]string{"stage": "2"}, got[0].Labels)
	assert.Nil(t, got[0].ExpiresAt, "--timeout 0 removes the lifetime")
	assert.Empty(t, strings.TrimSpace(c.ok(nil, "-o", "name", "sessions", "ls", "-l", "team=ml")))
	assert.Equal(t, id+"\n", c.ok(nil, "-o", "name", "sessions", "ls", "-l", "stage=2"))

	r := c.run(nil, "sessions", "edit", "renamed")
	assert.Equal(t, exitUsage, r.code, "nothing to change is a usage error: %+v", r)
	r = c.run(nil, "sessions", "new", "--timeout", "1500ms")
	assert.Equal(t, exitUsage, r.code, "whole seconds only: %+v", r)
	r = other.run(nil, "sessions", "edit", id, "--name", "mine")
	assert.Equal(t, exitFailure, r.code, "another principal's session is not found: %+v", r)
}
