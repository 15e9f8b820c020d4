package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

// defaultServer is the gateway used when neither --server, SANDGATE_URL nor a sign-in names
// one: where `make run` (gateway dev) listens.
const defaultServer = "http://localhost:8080"

// app holds the global flags and what the commands share.
type app struct {
	env    env
	server string // --server / SANDGATE_URL
	token  string // --token / SANDGATE_TOKEN
	apiKey string // SANDGATE_API_KEY
	// tokenFlag: --token was given on the command line (it then wins over SANDGATE_API_KEY).
	tokenFlag bool
	output    string // --output: text or json
	ran       bool   // a command's RunE was reached (errors before it are usage errors)
	// resultsDir is where `code` saves the images among rich results ("" saves none).
	resultsDir string
	http       *http.Client
}

func newApp(e env) *app { return &app{env: e, http: &http.Client{}} }

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sandgate",
		Short: "Command-line client of a Sandgate gateway",
		Long: `sandgate signs you in to a Sandgate gateway and works with its sandboxes: sessions,
commands and code with their output streamed live, files, tasks.

The gateway is --server, else $SANDGATE_URL, else the one you last signed in to with
'sandgate login', else ` + defaultServer + `. The bearer credential is --token, else
$SANDGATE_TOKEN, else the API key in $SANDGATE_API_KEY ('sandgate keys create' makes one;
setting both variables is refused), else the token 'sandgate login' cached for that gateway
(refreshed when it expires).

Exit codes: exec, run, code and 'tasks logs' exit with the remote program's exit code (124
when it timed out, 130 when interrupted here, 125 when sandgate itself failed); other
commands exit 0, 1 on failure and 2 on a usage error.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.ran = true
			a.tokenFlag = cmd.Flags().Changed("token")
			switch a.output {
			case "text", "json":
			default:
				return usagef("--output must be text or json, not %q", a.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVarP(&a.server, "server", "s", a.env.getenv("SANDGATE_URL"), "gateway base URL ($SANDGATE_URL)")
	f.StringVar(&a.token, "token", a.env.getenv("SANDGATE_TOKEN"), "bearer token ($SANDGATE_TOKEN); default: the one 'sandgate login' cached")
	f.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	a.apiKey = strings.TrimSpace(a.env.getenv("SANDGATE_API_KEY"))
	root.AddGroup(&cobra.Group{ID: "auth", Title: "Sign-in:"}, &cobra.Group{ID: "work", Title: "Sandboxes:"})
	for _, c := range []*cobra.Command{a.loginCommand(), a.logoutCommand(), a.whoamiCommand(), a.keysCommand()} {
		c.GroupID = "auth"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.profilesCommand(), a.sessionsCommand(), a.execCommand(), a.runCommand(), a.codeCommand(), a.cpCommand(), a.tasksCommand()} {
		c.GroupID = "work"
		root.AddCommand(c)
	}
	return root
}

// serverURL is the gateway to talk to (see the root command's help).
func (a *app) serverURL() (string, error) {
	s := a.server
	if s == "" {
		st, err := loadStore(a.env)
		if err == nil && st.Current != "" {
			s = st.Current
		}
	}
	if s == "" {
		s = defaultServer
	}
	return normalizeServer(s)
}

// client is a client of the gateway with the bearer credential resolved as the root
// command's help says.
func (a *app) client(ctx context.Context) (*client.Client, error) {
	server, err := a.serverURL()
	if err != nil {
		return nil, err
	}
	opts := []client.ClientOption{client.WithHTTPClient(a.http), client.WithUserAgent("sandgate-cli/" + version)}
	switch {
	case a.token != "" && a.apiKey != "" && !a.tokenFlag:
		// Two credentials from the environment: which one was meant is a guess, and a wrong
		// guess acts as someone (or with rights) the user did not intend.
		return nil, errors.New("both SANDGATE_TOKEN and SANDGATE_API_KEY are set: unset the one you do not mean to use (or pass --token)")
	case a.token != "":
		opts = append(opts, client.WithToken(a.token))
	case a.apiKey != "":
		if !strings.HasPrefix(a.apiKey, apiKeyPrefix) {
			return nil, fmt.Errorf("SANDGATE_API_KEY is not an API key (those start with %q; 'sandgate keys create' makes one); for an OIDC token use SANDGATE_TOKEN", apiKeyPrefix)
		}
		opts = append(opts, client.WithAPIKey(a.apiKey))
	default:
		ts := &cachedToken{env: a.env, server: server, http: a.http}
		if _, err := ts.token(ctx); err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTokenFunc(ts.token))
	}
	return client.New(server, opts...)
}

// json reports whether --output json was asked for.
func (a *app) json() bool { return a.output == "json" }

// printJSON writes v as indented JSON to stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.env.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under a header, aligned in columns, to stdout.
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// warn writes one line to stderr, prefixed "sandgate: ".
func (a *app) warn(format string, args ...any) {
	fmt.Fprintf(a.env.stderr, "sandgate: "+format+"\n", args...)
}

// message is err as one line: a gateway problem as "<status> <kind>: <detail>" with its
// field errors and, for a gateway fault, its request id.
func message(err error) string {
	var e *client.Error
	if !errors.As(err, &e) {
		return strings.TrimPrefix(err.Error(), "sandgate: ")
	}
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(e.Error(), "sandgate: "))
	for i, fe := range e.Errors {
		if i == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		if fe.Field != "" {
			b.WriteString(fe.Field + ": ")
		}
		b.WriteString(fe.Message)
		if i == len(e.Errors)-1 {
			b.WriteString(")")
		}
	}
	if e.Status >= 500 && e.RequestID != "" {
		b.WriteString(" [request id " + e.RequestID + "]")
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return strings.ReplaceAll(b.String(), "\n", " ")
}

// noArgs, exactArgs and rangeArgs are cobra's argument checks as usage errors.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MinimumNArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

// closeQuietly closes c, for bodies whose close error says nothing new.
func closeQuietly(c io.Closer) { _ = c.Close() }
