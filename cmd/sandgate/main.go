// Command sandgate is the command-line client of a Sandgate gateway: sign in, manage
// sessions, run commands and code with their output streamed live and their exit code as
// its own, copy files both ways, follow and cancel tasks. It is built on pkg/client only:
// what it does, any program outside this module can do.
//
// Exit codes: the commands that run a program (exec, shell, run, code, tasks logs) exit with the
// program's exit code (128+n when a signal n ended it), 124 when it timed out and 130 when
// interrupted here (the task is cancelled); when sandgate itself fails there (a refused or
// unreachable gateway, a bad flag) they exit 125, as `docker run` does. Every other command
// exits 0, 1 when the gateway refused or could not be reached, and 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at build time (make build: -ldflags -X main.version=…).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], env{getenv: os.Getenv, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}))
}

// env is what a run of the command sees of its process: the environment, the standard
// streams.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// Exit codes of sandgate's own failures (see the package doc).
const (
	exitFailure       = 1   // a command that runs no program failed
	exitUsage         = 2   // a bad command line, for commands that run no program
	exitTimedOut      = 124 // the remote program timed out (as timeout(1))
	exitOwnFailure    = 125 // sandgate failed where the exit code is the program's
	exitInterrupted   = 130 // interrupted here (128 + SIGINT)
	annotationProgram = "sandgate/program-exit-code"
)

// exitCode ends a command with a code and no further message: a remote program's exit code
// or an interruption already reported.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

// usageError is a bad command line (an unknown flag, a missing argument).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run executes one command line and returns the process's exit code.
func run(ctx context.Context, args []string, e env) int {
	app := newApp(e)
	root := app.rootCommand()
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	program := cmd != nil && cmd.Annotations[annotationProgram] != ""
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	var usage usageError
	isUsage := errors.As(err, &usage) || !app.ran // cobra's own errors come before RunE
	fmt.Fprintln(e.stderr, "sandgate:", message(err))
	switch {
	case program:
		return exitOwnFailure
	case isUsage:
		if cmd != nil {
			fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return exitUsage
	default:
		return exitFailure
	}
}
