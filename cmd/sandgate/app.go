package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

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

Exit codes: exec, shell, run, code and 'tasks logs' exit with the remote program's exit code (124
when it timed out, 130 when interrupted here, 125 when sandgate itself failed); other
commands exit 0, 1 on failure and 2 on a usage error.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.ran = true
			a.tokenFlag = cmd.Flags().Changed("token")
			switch a.output {
			case outputTable, "text":
				a.output = outputTable
			case outputJSON, outputYAML, outputName:
			default:
				return usagef("--output must be table, json, yaml or name, not %q", a.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVarP(&a.server, "server", "s", a.env.getenv("SANDGATE_URL"), "gateway base URL ($SANDGATE_URL)")
	f.StringVar(&a.token, "token", a.env.getenv("SANDGATE_TOKEN"), "bearer token ($SANDGATE_TOKEN); default: the one 'sandgate login' cached")
	f.StringVarP(&a.output, "output", "o", outputTable, "output format: table (text for people), json, yaml, or name (ids, one a line)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputTable, outputJSON, outputYAML, outputName}, cobra.ShellCompDirectiveNoFileComp))
	a.apiKey = strings.TrimSpace(a.env.getenv("SANDGATE_API_KEY"))
	root.AddGroup(&cobra.Group{ID: "auth", Title: "Sign-in:"}, &cobra.Group{ID: "work", Title: "Sandboxes:"})
	for _, c := range []*cobra.Command{a.loginCommand(), a.logoutCommand(), a.whoamiCommand(), a.tokenCommand(), a.keysCommand(), a.secretsCommand()} {
		c.GroupID = "auth"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.profilesCommand(), a.sessionsCommand(), a.execCommand(), a.shellCommand(), a.runCommand(), a.codeCommand(), a.cpCommand(), a.filesCommand(), a.portsCommand(), a.pauseCommand(), a.resumeCommand(), a.snapshotsCommand(), a.tasksCommand()} {
		c.GroupID = "work"
		root.AddCommand(c)
	}
	root.InitDefaultCompletionCmd() // now rather than at Execute, so that it refuses unknown shells too
	refuseUnknownSubcommands(root)
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
	tok, err := a.bearer(ctx, server)
	if err != nil {
		return nil, err
	}
	opts := []client.ClientOption{client.WithHTTPClient(a.http), client.WithUserAgent("sandgate-cli/" + version), client.WithTokenFunc(tok)}
	return client.New(server, opts...)
}

// bearer is the source of the bearer credential for server, resolved as the root command's
// help says: --token, $SANDGATE_TOKEN, $SANDGATE_API_KEY, else the token 'sandgate login'
// cached (checked now, refreshed when it expires).
func (a *app) bearer(ctx context.Context, server string) (func(context.Context) (string, error), error) {
	fixed := func(s string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return s, nil }
	}
	switch {
	case a.token != "" && a.apiKey != "" && !a.tokenFlag:
		// Two credentials from the environment: which one was meant is a guess, and a wrong
		// guess acts as someone (or with rights) the user did not intend.
		return nil, errors.New("both SANDGATE_TOKEN and SANDGATE_API_KEY are set: unset the one you do not mean to use (or pass --token)")
	case a.token != "":
		return fixed(a.token), nil
	case a.apiKey != "":
		if !strings.HasPrefix(a.apiKey, apiKeyPrefix) {
			return nil, fmt.Errorf("SANDGATE_API_KEY is not an API key (those start with %q; 'sandgate keys create' makes one); for an OIDC token use SANDGATE_TOKEN", apiKeyPrefix)
		}
		return fixed(a.apiKey), nil
	default:
		ts := &cachedToken{env: a.env, server: server, http: a.http}
		if _, err := ts.token(ctx); err != nil {
			return nil, err
		}
		return ts.token, nil
	}
}

// The values of --output.
const (
	outputTable = "table" // for people: tables and plain lines ("text" is the same)
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputName  = "name" // the ids of what the command answers, one a line
)

// structured reports whether the answer itself is asked for (--output json, yaml or
// name) rather than text for people.
func (a *app) structured() bool { return a.output != outputTable }

// print writes an answer to stdout as --output asks: indented JSON, YAML (the same
// document, field names as in the API), or the ids it holds (see ids).
func (a *app) print(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	switch a.output {
	case outputYAML:
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = a.env.stdout.Write(y)
		return err
	case outputName:
		for _, id := range ids(b) {
			if _, err := fmt.Fprintln(a.env.stdout, id); err != nil {
				return err
			}
		}
		return nil
	default:
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err = buf.WriteTo(a.env.stdout)
		return err
	}
}

// idFields are the fields that name what an answer is, in the order ids looks for them.
var idFields = []string{"id", "key_id", "task_id", "path", "session_id", "name"}

// ids are the names of a JSON answer for --output name: for an object its first field of
// idFields, for an array that of each element (elements without one are left out).
func ids(doc []byte) []string {
	var list []map[string]any
	if json.Unmarshal(doc, &list) != nil {
		var one map[string]any
		if json.Unmarshal(doc, &one) != nil {
			return nil
		}
		list = []map[string]any{one}
	}
	var out []string
	for _, m := range list {
		for _, f := range idFields {
			if s, ok := m[f].(string); ok && s != "" {
				out = append(out, s)
				break
			}
		}
	}
	return out
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

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// refuseUnknownSubcommands makes every command below root that only groups others (sessions,
// tasks, …) answer an unknown subcommand with a usage error (exit 2) rather than its help
// and success; without arguments it still shows its help. (Cobra checks the root's own
// arguments itself.)
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
		refuseUnknownSubcommands(c)
	}
}
