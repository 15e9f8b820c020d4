package web_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsoleAPIKeys drives the API keys page in Chromium: a key made with a profile
// restriction shows its secret once (copied by the button), works against the API, is
// listed by its prefix, and once revoked from the list is refused; an administrator sees
// everyone's keys.
func TestConsoleAPIKeys(t *testing.T) {
	p := newPage(t)
	g := startGateway(t)
	// The page's clipboard, readable here to check what the copy button put there.
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		_, err := chromedp.CallBrowser(p.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: g.URL,
		})
		require.NoError(t, err, name)
	}

	p.do(chromedp.Navigate(g.URL + "/#/keys"))
	p.signIn("alice", "dev")
	p.wait("the keys page", `location.hash === '#/keys' && document.querySelector('#create-key-form') && document.querySelector('#keys tbody tr')`)
	require.Contains(t, p.text("#keys"), "No API keys yet.")
	require.Equal(t, "API keys", p.text("#nav a[aria-current]"))

	// A bad name is the gateway's problem, shown as such.
	p.do(setValue("#key-name", "tab\there"), chromedp.Click(chromedp.ID("create-key")))
	p.wait("the problem", `document.querySelector('#create-key-form .problem')`)
	require.Contains(t, p.text("#create-key-form .problem-detail"), "control character")

	p.do(
		setValue("#key-name", "ci-deploy"),
		chromedp.SetValue(`#key-ttl`, "604800"),
		chromedp.Click(chromedp.CSS(`#key-profiles input[value=default]`)),
		chromedp.Click(chromedp.ID("create-key")),
	)
	p.wait("the new key's secret", `document.querySelector('#key-secret')?.value.startsWith('sgk_') && document.querySelector('#keys tr[data-key]')`)
	require.Empty(t, p.text("#create-key-form .problem"), "the earlier problem is gone")
	secret := eval[string](p, `document.querySelector('#key-secret').value`)
	require.Regexp(t, `^sgk_[0-9A-Za-z]{49}$`, secret)
	require.Contains(t, p.text("#new-key"), "it is not shown again")
	p.do(chromedp.Click(chromedp.ID("copy-secret")))
	p.wait("the copy", `document.querySelector('#key-copied').textContent !== ''`)
	require.Equal(t, "Copied to the clipboard.", p.text("#key-copied"))
	require.Equal(t, secret, eval[string](p, `navigator.clipboard.readText()`), "the button copied the secret")
	p.shot("keys-created")

	// The key works as alice, restricted to the profile ticked.
	resp, body := g.get(t, "GET", "/v1/me", secret)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	var me struct {
		Subject string `json:"subject"`
		APIKey  struct {
			ID       string   `json:"id"`
			Profiles []string `json:"profiles"`
		} `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal(body, &me))
	require.Equal(t, "alice", me.Subject)
	require.Equal(t, []string{"default"}, me.APIKey.Profiles)
	id := me.APIKey.ID

	row := `#keys tr[data-key="` + id + `"]`
	p.wait("the key's row", `document.querySelector('`+row+`')`)
	listed := p.text(row)
	require.Contains(t, listed, "ci-deploy")
	require.Contains(t, listed, secret[:12]+"…")
	require.Contains(t, listed, "active")
	require.Contains(t, listed, "default")
	require.NotContains(t, listed, secret[12:])

	// Done: the secret leaves the page.
	p.do(chromedp.Click(chromedp.ID("secret-done")))
	p.wait("the secret gone", `!document.querySelector('#key-secret')`)
	require.NotContains(t, eval[string](p, `document.body.innerHTML`), secret)

	// A narrow screen: nothing sticks out sideways.
	p.do(chromedp.EmulateViewport(390, 844))
	require.LessOrEqual(t, eval[int](p, `document.documentElement.scrollWidth`), 390, "#/keys overflows a 390px screen")
	p.shot("keys-narrow")
	p.do(chromedp.EmulateViewport(1200, 860))

	// Revoked from the list, after a confirmation: refused at once.
	p.do(chromedp.Click(chromedp.CSS(row + ` button[data-action=revoke]`)))
	p.wait("the confirmation", `document.querySelector('dialog[open] #confirm-ok')`)
	p.do(chromedp.Click(chromedp.ID("confirm-ok")))
	p.wait("the revoked row", `document.querySelector('`+row+` .status')?.textContent === 'revoked' && !document.querySelector('`+row+` button')`)
	p.shot("keys")
	resp, body = g.get(t, "GET", "/v1/me", secret)
	require.Equal(t, 401, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "was revoked at")

	// An administrator lists everyone's keys, with their principal.
	p.do(chromedp.Click(chromedp.ID("signout")))
	p.wait("the sign-in page", `document.querySelector('#signin')`)
	p.signIn("root", "admins")
	p.goTo("#/keys")
	p.wait("the admin's keys page", `document.querySelector('#keys-all') && document.querySelector('#keys tbody tr')`)
	require.NotContains(t, p.text("#keys"), "ci-deploy", "by default, one's own keys")
	p.do(chromedp.Click(chromedp.ID("keys-all")))
	p.wait("everyone's keys", `document.querySelector('`+row+`')`)
	require.Regexp(t, regexp.MustCompile(`#alice$`), strings.TrimSpace(eval[string](p, `document.querySelector('`+row+`').children[7].textContent`)))
	p.shot("keys-all")
}
