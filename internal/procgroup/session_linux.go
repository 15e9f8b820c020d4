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

// signalTree sends sig to process group sid and to every other live process of the tree of
// leader sid (see treeMembers), except skip (0: none) and the members of the group when the
// group was signalled as a whole; it returns the members it found (skip excluded), for a
// later round. Each process gets the signal once, except SIGKILL: the tree is read before
// any signal is sent (a parent that ends on it hands its children to init at once, out of the
// tree), so a member may leave the group (setpgid) between the reading and the group's
// signal — SIGKILL, which nothing can catch and a second copy cannot change, also goes to
// every member one by one, so such a member is not left running.
func signalTree(sid int, sig syscall.Signal, skip int) ([]member, bool) {
	members, ok := treeMembers(sid)
	if skip == 0 {
		_ = syscall.Kill(-sid, sig)
	}
	out := members[:0]
	for _, m := range members {
		if m.pid == skip {
			continue
		}
		out = append(out, m)
		if skip != 0 || m.pgrp != sid || sig == syscall.SIGKILL {
			_ = syscall.Kill(m.pid, sig)
		}
	}
	return out, ok
}

// sessionAlive reports whether the tree of leader sid still has a process that is not a
// zombie; ok is false when /proc cannot be read.
func sessionAlive(sid int) (alive, ok bool) {
	members, ok := treeMembers(sid)
	return len(members) > 0, ok
}

// member is a live process of a leader's tree: its pid, process group and start time (clock
// ticks since boot, which tells a process from a later one that reused its pid).
type member struct {
	pid, pgrp int
	start     uint64
}

// procStat is what scanProcs reads of one live (not zombie) process.
type procStat struct {
	pid, ppid, pgrp, session int
	start                    uint64
}

// treeMembers lists the live (not zombie) processes of the tree of leader sid: every process
// of session sid, and every descendant of the leader (found through the parent ids), also one
// that moved to a session of its own (setsid) — as long as its chain of parents up to the
// leader is unbroken. The leader itself is listed while it lives. ok is false when /proc
// cannot be read.
func treeMembers(sid int) (members []member, ok bool) {
	procs, ok := scanProcs()
	if !ok {
		return nil, false
	}
	children := map[int][]int{}
	for i, p := range procs {
		children[p.ppid] = append(children[p.ppid], i)
	}
	in := make([]bool, len(procs))
	var queue []int
	for i, p := range procs {
		if p.session == sid || p.pid == sid {
			in[i] = true
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, c := range children[procs[i].pid] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	for i, p := range procs {
		if in[i] {
			members = append(members, member{pid: p.pid, pgrp: p.pgrp, start: p.start})
		}
	}
	return members, true
}

// scanProcs reads the ids of every live (not zombie) process in /proc; ok is false when /proc
// cannot be read.
func scanProcs() (procs []procStat, ok bool) {
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
		if p, ok := statOf(name, buf[:]); ok {
			p.pid = pid
			procs = append(procs, p)
		}
	}
	return procs, true
}

// statOf reads process pid's parent, group, session and start time; false for a zombie or a
// process that is gone.
func statOf(pid string, buf []byte) (procStat, bool) {
	stat, ok := readStat(pid, buf)
	if !ok {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
	// stime cutime cstime priority nice threads itrealvalue starttime ...": comm may hold
	// spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 20 {
		return procStat{}, false
	}
	if state := f[0]; len(state) == 1 && (state[0] == 'Z' || state[0] == 'X') {
		return procStat{}, false
	}
	var p procStat
	p.ppid, _ = strconv.Atoi(string(f[1]))
	p.pgrp, _ = strconv.Atoi(string(f[2]))
	p.session, _ = strconv.Atoi(string(f[3]))
	p.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	return p, true
}

// startOf returns the start time of live process pid (0 and false for a zombie or a process
// that is gone).
func startOf(pid int) (uint64, bool) {
	var buf [512]byte
	p, ok := statOf(strconv.Itoa(pid), buf[:])
	return p.start, ok
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

// signalIfSame sends sig to process pid if it still is the process that started at start.
func signalIfSame(pid int, start uint64, sig syscall.Signal) {
	if s, ok := startOf(pid); ok && s == start {
		_ = syscall.Kill(pid, sig)
	}
}

// anyAlive reports whether a process of seen (pid → start time) still lives.
func anyAlive(seen map[int]uint64) bool {
	for pid, start := range seen {
		if s, ok := startOf(pid); ok && s == start {
			return true
		}
	}
	return false
}
