package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

func (a *app) tasksCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tasks",
		Aliases: []string{"task"},
		Short:   "List, inspect, cancel and follow tasks (executions)",
		Args:    noArgs,
	}
	cmd.AddCommand(a.tasksListCommand(), a.tasksGetCommand(), a.tasksCancelCommand(), a.tasksLogsCommand())
	return cmd
}

func (a *app) tasksListCommand() *cobra.Command {
	var session, status string
	var limit int
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your tasks, newest first",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			params := &client.ListTasksParams{}
			if session != "" {
				sid, err := resolveSession(cmd.Context(), c, session, "")
				if err != nil {
					return err
				}
				params.SessionId = &sid
			}
			if status != "" {
				s := client.TaskStatus(status)
				params.Status = &s
			}
			var tasks []client.Task
			for len(tasks) < limit {
				n := min(limit-len(tasks), 100)
				params.Limit = &n
				page, err := c.Tasks(cmd.Context(), params)
				if err != nil {
					return err
				}
				tasks = append(tasks, page.Tasks...)
				if page.NextCursor == "" || len(page.Tasks) == 0 {
					break
				}
				params.Cursor = &page.NextCursor
			}
			if a.structured() {
				return a.print(tasks)
			}
			rows := make([][]string, 0, len(tasks))
			for _, t := range tasks {
				rows = append(rows, []string{t.Id, string(t.Status), string(t.Operation), t.SessionId, t.Profile, t.SubmittedAt.Local().Format(time.DateTime), firstLine(t.Program, 60)})
			}
			return a.table([]string{"ID", "STATUS", "OPERATION", "SESSION", "PROFILE", "SUBMITTED", "PROGRAM"}, rows)
		},
	}
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "only tasks of this session (id or name)")
	_ = cmd.RegisterFlagCompletionFunc("session", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return a.completeSessions(cmd, toComplete)
	})
	f.StringVar(&status, "status", "", "only tasks in this status: pending, running, succeeded, failed, timed_out, cancelled or lost")
	f.IntVar(&limit, "limit", 50, "at most this many tasks")
	return cmd
}

func (a *app) tasksGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get TASK",
		Short: "Show a task, with its result once it has finished",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			t, err := c.Task(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(t)
			}
			return a.printTask(t)
		},
	}
}

// printTask shows a task as "field: value" lines.
func (a *app) printTask(t *client.Task) error {
	w := a.env.stdout
	fmt.Fprintf(w, "id:         %s\nstatus:     %s\noperation:  %s\nsession:    %s\nprofile:    %s\nsubmitted:  %s\n",
		t.Id, t.Status, t.Operation, t.SessionId, t.Profile, t.SubmittedAt.Local().Format(time.RFC3339))
	if t.FinishedAt != nil {
		fmt.Fprintf(w, "finished:   %s\n", t.FinishedAt.Local().Format(time.RFC3339))
	}
	if t.Program != nil {
		fmt.Fprintf(w, "program:    %s\n", strings.ReplaceAll(strings.TrimRight(*t.Program, "\n"), "\n", "\n            "))
	}
	if t.Error != nil {
		fmt.Fprintf(w, "error:      %s\n", *t.Error)
	}
	if r := t.Result; r != nil {
		code := "none (timed out)"
		if r.ExitCode != nil {
			code = fmt.Sprint(*r.ExitCode)
		}
		fmt.Fprintf(w, "exit code:  %s\nduration:   %s\nstdout:     %d bytes\nstderr:     %d bytes\n",
			code, time.Duration(r.DurationMs)*time.Millisecond, r.StdoutBytes, r.StderrBytes)
	}
	return nil
}

func (a *app) tasksCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK",
		Short: "Stop a task's execution and its whole process tree",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			t, err := c.CancelTask(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.structured() {
				return a.print(t)
			}
			_, err = fmt.Fprintf(a.env.stdout, "%s %s\n", t.Id, t.Status)
			return err
		},
	}
}

func (a *app) tasksLogsCommand() *cobra.Command {
	var follow bool
	var after string
	cmd := &cobra.Command{
		Use:   "logs TASK",
		Short: "Print a task's output; -f follows it live until it ends",
		Long: `Print a finished task's output (stdout and stderr to this process's stdout and stderr) and
exit with its exit code. With -f, follow a running task's output as it is produced (from the
start, or after --after, a stream position such as 1024-0) until it ends.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			if follow {
				s, err := c.FollowTask(cmd.Context(), args[0], after)
				if err != nil {
					return err
				}
				return a.follow(cmd.Context(), c, s, nil)
			}
			t, err := c.Task(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if t.FinishedAt == nil {
				return fmt.Errorf("task %s is still %s: follow its output with `sandgate tasks logs -f %s`", t.Id, t.Status, t.Id)
			}
			if t.Result == nil {
				msg := fmt.Sprintf("task %s ended %s without a result", t.Id, t.Status)
				if t.Error != nil {
					msg += ": " + *t.Error
				}
				return fmt.Errorf("%s", msg)
			}
			if !a.structured() {
				if err := writeOutput(a.env.stdout, t.Result.Stdout, t.Result.Encoding); err != nil {
					return err
				}
				if err := writeOutput(a.env.stderr, t.Result.Stderr, t.Result.Encoding); err != nil {
					return err
				}
				if t.Result.OutputDropped != nil && *t.Result.OutputDropped {
					a.warn("this task's output was dropped to keep within the retained-output quota")
				}
			}
			return a.finish(t.Result)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the task ends")
	cmd.Flags().StringVar(&after, "after", "", "with -f: resume after this stream position (an event id)")
	cmd.Annotations = map[string]string{annotationProgram: "yes"}
	return cmd
}

// firstLine is the first line of *s, cut to at most n characters ("…" marks a cut), or "-".
func firstLine(s *string, n int) string {
	if s == nil || strings.TrimSpace(*s) == "" {
		return "-"
	}
	l, rest, _ := strings.Cut(strings.TrimSpace(*s), "\n")
	if r := []rune(l); len(r) > n {
		return string(r[:n-1]) + "…"
	} else if rest != "" {
		return l + " …"
	}
	return l
}

// writeOutput writes a result's stdout or stderr, decoded from base64 when its encoding
// says so.
func writeOutput(w io.Writer, s string, enc client.ExecutionResultEncoding) error {
	chunk := client.OutputChunk{Data: s}
	if enc == client.ExecutionResultEncodingBase64 {
		chunk.Encoding = client.OutputChunkEncodingBase64
	}
	b, err := chunk.Bytes()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
