package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// maxSecretBytes is the most a secret's value may be (the gateway's limit).
const maxSecretBytes = 16 << 10

func (a *app) secretsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "Set, list and delete secrets (values sessions use without reading them)",
		Long: `A secret is a value a session uses by name without its programs reading it: a session made
with 'sandgate sessions new --secret NAME' gives its programs SANDGATE_SECRET_<NAME> holding
a placeholder, which the egress proxy replaces with the value in requests to the secret's
hosts. Secrets are write-only: 'ls' shows names and hosts, never values.`,
		Args: noArgs,
	}
	cmd.AddCommand(a.secretsSetCommand(), a.secretsListCommand(), a.secretsRemoveCommand())
	return cmd
}

func (a *app) secretsSetCommand() *cobra.Command {
	var hosts []string
	var fromFile string
	cmd := &cobra.Command{
		Use:   "set NAME --host HOST [--host HOST]…",
		Short: "Create or replace a secret; the value is read from standard input or --from-file",
		Long: `Sets secret NAME to the value read from standard input (or --from-file; one trailing
newline is dropped), sent only to the --host patterns: api.example.com, *.example.com or an
IP address, each with an optional :port. The value is never taken from the command line,
where shells and process lists would keep it.`,
		Example: `  printf %s "$OPENAI_API_KEY" | sandgate secrets set openai --host api.openai.com
  sandgate secrets set github --host api.github.com --from-file ~/.config/gh-token`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(hosts) == 0 {
				return usagef("give at least one --host the secret may be sent to (api.example.com, *.example.com)")
			}
			var r io.Reader = a.env.stdin
			if fromFile != "" {
				f, err := os.Open(fromFile)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			value, err := io.ReadAll(io.LimitReader(r, maxSecretBytes+2))
			if err != nil {
				return err
			}
			value = bytes.TrimSuffix(bytes.TrimSuffix(value, []byte("\n")), []byte("\r"))
			if len(value) == 0 {
				return usagef("the value is empty: pipe it on standard input or give --from-file")
			}
			if len(value) > maxSecretBytes {
				return usagef("the value is over %d bytes", maxSecretBytes)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			s, err := c.PutSecret(cmd.Context(), args[0], string(value), hosts)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(s)
			}
			_, err = fmt.Fprintln(a.env.stdout, s.Name)
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&hosts, "host", nil, "a host the value may be sent to (repeatable)")
	f.StringVar(&fromFile, "from-file", "", "read the value from this file instead of standard input")
	return cmd
}

func (a *app) secretsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your secrets by name (never their values)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Secrets(cmd.Context())
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(list)
			}
			rows := make([][]string, 0, len(list))
			for _, s := range list {
				env := ""
				if s.EnvName != nil {
					env = *s.EnvName
				}
				rows = append(rows, []string{s.Name, strings.Join(s.Hosts, ","), env, s.UpdatedAt.Local().Format(time.DateTime)})
			}
			return a.table([]string{"NAME", "HOSTS", "VARIABLE", "UPDATED"}, rows)
		},
	}
}

func (a *app) secretsRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME…",
		Aliases: []string{"delete"},
		Short:   "Delete secrets by name",
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			for _, name := range args {
				if err := c.DeleteSecret(cmd.Context(), name); err != nil {
					return fmt.Errorf("secret %s: %w", name, err)
				}
				if !a.structured() {
					fmt.Fprintln(a.env.stdout, name)
				}
			}
			return nil
		},
	}
}
