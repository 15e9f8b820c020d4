//go:build linux

package sandboxd

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's starttime: 100 on every Linux ABI.
const clockTicks = 100

// enableSubreaper makes this process the child subreaper of its descendants.
func enableSubreaper() bool {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
}

// nowTicks is the time since boot in clock ticks, the clock of /proc/<pid>/stat's starttime.
func nowTicks() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return ts.Sec*clockTicks + ts.Nsec/(1e9/clockTicks)
}

// child is a child process of this one.
type child struct {
	pid, session int
	start        int64 // clock ticks since boot
	zombie       bool
}

// adoptedChildren lists this process's children that are not in known.
func adoptedChildren(known map[int]struct{}) []child {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var out []child
	seen := map[int]bool{}
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil || seen[pid] {
				continue
			}
			seen[pid] = true
			if _, ok := known[pid]; ok {
				continue
			}
			if c, ok := statChild(pid); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// statChild reads the state, session and start time of process pid.
func statChild(pid int) (child, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return child{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return child{}, false
	}
	// After the command: state(0) ppid(1) pgrp(2) session(3) … starttime(19).
	f := bytes.Fields(data[i+1:])
	if len(f) < 20 {
		return child{}, false
	}
	sid, _ := strconv.Atoi(string(f[3]))
	start, _ := strconv.ParseInt(string(f[19]), 10, 64)
	return child{pid: pid, session: sid, start: start, zombie: string(f[0]) == "Z"}, true
}

// killOrphan kills process pid and, when it leads its own session, the session's process
// group with it (what it started there goes too; what it moved elsewhere is adopted in turn
// and found by a later sweep).
func killOrphan(pid, session int) {
	if session == pid {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// reapChild collects child pid if it has exited (a killed one that has not yet is collected
// by a later sweep, as a zombie) and reports whether it is gone.
func reapChild(pid int) bool {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return got == pid || err == syscall.ECHILD
}
