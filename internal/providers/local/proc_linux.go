//go:build linux

package local

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// awaitExit returns a channel closed once cmd's process has exited, and the function that
// reaps it. The process is left unreaped (waitid WNOWAIT) until reap is called, so its pid,
// and with it the session and process-group ids, stay reserved while leftovers are killed.
func awaitExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	ch := make(chan struct{})
	pid := cmd.Process.Pid
	go func() {
		defer close(ch)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return
			}
		}
	}()
	return ch, func() error { <-ch; return cmd.Wait() }
}

// signalSession sends sig to process group sid and to every other process of session sid
// (found through /proc), so children that moved to another process group are reached too.
// Each process gets the signal once.
func signalSession(sid int, sig syscall.Signal) {
	_ = syscall.Kill(-sid, sig)
	members, _ := sessionMembers(sid)
	for _, m := range members {
		if m.pgrp != sid {
			_ = syscall.Kill(m.pid, sig)
		}
	}
}

// member is a live process of a session.
type member struct{ pid, pgrp int }

// sessionAlive reports whether session sid still has a process that is not a zombie. Without
// /proc it falls back to whether the direct child is still running.
func sessionAlive(sid int, exited <-chan struct{}) bool {
	if members, ok := sessionMembers(sid); ok {
		return len(members) > 0
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// sessionMembers lists the live (not zombie) processes of session sid; ok is false when
// /proc cannot be read.
func sessionMembers(sid int) (members []member, ok bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 4 {
			continue
		}
		if state := f[0]; len(state) == 1 && (state[0] == 'Z' || state[0] == 'X') {
			continue
		}
		if s, err := strconv.Atoi(string(f[3])); err == nil && s == sid {
			pgrp, _ := strconv.Atoi(string(f[2]))
			members = append(members, member{pid: pid, pgrp: pgrp})
		}
	}
	return members, true
}
