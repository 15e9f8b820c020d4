package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

// sessionStateCommand is pause or resume: one call per session, each printed.
func (a *app) sessionStateCommand(use, short, long string, call func(*cobra.Command, *client.Client, string, []client.RequestEditorFn) (*client.Session, error)) *cobra.Command {
	var profile string
	cmd := &cobra.Command{
		Use:               use + " SESSION…",
		Short:             short,
		Long:              long,
		Args:              minArgs(1),
		ValidArgsFunction: a.sessionArgs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			var done []*client.Session
			for _, ref := range args {
				sid, err := resolveSession(cmd.Context(), c, ref, profile)
				if err != nil {
					return err
				}
				s, err := call(cmd, c, sid, profileEditors(profile))
				if err != nil {
					return fmt.Errorf("session %s: %w", ref, err)
				}
				done = append(done, s)
				if a.structured() {
					continue
				}
				if s.Warnings != nil {
					for _, w := range *s.Warnings {
						a.warn("session %s: warning: %s", s.Id, w)
					}
				}
				fmt.Fprintf(a.env.stdout, "%s\t%s\n", s.Id, s.State)
			}
			if a.structured() {
				return a.print(done)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&profile, "profile", "", `with SESSION "default": that profile's default session`)
	return cmd
}

func (a *app) pauseCommand() *cobra.Command {
	return a.sessionStateCommand("pause", "Freeze sessions' sandboxes (their processes stop until resumed)",
		`Freeze the sandboxes of sessions: their processes, background ones too, stop until
'sandgate resume' (or the next use of the session) thaws them. Refused while an execution
runs in the session. Prints each session's id and state.`,
		func(cmd *cobra.Command, c *client.Client, sid string, ed []client.RequestEditorFn) (*client.Session, error) {
			return c.Pause(cmd.Context(), sid, ed...)
		})
}

func (a *app) resumeCommand() *cobra.Command {
	return a.sessionStateCommand("resume", "Thaw paused sessions",
		`Thaw sessions that were paused; their processes go on where they stopped. Prints each
session's id and state.`,
		func(cmd *cobra.Command, c *client.Client, sid string, ed []client.RequestEditorFn) (*client.Session, error) {
			return c.Resume(cmd.Context(), sid, ed...)
		})
}

func (a *app) snapshotsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshots",
		Aliases: []string{"snapshot", "snap"},
		Short:   "Snapshot a session's workspace, list, restore and delete snapshots",
		Args:    noArgs,
	}
	cmd.AddCommand(a.snapshotsCreateCommand(), a.snapshotsListCommand(), a.snapshotsRestoreCommand(), a.snapshotsRemoveCommand())
	return cmd
}

func (a *app) snapshotsCreateCommand() *cobra.Command {
	var name, profile string
	cmd := &cobra.Command{
		Use:               "create SESSION",
		Short:             "Snapshot a session's workspace and print the snapshot's id",
		Args:              exactArgs(1),
		ValidArgsFunction: a.sessionArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			sid, err := resolveSession(cmd.Context(), c, args[0], profile)
			if err != nil {
				return err
			}
			snap, err := c.CreateSnapshot(cmd.Context(), sid, name, profileEditors(profile)...)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(snap)
			}
			_, err = fmt.Fprintln(a.env.stdout, snap.Id)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	cmd.Flags().StringVar(&profile, "profile", "", `with SESSION "default": that profile's default session`)
	return cmd
}

func (a *app) snapshotsListCommand() *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your snapshots, newest first",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			params := &client.ListSnapshotsParams{}
			if session != "" {
				sid, err := resolveSession(cmd.Context(), c, session, "")
				if err != nil {
					return err
				}
				params.SessionId = &sid
			}
			var snaps []client.Snapshot
			for {
				page, err := c.Snapshots(cmd.Context(), params)
				if err != nil {
					return err
				}
				snaps = append(snaps, page.Snapshots...)
				if page.NextCursor == "" {
					break
				}
				params.Cursor = &page.NextCursor
			}
			if a.structured() {
				return a.print(snaps)
			}
			rows := make([][]string, 0, len(snaps))
			for _, s := range snaps {
				rows = append(rows, []string{s.Id, orDash(s.Name), s.SessionId, s.Profile, string(s.Kind), s.CreatedAt.Local().Format(time.DateTime)})
			}
			return a.table([]string{"ID", "NAME", "SESSION", "PROFILE", "KIND", "CREATED"}, rows)
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only snapshots of this session (id or name)")
	_ = cmd.RegisterFlagCompletionFunc("session", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return a.completeSessions(cmd, toComplete)
	})
	return cmd
}

func (a *app) snapshotsRestoreCommand() *cobra.Command {
	var name string
	var labels map[string]string
	cmd := &cobra.Command{
		Use:   "restore SNAPSHOT",
		Short: "Start a new session from a snapshot and print its id",
		Long: `Start a new session, of the snapshot's profile, whose workspace is the snapshot's (the
same as 'sandgate sessions new --from-snapshot SNAPSHOT'). The session the snapshot was
taken of is left as it is.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			req := client.CreateSessionRequest{FromSnapshot: &args[0]}
			if name != "" {
				req.Name = &name
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
			_, err = fmt.Fprintln(a.env.stdout, s.Id)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the new session")
	cmd.Flags().StringToStringVar(&labels, "label", nil, "labels of the new session, key=value (repeat or separate with commas)")
	return cmd
}

func (a *app) snapshotsRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm SNAPSHOT…",
		Aliases: []string{"delete"},
		Short:   "Delete snapshots",
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := c.DeleteSnapshot(cmd.Context(), id); err != nil {
					return fmt.Errorf("snapshot %s: %w", id, err)
				}
				if !a.structured() || a.output == outputName {
					fmt.Fprintln(a.env.stdout, id)
				}
			}
			if a.structured() && a.output != outputName {
				return a.print(args)
			}
			return nil
		},
	}
}
