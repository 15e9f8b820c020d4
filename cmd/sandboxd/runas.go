package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// Capabilities (linux/capability.h) sandboxd needs to run programs as another user: start
// them so (SETUID, SETGID), signal them (KILL), and keep the workspace theirs while it still
// reads and writes everything in it (CHOWN, DAC_OVERRIDE, FOWNER).
const (
	capChown       = 0
	capDACOverride = 1
	capFowner      = 3
	capKill        = 5
	capSetgid      = 6
	capSetuid      = 7
)

var runAsCaps = []struct {
	bit  uint
	name string
}{
	{capChown, "CAP_CHOWN"}, {capDACOverride, "CAP_DAC_OVERRIDE"}, {capFowner, "CAP_FOWNER"},
	{capKill, "CAP_KILL"}, {capSetgid, "CAP_SETGID"}, {capSetuid, "CAP_SETUID"},
}

// programUser prepares --run-as spec for workspace ws: it resolves the user (lookUser), and
// when it is not sandboxd's own, checks that sandboxd holds the capabilities it needs to run
// programs as it and gives the workspace folder itself to it. It returns nil for an empty
// spec, and for sandboxd's own user (with a warning: programs can then signal sandboxd).
//
// Errors: a usageError for a user that cannot be resolved or capabilities sandboxd lacks (it
// refuses to start rather than run programs unprotected); the error of the workspace's chown.
func programUser(spec, ws string, log *slog.Logger) (*sandboxd.User, error) {
	if spec == "" {
		return nil, nil
	}
	u, err := lookUser(spec)
	if err != nil {
		return nil, usageError{"--run-as: " + err.Error()}
	}
	if int(u.UID) == os.Geteuid() {
		log.Warn("--run-as names sandboxd's own user: programs run as it and can signal, stop and trace sandboxd", "uid", u.UID)
		return nil, nil
	}
	if missing := missingCaps(); len(missing) > 0 {
		return nil, usageError{fmt.Sprintf("--run-as %s: sandboxd lacks %s to run programs as another user (run it as root with these capabilities, e.g. docker --cap-add)", spec, strings.Join(missing, ", "))}
	}
	st, err := os.Stat(ws)
	if err != nil {
		return nil, fmt.Errorf("the workspace: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && (sys.Uid != u.UID || sys.Gid != u.GID) {
		if err := os.Chown(ws, int(u.UID), int(u.GID)); err != nil {
			return nil, fmt.Errorf("giving the workspace to the programs' user: %w", err)
		}
	}
	log.Info("programs run as their own user", "uid", u.UID, "gid", u.GID, "groups", u.Groups)
	return u, nil
}

// lookUser resolves a user given as "uid", "uid:gid", "name" or "name:group" (names in the
// sandbox's /etc/passwd and /etc/group). Without a group it is the user's primary group from
// /etc/passwd, else the gid equal to the uid; a user found in /etc/passwd also gets the
// supplementary groups /etc/group lists it in.
func lookUser(spec string) (*sandboxd.User, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") {
		return nil, fmt.Errorf("%q is not a user: give uid, uid:gid, name or name:group", spec)
	}
	var entry *user.User
	uid, err := parseID(name)
	if err != nil {
		if entry, err = user.Lookup(name); err != nil {
			return nil, fmt.Errorf("no user %q in this sandbox: %w", name, err)
		}
		if uid, err = parseID(entry.Uid); err != nil {
			return nil, fmt.Errorf("user %q has a uid that is not a number", name)
		}
	} else if e, lerr := user.LookupId(name); lerr == nil {
		entry = e
	}
	gid := uid
	switch {
	case hasGroup:
		if gid, err = parseID(group); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return nil, fmt.Errorf("no group %q in this sandbox: %w", group, lerr)
			}
			if gid, err = parseID(g.Gid); err != nil {
				return nil, fmt.Errorf("group %q has a gid that is not a number", group)
			}
		}
	case entry != nil:
		if g, err := parseID(entry.Gid); err == nil {
			gid = g
		}
	}
	u := &sandboxd.User{UID: uid, GID: gid, Groups: []uint32{}}
	if entry != nil {
		if ids, err := entry.GroupIds(); err == nil {
			for _, id := range ids {
				if g, err := parseID(id); err == nil && g != gid {
					u.Groups = append(u.Groups, g)
				}
			}
		}
	}
	return u, nil
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, err
	}
	if n == 1<<32-1 {
		return 0, errors.New("(uint32)-1 is not an id")
	}
	return uint32(n), nil
}

// missingCaps names the capabilities of runAsCaps that sandboxd's effective set lacks (all
// of them when /proc/self/status cannot be read).
func missingCaps() []string {
	eff, ok := effectiveCaps()
	var missing []string
	for _, c := range runAsCaps {
		if !ok || eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing
}

// effectiveCaps reads this process's effective capability set (CapEff of /proc/self/status).
func effectiveCaps() (uint64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n, err == nil
		}
	}
	return 0, false
}
