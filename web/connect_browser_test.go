package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsoleConnectAgent drives the "Connect an agent" page in Chromium: each MCP client's
// configuration names the gateway's /mcp endpoint with a placeholder credential, copies as
// shown, and with "Fill in my current sign-in token" carries a token that works against the
// API; the Python snippet uses the caller's default profile. Also the session list's labels,
// the favicon and the styled development sign-in form.
func TestConsoleConnectAgent(t *testing.T) {
	p := newPage(t)
	g := startGateway(t)
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		_, err := chromedp.CallBrowser(p.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: g.URL,
		})
		require.NoError(t, err, name)
	}

	// The development sign-in form is styled (its own stylesheet, the favicon as its mark).
	p.do(chromedp.Navigate(g.URL + "/#/connect"))
	p.wait("the sign-in button", `document.querySelector('#signin')`)
	p.do(chromedp.Click(chromedp.ID("signin")))
	p.wait("the dev issuer's sign-in form", `document.querySelector('input[name=sub]')`)
	require.Equal(t, "Sandgate dev sign-in", eval[string](p, `document.title`))
	require.NotEqual(t, "rgba(0, 0, 0, 0)", eval[string](p, `getComputedStyle(document.querySelector('button[type=submit]')).backgroundColor`), "the button is styled")
	require.True(t, eval[bool](p, `document.querySelector('.brand img').complete && document.querySelector('.brand img').naturalWidth > 0`), "the favicon loads as the form's mark")
	p.shot("dev-signin")
	p.do(
		setValue("input[name=sub]", "alice"),
		setValue("input[name=groups]", "dev"),
		chromedp.Click(chromedp.CSS("button[type=submit]")),
	)
	p.wait("the connect page", `location.hash === '#/connect' && document.querySelector('#connect-generic')`)
	require.Equal(t, "Connect an agent", p.text("#nav a[aria-current]"))
	require.Equal(t, g.URL+"/mcp", p.text("#connect-url"))

	// The favicon: an SVG served by the gateway.
	href := eval[string](p, `document.querySelector('link[rel=icon]').href`)
	require.Equal(t, g.URL+"/console/favicon.svg", href)
	resp, err := http.Get(href)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "image/svg+xml", resp.Header.Get("Content-Type"))

	// Every MCP configuration names the endpoint and the placeholder.
	type server struct {
		Type    string            `json:"type"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
	}
	config := func(id string) server {
		t.Helper()
		var c struct {
			MCPServers map[string]server `json:"mcpServers"`
		}
		require.NoError(t, json.Unmarshal([]byte(p.text("#connect-"+id)), &c), id)
		require.Contains(t, c.MCPServers, "sandgate", id)
		return c.MCPServers["sandgate"]
	}
	generic := config("generic")
	require.Equal(t, server{Type: "http", URL: g.URL + "/mcp", Headers: map[string]string{"Authorization": "Bearer <TOKEN>"}}, generic)
	cursor := config("cursor")
	require.Equal(t, g.URL+"/mcp", cursor.URL)
	require.Equal(t, "Bearer <TOKEN>", cursor.Headers["Authorization"])
	desktop := config("claude-desktop")
	require.Equal(t, "npx", desktop.Command)
	require.Contains(t, desktop.Args, g.URL+"/mcp")
	require.Equal(t, "Bearer <TOKEN>", desktop.Env["SANDGATE_AUTH"])
	require.Equal(t, `claude mcp add --transport http sandgate `+g.URL+`/mcp --header "Authorization: Bearer <TOKEN>"`, p.text("#connect-claude-code"))
	python := p.text("#connect-python")
	require.Contains(t, python, "from sandgate import Sandbox")
	require.Contains(t, python, `Sandbox.create(profile="default")`, "the caller's default profile")
	require.Contains(t, python, `sbx.commands.run("echo hi")`)
	require.Contains(t, python, "SANDGATE_URL="+g.URL+" ")

	// Copy puts exactly what is shown on the clipboard.
	p.do(chromedp.Click(chromedp.ID("copy-generic")))
	p.wait("the copy", `document.querySelector('#connect-generic-copied').textContent !== ''`)
	require.Equal(t, "Copied.", p.text("#connect-generic-copied"))
	require.Equal(t, p.text("#connect-generic"), eval[string](p, `navigator.clipboard.readText()`))
	p.shot("connect")

	// With the sign-in token filled in, the configuration works as it is.
	p.do(chromedp.Click(chromedp.ID("connect-use-token")))
	p.wait("the token filled in", `!document.querySelector('#connect-generic').textContent.includes('<TOKEN>')`)
	generic = config("generic")
	tok := strings.TrimPrefix(generic.Headers["Authorization"], "Bearer ")
	require.NotEmpty(t, tok)
	resp, body := g.get(t, "GET", "/v1/me", tok)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, "alice", jsonField(t, body, "subject"))
	require.Contains(t, p.text("#connect-python"), "SANDGATE_TOKEN="+tok)
	p.do(chromedp.Click(chromedp.ID("connect-use-token")))
	p.wait("the placeholder back", `document.querySelector('#connect-generic').textContent.includes('<TOKEN>')`)

	// A narrow screen: nothing sticks out sideways (the snippets scroll inside their boxes).
	p.do(chromedp.EmulateViewport(390, 844))
	require.LessOrEqual(t, eval[int](p, `document.documentElement.scrollWidth`), 390, "#/connect overflows a 390px screen")
	p.do(chromedp.EmulateViewport(1200, 860))

	// Labels in the session list, sorted by key.
	alice := g.token(t, "alice", "dev")
	resp, body = g.call(t, "POST", "/v1/sessions", alice, `{"name":"labelled","labels":{"team":"ml","env":"dev"}}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	sid := jsonField(t, body, "id")
	p.goTo("#/sessions")
	row := `#sessions tr[data-session="` + sid + `"]`
	p.wait("the labelled session", `document.querySelector('`+row+` .labels')`)
	require.Equal(t, []string{"env=dev", "team=ml"}, eval[[]string](p, `[...document.querySelectorAll('`+row+` .labels .chip')].map((c) => c.textContent)`))
}
