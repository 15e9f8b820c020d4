package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandgate/sandgate/pkg/client"
)

// loginShell is the program `sandgate shell` runs when given none: bash where the sandbox
// has it, else sh, as a login shell.
const loginShell = `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`

func (a *app) shellCommand() *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "shell SESSION [flags] [-- COMMAND [ARG…]]",
		Short: "Open an interactive terminal in a session (a shell, or COMMAND on a terminal)",
		Long: `Open an interactive terminal in a session: a login shell (bash where there is one, else
sh), or COMMAND with its arguments, runs on a pseudo-terminal of the sandbox; this terminal
is put in raw mode, so every key (Ctrl-C, Ctrl-D, arrows) goes to the remote program, and a
resize of this window resizes the remote terminal. sandgate exits with the program's exit
code when it ends. SESSION is a session's id or name; "default" with --profile is your
default session of that profile.

The profile must have the interactive capability ('sandgate profiles -o yaml' shows it),
and the profile's execution timeout applies to the terminal as to any command.`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash == -1 && len(args) > 1:
				return usagef("put -- between the session and the command: sandgate shell SESSION -- COMMAND [ARG…]")
			case dash == 1 && len(args) == 1:
				return usagef("name a command after --, or leave out -- for a shell")
			case a.structured():
				return usagef("shell is interactive: --output %s does not apply", a.output)
			}
			in, ok := a.env.stdin.(*os.File)
			if !ok || !term.IsTerminal(int(in.Fd())) {
				return usagef("shell needs a terminal on standard input; to run a command without one use 'sandgate exec'")
			}
			fd := int(in.Fd())
			cols, rows, err := term.GetSize(fd)
			if err != nil {
				return err
			}
			command := loginShell
			if len(args) > 1 {
				if err := checkUTF8(args[1:]); err != nil {
					return err
				}
				command = commandLine(args[1:])
			}
			env, err := rf.envMap()
			if err != nil {
				return err
			}
			if t := a.env.getenv("TERM"); t != "" {
				if env == nil {
					env = &map[string]string{}
				}
				if _, set := (*env)["TERM"]; !set {
					(*env)["TERM"] = t
				}
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			sid, err := resolveSession(cmd.Context(), c, args[0], rf.profile)
			if err != nil {
				return err
			}
			req := client.CommandRequest{Command: command, Env: env, TimeoutS: rf.timeoutS(), Pty: &client.TerminalSize{Rows: clamp(rows), Cols: clamp(cols)}}
			if rf.cwd != "" {
				req.Cwd = &rf.cwd
			}
			editors := profileEditors(rf.profile)
			s, err := c.StreamCommand(cmd.Context(), sid, req, editors...)
			if err != nil {
				return err
			}
			old, err := term.MakeRaw(fd)
			if err != nil {
				closeQuietly(s)
				return err
			}
			defer func() { _ = term.Restore(fd, old) }()
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, syscall.SIGWINCH)
			defer signal.Stop(winch)
			resizeCtx, stopResize := context.WithCancel(cmd.Context())
			defer stopResize()
			return a.follow(cmd.Context(), c, s, in, func(taskID string) {
				go a.forwardResizes(resizeCtx, c, taskID, fd, winch, editors)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&rf.profile, "profile", "", `with SESSION "default": that profile's default session; else the profile the session must have`)
	f.StringArrayVarP(&rf.env, "env", "e", nil, "environment variable NAME=VALUE (repeatable)")
	f.StringVar(&rf.cwd, "cwd", "", "working folder, relative to the workspace")
	f.DurationVar(&rf.timeout, "timeout", 0, "lower the profile's execution timeout (e.g. 30m)")
	cmd.Annotations = map[string]string{annotationProgram: "yes"}
	cmd.ValidArgsFunction = a.sessionArgs(false)
	return cmd
}

// forwardResizes sets the remote terminal's size to this terminal's after every SIGWINCH
// until ctx ends. A failed resize is reported and the terminal goes on at its old size.
func (a *app) forwardResizes(ctx context.Context, c *client.Client, taskID string, fd int, winch <-chan os.Signal, editors []client.RequestEditorFn) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			cols, rows, err := term.GetSize(fd)
			if err != nil {
				continue
			}
			if err := c.ResizeTerminal(ctx, taskID, client.TerminalSize{Rows: clamp(rows), Cols: clamp(cols)}, editors...); err != nil && ctx.Err() == nil {
				a.warn("resizing the terminal: %s\r", message(err))
			}
		}
	}
}

// clamp is a terminal dimension within the API's bounds (1 to 1000 characters).
func clamp(n int) int { return max(1, min(n, 1000)) }
