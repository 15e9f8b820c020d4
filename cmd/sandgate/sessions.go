package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

func (a *app) profilesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "profiles",
		Short: "List the workload profiles you may use",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			ps, err := c.Profiles(cmd.Context())
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(ps)
			}
			rows := make([][]string, 0, len(ps))
			for _, p := range ps {
				name := p.Name
				if p.Default {
					name += " (default)"
				}
				idle := fmt.Sprintf("%ds, then %s", p.IdleTimeoutS, p.IdleAction)
				switch {
				case p.Scope == client.ScopePerCall:
					idle = "- (a fresh sandbox per run)"
				case p.Environment == client.ProfileEnvironmentAttached:
					idle = "- (attached: never reset)"
				}
				rows = append(rows, []string{name, p.Provider, string(p.Scope), string(p.Isolation), idle})
			}
			return a.table([]string{"NAME", "PROVIDER", "SCOPE", "ISOLATION", "IDLE"}, rows)
		},
	}
}

func (a *app) sessionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sessions",
		Aliases: []string{"session"},
		Short:   "List, create and destroy sessions (sandboxes)",
		Args:    noArgs,
	}
	cmd.AddCommand(a.sessionsListCommand(), a.sessionsNewCommand(), a.sessionsRemoveCommand())
	return cmd
}

func (a *app) sessionsListCommand() *cobra.Command {
	var profile string
	var all bool
	var labels map[string]string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your sessions, newest first",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			params := client.ListSessionsParams{}
			if profile != "" {
				params.Profile = &profile
			}
			if all {
				params.All = &all
			}
			sessions, err := allSessions(cmd.Context(), c, params)
			if err != nil {
				return err
			}
			sessions = slices.DeleteFunc(sessions, func(s client.Session) bool { return !hasLabels(s.Labels, labels) })
			if a.structured() {
				return a.print(sessions)
			}
			rows := make([][]string, 0, len(sessions))
			for _, s := range sessions {
				rows = append(rows, []string{s.Id, orDash(s.Name), s.Profile, string(s.Status), string(s.State), s.LastUsedAt.Local().Format(time.DateTime), labelList(s.Labels)})
			}
			return a.table([]string{"ID", "NAME", "PROFILE", "STATUS", "STATE", "LAST USED", "LABELS"}, rows)
		},
	}
	cmd.Flags().StringVar(&profile, "profile", "", "only sessions of this profile")
	cmd.Flags().BoolVar(&all, "all", false, "every principal's sessions (admins)")
	cmd.Flags().StringToStringVarP(&labels, "label", "l", nil, "only sessions with these labels, key=value (repeat or separate with commas: all must match)")
	return cmd
}

func (a *app) sessionsNewCommand() *cobra.Command {
	var profile, name, snapshot string
	var labels map[string]string
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Create a session and print its id",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			req := client.CreateSessionRequest{}
			if profile != "" {
				req.Profile = &profile
			}
			if name != "" {
				req.Name = &name
			}
			if snapshot != "" {
				req.FromSnapshot = &snapshot
			}
			if len(labels) > 0 {
				req.Labels = &labels
			}
			s, err := c.CreateSession(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(s)
			}
			if s.Warnings != nil {
				for _, w := range *s.Warnings {
					a.warn("warning: %s", w)
				}
			}
			_, err = fmt.Fprintln(a.env.stdout, s.Id)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", "", "workload profile (default: the gateway's default profile)")
	f.StringVar(&name, "name", "", "a name for the session")
	f.StringVar(&snapshot, "from-snapshot", "", "start from this snapshot")
	f.StringToStringVar(&labels, "label", nil, "labels, key=value (repeat or separate with commas)")
	return cmd
}

func (a *app) sessionsRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "rm SESSION…",
		Aliases:           []string{"delete"},
		Short:             "Destroy sessions and their sandboxes",
		Args:              minArgs(1),
		ValidArgsFunction: a.sessionArgs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			var done []*client.SessionDestroyed
			for _, ref := range args {
				id, err := resolveSession(cmd.Context(), c, ref, "")
				if err != nil {
					return err
				}
				d, err := c.DeleteSession(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("session %s: %w", id, err)
				}
				done = append(done, d)
				if !d.Destroyed && d.Notice != nil {
					a.warn("session %s: %s", d.SessionId, *d.Notice) // kept, and retried by the gateway
				}
				if !a.structured() {
					fmt.Fprintln(a.env.stdout, d.SessionId)
				}
			}
			if a.structured() {
				return a.print(done)
			}
			return nil
		},
	}
}

// orDash is *s, or "-" for nil or empty.
func orDash(s *string) string {
	if s == nil || strings.TrimSpace(*s) == "" {
		return "-"
	}
	return *s
}

// labelList is labels as k=v pairs sorted by key and joined by commas, or "-" for none.
func labelList(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return strings.Join(pairs, ",")
}

// hasLabels reports whether labels has every key of want with its value.
func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
