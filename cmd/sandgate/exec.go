package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"al.essio.dev/pkg/shellescape"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandgate/sandgate/pkg/client"
)

// maxInlineStdin is the most standard input sent inline (the `stdin` field) where it cannot
// be streamed: the contract's maxLength of that field.
const maxInlineStdin = 1 << 20

// runFlags are the flags of the commands that run a program.
type runFlags struct {
	profile string
	env     []string
	cwd     string
	timeout time.Duration
	noStdin bool
}

func (rf *runFlags) add(cmd *cobra.Command, profileUsage string, cwd bool) {
	f := cmd.Flags()
	f.StringVar(&rf.profile, "profile", "", profileUsage)
	f.StringArrayVarP(&rf.env, "env", "e", nil, "environment variable NAME=VALUE (repeatable)")
	if cwd {
		f.StringVar(&rf.cwd, "cwd", "", "working folder, relative to the workspace")
	}
	f.DurationVar(&rf.timeout, "timeout", 0, "lower the profile's execution timeout (e.g. 30s)")
	f.BoolVarP(&rf.noStdin, "no-stdin", "n", false, "do not send this process's standard input (as ssh -n)")
	cmd.Annotations = map[string]string{annotationProgram: "yes"}
}

// envMap is --env as the request's env; nil when none.
func (rf *runFlags) envMap() (*map[string]string, error) {
	if len(rf.env) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(rf.env))
	for _, kv := range rf.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--env %q: want NAME=VALUE", kv)
		}
		m[k] = v
	}
	return &m, nil
}

func (rf *runFlags) timeoutS() *float64 {
	if rf.timeout <= 0 {
		return nil
	}
	s := rf.timeout.Seconds()
	return &s
}

// checkUTF8 refuses arguments that are not UTF-8: the API carries a command as JSON text
// (RFC 8259 §8.1), so their bytes could not reach the program as they are.
func checkUTF8(argv []string) error {
	for i, a := range argv {
		if !utf8.ValidString(a) {
			return usagef("argument %d (%q) is not valid UTF-8: a command travels as JSON text, so its bytes would not arrive as they are; pass such data through a file (sandgate cp) or standard input", i+1, a)
		}
	}
	return nil
}

// commandLine quotes argv for the gateway's `/bin/sh -c` (a command is one string in the
// API): every argument becomes exactly one word, whatever its characters, and the first
// is always quoted so that it cannot be read as a variable assignment or a reserved word.
// Nothing of the user's input is interpreted by the remote shell.
func commandLine(argv []string) string {
	words := make([]string, len(argv))
	for i, s := range argv {
		words[i] = shellescape.Quote(s)
	}
	if words[0] == argv[0] { // left bare: only characters that need no quoting
		words[0] = "'" + argv[0] + "'"
	}
	return strings.Join(words, " ")
}

// pipedStdin is this process's standard input when it is to be sent to the program: not
// with --no-stdin, not from a terminal (a terminal is not piped: there is no end to it).
func (a *app) pipedStdin(noStdin bool) io.Reader {
	if noStdin || a.env.stdin == nil {
		return nil
	}
	if f, ok := a.env.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return a.env.stdin
}

// readInline reads all of r for the inline `stdin` field, at most maxInlineStdin bytes.
// startFeeding starts an execution (start) with its input kept open when there is stdin to
// pipe; when the provider keeps no input open (a capability problem: not interactive) it
// starts it again with stdin read into *inline (at most 1 MiB) instead. It returns the
// stream and the input still to pipe (nil once sent inline).
func startFeeding(ctx context.Context, start func(ctx context.Context, stdinOpen bool) (*client.Stream, error), stdin io.Reader, inline **string) (*client.Stream, io.Reader, error) {
	s, err := start(ctx, stdin != nil)
	if stdin == nil || !client.IsKind(err, client.KindCapability) {
		return s, stdin, err
	}
	if *inline, err = readInline(stdin); err != nil {
		return nil, nil, err
	}
	s, err = start(ctx, false)
	return s, nil, err
}

func readInline(r io.Reader) (*string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInlineStdin+1))
	if err != nil {
		return nil, fmt.Errorf("reading standard input: %w", err)
	}
	if len(b) > maxInlineStdin {
		return nil, fmt.Errorf("standard input is over %d bytes, the most this request sends (use -n, or a file with cp)", maxInlineStdin)
	}
	if len(b) == 0 {
		return nil, nil
	}
	s := string(b)
	return &s, nil
}

func (a *app) execCommand() *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "exec SESSION [flags] -- COMMAND [ARG…]",
		Short: "Run a command in a session, streaming its output; its exit code is sandgate's",
		Long: `Run a command in a session: its output is streamed as it is produced, its exit code
becomes sandgate's, and this process's standard input is piped to it when it is not a terminal
(-n sends none). SESSION is a session's id or name; "default" with --profile is your default
session of that profile.

The command is an argument vector: each ARG reaches the program as one argument, quoted for
the sandbox's /bin/sh. For shell syntax (pipes, redirections, variables), run a shell:
  sandgate exec SESSION -- sh -c 'ls | wc -l'

Interrupting sandgate (Ctrl-C) cancels the remote command.`,
		Args: minArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usagef("put -- between the session and the command: sandgate exec SESSION -- COMMAND [ARG…]")
			}
			if err := checkUTF8(args[1:]); err != nil {
				return err
			}
			env, err := rf.envMap()
			if err != nil {
				return err
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			sid, err := resolveSession(cmd.Context(), c, args[0], rf.profile)
			if err != nil {
				return err
			}
			req := client.CommandRequest{Command: commandLine(args[1:]), Env: env, TimeoutS: rf.timeoutS()}
			if rf.cwd != "" {
				req.Cwd = &rf.cwd
			}
			editors := profileEditors(rf.profile)
			stdin := a.pipedStdin(rf.noStdin)
			start := func(ctx context.Context, stdinOpen bool) (*client.Stream, error) {
				r := req
				if stdinOpen {
					r.StdinOpen = &stdinOpen
				}
				return c.StreamCommand(ctx, sid, r, editors...)
			}
			s, stdin, err := startFeeding(cmd.Context(), start, stdin, &req.Stdin)
			if err != nil {
				return err
			}
			return a.follow(cmd.Context(), c, s, stdin)
		},
	}
	rf.add(cmd, `with SESSION "default": that profile's default session; else the profile the session must have`, true)
	cmd.ValidArgsFunction = a.sessionArgs(false)
	return cmd
}

func (a *app) runCommand() *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "run --profile PROFILE [flags] -- COMMAND [ARG…]",
		Short: "Run a command once in a fresh sandbox of a per_call profile",
		Long: `Run a command in a fresh sandbox that is destroyed afterwards (a per_call profile):
output streamed, exit code propagated, as exec. Standard input, when not a terminal, is sent
with the request (at most 1 MiB; -n sends none).`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usagef("put -- before the command: sandgate run --profile PROFILE -- COMMAND [ARG…]")
			}
			if err := checkUTF8(args); err != nil {
				return err
			}
			env, err := rf.envMap()
			if err != nil {
				return err
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			line := commandLine(args)
			req := client.RunRequest{Command: &line, Env: env, TimeoutS: rf.timeoutS()}
			if rf.profile != "" {
				req.Profile = &rf.profile
			}
			if in := a.pipedStdin(rf.noStdin); in != nil {
				if req.Stdin, err = readInline(in); err != nil {
					return err
				}
			}
			s, err := c.StreamRun(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.follow(cmd.Context(), c, s, nil)
		},
	}
	rf.add(cmd, "the per_call profile to run in (default: the gateway's default)", false)
	return cmd
}

// languages maps file extensions to the code languages profiles declare.
var languages = map[string]string{".py": "python", ".sh": "bash", ".bash": "bash", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript", ".r": "r", ".R": "r"}

func (a *app) codeCommand() *cobra.Command {
	var rf runFlags
	var language, contextName string
	cmd := &cobra.Command{
		Use:   "code SESSION FILE|-",
		Short: "Run code (a file, or - for standard input) in a session",
		Long: `Run code in a session, read from FILE or from standard input (-): output streamed,
exit code propagated, as exec. On a stateful profile Python code keeps its variables between
runs (in --context, default "default"). The language is --language, else taken from FILE's
extension (.py, .sh, .js, .ts, .r), else the gateway's default (python). With a FILE,
standard input is piped to the program as with exec.

Rich results of Python code in a context (the last expression's value, display(...),
pandas tables, matplotlib charts) are shown as they come: their text on stdout, images saved
to --results-dir as <task id>-<n>.png (or .jpg, .svg), each file named on stderr. With
--output json the result carries them as the API gives them.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := rf.envMap()
			if err != nil {
				return err
			}
			var code []byte
			var stdin io.Reader
			if args[1] == "-" {
				code, err = io.ReadAll(a.env.stdin)
			} else {
				code, err = os.ReadFile(args[1])
				stdin = a.pipedStdin(rf.noStdin)
				if language == "" {
					language = languages[filepath.Ext(args[1])]
				}
			}
			if err != nil {
				return fmt.Errorf("reading the code: %w", err)
			}
			if len(code) == 0 {
				return usagef("no code in %s", args[1])
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			sid, err := resolveSession(cmd.Context(), c, args[0], rf.profile)
			if err != nil {
				return err
			}
			req := client.CodeRequest{Code: string(code), Env: env, TimeoutS: rf.timeoutS()}
			if language != "" {
				req.Language = &language
			}
			if contextName != "" {
				req.Context = &contextName
			}
			start := func(ctx context.Context, stdinOpen bool) (*client.Stream, error) {
				r := req
				if stdinOpen {
					r.StdinOpen = &stdinOpen
				}
				return c.StreamCode(ctx, sid, r, profileEditors(rf.profile)...)
			}
			s, stdin, err := startFeeding(cmd.Context(), start, stdin, &req.Stdin)
			if err != nil {
				return err
			}
			return a.follow(cmd.Context(), c, s, stdin)
		},
	}
	rf.add(cmd, `with SESSION "default": that profile's default session; else the profile the session must have`, false)
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return a.completeSessions(cmd, toComplete)
		}
		return nil, cobra.ShellCompDirectiveDefault // FILE
	}
	cmd.Flags().StringVarP(&language, "language", "l", "", "language of the code (python, bash, …)")
	cmd.Flags().StringVar(&contextName, "context", "", "stateful context to run in")
	cmd.Flags().StringVar(&a.resultsDir, "results-dir", ".", "folder the images among the code's results (charts) are saved in")
	return cmd
}

// profileEditors adds ?profile= when a profile is named.
func profileEditors(profile string) []client.RequestEditorFn {
	if profile == "" {
		return nil
	}
	return []client.RequestEditorFn{client.WithProfile(profile)}
}

// follow reads an execution's event stream to its end: output to stdout and stderr as it
// comes (not with --output json), stdin (when not nil) piped to the task once the stream
// names it (forwardStdin: the gateway's temporary refusals waited out, a failure reported on
// stderr at once), and the result's exit code returned as an exitCode. Interrupted (ctx ended), it
// cancels the task and returns exitInterrupted.
//
// onTask, when given, is called once with the task id as soon as the stream names it.
func (a *app) follow(ctx context.Context, c *client.Client, s *client.Stream, stdin io.Reader, onTask ...func(taskID string)) error {
	defer closeQuietly(s)
	stdout, stderr := a.env.stdout, a.env.stderr
	if a.structured() {
		stdout, stderr = io.Discard, io.Discard
	}
	pumpCtx, stopPump := context.WithCancel(ctx)
	defer stopPump()
	var pumpMu sync.Mutex
	var pumpErr error
	taskID := ""
	var result *client.ExecutionResult
	results := &resultPrinter{a: a, dir: a.resultsDir}
	for result == nil && s.Next() {
		ev := s.Event()
		switch ev.Type {
		case client.EventTask:
			t, err := ev.Task()
			if err != nil {
				return err
			}
			if taskID == "" && stdin != nil {
				go func() { // ends with stdin's end, or at exit when stdin never ends
					err := forwardStdin(pumpCtx, c.StdinWriter(pumpCtx, t.Id), stdin, func(err error) {
						if client.IsKind(err, client.KindConflict) {
							// The program ended before reading all its input (`sh -c 'exit 3'`
							// fed a file): as with a local pipe, the rest is dropped in silence.
							return
						}
						// \r: a terminal in raw mode does not return the carriage itself.
						a.warn("standard input: %s; no more input is sent to task %s\r", message(err), t.Id)
					})
					pumpMu.Lock()
					pumpErr = err
					pumpMu.Unlock()
				}()
			}
			if taskID == "" {
				for _, f := range onTask {
					f(t.Id)
				}
			}
			taskID = t.Id
			results.taskID = t.Id
		case client.EventRichResult:
			r, err := ev.RichResult()
			if err != nil {
				return err
			}
			if !a.structured() {
				if err := results.show(*r); err != nil {
					return err
				}
			}
		case client.EventStdout, client.EventStderr:
			b, err := ev.Bytes()
			if err != nil {
				return err
			}
			w := stdout
			if ev.Type == client.EventStderr {
				w = stderr
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		case client.EventGap:
			if g, err := ev.Gap(); err == nil && !a.structured() {
				a.warn("[%s bytes %d to %d dropped here: the output is over the profile's limit]", g.Stream, g.From, g.To)
			}
		case client.EventResult:
			r, err := ev.Result()
			if err != nil {
				return err
			}
			result = r
		case client.EventError:
			return ev.Problem()
		}
	}
	if result == nil {
		if ctx.Err() != nil && taskID != "" {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, err := c.CancelTask(cctx, taskID); err != nil {
				a.warn("interrupted; cancelling task %s failed: %s", taskID, message(err))
			} else {
				a.warn("interrupted; task %s cancelled", taskID)
			}
			return exitCode(exitInterrupted)
		}
		err := s.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		pumpMu.Lock()
		defer pumpMu.Unlock()
		if pumpErr != nil {
			err = errors.Join(err, fmt.Errorf("standard input: %w", pumpErr))
		}
		if taskID != "" {
			return fmt.Errorf("following task %s: %w", taskID, err)
		}
		return err
	}
	if result.Results != nil && !a.structured() {
		// Those the stream did not carry (it was resumed from the stored result).
		for _, r := range (*result.Results)[min(results.shown, len(*result.Results)):] {
			if err := results.show(r); err != nil {
				return err
			}
		}
	}
	return a.finish(result)
}

// finish reports a result: with --output json the result itself, else its notices on
// stderr; and returns its exit code (nil for 0).
func (a *app) finish(r *client.ExecutionResult) error {
	if a.structured() {
		if err := a.print(r); err != nil {
			return err
		}
	} else {
		if r.Notice != nil && *r.Notice != "" {
			a.warn("notice: %s", *r.Notice)
		}
		for _, w := range r.Warnings {
			a.warn("warning: %s", w)
		}
		if r.OomKilled != nil && *r.OomKilled {
			a.warn("the program ran out of memory (the profile's memory_mb) and was killed")
		}
		if r.ExitCode == nil {
			a.warn("the program timed out and was killed")
		}
	}
	switch {
	case r.ExitCode == nil:
		return exitCode(exitTimedOut)
	case *r.ExitCode != 0:
		return exitCode(*r.ExitCode)
	}
	return nil
}
