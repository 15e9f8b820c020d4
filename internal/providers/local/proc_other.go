//go:build unix && !linux

package local

import (
	"os/exec"
	"syscall"
)

// awaitExit returns a channel closed once cmd's process has exited, and the function that
// returns its Wait result. Without waitid WNOWAIT the process is reaped at once, so signalling
// its process group afterwards relies on the group id not being reused within moments.
func awaitExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	ch := make(chan struct{})
	var err error
	go func() {
		err = cmd.Wait()
		close(ch)
	}()
	return ch, func() error { <-ch; return err }
}

// signalSession sends sig to process group sid.
func signalSession(sid int, sig syscall.Signal) {
	_ = syscall.Kill(-sid, sig)
}

// sessionAlive reports whether the direct child is still running.
func sessionAlive(_ int, exited <-chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
		return true
	}
}
