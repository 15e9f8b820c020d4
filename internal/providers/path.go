package providers

import (
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/wspath"
)

// CleanPath turns a caller's workspace path into a clean, slash-separated path relative to the
// sandbox workspace, the form every provider hands to its backend; see wspath.Clean for the
// rules (fault.Policy for NUL bytes, absolute paths and paths leaving the workspace).
func CleanPath(p string) (string, error) { return wspath.Clean(p) }

// CleanEntry is CleanPath for a path that names an entry inside the workspace, the path of
// WriteFile and RemoveFile: the workspace folder itself ("", ".", "a/..") is a
// fault.Validation error on every provider (wspath.CleanEntry).
func CleanEntry(p string) (string, error) { return wspath.CleanEntry(p) }

// ValidEnvName reports whether name is a portable environment variable name,
// ^[A-Za-z_][A-Za-z0-9_]*$ (see wspath.ValidEnvName).
func ValidEnvName(name string) bool { return wspath.ValidEnvName(name) }

// MaxArgBytes is the kernel's bound on one argument or one NAME=value environment string,
// including its terminating NUL (Linux MAX_ARG_STRLEN, 32 pages of 4 KiB): a longer one
// makes execve fail with E2BIG.
const MaxArgBytes = 32 * 4096

// MaxEnvBytes bounds the caller's environment, well under the
// kernel's whole-exec limit (a quarter of the stack limit, 2 MiB by default), leaving room
// for what the provider adds.
const MaxEnvBytes = 1 << 20

// CheckExecSpec validates spec against what a provider declares in caps. Providers call it
// first thing in Sandbox.Exec, so a spec they cannot honour fails before anything runs; subject
// names the provider in capability errors (e.g. "local_subprocess").
//
// It returns, in this order:
//   - fault.Validation unless exactly one of Command and Code is set, when Code is set without
//     a Language (allowed with a Context: the context's language is used, python for a new
//     one) or Command with one, or when Timeout is negative;
//   - fault.Unsupported(subject, "shell") for a Command without caps.Shell, and
//     fault.Unsupported(subject, "language:<lang>") for a Language caps does not declare
//     (docs/semantics.md §3, §4);
//   - fault.Validation for a Context on a Command, fault.Unsupported(subject, "stateful") for a
//     Context without caps.Stateful;
//   - fault.Validation for an Env name that fails ValidEnvName, a NUL byte in the program
//     text or an Env value, one NAME=value of MaxArgBytes or more, or an environment over
//     MaxEnvBytes (the OS cannot pass them: execve fails with E2BIG; the program text itself
//     is not an argument — providers pass it on stdin or in a file);
//   - fault.Unsupported(subject, "interactive") for StdinOpen or a PTY without
//     caps.Interactive, fault.Unsupported(subject, "background") for Background without
//     caps.Background; fault.Validation when those lack an ID, for a PTY or Background on
//     code, and for a PTY size outside 1 to 1000;
//   - the fault.Policy error of CleanPath when Dir leaves the workspace.
func CheckExecSpec(subject string, caps Capabilities, spec ExecSpec) error {
	switch {
	case spec.Command != "" && spec.Code != "":
		return fault.New(fault.Validation, "give either a command or code to run, not both")
	case spec.Command == "" && spec.Code == "":
		return fault.New(fault.Validation, "give a command or code to run")
	case spec.Command != "" && spec.Language != "":
		return fault.New(fault.Validation, "a language applies to code only, not to a command")
	case spec.Code != "" && spec.Language == "" && spec.Context == "":
		return fault.New(fault.Validation, "code needs a language")
	case spec.Timeout < 0:
		return fault.New(fault.Validation, "timeout must not be negative")
	}
	if spec.Command != "" && !caps.Shell {
		return fault.Unsupported(subject, "shell")
	}
	if spec.Code != "" && spec.Language != "" && !caps.SupportsLanguage(spec.Language) {
		return fault.Unsupported(subject, "language:"+spec.Language)
	}
	if spec.Context != "" {
		if spec.Code == "" {
			return fault.New(fault.Validation, "a context applies to code only, not to a command")
		}
		if !caps.Stateful {
			return fault.Unsupported(subject, "stateful")
		}
	}
	if spec.StdinOpen || spec.PTY != nil {
		if !caps.Interactive {
			return fault.Unsupported(subject, "interactive")
		}
		if spec.ID == "" {
			return fault.New(fault.Validation, "an open stdin or a pty needs an execution id")
		}
	}
	if spec.PTY != nil {
		if spec.Command == "" {
			return fault.New(fault.Validation, "a pty runs a command, not code")
		}
		if spec.PTY.Rows < 1 || spec.PTY.Cols < 1 || spec.PTY.Rows > 1000 || spec.PTY.Cols > 1000 {
			return fault.New(fault.Validation, "a pty needs rows and cols from 1 to 1000")
		}
	}
	if spec.Background {
		if !caps.Background {
			return fault.Unsupported(subject, "background")
		}
		if spec.Command == "" || spec.ID == "" {
			return fault.New(fault.Validation, "a background process runs a command and needs an execution id")
		}
	}
	if strings.IndexByte(spec.Command, 0) >= 0 || strings.IndexByte(spec.Code, 0) >= 0 {
		return fault.New(fault.Validation, "the program text contains a NUL byte")
	}
	if err := CheckEnv(spec.Env); err != nil {
		return err
	}
	if _, err := CleanPath(spec.Dir); err != nil {
		return err
	}
	return nil
}

// CheckEnv refuses an environment a program could not be given: a name that is not letters,
// digits and underscores (not starting with a digit), a NUL byte in a value, a variable of
// MaxArgBytes or more, all of them over MaxEnvBytes. Errors: fault.Validation.
func CheckEnv(env map[string]string) error {
	envBytes := 0
	for name, value := range env {
		if !ValidEnvName(name) {
			return fault.New(fault.Validation, "invalid environment variable name %q: use letters, digits and underscores, not starting with a digit", name)
		}
		if strings.IndexByte(value, 0) >= 0 {
			return fault.New(fault.Validation, "environment variable %s contains a NUL byte", name)
		}
		if n := len(name) + 1 + len(value); n >= MaxArgBytes {
			return fault.New(fault.Validation, "environment variable %s is %d bytes, over the %d bytes the kernel passes as one variable; pass large values as a file or on stdin", name, n, MaxArgBytes-1)
		}
		envBytes += len(name) + len(value) + 2
	}
	if envBytes > MaxEnvBytes {
		return fault.New(fault.Validation, "the environment takes %d bytes, over the %d bytes allowed for a program's environment; pass large values as a file or on stdin", envBytes, MaxEnvBytes)
	}
	return nil
}
