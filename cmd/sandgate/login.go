package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/sandgate/sandgate/pkg/client"
)

// consoleConfig is the gateway's unauthenticated GET /console/config.json: the issuer and
// public client its web console signs in with (auth.console, or under `gateway dev` its
// development issuer and the client sandgate-console). `sandgate login` signs in with the
// same ones.
type consoleConfig struct {
	Issuer   string   `json:"issuer"`
	ClientID string   `json:"client_id"`
	Scopes   []string `json:"scopes"`
}

type loginFlags struct {
	issuer, clientID string
	scopes           []string
	flow             string
	noBrowser        bool
}

func (a *app) loginCommand() *cobra.Command {
	var lf loginFlags
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign in to the gateway's OIDC issuer and cache the token",
		Long: `Sign in with OpenID Connect and cache the token (with its refresh token) for this gateway
in <user config dir>/sandgate/credentials.json (mode 0600); later commands use it and refresh
it when it expires.

The issuer and client are the ones the gateway's web console uses (GET /console/config.json:
auth.console, or under 'gateway dev' its development issuer), unless --issuer and
--client-id ($SANDGATE_ISSUER, $SANDGATE_CLIENT_ID) name others. The issuer must know the
client as a public client (no secret), and the gateway must trust the issuer with the client
id among its audiences: the token sent is the ID token.

Flows: 'device' (RFC 8628: open the printed address on any device and confirm the code) or
'browser' (authorization code with PKCE, redirected to a listener on 127.0.0.1); 'auto'
takes the device flow when the issuer offers it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.login(cmd.Context(), lf) },
	}
	f := cmd.Flags()
	f.StringVar(&lf.issuer, "issuer", a.env.getenv("SANDGATE_ISSUER"), "OIDC issuer URL ($SANDGATE_ISSUER); default: the gateway's console issuer")
	f.StringVar(&lf.clientID, "client-id", a.env.getenv("SANDGATE_CLIENT_ID"), "public client id at the issuer ($SANDGATE_CLIENT_ID)")
	f.StringSliceVar(&lf.scopes, "scopes", nil, "scopes to ask for (default: the console's, plus offline_access when the issuer offers it)")
	f.StringVar(&lf.flow, "flow", "auto", "sign-in flow: auto, device or browser")
	f.BoolVar(&lf.noBrowser, "no-browser", false, "print the sign-in address instead of opening a browser")
	return cmd
}

func (a *app) login(ctx context.Context, lf loginFlags) error {
	if !slices.Contains([]string{"auto", "device", "browser"}, lf.flow) {
		return usagef("--flow must be auto, device or browser, not %q", lf.flow)
	}
	server, err := a.serverURL()
	if err != nil {
		return err
	}
	conf := consoleConfig{Issuer: lf.issuer, ClientID: lf.clientID}
	if conf.Issuer == "" || conf.ClientID == "" {
		cc, err := a.fetchConsoleConfig(ctx, server)
		if err != nil {
			return err
		}
		if conf.Issuer == "" {
			conf.Issuer = cc.Issuer
		}
		if conf.ClientID == "" {
			conf.ClientID = cc.ClientID
		}
		conf.Scopes = cc.Scopes
	}
	if conf.Issuer == "" || conf.ClientID == "" {
		return fmt.Errorf("%s names no sign-in issuer (auth.console is not set): pass --issuer and --client-id", server)
	}
	octx := oidc.ClientContext(ctx, a.http)
	provider, err := oidc.NewProvider(octx, conf.Issuer)
	if err != nil {
		return fmt.Errorf("OIDC discovery of %s: %w", conf.Issuer, err)
	}
	var meta struct {
		Scopes []string `json:"scopes_supported"`
	}
	_ = provider.Claims(&meta)
	scopes := lf.scopes
	if len(scopes) == 0 {
		scopes = conf.Scopes
		if len(scopes) == 0 {
			scopes = []string{oidc.ScopeOpenID, "profile", "email"}
		}
		if slices.Contains(meta.Scopes, oidc.ScopeOfflineAccess) && !slices.Contains(scopes, oidc.ScopeOfflineAccess) {
			scopes = append(slices.Clone(scopes), oidc.ScopeOfflineAccess)
		}
	}
	si := &signIn{Issuer: conf.Issuer, ClientID: conf.ClientID, TokenURL: provider.Endpoint().TokenURL, Scopes: scopes}
	oc := si.oauthConfig(provider.Endpoint())
	flow := lf.flow
	if flow == "auto" {
		flow = "browser"
		if oc.Endpoint.DeviceAuthURL != "" {
			flow = "device"
		}
	}
	var tok *oauth2.Token
	switch flow {
	case "device":
		tok, err = a.deviceFlow(octx, oc)
	default:
		tok, err = a.browserFlow(octx, oc, lf.noBrowser)
	}
	if err != nil {
		return err
	}
	if err := si.take(tok); err != nil {
		return err
	}
	c, err := client.New(server, client.WithHTTPClient(a.http), client.WithToken(si.Bearer))
	if err != nil {
		return err
	}
	me, err := c.Me(ctx)
	if err != nil {
		return fmt.Errorf("signed in at %s, but the gateway refuses the token: %w", conf.Issuer, err)
	}
	st, err := loadStore(a.env)
	if err != nil {
		return err
	}
	st.Servers[server] = si
	st.Current = server
	if err := st.save(); err != nil {
		return fmt.Errorf("saving the token: %w", err)
	}
	if a.structured() {
		return a.print(me)
	}
	fmt.Fprintf(a.env.stderr, "Signed in to %s as %s", server, me.Subject)
	if len(me.Groups) > 0 {
		fmt.Fprintf(a.env.stderr, " (groups %s)", strings.Join(me.Groups, ", "))
	}
	fmt.Fprintln(a.env.stderr, ".")
	return nil
}

// fetchConsoleConfig reads the gateway's sign-in configuration.
func (a *app) fetchConsoleConfig(ctx context.Context, server string) (*consoleConfig, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/console/config.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking %s for its issuer: %w", server, err)
	}
	defer closeQuietly(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %d for /console/config.json: pass --issuer and --client-id", server, resp.StatusCode)
	}
	var cc consoleConfig
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&cc); err != nil {
		return nil, fmt.Errorf("%s/console/config.json: %w", server, err)
	}
	return &cc, nil
}

// deviceFlow is the device authorization grant (RFC 8628): it prints where to go and the
// code, then polls the token endpoint until the user confirmed (or the code expired).
func (a *app) deviceFlow(ctx context.Context, oc *oauth2.Config) (*oauth2.Token, error) {
	da, err := oc.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("device authorization: %w", err)
	}
	fmt.Fprintf(a.env.stderr, "To sign in, open %s and enter the code %s\n", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(a.env.stderr, "(or open %s)\n", da.VerificationURIComplete)
	}
	fmt.Fprintln(a.env.stderr, "Waiting for you to confirm…")
	tok, err := oc.DeviceAccessToken(ctx, da)
	if err != nil {
		return nil, fmt.Errorf("device sign-in: %w", err)
	}
	return tok, nil
}

var doneTmpl = template.Must(template.New("d").Parse(`<!doctype html><html><head><meta charset="utf-8"><title>sandgate</title></head>
<body style="font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto"><p>{{.}}</p></body></html>`))

// browserFlow is the authorization code flow with PKCE (RFC 7636, S256) for a native app
// (RFC 8252): a listener on 127.0.0.1 takes the redirect.
func (a *app) browserFlow(ctx context.Context, oc *oauth2.Config, noBrowser bool) (*oauth2.Token, error) {
	if oc.Endpoint.AuthURL == "" {
		return nil, errors.New("the issuer has no authorization endpoint: use --flow device")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("a listener for the sign-in redirect: %w", err)
	}
	oc.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	state, verifier := rand.Text(), oauth2.GenerateVerifier()
	type answer struct {
		code string
		err  error
	}
	answers := make(chan answer, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var ans answer
		switch {
		case q.Get("state") != state:
			ans.err = errors.New("the sign-in redirect carries another state: start again")
		case q.Get("error") != "":
			ans.err = fmt.Errorf("the issuer refused: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			ans.err = errors.New("the sign-in redirect carries no code")
		default:
			ans.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		msg := "Signed in. You can close this tab and return to your terminal."
		if ans.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			msg = "Sign-in failed: " + ans.err.Error()
		}
		_ = doneTmpl.Execute(w, msg)
		select {
		case answers <- ans:
		default:
		}
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()

	authURL := oc.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier))
	fmt.Fprintf(a.env.stderr, "To sign in, open this address in a browser:\n%s\n", authURL)
	if !noBrowser {
		openBrowser(authURL)
	}
	fmt.Fprintln(a.env.stderr, "Waiting for the sign-in…")
	var ans answer
	select {
	case ans = <-answers:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Minute):
		return nil, errors.New("no sign-in within 10 minutes")
	}
	if ans.err != nil {
		return nil, ans.err
	}
	tok, err := oc.Exchange(ctx, ans.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("redeeming the sign-in code: %w", err)
	}
	return tok, nil
}

// openBrowser asks the desktop to open u (best effort: the address is printed anyway). The
// address is one argument of the opener, never a shell string.
func openBrowser(u string) {
	var name string
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name = "explorer.exe"
	default:
		name = "xdg-open"
	}
	if p, err := exec.LookPath(name); err == nil {
		c := exec.Command(p, u)
		if c.Start() == nil {
			go func() { _ = c.Wait() }()
		}
	}
}

func (a *app) logoutCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the cached token of the gateway",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			server, err := a.serverURL()
			if err != nil {
				return err
			}
			st, err := loadStore(a.env)
			if err != nil {
				return err
			}
			delete(st.Servers, server)
			if st.Current == server {
				st.Current = ""
			}
			if err := st.save(); err != nil {
				return err
			}
			fmt.Fprintf(a.env.stderr, "Signed out of %s.\n", server)
			return nil
		},
	}
}

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the principal the gateway maps your token or API key to",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			me, err := c.Me(cmd.Context())
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(me)
			}
			if err := a.table([]string{"SUBJECT", "ISSUER", "GROUPS", "ADMIN"},
				[][]string{{me.Subject, me.Issuer, strings.Join(me.Groups, ","), fmt.Sprint(me.Admin)}}); err != nil {
				return err
			}
			if k := me.ApiKey; k != nil {
				only := ""
				if k.Profiles != nil {
					only = ", restricted to the profiles " + strings.Join(*k.Profiles, ", ")
				}
				_, err = fmt.Fprintf(a.env.stdout, "(with API key %s%s: the groups are those its sign-in had when it was made)\n", k.Id, only)
			}
			return err
		},
	}
}
