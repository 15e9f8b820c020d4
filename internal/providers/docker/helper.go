package docker

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandgate/sandgate/internal/fault"
)

// helperSource is the in-container helper: the supervisor of executions (mode run) and the
// file operations that must see the container's own view of paths and symlinks.
//
//go:embed helper.py
var helperSource string

// helperTimeout bounds one helper call that has no deadline of its own.
const helperTimeout = 2 * time.Minute

// helperReplyMax bounds a helper's reply (a listing of a huge folder).
const helperReplyMax = 64 << 20

// helperCmd is the argument vector that runs the helper in mode with args.
func (s *Sandbox) helperCmd(mode string, args ...string) []string {
	return append([]string{s.interp.python, "-I", "-S", "-c", helperSource, mode}, args...)
}

// helper runs the helper in mode with args and returns its reply's NUL-terminated fields.
// The first field is a status word ("ok", "escape", …). Errors are the daemon's (classified)
// or a helper that did not reply.
func (s *Sandbox) helper(ctx context.Context, mode string, args ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = helperReplyMax, 64<<10
	execID, hr, err := s.startExec(ctx, s.helperCmd(mode, args...), nil, false)
	if err != nil {
		return nil, err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&stdout, &stderr, hr.Reader)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		hr.Close()
		<-copied
		return nil, ctx.Err()
	}
	hr.Close()
	if stdout.over {
		return nil, fault.New(fault.Conflict, "%s: the reply of the sandbox (%s) is larger than %d bytes", TypeName, mode, helperReplyMax)
	}
	out := stdout.Bytes()
	if err != nil || len(out) == 0 || out[len(out)-1] != 0 {
		code := -1
		if ins, ierr := s.p.cli.ContainerExecInspect(ctx, execID); ierr == nil {
			code = ins.ExitCode
		}
		return nil, fmt.Errorf("%s: the sandbox helper (%s) failed (exit %d): %s", TypeName, mode, code,
			strings.TrimSpace(firstLines(stderr.String(), 5)))
	}
	return strings.Split(string(out[:len(out)-1]), "\x00"), nil
}

// pathStatus turns a helper status word about workspace path p into an error; "ok" is nil.
func pathStatus(status, p string) error {
	switch status {
	case "ok":
		return nil
	case "escape":
		return fault.New(fault.Policy, "path '%s' escapes the sandbox workspace", p)
	case "notfound":
		return fault.New(fault.NotFound, "no file or folder '%s' in the sandbox workspace", p)
	case "isdir":
		return fault.New(fault.Conflict, "path '%s' is a folder", p)
	case "notdir":
		return fault.New(fault.Conflict, "path '%s' is not a folder", p)
	case "notregular":
		return fault.New(fault.Conflict, "path '%s' is not a regular file", p)
	case "parentfile":
		return fault.New(fault.Conflict, "a parent of path '%s' is not a folder", p)
	case "notempty":
		return fault.New(fault.Conflict, "folder '%s' is not empty", p)
	case "loop":
		return fault.New(fault.Conflict, "path '%s' has too many levels of symbolic links", p)
	case "perm":
		return fault.New(fault.Conflict, "path '%s' is not accessible (permission denied)", p)
	case "readonly":
		return fault.New(fault.Conflict, "path '%s' is on a read-only file system", p)
	case "nospace":
		return fault.New(fault.Conflict, "no space left in the sandbox for '%s'", p)
	case "toolong":
		return fault.New(fault.Validation, "path '%s' is too long", p)
	}
	return fmt.Errorf("%s: sandbox path '%s': %s", TypeName, p, status)
}

// limitedBuffer keeps at most max bytes and notes whether more came.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// execOptions builds the options of an exec of cmd with env.
func (s *Sandbox) execOptions(cmd, env []string, stdin bool) container.ExecOptions {
	return container.ExecOptions{
		User:         s.p.cfg.User,
		AttachStdin:  stdin,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   "/", // the helper is given the workspace; it may not exist yet
		Cmd:          cmd,
	}
}
