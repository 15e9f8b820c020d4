package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// binary is the sandgate command built for the tests: they run it as a user would.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandgate-cli-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sandgate")
	if out, err := exec.Command(goTool(), "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sandgate: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command that builds the binaries under test: the one on PATH, else the
// toolchain's usual place on the machines .ci/run prepares.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := "/usr/local/go/bin/go"; fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startGateway is a real gateway (gatewaytest: Postgres of its own, the development issuer
// at /dev/oidc, its console config naming that issuer) with a stateful "default" profile
// and a per_call "oneshot" one, both local. Without Postgres the test skips (fails under
// CI=true).
//
// edit, when given, changes the configuration further.
func startGateway(t *testing.T, edit ...func(*config.Config)) *gatewaytest.Env {
	t.Helper()
	workdir := t.TempDir()
	return gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, Config: func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: "local_subprocess", Stateful: true, Blocks: lb},
			"oneshot": {Type: "local_subprocess", Scope: "per_call", Blocks: lb},
		}
		for _, f := range edit {
			f(c)
		}
	}})
}

// cli runs the binary for one user: a home and config folder of its own, the gateway in
// SANDGATE_URL and, unless signed in through login, a token in SANDGATE_TOKEN.
type cli struct {
	t   *testing.T
	env map[string]string
	dir string // the user's working folder
}

func newCLI(t *testing.T, gw *gatewaytest.Env, token string) *cli {
	home := t.TempDir()
	c := &cli{t: t, dir: t.TempDir(), env: map[string]string{
		"PATH":            os.Getenv("PATH"),
		"HOME":            home,
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"SANDGATE_URL":    gw.URL,
	}}
	if token != "" {
		c.env["SANDGATE_TOKEN"] = token
	}
	return c
}

func (c *cli) command(stdin io.Reader, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Dir = c.dir
	for k, v := range c.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = stdin
	return cmd
}

// result is one finished run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the binary to its end.
func (c *cli) run(stdin io.Reader, args ...string) result {
	c.t.Helper()
	cmd := c.command(stdin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(c.t, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// ok runs the binary and requires exit code 0.
func (c *cli) ok(stdin io.Reader, args ...string) string {
	c.t.Helper()
	r := c.run(stdin, args...)
	require.Equal(c.t, 0, r.code, "sandgate %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.stdout, r.stderr)
	return r.stdout
}

// okJSON runs the binary with --output json and decodes its stdout into v.
func (c *cli) okJSON(v any, args ...string) {
	c.t.Helper()
	out := c.ok(nil, append([]string{"--output", "json"}, args...)...)
	require.NoError(c.t, json.Unmarshal([]byte(out), v), "stdout: %s", out)
}

// lines reads a pipe line by line into a channel, closed at its end.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// waitLine reads lines until one matches re and returns its submatches.
func waitLine(t *testing.T, ch <-chan string, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(time.Minute)
	var seen []string
	for {
		select {
		case l, ok := <-ch:
			require.True(t, ok, "the output ended before a line matching %s; it was:\n%s", re, strings.Join(seen, "\n"))
			seen = append(seen, l)
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %s within a minute; seen:\n%s", re, strings.Join(seen, "\n"))
		}
	}
}

// noRedirect is an HTTP client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestLogin(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, "")

	r := c.run(nil, "whoami")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "not signed in to "+gw.URL)

	// The device flow: sandgate prints where to go and the code; the user opens the page,
	// checks the code and signs in; sandgate, polling, gets the token.
	cmd := c.command(nil, "login", "--flow", "device")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out := lines(stderr)
	m := waitLine(t, out, regexp.MustCompile(`^To sign in, open (\S+) and enter the code (\S+)$`))
	verify, userCode := m[1], m[2]
	assert.Equal(t, gw.Issuer.URL()+"/device", verify)
	complete := waitLine(t, out, regexp.MustCompile(`^\(or open (\S+)\)$`))[1]
	resp, err := http.Get(complete)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(page), userCode, "the verification page is prefilled with the code")
	resp, err = http.PostForm(verify, url.Values{"user_code": {strings.ToLower(userCode)}, "sub": {"alice"}, "groups": {"dev,ml"}, "email": {"alice@example.test"}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	waitLine(t, out, regexp.MustCompile(`^Signed in to `+regexp.QuoteMeta(gw.URL)+` as alice \(groups dev, ml\)\.$`))
	require.NoError(t, cmd.Wait())

	// The token is cached for the user alone, with its refresh token.
	dir := filepath.Join(c.env["XDG_CONFIG_HOME"], "sandgate")
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	file := filepath.Join(dir, "credentials.json")
	st, err = os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	cache := readCache(t, file)
	si := cache.Servers[gw.URL]
	require.NotNil(t, si)
	assert.Equal(t, gw.URL, cache.Current)
	assert.Equal(t, gw.Issuer.URL(), si.Issuer)
	assert.NotEmpty(t, si.RefreshToken)
	assert.Contains(t, si.Scopes, "offline_access", "the issuer offers it, so login asks for it")

	// Later commands use the cached token, also without SANDGATE_URL (the gateway signed
	// in to last).
	delete(c.env, "SANDGATE_URL")
	var me struct {
		Subject string   `json:"subject"`
		Groups  []string `json:"groups"`
	}
	c.okJSON(&me, "whoami")
	assert.Equal(t, "alice", me.Subject)
	assert.Equal(t, []string{"dev", "ml"}, me.Groups)
	c.env["SANDGATE_URL"] = gw.URL

	// An expired token is refreshed with the refresh token, and the cache saved again.
	si.Expiry = time.Now().Add(-time.Hour)
	writeCache(t, file, cache)
	c.okJSON(&me, "whoami")
	assert.Equal(t, "alice", me.Subject)
	refreshed := readCache(t, file).Servers[gw.URL]
	assert.True(t, refreshed.Expiry.After(time.Now().Add(time.Hour)), "the refreshed token's expiry is saved: %s", refreshed.Expiry)
	st, err = os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the cache stays the user's alone after a refresh")

	// A refresh token the issuer refuses: sign in again.
	si.Expiry, si.RefreshToken = time.Now().Add(-time.Hour), "not-a-refresh-token"
	writeCache(t, file, cache)
	r = c.run(nil, "whoami")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "could not be refreshed")
	assert.Contains(t, r.stderr, "run `sandgate login`")

	// The browser flow: authorization code with PKCE, redirected to sandgate's listener on
	// 127.0.0.1. The "browser" here is an HTTP client that submits the issuer's form.
	cmd = c.command(nil, "login", "--flow", "browser", "--no-browser")
	stderr, err = cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out = lines(stderr)
	authURL := waitLine(t, out, regexp.MustCompile(`^(http://\S+/authorize\?\S+)$`))[1]
	au, err := url.Parse(authURL)
	require.NoError(t, err)
	q := au.Query()
	assert.Equal(t, "S256", q.Get("code_challenge_method"))
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/callback$`, q.Get("redirect_uri"))
	resp, err = http.Get(authURL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = noRedirect.PostForm(gw.Issuer.URL()+"/authorize", url.Values{"q": {au.RawQuery}, "sub": {"bob"}, "groups": {"dev"}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	resp, err = http.Get(resp.Header.Get("Location")) // the browser follows to sandgate
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(page), "Signed in.")
	waitLine(t, out, regexp.MustCompile(`^Signed in to .* as bob`))
	require.NoError(t, cmd.Wait())
	c.okJSON(&me, "whoami")
	assert.Equal(t, "bob", me.Subject)

	// --token wins over the cache; logout forgets the cache.
	c.okJSON(&me, "whoami", "--token", gw.Token("carol"))
	assert.Equal(t, "carol", me.Subject)
	c.ok(nil, "logout")
	r = c.run(nil, "whoami")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "not signed in")
}

func readCache(t *testing.T, file string) *store {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var st store
	require.NoError(t, json.Unmarshal(b, &st))
	return &st
}

func writeCache(t *testing.T, file string, st *store) {
	t.Helper()
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, b, 0o600))
}

// session creates a session through the CLI and returns its id.
func (c *cli) session(args ...string) string {
	c.t.Helper()
	id := strings.TrimSpace(c.ok(nil, append([]string{"sessions", "new"}, args...)...))
	require.Regexp(c.t, `^[0-9a-f]+$`, id)
	return id
}

func TestSessionsAndExec(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))

	var profiles []struct {
		Name string `json:"name"`
	}
	c.okJSON(&profiles, "profiles")
	require.Len(t, profiles, 2)
	table := c.ok(nil, "profiles")
	assert.Regexp(t, `oneshot +local_subprocess +per_call +none +- \(a fresh sandbox per run\)`, table, "a per_call profile has no idle timeout")

	sid := c.session("--name", "demo", "--label", "team=ml")
	var sessions []struct {
		ID     string            `json:"id"`
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	c.okJSON(&sessions, "sessions", "ls")
	require.Len(t, sessions, 1)
	assert.Equal(t, sid, sessions[0].ID)
	assert.Equal(t, "demo", sessions[0].Name)
	assert.Equal(t, map[string]string{"team": "ml"}, sessions[0].Labels)
	assert.Regexp(t, `(?m)^`+sid+`\s+demo\s+default\s`, c.ok(nil, "sessions", "ls"))

	// The remote exit code is sandgate's; stdout and stderr go to their own streams.
	r := c.run(nil, "exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	assert.Equal(t, 3, r.code)
	assert.Equal(t, "out\n", r.stdout)
	assert.Equal(t, "err\n", r.stderr)

	// Every argument reaches the program as one argument: nothing is read by the shell.
	out := c.ok(nil, "exec", sid, "--", "printf", "%s|", "a b", "$HOME", ";echo pwned", "'quoted'", "", "`id`")
	assert.Equal(t, "a b|$HOME|;echo pwned|'quoted'||`id`|", out)
	r = c.run(nil, "exec", sid, "--", "FOO=bar")
	assert.Equal(t, 127, r.code, "an argv[0] with = runs a program of that name, it sets no variable: %+v", r)

	// Standard input is piped when it is not a terminal, in many requests when large.
	assert.Equal(t, "apple\npear\n", c.ok(strings.NewReader("pear\napple\n"), "exec", sid, "--", "sort"))
	big := bytes.Repeat([]byte("0123456789abcdef"), 300_000/16)
	assert.Equal(t, "300000", strings.TrimSpace(c.ok(bytes.NewReader(big), "exec", sid, "--", "wc", "-c")))
	assert.Equal(t, "0", strings.TrimSpace(c.ok(strings.NewReader("ignored"), "exec", "-n", sid, "--", "wc", "-c")), "-n sends no input")

	// Output streams live: the first line is here while the program still waits (for a
	// file this test makes after reading it; the local provider runs on this machine).
	signal := filepath.Join(t.TempDir(), "go")
	cmd := c.command(nil, "exec", sid, "--", "sh", "-c", `echo first; while [ ! -e "$1" ]; do sleep 0.05; done; echo second; exit 4`, "sh", signal)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	outLines := lines(stdout)
	waitLine(t, outLines, regexp.MustCompile(`^first$`))
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	waitLine(t, outLines, regexp.MustCompile(`^second$`))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 4, ee.ExitCode())

	// --output json: the result document, and still the exit code.
	r = c.run(nil, "-o", "json", "exec", sid, "--", "sh", "-c", "echo hi; exit 2")
	assert.Equal(t, 2, r.code)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), "stdout: %s", r.stdout)
	assert.Equal(t, 2, res.ExitCode)
	assert.Equal(t, "hi\n", res.Stdout)

	// A timeout is 124, like timeout(1).
	r = c.run(nil, "exec", "--timeout", "500ms", sid, "--", "sleep", "30")
	assert.Equal(t, exitTimedOut, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "timed out")

	// Interrupted, sandgate cancels the remote command and exits 130.
	cmd = c.command(nil, "exec", sid, "--", "sh", "-c", "echo running; sleep 60")
	stdout, err = cmd.StdoutPipe()
	require.NoError(t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	waitLine(t, lines(stdout), regexp.MustCompile(`^running$`))
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitInterrupted, ee.ExitCode(), "stderr: %s", errb.String())
	taskID := regexp.MustCompile(`task (\w+) cancelled`).FindStringSubmatch(errb.String())
	require.NotNil(t, taskID, "stderr: %s", errb.String())
	var task struct {
		Status string `json:"status"`
	}
	c.okJSON(&task, "tasks", "get", taskID[1])
	assert.Equal(t, "cancelled", task.Status)

	// A one-off run in a fresh sandbox, with its input sent along.
	assert.Equal(t, "once\n", c.ok(nil, "run", "--profile", "oneshot", "--", "echo", "once"))
	assert.Equal(t, "piped", c.ok(strings.NewReader("piped"), "run", "--profile", "oneshot", "--", "cat"))
	r = c.run(nil, "run", "--profile", "oneshot", "-e", "CODE=7", "--", "sh", "-c", `exit "$CODE"`)
	assert.Equal(t, 7, r.code)

	// Errors: a problem from the gateway is one line with its detail; where the exit code
	// is the program's, sandgate's own failures are 125; elsewhere 1, and usage errors 2.
	r = c.run(nil, "exec", "0123456789abcdef0123456789abcdef", "--", "true")
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Regexp(t, `^sandgate: 404 not-found: .+\n$`, r.stderr)
	r = c.run(nil, "exec", sid, "true")
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Contains(t, r.stderr, "put -- between the session and the command")
	r = c.run(nil, "exec", sid, "--", "echo", "\xff\xfe")
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Contains(t, r.stderr, "is not valid UTF-8", "bytes a JSON command cannot carry are refused, not replaced")
	r = c.run(nil, "tasks", "get", "0123456789abcdef0123456789abcdef")
	assert.Equal(t, exitFailure, r.code)
	assert.Regexp(t, `^sandgate: 404 not-found: .+\n$`, r.stderr)
	r = c.run(nil, "sessions", "rm")
	assert.Equal(t, exitUsage, r.code)
	r = c.run(nil, "sessions", "ls", "--bogus")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "unknown flag: --bogus")
	r = c.run(nil, "--output", "xml", "profiles")
	assert.Equal(t, exitUsage, r.code)
	r = c.run(nil, "profiles", "--token", "not-a-token")
	assert.Equal(t, exitFailure, r.code)
	assert.Regexp(t, `^sandgate: 401 unauthenticated: .+\n$`, r.stderr)

	assert.Equal(t, sid+"\n", c.ok(nil, "sessions", "rm", sid))
	c.okJSON(&sessions, "sessions", "ls")
	assert.Empty(t, sessions)
}

func TestCodeAndCopy(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	sid := c.session()

	// Code from a file, then from standard input: a stateful profile keeps the variable.
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "answer.py"), []byte("answer = 6*7\nprint(answer)\n"), 0o644))
	assert.Equal(t, "42\n", c.ok(nil, "code", sid, "answer.py"))
	assert.Equal(t, "still 42\n", c.ok(strings.NewReader(`print(f"still {answer}")`), "code", sid, "-"))
	r := c.run(strings.NewReader("import sys\nsys.exit(5)\n"), "code", sid, "-")
	assert.Equal(t, 5, r.code)
	assert.Equal(t, "3\n", c.ok(strings.NewReader("echo $((1+2))"), "code", "--language", "bash", sid, "-"))
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "read.py"), []byte("import sys\nprint(sys.stdin.read().upper())\n"), 0o644))
	assert.Equal(t, "PIPED\n\n", c.ok(strings.NewReader("piped\n"), "code", sid, "read.py"), "with a file, stdin goes to the program")

	// cp both ways, byte-exact, binary.
	data := make([]byte, 3<<20+17)
	_, _ = rand.Read(data)
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, "data.bin"), data, 0o644))
	var written struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	}
	c.okJSON(&written, "cp", "data.bin", sid+":in/")
	assert.Equal(t, "in/data.bin", written.Path)
	assert.Equal(t, int64(len(data)), written.Size)
	c.ok(nil, "cp", sid+":in/data.bin", "copy.bin")
	got, err := os.ReadFile(filepath.Join(c.dir, "copy.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the round trip is byte-exact")
	require.NoError(t, os.Mkdir(filepath.Join(c.dir, "out"), 0o755))
	c.ok(nil, "cp", sid+":in/data.bin", "out")
	got, err = os.ReadFile(filepath.Join(c.dir, "out", "data.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "into a folder, under the same name")
	assert.Equal(t, string(data[:1000]), c.ok(bytes.NewReader(data[:1000]), "cp", "-", sid+":piped.bin")+c.ok(nil, "cp", sid+":piped.bin", "-"))
	assert.Equal(t, fmt.Sprint(len(data)), strings.TrimSpace(c.ok(nil, "exec", sid, "--", "sh", "-c", "wc -c < in/data.bin")))

	r = c.run(nil, "cp", sid+":missing.bin", "x.bin")
	assert.Equal(t, exitFailure, r.code)
	assert.Regexp(t, `^sandgate: 404 not-found: .+\n$`, r.stderr)
	assert.NoFileExists(t, filepath.Join(c.dir, "x.bin"), "a failed download leaves no file")
	entries, err := os.ReadDir(c.dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".sandgate-", "no temporary file is left behind")
	}
	r = c.run(nil, "cp", "a", "b")
	assert.Equal(t, exitUsage, r.code)
	r = c.run(nil, "cp", sid+":../../etc/passwd", "-")
	assert.Equal(t, exitFailure, r.code, "the gateway confines paths: %+v", r)
}

func TestTasks(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("alice", "dev"))
	sid := c.session()

	// A finished task: ls, get, logs.
	assert.Equal(t, 3, c.run(nil, "exec", sid, "--", "sh", "-c", "echo done; echo warn >&2; exit 3").code)
	var tasks []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	c.okJSON(&tasks, "tasks", "ls", "--session", sid)
	require.Len(t, tasks, 1)
	done := tasks[0].ID
	var task struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Result struct {
			ExitCode int `json:"exit_code"`
		} `json:"result"`
	}
	c.okJSON(&task, "tasks", "get", done)
	assert.Equal(t, "succeeded", task.Status)
	assert.Equal(t, 3, task.Result.ExitCode)
	assert.Contains(t, c.ok(nil, "tasks", "get", done), "exit code:  3")
	r := c.run(nil, "tasks", "logs", done)
	assert.Equal(t, 3, r.code)
	assert.Equal(t, "done\n", r.stdout)
	assert.Equal(t, "warn\n", r.stderr)
	assert.Regexp(t, `(?m)^`+done+`\s+succeeded\s`, c.ok(nil, "tasks", "ls"))

	// A running task, followed live by `logs -f` in another process, then cancelled.
	runner := c.command(nil, "exec", sid, "--", "sh", "-c", "echo started; sleep 60; echo never")
	stdout, err := runner.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, runner.Start())
	waitLine(t, lines(stdout), regexp.MustCompile(`^started$`))
	c.okJSON(&tasks, "tasks", "ls", "--session", sid, "--status", "running")
	require.Len(t, tasks, 1)
	running := tasks[0].ID
	r = c.run(nil, "tasks", "logs", running)
	assert.Equal(t, exitOwnFailure, r.code)
	assert.Contains(t, r.stderr, "tasks logs -f "+running)

	follower := c.command(nil, "tasks", "logs", "-f", running)
	fout, err := follower.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, follower.Start())
	followed := lines(fout)
	waitLine(t, followed, regexp.MustCompile(`^started$`))

	var cancelled struct {
		Status string `json:"status"`
	}
	c.okJSON(&cancelled, "tasks", "cancel", running)
	assert.Equal(t, "cancelled", cancelled.Status)
	for l := range followed {
		assert.NotEqual(t, "never", l)
	}
	var ee *exec.ExitError
	require.ErrorAs(t, follower.Wait(), &ee, "a cancelled program exits non-zero")
	assert.NotEqual(t, exitOwnFailure, ee.ExitCode())
	require.ErrorAs(t, runner.Wait(), &ee)
	assert.NotEqual(t, exitOwnFailure, ee.ExitCode())
	c.okJSON(&task, "tasks", "get", running)
	assert.Equal(t, "cancelled", task.Status)
}

// TestReadmeCLI runs the README's CLI block verbatim, as a user signed in (here with
// SANDGATE_TOKEN instead of the interactive login, which TestLogin drives), with this
// binary on PATH.
func TestReadmeCLI(t *testing.T) {
	gw := startGateway(t)
	c := newCLI(t, gw, gw.Token("dev", "dev"))
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- cli:start -->\\s*```sh\n(.*?)```\\s*<!-- cli:end -->").FindSubmatch(readme)
	require.NotNil(t, m, "README has no CLI block")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", string(m[1]))
	cmd.Dir = c.dir
	for k, v := range c.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the README's CLI block failed:\n%s", out)
	t.Logf("%s", out)
	for _, want := range []string{"42\n", "to stderr\nexit code 3\n", "apple\npear\n", "still here: 42\n", "byte-exact\n", "succeeded", "exit code:  0"} {
		assert.Contains(t, string(out), want)
	}
}
