package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) tokenCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Print the bearer credential sandgate uses (for curl, or an agent's MCP config)",
		Long: `Print the bearer credential the other commands send to the gateway, resolved as
'sandgate --help' says (--token, $SANDGATE_TOKEN, $SANDGATE_API_KEY, else the token
'sandgate login' cached, refreshed first when it has expired), on one line:

  curl -H "Authorization: Bearer $(sandgate token)" "$SANDGATE_URL/v1/me"

A token from login expires (an hour, typically); for a long-lived agent configuration
make an API key instead ('sandgate keys create NAME'). Anyone who has the credential acts
as you: do not paste it where others can read it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			server, err := a.serverURL()
			if err != nil {
				return err
			}
			tok, err := a.bearer(cmd.Context(), server)
			if err != nil {
				return err
			}
			s, err := tok(cmd.Context())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.env.stdout, s)
			return err
		},
	}
}
