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

// signalSession sends sig to process group sid.
func signalSession(sid int, sig syscall.Signal) {
	_ = syscall.Kill(-sid, sig)
}

// sessionAlive cannot tell without /proc.
func sessionAlive(int) (alive, ok bool) { return false, false }
