//go:build unix

package sandboxd

import (
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/procgroup"
)

// orphans ends processes that escaped their execution's session (setsid, a double fork) when
// the runtime has no cgroup per execution to contain them (Options.Subreaper): the runtime's
// process is then the child subreaper of everything it starts, so an escaped process whose
// parent exits becomes the runtime's own child instead of init's. Such an adopted orphan is
// killed — its session too — as soon as every execution that was running when it started has
// ended: it belongs to one of them, and none of them may leave work behind (docs/semantics.md
// §9). An orphan that started while no (foreground) execution ran is killed at the next
// sweep: at the end of any execution, background ones included, and every sweepEvery.
// Processes the runtime started itself (execution leaders, context interpreters) are never
// touched here.
type orphans struct {
	on bool

	mu    sync.Mutex
	known map[int]struct{} // direct children the runtime started
	live  map[*int64]int64 // running executions → their start, in clock ticks since boot
	poke  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newOrphans(on bool) *orphans {
	o := &orphans{on: on && enableSubreaper(), known: map[int]struct{}{}, live: map[*int64]int64{}}
	if o.on {
		o.poke, o.stop, o.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go o.loop()
	}
	return o
}

// start starts cmd like procgroup.StartIn and registers its process as one of the runtime's,
// atomically with respect to sweeps (a sweep between the fork and the registration would take
// the new child for an orphan).
func (o *orphans) start(cmd *exec.Cmd, cg *procgroup.Cgroups) (*procgroup.Process, error) {
	if !o.on {
		return procgroup.StartIn(cmd, cg)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	p, err := procgroup.StartIn(cmd, cg)
	if err == nil {
		o.known[p.Pid()] = struct{}{}
	}
	return p, err
}

// forget unregisters a process of the runtime once it has been reaped.
func (o *orphans) forget(p *procgroup.Process) {
	if !o.on || p == nil {
		return
	}
	o.mu.Lock()
	delete(o.known, p.Pid())
	o.mu.Unlock()
}

// begin records a running execution; the returned end records its end and sweeps.
func (o *orphans) begin() (end func()) {
	if !o.on {
		return func() {}
	}
	key := new(int64)
	o.mu.Lock()
	o.live[key] = nowTicks()
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(o.live, key)
		o.mu.Unlock()
		o.ended()
	}
}

// ended sweeps after an execution ended — at once, so the execution's answer comes after its
// escaped processes are gone — and has the loop look again for ones handed over later.
func (o *orphans) ended() {
	if !o.on {
		return
	}
	o.sweep(false)
	select {
	case o.poke <- struct{}{}:
	default:
	}
}

// sweepEvery is how often the loop sweeps when nothing ended: an orphan handed over while no
// execution that may own it runs (a background process that daemonized) goes within it.
const sweepEvery = time.Second

// sweepDelays are when the loop sweeps after an execution ended: at once, then again for
// orphans adopted a little later (the killing of an execution's session makes the parents of
// its escaped processes exit, and the kernel hands those over as it goes).
var sweepDelays = []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, time.Second, 3 * time.Second}

func (o *orphans) loop() {
	defer close(o.done)
	// Adopted orphans that exit are reaped as they do, while executions run too: a zombie
	// still counts against the sandbox's pids limit.
	exits := make(chan os.Signal, 1)
	signal.Notify(exits, syscall.SIGCHLD)
	defer signal.Stop(exits)
	var timer *time.Timer
	var timerC <-chan time.Time
	every := time.NewTicker(sweepEvery)
	defer every.Stop()
	step := 0
	for {
		select {
		case <-o.stop:
			if timer != nil {
				timer.Stop()
			}
			o.sweep(true)
			return
		case <-exits:
			o.reapZombies()
			continue
		case <-every.C:
			o.sweep(false)
			continue
		case <-o.poke:
			step = 0
		case <-timerC:
			step++
		}
		o.sweep(false)
		if step+1 < len(sweepDelays) {
			if timer == nil {
				timer = time.NewTimer(sweepDelays[step+1] - sweepDelays[step])
			} else {
				timer.Reset(sweepDelays[step+1] - sweepDelays[step])
			}
			timerC = timer.C
		} else {
			timerC = nil
		}
	}
}

// close stops the loop after a last sweep that kills every adopted orphan.
func (o *orphans) close() {
	if !o.on {
		return
	}
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
}

// sweep kills and reaps the adopted orphans that no running execution may own (all of them
// when all is set), and returns once they are gone (at most reapWait): an execution's answer
// comes after its escaped processes ended, not while they are dying.
func (o *orphans) sweep(all bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var killed []int
	for _, c := range adoptedChildren(o.known) {
		if c.zombie {
			reapChild(c.pid)
			continue
		}
		if !all && o.ownedByLive(c.start) {
			continue
		}
		killOrphan(c.pid, c.session)
		if !reapChild(c.pid) {
			killed = append(killed, c.pid)
		}
	}
	deadline := time.Now().Add(reapWait)
	for len(killed) > 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		killed = slices.DeleteFunc(killed, reapChild)
	}
}

// reapWait bounds how long a sweep waits for the orphans it killed to exit (SIGKILL ends
// them at once, unless the machine is very busy or they wait on a device).
const reapWait = 2 * time.Second

// reapZombies reaps the adopted orphans that have exited.
func (o *orphans) reapZombies() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range adoptedChildren(o.known) {
		if c.zombie {
			reapChild(c.pid)
		}
	}
}

// ownedByLive reports whether an execution that was running at tick start is still running
// (the tick has 10 ms resolution: an execution that began in the same tick counts).
func (o *orphans) ownedByLive(start int64) bool {
	for _, began := range o.live {
		if began <= start+1 {
			return true
		}
	}
	return false
}
