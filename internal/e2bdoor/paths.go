package e2bdoor

import (
	"path"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
)

// Home is where the door shows the session's workspace: E2B's home folder (its default user's
// home and working folder, where relative paths start). Sandgate's file operations reach the
// workspace only (docs/semantics.md §8 "Files"), so a path of E2B's envd — absolute, relative
// to the home, or starting with ~ — is taken as a workspace path when it is in the home and
// refused (policy) when not. Programs see the workspace where their provider puts it
// (/workspace on docker and kubernetes), not at /home/user.
const Home = "/home/user"

// workspacePath maps an E2B path onto the workspace: "." for the home itself, a clean
// relative path for what is under it. Errors: fault.Policy for an absolute path outside the
// home, a path with a NUL byte; fault.Validation for a relative one that leaves it.
func workspacePath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fault.New(fault.Policy, "path %q contains a NUL byte", p)
	}
	switch {
	case p == "" || p == "~":
		return ".", nil
	case strings.HasPrefix(p, "~/"):
		p = p[2:]
	case path.IsAbs(p):
		c := path.Clean(p)
		if c == Home {
			return ".", nil
		}
		rel, ok := strings.CutPrefix(c, Home+"/")
		if !ok {
			return "", fault.New(fault.Policy, "path '%s' is outside %s: Sandgate's E2B door reaches the sandbox's workspace only, which it shows as %s (docs/e2b-door.md)", p, Home, Home)
		}
		return rel, nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fault.New(fault.Policy, "path '%s' leaves %s: Sandgate's E2B door reaches the sandbox's workspace only, which it shows as %s (docs/e2b-door.md)", p, Home, Home)
	}
	return c, nil
}

// e2bPath is workspace path rel ("." the workspace) as E2B's envd names it: absolute, under
// Home.
func e2bPath(rel string) string {
	if rel == "" || rel == "." {
		return Home
	}
	return path.Join(Home, rel)
}

// execDir is workspace path rel as an execution's working folder ("" for the workspace).
func execDir(rel string) string {
	if rel == "." {
		return ""
	}
	return rel
}
