package ec2ssm

import (
	"encoding/base64"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate/internal/providers"
)

// heredocDelimiter is the here-document delimiter python code is fed through.
const heredocDelimiter = "SANDGATE_EOF"

// quote returns s as one single-quoted POSIX shell word: nothing inside is interpreted, and
// each ' becomes '\” (close, escaped quote, reopen).
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// delimiterFor returns a here-document delimiter that no line of text equals: base, else
// base_1, base_2, … (seed: AK_SANDBOX_EOF and its suffixes).
func delimiterFor(text, base string) string {
	lines := make(map[string]struct{})
	for _, l := range strings.Split(text, "\n") {
		lines[l] = struct{}{}
	}
	d := base
	for i := 1; ; i++ {
		if _, taken := lines[d]; !taken {
			return d
		}
		d = base + "_" + strconv.Itoa(i)
	}
}

// heredoc returns a quoted here-document redirection on file descriptor fd ("" for standard
// input) carrying text exactly (a final newline is added when text lacks one).
func heredoc(fd, text string) string {
	d := delimiterFor(text, heredocDelimiter)
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return fd + "<<'" + d + "'\n" + text + d
}

// program returns the shell program one execution runs on the instance, before any run_as
// wrapping: the environment, standard input, then the command or the interpreter with the
// code. stdin nil means empty standard input.
func program(spec providers.ExecSpec, python string, stdin []byte) string {
	var b strings.Builder
	env := maps.Clone(spec.Env)
	if spec.Code != "" {
		if env == nil {
			env = map[string]string{}
		}
		if _, set := env["PYTHONUNBUFFERED"]; !set {
			env["PYTHONUNBUFFERED"] = "1" // output printed before a timeout is not lost in a buffer
		}
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		b.WriteString("export " + name + "=" + quote(env[name]) + "\n")
	}
	if stdin == nil {
		b.WriteString("exec </dev/null\n")
	} else {
		// An unlinked temporary file (mode 0600) holds the input: exact bytes, any size the
		// command can carry, and nothing left behind on the instance.
		b.WriteString("sandgate_in=$(mktemp) || { echo 'sandgate: cannot create a temporary file for standard input' >&2; exit 125; }\n")
		b.WriteString("printf '%s' " + quote(base64.StdEncoding.EncodeToString(stdin)) + ` | base64 -d >"$sandgate_in" || { rm -f "$sandgate_in"; echo 'sandgate: cannot decode standard input (is base64 installed?)' >&2; exit 125; }` + "\n")
		b.WriteString(`exec <"$sandgate_in"; rm -f "$sandgate_in"; unset sandgate_in` + "\n")
	}
	switch {
	case spec.Command != "":
		b.WriteString(spec.Command)
	case stdin == nil:
		b.WriteString(quote(python) + " - " + heredoc("", spec.Code))
	default:
		// Standard input is the caller's: the code comes on file descriptor 3.
		b.WriteString(quote(python) + " /dev/fd/3 " + heredoc("3", spec.Code))
	}
	return b.String()
}

// asUser wraps program so that it runs as user: sudo -n -u <user> sh -c '<program>'. user must
// have passed validUser.
func asUser(user, program string) string {
	return "sudo -n -u " + user + " sh -c " + quote(program)
}
