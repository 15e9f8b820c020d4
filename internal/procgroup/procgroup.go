//go:build unix

package procgroup

import (
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollInterval is how often Terminate checks whether the session has ended.
const pollInterval = 20 * time.Millisecond

// Process is a started program that leads its own session. Its methods are safe for
// concurrent use.
type Process struct {
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed once the leader has exited (reaped already off Linux)

	cgroup string // the process's own cgroup (StartIn with Cgroups), "" without

	mu     sync.Mutex // held while signalling the session, and to set reaped
	reaped bool

	waitOnce sync.Once
	state    *os.ProcessState
	waitErr  error
	//lint:ignore U1000 used off Linux (session_other.go), where cmd.Wait is the watch
	watchErr error // off Linux: cmd.Wait's result, set before exited is closed
}

// Start starts cmd as the leader of a new session and process group: it sets Setsid in
// cmd.SysProcAttr (keeping its other fields) and calls cmd.Start. The caller must call Wait
// eventually, and must not call cmd.Wait itself.
//
// Standard streams that are not *os.File make exec.Cmd copy them in goroutines, which Wait
// then waits for; give *os.File streams (pipes) to decide yourself when copying ends.
//
// Errors: cmd.Start's.
func Start(cmd *exec.Cmd) (*Process, error) { return StartIn(cmd, nil) }

// StartIn is Start, with the process created in a cgroup of its own under cg when cg is not
// nil: then every process it starts, wherever it moves in sessions and process groups, is
// signalled with the session and killed by Wait, and the cgroup is removed after.
//
// Errors: cmd.Start's; the cgroup's when it cannot be made.
func StartIn(cmd *exec.Cmd, cg *Cgroups) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setpgid = false // setsid already makes a new group; setpgid after it fails
	var dir string
	if cg != nil {
		d, fd, err := cg.prepare(cmd.SysProcAttr)
		if err != nil {
			return nil, err
		}
		dir = d
		defer syscall.Close(fd) // the child has it once started
	}
	if err := cmd.Start(); err != nil {
		if dir != "" {
			cgroupRemove(dir)
		}
		return nil, err
	}
	p := &Process{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{}), cgroup: dir}
	go p.watch()
	return p, nil
}

// Cgroup returns the folder of the process's own cgroup, "" when it has none (Start, or
// StartIn without Cgroups). Wait removes it.
func (p *Process) Cgroup() string { return p.cgroup }

// Pid returns the leader's process id, which is also the session and process-group id.
func (p *Process) Pid() int { return p.pid }

// Exited returns a channel closed once the leader has exited. On Linux it is not reaped yet:
// its ids stay reserved until Wait.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Signal sends sig to the leader only. After the leader was reaped it returns
// os.ErrProcessDone.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return os.ErrProcessDone
	}
	return p.cmd.Process.Signal(sig)
}

// SignalSession sends sig to every process of the leader's session that can be found, and
// to its descendants that left the session while their parents live (see the package doc).
// It does nothing once the leader was reaped.
func (p *Process) SignalSession(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		p.signalAll(sig)
	}
}

// signalAll sends sig to every process of the cgroup when there is one — it holds the whole
// session, which was born in it, and whatever left the session — else to the tree of the
// leader (its session, and its descendants that left it, found through /proc). Each process
// gets the signal once. It returns the tree members it signalled (nil with a cgroup).
func (p *Process) signalAll(sig syscall.Signal) []member {
	if p.cgroup != "" {
		cgroupSignal(p.cgroup, sig)
		return nil
	}
	members, _ := signalTree(p.pid, sig, 0)
	return members
}

// Terminate sends SIGTERM to the session, waits up to grace for every process of it to end,
// then sends SIGKILL to what is left, and returns once the leader has exited. It does not reap
// the leader: call Wait.
//
// Without a cgroup, the processes signalled are the leader's tree (see SignalSession), and
// those found with the SIGTERM are remembered: one that left the session (setsid) and whose
// parent then ended on SIGTERM is no longer found through its parents, and still gets the
// SIGKILL.
func (p *Process) Terminate(grace time.Duration) {
	seen := p.signalRemembering(syscall.SIGTERM, nil)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
wait:
	for p.sessionAlive() || anyAlive(seen) {
		select {
		case <-timer.C:
			break wait
		case <-tick.C:
		}
	}
	p.signalRemembering(syscall.SIGKILL, seen)
	<-p.exited
}

// signalRemembering is SignalSession that also signals the processes of seen still alive
// (the same processes: same pid and start time) and returns seen with the members found now.
func (p *Process) signalRemembering(sig syscall.Signal, seen map[int]uint64) map[int]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return seen
	}
	found := p.signalAll(sig)
	if seen == nil {
		seen = map[int]uint64{}
	}
	now := make(map[int]bool, len(found))
	for _, m := range found {
		now[m.pid] = true
		seen[m.pid] = m.start
	}
	for pid, start := range seen {
		if !now[pid] && pid != p.pid {
			signalIfSame(pid, start, sig)
		}
	}
	return seen
}

// KillOthers kills every process of the leader's cgroup, or without one of its tree (its
// session and its descendants, see SignalSession), except the leader itself, and returns
// once none is left or after a bounded number of rounds (a process forking as it is killed
// leaves children for the next round). The leader goes on running: a supervisor ends what a
// long-lived program (an interpreter) started on someone's behalf. It does nothing once the
// leader has exited.
func (p *Process) KillOthers() {
	const rounds = 50
	for i := range rounds {
		p.mu.Lock()
		if p.reaped {
			p.mu.Unlock()
			return
		}
		select {
		case <-p.exited:
			p.mu.Unlock()
			return
		default:
		}
		var left bool
		if p.cgroup != "" {
			left = cgroupSignalExcept(p.cgroup, syscall.SIGKILL, p.pid)
		} else {
			members, _ := signalTree(p.pid, syscall.SIGKILL, p.pid)
			left = len(members) > 0
		}
		p.mu.Unlock()
		if !left {
			return
		}
		// SIGKILL is delivered at once, but a process takes a moment to exit.
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
}

// Kill sends SIGKILL to the session and returns once the leader has exited. It does not reap
// the leader: call Wait.
func (p *Process) Kill() {
	p.SignalSession(syscall.SIGKILL)
	<-p.exited
}

// Wait waits for the leader to exit, SIGKILLs whatever it left running in its session, reaps
// it and returns cmd.Wait's result (its state is also in cmd.ProcessState). It may be called
// more than once and from several goroutines; all get the same result.
func (p *Process) Wait() (*os.ProcessState, error) {
	p.waitOnce.Do(func() {
		<-p.exited
		p.mu.Lock()
		if !p.reaped {
			p.signalAll(syscall.SIGKILL)
			p.reaped = true
		}
		p.mu.Unlock()
		p.state, p.waitErr = p.reap()
		if p.cgroup != "" {
			cgroupRemove(p.cgroup)
		}
	})
	return p.state, p.waitErr
}

// sessionAlive reports whether the session still has a live process; without /proc, whether
// the leader is still running.
func (p *Process) sessionAlive() bool {
	if p.cgroup != "" {
		if populated, ok := cgroupPopulated(p.cgroup); ok {
			return populated
		}
	}
	if alive, ok := sessionAlive(p.pid); ok {
		return alive
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// ExitStatus returns how a reaped process ended: its exit code, or 128+n and the signal's name
// ("SIGKILL") when signal n killed it. A nil state gives -1 and "".
func ExitStatus(ps *os.ProcessState) (code int, signal string) {
	if ps == nil {
		return -1, ""
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return ps.ExitCode(), ""
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), SignalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}

// SignalName returns the conventional name of sig ("SIGKILL"), or "SIG<n>" for a signal
// without one.
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(int(sig))
}
