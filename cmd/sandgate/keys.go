package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

// apiKeyPrefix starts every Sandgate API key.
const apiKeyPrefix = "sgk_"

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "keys",
		Aliases: []string{"key", "api-keys"},
		Short:   "Create, list and revoke API keys (credentials for scripts and CI)",
		Long: `An API key authenticates as you — your subject and groups as they are when it is made —
wherever a token does: set SANDGATE_API_KEY for this command, or send
'Authorization: Bearer <key>' to the REST API or /mcp. Only a sign-in makes keys (a
request made with a key cannot); revoking one takes effect on every gateway replica within
a second.`,
		Args: noArgs,
	}
	cmd.AddCommand(a.keysCreateCommand(), a.keysListCommand(), a.keysRevokeCommand())
	return cmd
}

func (a *app) keysCreateCommand() *cobra.Command {
	var ttl string
	var profiles []string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Make an API key and print its secret (shown this once)",
		Long: `Makes an API key named NAME that authenticates as you, and prints its secret on
standard output — the only time it is shown: the gateway keeps a hash of it. What the key
is (id, expiry) goes to standard error, so KEY=$(sandgate keys create ci) keeps just the
secret.`,
		Example: `  KEY=$(sandgate keys create ci-deploy --ttl 90d --profile default)
  SANDGATE_API_KEY=$KEY sandgate whoami`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.CreateAPIKeyRequest{Name: args[0]}
			if ttl != "" {
				s, err := parseTTL(ttl)
				if err != nil {
					return usageError{err}
				}
				req.TtlS = &s
			}
			if len(profiles) > 0 {
				req.Profiles = &profiles
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			k, err := c.CreateAPIKey(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(k)
			}
			restriction := "every profile you may use"
			if k.Profiles != nil {
				restriction = "only " + strings.Join(*k.Profiles, ", ")
			}
			a.warn("API key %s (%s…) for %s, %s, expires %s; store the secret now: it is not shown again",
				k.Id, k.Prefix, k.Principal, restriction, k.ExpiresAt.Local().Format(time.DateTime))
			_, err = fmt.Fprintln(a.env.stdout, k.Secret)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&ttl, "ttl", "", "lifetime: a duration (12h, 90m) or whole days (90d); default the gateway's auth.api_keys.default_ttl")
	f.StringSliceVar(&profiles, "profile", nil, "restrict the key to this profile (repeat or separate with commas); default every profile you may use")
	return cmd
}

// parseTTL reads a key's lifetime — a Go duration or a whole number of days ("90d") — as
// whole seconds (at least one).
func parseTTL(s string) (int, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > math.MaxInt32/86400 {
			return 0, fmt.Errorf("--ttl %q: a number of days is a positive whole number, as in 90d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("--ttl %q: a duration such as 12h or 90m, or whole days such as 90d", s)
		}
	}
	if d < time.Second {
		return 0, fmt.Errorf("--ttl %q: must be positive (the gateway wants at least a minute)", s)
	}
	return int(d / time.Second), nil
}

func (a *app) keysListCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your API keys, newest first (never their secrets)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			params := &client.ListAPIKeysParams{}
			if all {
				params.All = &all
			}
			var keys []client.APIKey
			for {
				page, err := c.APIKeys(cmd.Context(), params)
				if err != nil {
					return err
				}
				keys = append(keys, page.ApiKeys...)
				if page.NextCursor == "" || len(page.ApiKeys) == 0 {
					break
				}
				params.Cursor = &page.NextCursor
			}
			if a.structured() {
				return a.print(keys)
			}
			header := []string{"ID", "NAME", "PREFIX", "STATUS", "PROFILES", "CREATED", "LAST USED", "EXPIRES"}
			if all {
				header = append(header, "PRINCIPAL")
			}
			rows := make([][]string, 0, len(keys))
			for _, k := range keys {
				profiles := "*"
				if k.Profiles != nil {
					profiles = strings.Join(*k.Profiles, ",")
				}
				used := "never"
				if k.LastUsedAt != nil {
					used = k.LastUsedAt.Local().Format(time.DateTime)
				}
				row := []string{k.Id, k.Name, k.Prefix, string(k.Status), profiles, k.CreatedAt.Local().Format(time.DateTime), used,
					k.ExpiresAt.Local().Format(time.DateTime)}
				if all {
					row = append(row, k.Principal)
				}
				rows = append(rows, row)
			}
			return a.table(header, rows)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every principal's keys (admins, signed in)")
	return cmd
}

func (a *app) keysRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "revoke KEY…",
		Aliases: []string{"rm"},
		Short:   "Revoke API keys by id; every gateway replica refuses them within a second",
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			var done []*client.APIKey
			for _, id := range args {
				if strings.HasPrefix(id, apiKeyPrefix) {
					return usagef("%s… is a key's secret; revoke takes its id (the ID column of 'sandgate keys ls')", id[:min(len(id), 12)])
				}
				k, err := c.RevokeAPIKey(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("API key %s: %w", id, err)
				}
				done = append(done, k)
				if !a.structured() {
					fmt.Fprintln(a.env.stdout, k.Id)
				}
			}
			if a.structured() {
				return a.print(done)
			}
			return nil
		},
	}
}
