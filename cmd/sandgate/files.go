package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

func (a *app) filesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "files",
		Aliases: []string{"file"},
		Short:   "List and delete files of a session's workspace (copy them with cp)",
		Args:    noArgs,
	}
	cmd.AddCommand(a.filesListCommand(), a.filesRemoveCommand())
	return cmd
}

func (a *app) filesListCommand() *cobra.Command {
	var profile string
	cmd := &cobra.Command{
		Use:     "ls SESSION [FOLDER]",
		Aliases: []string{"list"},
		Short:   "List a folder of a session's workspace (the workspace itself by default)",
		Long: `List a folder of a session's workspace: FOLDER is relative to the workspace (default: the
workspace itself). Folders are shown with a trailing /. SESSION is a session's id or name;
"default" with --profile is your default session of that profile.`,
		Args:              rangeArgs(1, 2),
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
			dir := ""
			if len(args) > 1 {
				dir = args[1]
			}
			l, err := c.Files(cmd.Context(), sid, dir, profileEditors(profile)...)
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(l.Entries)
			}
			rows := make([][]string, 0, len(l.Entries))
			for _, e := range l.Entries {
				name := e.Name
				switch e.Type {
				case client.FileEntryTypeDir:
					name += "/"
				case client.FileEntryTypeSymlink:
					name += "@"
				}
				rows = append(rows, []string{e.Mode, strconv.FormatInt(e.Size, 10), e.ModifiedAt.Local().Format(time.DateTime), name})
			}
			return a.table([]string{"MODE", "SIZE", "MODIFIED", "NAME"}, rows)
		},
	}
	cmd.Flags().StringVar(&profile, "profile", "", `with SESSION "default": that profile's default session`)
	return cmd
}

func (a *app) filesRemoveCommand() *cobra.Command {
	var profile string
	cmd := &cobra.Command{
		Use:     "rm SESSION PATH…",
		Aliases: []string{"delete"},
		Short:   "Delete files or empty folders of a session's workspace",
		Long: `Delete files, or folders that are empty, of a session's workspace; a path that is already
absent is not an error. PATH is relative to the workspace. Each path deleted is printed.`,
		Args:              minArgs(2),
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
			type deleted struct {
				SessionID string `json:"session_id"`
				Path      string `json:"path"`
			}
			var done []deleted
			for _, p := range args[1:] {
				if err := c.DeleteFile(cmd.Context(), sid, p, profileEditors(profile)...); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				done = append(done, deleted{sid, p})
				if !a.structured() {
					fmt.Fprintln(a.env.stdout, p)
				}
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
