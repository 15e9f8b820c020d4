//go:build linux

package procgroup

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// watch closes p.exited once the leader has exited, leaving it unreaped (waitid WNOWAIT) so
// its ids stay reserved until reap.
func (p *Process) watch() {
	defer close(p.exited)
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// reap collects the exited leader.
func (p *Process) reap() (*os.ProcessState, error) {
	err := p.cmd.Wait()
	return p.cmd.ProcessState, err
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

// sessionAlive reports whether session sid still has a process that is not a zombie; ok is
// false when /proc cannot be read.
func sessionAlive(sid int) (alive, ok bool) {
	members, ok := sessionMembers(sid)
	return len(members) > 0, ok
}

// member is a live process of a session.
type member struct{ pid, pgrp int }

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
	var buf [512]byte
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		stat, ok := readStat(name, buf[:])
		if !ok {
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

// readStat reads /proc/<pid>/stat into buf with plain system calls (os.ReadFile costs twice
// as many, and this runs for every process at the end of every execution). The fields used
// come well within 512 bytes: comm is at most 64.
func readStat(pid string, buf []byte) ([]byte, bool) {
	fd, err := syscall.Open("/proc/"+pid+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	n, err := syscall.Read(fd, buf)
	if err != nil || n <= 0 {
		return nil, false
	}
	return buf[:n], true
}
