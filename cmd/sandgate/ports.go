package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

func (a *app) portsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ports",
		Aliases: []string{"port"},
		Short:   "Reach a port a session's program listens on: a link to share, or to open",
		Long: `A program in a session that listens on a port (a web app, a notebook, an API) can be
reached through the gateway, on profiles with the preview_ports capability. 'ports share'
prints a link that works without signing in, for anyone who has it, until it expires;
'ports open' makes a link for your own browser and opens it.`,
		Args: noArgs,
	}
	cmd.AddCommand(a.portsLinkCommand("share", false), a.portsLinkCommand("open", true))
	return cmd
}

func (a *app) portsLinkCommand(use string, personal bool) *cobra.Command {
	var profile string
	var ttl time.Duration
	var noBrowser bool
	short := "Print a link to a session's port that works without signing in, until it expires"
	if personal {
		short = "Open a session's port in your browser (a personal link)"
	}
	cmd := &cobra.Command{
		Use:               use + " SESSION PORT",
		Short:             short,
		Args:              exactArgs(2),
		ValidArgsFunction: a.sessionArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return usagef("PORT must be a number from 1 to 65535, not %q", args[1])
			}
			req := client.PortLinkRequest{}
			if ttl != 0 {
				if ttl < time.Second || ttl%time.Second != 0 {
					return usagef("--ttl must be whole seconds, at least 1s, not %s", ttl)
				}
				s := int(ttl / time.Second)
				req.TtlS = &s
			}
			if personal {
				req.Personal = &personal
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			sid, err := resolveSession(cmd.Context(), c, args[0], profile)
			if err != nil {
				return err
			}
			link, err := c.PortLink(cmd.Context(), sid, port, req, profileEditors(profile)...)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(link)
			}
			if _, err := fmt.Fprintln(a.env.stdout, link.Url); err != nil {
				return err
			}
			if personal && !noBrowser {
				openBrowser(link.Url)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", "", `with SESSION "default": that profile's default session`)
	f.DurationVar(&ttl, "ttl", 0, "how long the link works (default: the gateway's, an hour; at most 7 days)")
	if personal {
		f.BoolVar(&noBrowser, "no-browser", false, "print the link instead of opening it")
	}
	return cmd
}
