package web_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// screenshotDir holds the screenshots of every view (gitignored test artifacts).
const screenshotDir = "testdata/screenshots"

// docsScreenshot is the README's picture of the session page, rewritten when
// SANDGATE_UPDATE_SCREENSHOTS=1.
const docsScreenshot = "../docs/console-session.png"

// chromiumPath finds Debian's chromium; without it the test skips, except under CI=true.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SANDGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed, and CI=true requires the browser test: install Debian's chromium (.ci/run does)")
	}
	t.Skip("chromium is not installed (apt-get install chromium); skipping the browser test of the console")
	return ""
}

type page struct {
	t   *testing.T
	ctx context.Context
}

func newPage(t *testing.T) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 860),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() }) // before the user-data dir is removed
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	require.NoError(t, os.MkdirAll(screenshotDir, 0o755))
	return &page{t: t, ctx: ctx}
}

// fail saves a screenshot and the page's text, then stops the test.
func (p *page) fail(format string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	name := filepath.Join(screenshotDir, "FAILED-"+p.t.Name()+".png")
	if buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		_ = os.WriteFile(name, buf, 0o644)
	}
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	p.t.Fatalf("%s\npage (screenshot %s):\n%s", fmt.Sprintf(format, args...), name, text)
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.fail("browser step: %v", err)
	}
}

// eval runs a JavaScript expression (awaiting a promise) and decodes its value into T.
func eval[T any](p *page, js string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.fail("evaluate %s: %v", js, err)
	}
	return v
}

// wait polls a JavaScript condition until it is true; errors (a page in mid-navigation)
// count as not yet.
func (p *page) wait(what, js string) {
	p.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { try { return !!(`+js+`); } catch { return false; } })()`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.fail("timed out waiting for %s (%s)", what, js)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *page) text(sel string) string {
	p.t.Helper()
	return eval[string](p, `document.querySelector(`+jsString(sel)+`)?.textContent ?? ""`)
}

func (p *page) goTo(hash string) {
	p.t.Helper()
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = ` + jsString(hash)))
}

// setValue sets a form control's value as typing would (an input event follows).
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`(() => { const el = document.querySelector(` + jsString(sel) + `);
		el.value = ` + jsString(v) + `; el.dispatchEvent(new Event('input', { bubbles: true })); })()`)
}

// shot saves a full-page screenshot of the current view as name.png.
func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	eval[bool](p, `document.fonts.ready.then(() => true)`)
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.fail("screenshot %s: %v", name, err)
	}
	require.NoError(p.t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), buf, 0o644))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// signIn goes through the development issuer's form as sub with groups.
func (p *page) signIn(sub, groups string) {
	p.t.Helper()
	p.wait("the sign-in button", `document.querySelector('#signin')`)
	p.do(chromedp.Click(chromedp.ID("signin")))
	p.wait("the dev issuer's sign-in form", `document.querySelector('input[name=sub]')`)
	p.do(
		setValue("input[name=sub]", sub),
		setValue("input[name=groups]", groups),
		chromedp.Click(chromedp.CSS("button[type=submit]")),
	)
	p.wait("the console after sign-in", `!document.querySelector('#nav').hidden`)
}

func testFiles(t *testing.T) (dir string, data []byte) {
	dir = t.TempDir()
	data = make([]byte, 300<<10)
	_, _ = rand.Read(data)
	img := image.NewRGBA(image.Rect(0, 0, 96, 64))
	for x := range 96 {
		for y := range 64 {
			img.Set(x, y, color.RGBA{R: uint8(x * 2), G: uint8(60 + y*2), B: 200, A: 255})
		}
	}
	var pngBuf bytes.Buffer
	require.NoError(t, png.Encode(&pngBuf, img))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.bin"), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from the console\nsecond line\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pixel.png"), pngBuf.Bytes(), 0o644))
	return dir, data
}

// TestConsoleInBrowser drives the console in Debian's Chromium against a real gateway: sign-in
// through the dev issuer's form, a session, code and a command (also one promoted to a task),
// files up and down byte-exact, an expired and a rejected token, and the session's end.
func TestConsoleInBrowser(t *testing.T) {
	p := newPage(t)
	g := startGateway(t)

	// Signed out, the route is kept: sign-in comes back to it.
	p.do(chromedp.Navigate(g.URL + "/#/profiles"))
	p.wait("the sign-in page", `document.querySelector('#signin')`)
	p.shot("signin")
	p.signIn("alice", "dev,ml")
	p.wait("the profiles view", `location.hash === '#/profiles' && document.querySelector('#profiles [data-profile=default]')`)
	require.Empty(t, eval[string](p, `location.search`), "the authorization code does not stay in the address bar")
	require.Contains(t, p.text(`[data-profile=default]`), "no isolation", "the unisolated local provider is obvious")
	p.shot("profiles")

	p.goTo("#/me")
	p.wait("the me view", `document.querySelector('#me-view')`)
	me := p.text("#me-view")
	require.Contains(t, me, "alice")
	require.Contains(t, p.text("#groups"), "ml")
	require.Contains(t, p.text("#identity"), "agent")
	p.shot("me")

	// Create a session.
	p.goTo("#/sessions")
	p.wait("the new-session form", `document.querySelector('#create-session-form')`)
	p.do(chromedp.SendKeys(chromedp.ID("new-session-name"), "demo"), chromedp.Click(chromedp.ID("create-session")))
	p.wait("the session page", `/^#\/sessions\/[0-9a-f]{32}$/.test(location.hash) && document.querySelector('#runner')`)
	sid := strings.TrimPrefix(eval[string](p, `location.hash`), "#/sessions/")
	require.Contains(t, p.text("h1"), "demo")
	require.Contains(t, p.text("#idle-left"), "left")

	// Run code: both streams, the exit code and the duration are shown.
	p.do(
		setValue("#code", "import sys\nprint(6*7)\nprint('careful', file=sys.stderr)\nsys.exit(3)"),
		chromedp.Click(chromedp.ID("run")),
	)
	p.wait("the code's result", `document.querySelector('#result').dataset.state === 'done'`)
	require.Equal(t, "42\n", p.text("#stdout"))
	require.Equal(t, "careful\n", p.text("#stderr"))
	require.Equal(t, "3", p.text("#exit-code"))
	require.Regexp(t, `\d+ ms|s$`, p.text("#duration"))
	p.shot("session")
	if os.Getenv("SANDGATE_UPDATE_SCREENSHOTS") == "1" {
		ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		cancel()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(docsScreenshot, buf, 0o644))
		t.Logf("wrote %s (%d bytes)", docsScreenshot, len(buf))
	}

	// A refused request shows the problem's detail and type.
	p.do(
		chromedp.Click(chromedp.ID("mode-command")),
		setValue("#command", "pwd"),
		setValue("#cwd", "../.."),
		chromedp.Click(chromedp.ID("run")),
	)
	p.wait("the problem", `document.querySelector('#result').dataset.state === 'error'`)
	require.True(t, strings.HasPrefix(p.text("#result .problem-type"), "https://sandgate.dev/problems/"), p.text("#result"))
	require.NotEmpty(t, p.text("#result .problem-detail"))
	p.shot("session-problem")

	// Output streams while the command runs: the first line shows before the program ends;
	// the run is a task (linked), and its result replaces the live panes.
	p.do(
		setValue("#cwd", ""),
		setValue("#command", "echo early; sleep 2; echo later"),
		chromedp.Click(chromedp.ID("run")),
	)
	p.wait("the live first line", `document.querySelector('#result').dataset.state === 'pending' && document.querySelector('#pending a') && document.querySelector('#live-stdout')?.textContent === 'early\n'`)
	later := eval[string](p, `document.querySelector('#result').dataset.task`)
	p.shot("session-live")
	p.wait("the task's result", `document.querySelector('#result').dataset.state === 'done'`)
	require.Equal(t, "early\nlater\n", p.text("#stdout"))
	require.Equal(t, "0", p.text("#exit-code"))

	// One more that runs long, to follow on its task page and cancel from the tasks list.
	p.do(setValue("#command", "echo waiting; sleep 60"), chromedp.Click(chromedp.ID("run")))
	p.wait("the long task", `document.querySelector('#result').dataset.state === 'pending'`)
	long := eval[string](p, `document.querySelector('#result').dataset.task`)
	p.do(setValue("#command", ""))
	p.goTo("#/tasks/" + long)
	p.wait("its live output on the task page", `document.querySelector('#live-stdout')?.textContent === 'waiting\n'`)
	require.Contains(t, p.text("#task-program"), "sleep 60", "the task page shows what runs")
	p.shot("task-live")

	p.goTo("#/tasks")
	p.wait("the tasks", `document.querySelectorAll('#tasks tr[data-task]').length >= 3 && document.querySelector('#tasks tr[data-task="`+long+`"] button')`)
	require.Contains(t, p.text("#tasks"), "succeeded")
	p.shot("tasks")
	p.do(chromedp.Click(chromedp.CSS(`#tasks tr[data-task="` + long + `"] button`)))
	p.wait("the cancelled task", `document.querySelector('#tasks tr[data-task="`+long+`"]')?.textContent.includes('cancelled')`)

	p.goTo("#/tasks/" + later)
	p.wait("the task page", `document.querySelector('#result').dataset.state === 'done'`)
	require.Equal(t, "early\nlater\n", p.text("#stdout"))
	require.Contains(t, p.text("#task-status"), "succeeded")
	require.Equal(t, "echo early; sleep 2; echo later", p.text("#task-program"))
	p.shot("task")

	// A terminal: a shell on a pseudo-terminal, typed into through xterm.js; closing the page
	// closes it.
	p.goTo("#/sessions/" + sid + "/terminal")
	p.wait("the terminal page", `document.querySelector('#terminal-start')`)
	p.do(chromedp.Click(chromedp.ID("terminal-start")))
	p.wait("the shell", `document.querySelector('#terminal').dataset.process && document.querySelector('#terminal .xterm-helper-textarea')`)
	shell := eval[string](p, `document.querySelector('#terminal').dataset.process`)
	// Typed as text input (as an IME or a paste delivers it) then Enter: synthetic key events
	// of each character would reach xterm.js twice (keydown and keypress).
	p.do(chromedp.Focus(chromedp.CSS(`#terminal .xterm-helper-textarea`)))
	_, typed := chromedp.Call(p.ctx, input.InsertText, input.InsertTextParams{Text: "echo $((6*7))-from-the-terminal"})
	require.NoError(t, typed)
	p.do(chromedp.KeyEvent(kb.Enter))
	p.wait("the shell's answer", `document.querySelector('#terminal .xterm-rows')?.textContent.includes('42-from-the-terminal')`)
	p.shot("terminal")
	p.do(chromedp.Click(chromedp.ID("terminal-stop")))
	// The buffer holds the line at once; the rows show it at the next animation frame.
	p.wait("the closed shell", `document.querySelector('#terminal').dataset.ended === 'true' && document.querySelector('#terminal .xterm-rows').textContent.includes('the shell ended')`)
	_ = shell

	// Files: upload three, preview text and an image, download one byte-exact, delete one.
	dir, data := testFiles(t)
	p.goTo("#/sessions/" + sid + "/files")
	p.wait("the file browser", `document.querySelector('#files tbody tr')`)
	p.do(chromedp.SetUploadFiles(chromedp.ID("upload-input"), []string{
		filepath.Join(dir, "data.bin"), filepath.Join(dir, "hello.txt"), filepath.Join(dir, "pixel.png"),
	}))
	p.wait("the uploaded files", `['data.bin', 'hello.txt', 'pixel.png'].every((f) => document.querySelector('#files tr[data-path="' + f + '"]'))`)
	require.Contains(t, p.text(`#files tr[data-path="data.bin"]`), "300 KiB")

	p.do(chromedp.Click(chromedp.CSS(`#files tr[data-path="hello.txt"] button[data-action=preview]`)))
	p.wait("the text preview", `document.querySelector('#preview-text')`)
	require.Equal(t, "hello from the console\nsecond line\n", p.text("#preview-text"))
	p.do(chromedp.Click(chromedp.CSS(`#files tr[data-path="pixel.png"] button[data-action=preview]`)))
	p.wait("the image preview", `document.querySelector('#preview-image')?.complete && document.querySelector('#preview-image').naturalWidth === 96`)
	p.shot("files")

	downloads := t.TempDir()
	_, err := chromedp.CallBrowser(p.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: downloads, EventsEnabled: new(true),
	})
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	events := chromedp.BrowserEvents(dctx, browser.DownloadProgress) // subscribed before the click
	p.do(chromedp.Click(chromedp.CSS(`#files tr[data-path="data.bin"] button[data-action=download]`)))
	var got []byte
	for ev, err := range events {
		require.NoError(t, err, "waiting for the download")
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatal("the download was cancelled")
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			got, err = os.ReadFile(filepath.Join(downloads, ev.GUID))
			require.NoError(t, err)
			break
		}
	}
	cancel()
	want := sha256.Sum256(data)
	sum := sha256.Sum256(got)
	require.Equal(t, hex.EncodeToString(want[:]), hex.EncodeToString(sum[:]), "the download is byte-exact")

	p.do(chromedp.Click(chromedp.CSS(`#files tr[data-path="hello.txt"] button[data-action=delete]`)))
	p.wait("the confirmation", `document.querySelector('dialog[open] #confirm-ok')`)
	p.do(chromedp.Click(chromedp.ID("confirm-ok")))
	p.wait("hello.txt gone", `document.querySelector('#files tr[data-path="data.bin"]') && !document.querySelector('#files tr[data-path="hello.txt"]')`)

	// A narrow screen: nothing sticks out sideways.
	p.do(chromedp.EmulateViewport(390, 844))
	for _, view := range []struct{ hash, sel, name string }{
		{"#/sessions/" + sid, "#runner", "session-narrow"},
		{"#/sessions", "#sessions tr[data-session]", "sessions-narrow"},
		{"#/profiles", "#profiles .card", "profiles-narrow"},
	} {
		p.goTo(view.hash)
		p.wait(view.name, `document.querySelector(`+jsString(view.sel)+`)`)
		require.LessOrEqual(t, eval[int](p, `document.documentElement.scrollWidth`), 390, "%s overflows a 390px screen", view.hash)
		p.shot(view.name)
	}
	p.do(chromedp.EmulateViewport(1200, 860))

	// An expired token: back to sign-in on the same page, which comes back with its draft.
	p.goTo("#/sessions/" + sid)
	p.wait("the session page", `document.querySelector('#runner')`)
	p.do(chromedp.Click(chromedp.ID("mode-code")), chromedp.SendKeys(chromedp.ID("code"), "print('draft')"))
	p.do(chromedp.Evaluate[chromedp.Void](`(() => {
		const t = JSON.parse(sessionStorage.getItem('sandgate.token'));
		t.exp = Math.floor(Date.now() / 1000) - 60;
		sessionStorage.setItem('sandgate.token', JSON.stringify(t));
	})()`), chromedp.Reload())
	p.wait("the expiry message", `document.querySelector('#signin-message')`)
	require.Contains(t, p.text("#signin-message"), "expired")
	require.Equal(t, "#/sessions/"+sid, eval[string](p, `location.hash`))
	p.shot("signin-expired")
	p.signIn("alice", "dev,ml")
	p.wait("the restored session page", `location.hash === '#/sessions/`+sid+`' && document.querySelector('#runner')`)
	require.Contains(t, eval[string](p, `document.querySelector('#code').value`), "print('draft')")

	// A token the gateway rejects (401) does the same.
	p.do(chromedp.Evaluate[chromedp.Void](`(() => {
		const t = JSON.parse(sessionStorage.getItem('sandgate.token'));
		t.value = t.value.slice(0, -6) + (t.value.endsWith('AAAAAA') ? 'BBBBBB' : 'AAAAAA');
		sessionStorage.setItem('sandgate.token', JSON.stringify(t));
	})()`))
	p.goTo("#/tasks")
	p.wait("the sign-in page after a 401", `document.querySelector('#signin-message')`)
	require.Equal(t, "#/tasks", eval[string](p, `location.hash`))
	p.signIn("alice", "dev,ml")
	p.wait("the restored tasks page", `location.hash === '#/tasks' && document.querySelector('#tasks tr[data-task]')`)

	// The sessions list: status and idle time left.
	p.goTo("#/sessions")
	p.wait("the session row", `document.querySelector('#sessions tr[data-session="`+sid+`"]')`)
	require.Regexp(t, regexp.MustCompile(`\d+ min \d+ s left`), p.text(`#sessions tr[data-session="`+sid+`"] .idle`))
	p.shot("sessions")

	// Destroy the session from its page.
	p.goTo("#/sessions/" + sid)
	p.wait("the session page", `document.querySelector('#destroy-session')`)
	p.do(chromedp.Click(chromedp.ID("destroy-session")))
	p.wait("the confirmation", `document.querySelector('dialog[open] #confirm-ok')`)
	p.do(chromedp.Click(chromedp.ID("confirm-ok")))
	p.wait("the sessions list without it", `location.hash === '#/sessions' && document.querySelector('#sessions tbody tr') && !document.querySelector('#sessions tr[data-session="`+sid+`"]')`)
	resp, _ := g.get(t, "GET", "/v1/sessions/"+sid, g.token(t, "alice", "dev", "ml"))
	require.Equal(t, 404, resp.StatusCode, "the session is gone")

	p.do(chromedp.Click(chromedp.ID("signout")))
	p.wait("the sign-in page", `document.querySelector('#signin')`)
	require.Empty(t, eval[string](p, `sessionStorage.getItem('sandgate.token') ?? ''`))
}

// TestConsoleParkAndPreview drives the session page's pause, resume and snapshot buttons, the
// snapshots list (fork) and the "open port" link in Chromium, on a Docker sandbox.
func TestConsoleParkAndPreview(t *testing.T) {
	img := dockerImage(t)
	p := newPage(t)
	g := startGateway(t, func(c *config.Config) {
		c.Sandbox.Profiles = map[string]config.Profile{
			"docker": {Type: docker.TypeName, Stateful: true, IdleAction: config.IdlePause, Blocks: config.Blocks{
				docker.TypeName: &docker.Block{Image: img, Pull: "never"},
			}},
		}
		c.Sandbox.DefaultProfile = "docker"
	})
	tok := g.token(t, "alice", "dev")
	// A session with a web server running in it, set up through the API.
	resp, body := g.call(t, "POST", "/v1/sessions", tok, `{"profile":"docker","name":"park"}`)
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	sid := jsonField(t, body, "id")
	t.Cleanup(func() { g.get(t, "DELETE", "/v1/sessions/"+sid, tok) })
	resp, body = g.call(t, "POST", "/v1/sessions/"+sid+"/commands", tok, `{"command":"mkdir -p site && echo '<h1>served from the sandbox</h1>' > site/index.html"}`)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	resp, body = g.call(t, "POST", "/v1/sessions/"+sid+"/commands", tok, `{"command":"exec python3 -m http.server 8000 --bind 127.0.0.1 --directory site","background":true}`)
	require.Equal(t, 201, resp.StatusCode, "%s", body)

	p.do(chromedp.Navigate(g.URL + "/#/sessions/" + sid))
	p.signIn("alice", "dev")
	p.wait("the session page", `document.querySelector('#session-state') && document.querySelector('#pause-session')`)
	require.Equal(t, "running", p.text("#session-state"))

	// Pause, then resume.
	p.do(chromedp.Click(chromedp.ID("pause-session")))
	p.wait("the paused state", `document.querySelector('#session-state').textContent === 'paused' && document.querySelector('#pause-session').textContent === 'Resume'`)
	require.Contains(t, p.text("#idle-left"), "paused")
	p.shot("session-paused")
	p.do(setValue("#code", "print('while paused')"), chromedp.Click(chromedp.ID("run")))
	p.wait("the paused problem", `document.querySelector('#result').dataset.state === 'error'`)
	require.Equal(t, "https://sandgate.dev/problems/paused", p.text("#result .problem-type"))
	p.do(chromedp.Click(chromedp.ID("pause-session")))
	p.wait("the running state", `document.querySelector('#session-state').textContent === 'running' && document.querySelector('#pause-session').textContent === 'Pause'`)

	// Open the port (a personal link, opened in a new tab), then make a share link: both work
	// without a token.
	p.do(setValue("#port", "8000"), chromedp.Click(chromedp.ID("open-port")))
	p.wait("the port link", `document.querySelector('#port-link')`)
	link := eval[string](p, `document.querySelector('#port-link').href`)
	require.True(t, strings.HasPrefix(link, g.URL+"/preview/v3.p."+sid+".8000."), link)
	resp, body = g.get(t, "GET", strings.TrimPrefix(link, g.URL)+"index.html", "")
	require.Equal(t, 200, resp.StatusCode, "the link works without a token: %s", body)
	require.Contains(t, string(body), "served from the sandbox")
	p.do(chromedp.Click(chromedp.ID("share-port")))
	p.wait("the share link", `document.querySelector('#share-link')`)
	share := eval[string](p, `document.querySelector('#share-link').href`)
	require.True(t, strings.HasPrefix(share, g.URL+"/preview/v3.s."+sid+".8000."), share)
	resp, body = g.get(t, "GET", strings.TrimPrefix(share, g.URL)+"index.html", "")
	require.Equal(t, 200, resp.StatusCode, "the share link works without a token: %s", body)
	p.shot("session-port")

	// A snapshot, listed, then forked into a new session.
	p.do(chromedp.Click(chromedp.ID("snapshot-session")))
	p.wait("the snapshot", `document.querySelector('#snapshot-done')`)
	p.goTo("#/snapshots")
	p.wait("the snapshots list", `document.querySelector('#snapshots tr[data-snapshot] button[data-action=fork]')`)
	snap := eval[string](p, `document.querySelector('#snapshots tr[data-snapshot]').dataset.snapshot`)
	t.Cleanup(func() { g.get(t, "DELETE", "/v1/snapshots/"+snap, tok) })
	p.shot("snapshots")
	p.do(chromedp.Click(chromedp.CSS(`#snapshots tr[data-snapshot] button[data-action=fork]`)))
	p.wait("the forked session", `/^#\/sessions\/[0-9a-f]{32}$/.test(location.hash) && location.hash !== '#/sessions/`+sid+`' && document.querySelector('#session-state')`)
	fork := strings.TrimPrefix(eval[string](p, `location.hash`), "#/sessions/")
	t.Cleanup(func() { g.get(t, "DELETE", "/v1/sessions/"+fork, tok) })
	require.Equal(t, "running", p.text("#session-state"))
	p.do(chromedp.Click(chromedp.ID("mode-command")), setValue("#command", "cat site/index.html"), chromedp.Click(chromedp.ID("run")))
	p.wait("the fork's file", `document.querySelector('#result').dataset.state === 'done'`)
	require.Equal(t, "<h1>served from the sandbox</h1>\n", p.text("#stdout"))

	p.goTo("#/sessions")
	p.wait("the sessions list", `document.querySelector('#sessions tr[data-session="`+fork+`"]')`)
	require.Contains(t, p.text(`#sessions tr[data-session="`+sid+`"]`), "running")
	p.shot("sessions-states")
}

// TestConsoleRichResults: code's rich results on the session page — a matplotlib chart as an
// image, a pandas table and other HTML in sandboxed frames that run no script and load
// nothing, the last expression's value as Out.
func TestConsoleRichResults(t *testing.T) {
	p := newPage(t)
	for _, m := range []string{"pandas", "matplotlib"} {
		if out, err := exec.Command("python3", "-c", "import "+m).CombinedOutput(); err != nil {
			msg := "python3 has no " + m + " (Debian: apt-get install python3-pandas python3-matplotlib; scripts/test-setup.sh does): " + strings.TrimSpace(string(out))
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	workdir := t.TempDir()
	g := startGateway(t, func(c *config.Config) {
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: "local_subprocess", Stateful: true, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}},
		}
	})
	// A server the HTML result points at: a frame that may not reach the network never asks.
	var asked atomic.Int32
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
	t.Cleanup(probe.Close)

	p.do(chromedp.Navigate(g.URL + "/#/sessions"))
	p.signIn("alice", "dev")
	p.wait("the new-session form", `document.querySelector('#create-session-form')`)
	p.do(chromedp.SendKeys(chromedp.ID("new-session-name"), "charts"), chromedp.Click(chromedp.ID("create-session")))
	p.wait("the session page", `/^#\/sessions\/[0-9a-f]{32}$/.test(location.hash) && document.querySelector('#runner')`)
	title := eval[string](p, `document.title`)
	p.do(
		setValue("#code", `import pandas as pd
import matplotlib.pyplot as plt
display(pd.DataFrame({"city": ["Oslo", "Lima", "Cairo"], "temp_c": [4, 19, 27]}))
plt.figure(figsize=(5, 3))
plt.bar(["Oslo", "Lima", "Cairo"], [4, 19, 27], color="#2457c5")
plt.title("Temperature")
plt.show()
display({"text/html": "<p id='probe'>untrusted <img src='`+probe.URL+`/probe.png'></p><script>parent.document.title = 'pwned'</script>"}, raw=True)
6 * 7`),
		chromedp.Click(chromedp.ID("run")),
	)
	p.wait("the code's result", `document.querySelector('#result').dataset.state === 'done'`)
	p.wait("the chart", `document.querySelector('#rich-results img[data-type="image/png"]')?.complete`)
	width := eval[int](p, `document.querySelector('#rich-results img[data-type="image/png"]').naturalWidth`)
	height := eval[int](p, `document.querySelector('#rich-results img[data-type="image/png"]').naturalHeight`)
	require.Greater(t, width, height, "a 5x3 chart, drawn: %dx%d", width, height)
	require.Equal(t, 4, eval[int](p, `document.querySelectorAll('#rich-results .rich-result').length`))
	p.wait("the frames", `[...document.querySelectorAll('#rich-results iframe')].every((f) => f.dataset.loaded === 'true')`)
	frames := eval[[]string](p, `[...document.querySelectorAll('#rich-results iframe')].map((f) => f.getAttribute('sandbox'))`)
	require.Equal(t, []string{"", ""}, frames, "the table and the HTML, each in a frame sandboxed of everything")
	require.True(t, eval[bool](p, `[...document.querySelectorAll('#rich-results iframe')].every((f) => f.contentDocument === null)`), "the frames have an origin of their own")
	require.Contains(t, eval[string](p, `document.querySelector('#rich-results iframe').srcdoc`), "<th>temp_c</th>")
	require.Equal(t, "42", p.text(`#rich-results .rich-result.main pre`))
	require.Equal(t, "Out", p.text(`#rich-results .rich-result.main .rich-label`))
	// Frames of another origin are painted only inside the viewport: one as tall as the page.
	p.do(chromedp.EmulateViewport(1200, int64(eval[int](p, `document.documentElement.scrollHeight`))))
	p.wait("the frames painted", `[...document.querySelectorAll('#rich-results iframe')].every((f) => f.getBoundingClientRect().bottom <= innerHeight)`)
	time.Sleep(500 * time.Millisecond) // a frame's paint has no event to wait for; a screenshot only
	p.shot("session-results")
	p.do(chromedp.EmulateViewport(1200, 860))
	require.Equal(t, title, eval[string](p, `document.title`), "no script of a result ran")
	require.Zero(t, asked.Load(), "no result reached the network")
}
