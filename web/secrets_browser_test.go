package web_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// TestConsoleSecrets drives the Secrets page in Chromium: a secret set with its hosts is listed
// by name, hosts and variable, never its value; a bad host is the gateway's problem, shown as
// such; deleting one asks first.
func TestConsoleSecrets(t *testing.T) {
	p := newPage(t)
	var k [32]byte
	_, _ = rand.Read(k[:])
	g := startGateway(t, func(c *config.Config) { c.Secrets.Keys = []string{"k1:" + base64.StdEncoding.EncodeToString(k[:])} })

	p.do(chromedp.Navigate(g.URL + "/#/secrets"))
	p.signIn("alice", "dev")
	p.wait("the secrets page", `location.hash === '#/secrets' && document.querySelector('#set-secret-form') && document.querySelector('#secrets tbody tr')`)
	require.Contains(t, p.text("#secrets"), "No secrets yet.")
	require.Equal(t, "Secrets", p.text("#nav a[aria-current]"))

	p.do(setValue("#secret-name", "openai"), setValue("#secret-value", "sk-console-NEVER-SHOWN"), setValue("#secret-hosts", "https://api.openai.com/v1"),
		chromedp.Click(chromedp.ID("set-secret")))
	p.wait("the problem", `document.querySelector('#set-secret-form .problem')`)
	require.Contains(t, p.text("#set-secret-form .problem-detail"), "https://api.openai.com/v1")

	p.do(setValue("#secret-name", "openai"), setValue("#secret-value", "sk-console-NEVER-SHOWN"), setValue("#secret-hosts", "api.openai.com, *.openai.com"),
		chromedp.Click(chromedp.ID("set-secret")))
	row := `#secrets tr[data-secret="openai"]`
	p.wait("the secret's row", `document.querySelector('`+row+`')`)
	listed := p.text(row)
	require.Contains(t, listed, "api.openai.com")
	require.Contains(t, listed, "*.openai.com")
	require.Contains(t, listed, "SANDGATE_SECRET_OPENAI")
	require.Empty(t, eval[string](p, `document.querySelector('#secret-value').value`), "the form forgets the value")
	require.NotContains(t, eval[string](p, `document.body.innerHTML`), "NEVER-SHOWN")
	p.shot("secrets")

	p.do(chromedp.Click(chromedp.CSS(row + ` button[data-action=delete]`)))
	p.wait("the confirmation", `document.querySelector('dialog[open] #confirm-ok')`)
	p.do(chromedp.Click(chromedp.ID("confirm-ok")))
	p.wait("the empty list", `!document.querySelector('`+row+`') && document.querySelector('#secrets').textContent.includes('No secrets yet.')`)
}
