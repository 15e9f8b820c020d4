//go:build unix && !linux

package procgroup

import (
	"os"
	"syscall"
)

// watch reaps the leader as soon as it exits (there is no WNOWAIT here) and closes p.exited.
func (p *Process) watch() {
	p.watchErr = p.cmd.Wait()
	close(p.exited)
}

// reap returns the result watch collected.
func (p *Process) reap() (*os.ProcessState, error) {
	return p.cmd.ProcessState, p.watchErr
}

// member is a process of a leader's tree (never listed here: there is no /proc).
type member struct {
	pid, pgrp int
	start     uint64
}

// signalTree sends sig to process group sid (unless skip is set: the others of the group
// cannot be told apart from the leader here); it finds no members.
func signalTree(sid int, sig syscall.Signal, skip int) ([]member, bool) {
	if skip == 0 {
		_ = syscall.Kill(-sid, sig)
	}
	return nil, false
}

// signalIfSame cannot tell a process from one that reused its pid here: it does nothing.
func signalIfSame(int, uint64, syscall.Signal) {}

// anyAlive cannot tell without /proc.
func anyAlive(map[int]uint64) bool { return false }

// sessionAlive cannot tell without /proc.
func sessionAlive(int) (alive, ok bool) { return false, false }
