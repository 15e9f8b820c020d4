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
	cmd.AddCommand(a.sessionsListCommand(), a.sessionsNewCommand(), a.sessionsEditCommand(), a.sessionsRemoveCommand())
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
			if len(labels) > 0 {
				sel := selectors(labels)
				params.Label = &sel
			}
			sessions, err := allSessions(cmd.Context(), c, params)
			if err != nil {
				return err
			}
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
	var profile, name, snapshot, onExpiry string
	var labels map[string]string
	var env runFlags // its env: the session's environment, as exec's --env
	var timeout time.Duration
	var cpu float64
	var memoryMB int
	var secrets []string
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
			if req.Env, err = env.envMap(); err != nil {
				return err
			}
			if timeout != 0 {
				secs, err := wholeSeconds("--timeout", timeout)
				if err != nil {
					return err
				}
				req.TimeoutS = &secs
			}
			if onExpiry != "" {
				oe := client.CreateSessionRequestOnExpiry(onExpiry)
				req.OnExpiry = &oe
			}
			if cpu != 0 {
				req.Cpu = &cpu
			}
			if memoryMB != 0 {
				req.MemoryMb = &memoryMB
			}
			if len(secrets) > 0 {
				req.Secrets = &secrets
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
	f.StringArrayVarP(&env.env, "env", "e", nil, "environment variable NAME=VALUE of every program run in the session (repeatable; a run's own --env wins)")
	f.StringArrayVar(&secrets, "secret", nil, "bind your secret NAME: programs see SANDGATE_SECRET_<NAME> holding a placeholder (repeatable; 'sandgate secrets set')")
	f.DurationVar(&timeout, "timeout", 0, "the session's lifetime (e.g. 30m, 2h; whole seconds, at most 720h): it ends then, as --on-expiry says")
	f.StringVar(&onExpiry, "on-expiry", "", "what the end of --timeout does: destroy (the default) or pause")
	f.Float64Var(&cpu, "cpu", 0, "cores for the session's sandbox, within the profile's policy")
	f.IntVar(&memoryMB, "memory", 0, "MiB of memory for the session's sandbox, within the profile's policy")
	return cmd
}

func (a *app) sessionsEditCommand() *cobra.Command {
	var name string
	var labels map[string]string
	var unlabel []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "edit SESSION",
		Aliases:           []string{"update"},
		Short:             "Rename a session, change its labels or set its lifetime from now",
		Args:              exactArgs(1),
		ValidArgsFunction: a.sessionArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			var patch client.SessionPatch
			if f.Changed("name") {
				patch.Name = &name
			}
			if len(labels) > 0 || len(unlabel) > 0 {
				m := map[string]*string{}
				for k, v := range labels {
					m[k] = &v
				}
				for _, k := range unlabel {
					if _, set := labels[k]; set {
						return usagef("label %q is both set and removed", k)
					}
					m[k] = nil
				}
				patch.Labels = &m
			}
			if f.Changed("timeout") {
				secs, err := wholeSeconds("--timeout", timeout)
				if err != nil {
					return err
				}
				patch.TimeoutS = &secs
			}
			if patch == (client.SessionPatch{}) {
				return usagef("nothing to change: give --name, --label, --unlabel or --timeout")
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			id, err := resolveSession(cmd.Context(), c, args[0], "")
			if err != nil {
				return err
			}
			s, err := c.UpdateSession(cmd.Context(), id, patch)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(s)
			}
			_, err = fmt.Fprintln(a.env.stdout, s.Id)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "the session's new name (\"\" clears it)")
	f.StringToStringVarP(&labels, "label", "l", nil, "labels to set, key=value (repeat or separate with commas)")
	f.StringSliceVar(&unlabel, "unlabel", nil, "labels to remove, by key (repeat or separate with commas)")
	f.DurationVar(&timeout, "timeout", 0, "end the session this long from now (e.g. 1h; 0 removes its lifetime)")
	return cmd
}

// wholeSeconds is d in whole seconds for a *_s field; flag names the option in the error.
func wholeSeconds(flag string, d time.Duration) (int, error) {
	if d < 0 || d%time.Second != 0 {
		return 0, usagef("%s takes a whole number of seconds, like 90s or 2h, not %s", flag, d)
	}
	return int(d / time.Second), nil
}

// selectors is labels as the API's label selectors (key=value), sorted by key.
func selectors(labels map[string]string) []string {
	sel := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		sel = append(sel, k+"="+labels[k])
	}
	return sel
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
	return strings.Join(selectors(labels), ",")
}
