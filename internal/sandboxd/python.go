//go:build unix

package sandboxd

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/procgroup"
)

// driverSource is the python context driver; its header describes the protocol.
//
//go:embed driver.py
var driverSource string

// Limits of the python context protocol.
const (
	pythonStartTimeout = 30 * time.Second         // for the driver's "ready"
	maxReply           = DefaultMaxOutput + 1<<20 // bytes of one reply (a result, a long traceback)
	startupStderrMax   = 16 << 10                 // bytes of driver stderr kept for a start error
)

// pyProcess is one running python context driver.
type pyProcess struct {
	proc    *procgroup.Process
	forget  func(*procgroup.Process) // unregisters proc from the runtime's orphans once reaped
	conn    *net.UnixConn
	replies chan pyReply  // closed when the control socket ends
	dead    chan struct{} // closed once the driver has exited and was reaped
	state   *os.ProcessState
	// private is the driver's own folder (its "ready" says which), removed once it ended.
	private atomic.Pointer[string]

	mu     sync.Mutex
	reason string // why sandboxd killed it, for the execution's notice
}

// pyRequest asks the driver to run one cell (the code travels on its own pipe).
type pyRequest struct {
	Env        map[string]string `json:"env,omitempty"`
	Dir        string            `json:"dir,omitempty"`
	MaxResults int64             `json:"max_result_bytes"`
}

// pyReply is a driver message: "ready" once, then per cell any number of "result" and one
// "ok", "exit" or "error".
type pyReply struct {
	Status    string `json:"status"`
	Code      int    `json:"code"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
	Pid       int    `json:"pid"`
	Version   string `json:"version"`
	Private   string `json:"private"`
	// A "result":
	Data    map[string]json.RawMessage `json:"data"`
	Main    bool                       `json:"main"`
	Dropped *DroppedResult             `json:"dropped"`
}

// privateFolder is the form of the folder a driver makes for itself (tempfile.mkdtemp).
var privateFolder = regexp.MustCompile(`^sandboxd-python-[A-Za-z0-9_]+$`)

// startPython starts a driver for context name and waits for it to be ready.
// Errors: fault.Capability when python is not installed; fault.Provision when the driver does
// not start or does not get ready within pythonStartTimeout.
func (r *Runtime) startPython(name string) (*pyProcess, error) {
	interp, err := r.interpreter("python")
	if err != nil {
		return nil, err
	}
	// Close-on-exec under ForkLock, so no other program started meanwhile inherits it.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("sandboxd: python context '%s': socketpair: %w", name, err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "sandboxd-control"), os.NewFile(uintptr(fds[1]), "sandboxd-control")
	fc, err := net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		_ = theirs.Close()
		return nil, fmt.Errorf("sandboxd: python context '%s': %w", name, err)
	}
	conn := fc.(*net.UnixConn)
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = theirs.Close()
		_ = conn.Close()
		return nil, fmt.Errorf("sandboxd: python context '%s': %w", name, err)
	}
	cmd := &exec.Cmd{
		Path:        interp,
		Args:        []string{interp, "-u", "-c", driverSource},
		Dir:         r.workspace,
		Env:         mergeEnv(r.env, map[string]string{"PWD": r.workspace}),
		Stderr:      errW,
		ExtraFiles:  []*os.File{theirs},
		SysProcAttr: r.credential(nil),
	}
	proc, err := r.orphans.start(cmd, r.cgroups)
	_ = theirs.Close()
	_ = errW.Close()
	if err != nil {
		_ = errR.Close()
		_ = conn.Close()
		return nil, fault.Wrap(fault.Provision, err, "sandboxd: starting the python context '%s'", name)
	}
	// Until the driver is ready its stderr says why it is not (an old python, say); then it
	// becomes /dev/null and this copy ends.
	var stderr bytes.Buffer
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(&stderr, io.LimitReader(errR, startupStderrMax))
		_, _ = io.Copy(io.Discard, errR)
		_ = errR.Close()
	}()
	py := &pyProcess{proc: proc, forget: r.orphans.forget, conn: conn, replies: make(chan pyReply, 1), dead: make(chan struct{})}
	go py.watch()
	go py.readReplies()

	timer := time.NewTimer(pythonStartTimeout)
	defer timer.Stop()
	select {
	case rep, ok := <-py.replies:
		if ok && rep.Status == "ready" {
			r.log.Debug("sandboxd: python context started", "context", name, "pid", rep.Pid, "python", rep.Version)
			// Said before any code ran, so it is the driver's word; only a folder of its
			// form, by an absolute clean path, is ever removed.
			if p := rep.Private; filepath.IsAbs(p) && filepath.Clean(p) == p && privateFolder.MatchString(filepath.Base(p)) {
				py.private.Store(&p)
			}
			return py, nil
		}
	case <-py.dead:
	case <-timer.C:
	}
	py.kill("it did not start")
	<-py.dead
	<-stderrDone
	why := strings.TrimSpace(stderr.String())
	if why == "" {
		why = describeEnd(py.state, "")
	}
	return nil, fault.New(fault.Provision, "sandboxd: the python context '%s' did not start (%s): %s", name, interp, why)
}

// watch reaps the driver once it has exited (its session's leftovers are killed first), then
// closes the control socket.
func (py *pyProcess) watch() {
	py.state, _ = py.proc.Wait()
	if py.forget != nil {
		py.forget(py.proc)
	}
	if p := py.private.Load(); p != nil {
		_ = os.RemoveAll(*p) // a driver that was killed left it
	}
	close(py.dead)
	_ = py.conn.Close()
}

// readReplies reads the driver's messages until the control socket ends.
func (py *pyProcess) readReplies() {
	defer close(py.replies)
	var head [4]byte
	for {
		if _, err := io.ReadFull(py.conn, head[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(head[:])
		if n > maxReply {
			py.kill("it sent a reply over the size limit")
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(py.conn, body); err != nil {
			return
		}
		var rep pyReply
		if err := json.Unmarshal(body, &rep); err != nil {
			py.kill("it sent a malformed reply")
			return
		}
		select {
		case py.replies <- rep:
		case <-py.dead:
			return
		}
	}
}

// send hands the driver one cell: the request and the four descriptors of its stdin, stdout,
// stderr and code.
func (py *pyProcess) send(req pyRequest, files ...*os.File) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	head := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	// The descriptors ride on the header; the driver reads them with its first 4 bytes.
	if _, _, err := py.conn.WriteMsgUnix(head, syscall.UnixRights(fds...), nil); err != nil {
		return err
	}
	_, err = py.conn.Write(body)
	return err
}

// kill ends the driver and its whole session; reason is kept for the notice.
func (py *pyProcess) kill(reason string) {
	py.mu.Lock()
	if py.reason == "" {
		py.reason = reason
	}
	py.mu.Unlock()
	py.proc.SignalSession(syscall.SIGKILL)
}

func (py *pyProcess) killReason() string {
	py.mu.Lock()
	defer py.mu.Unlock()
	return py.reason
}

func (py *pyProcess) alive() bool {
	select {
	case <-py.dead:
		return false
	default:
		return true
	}
}

// describeEnd says how a driver ended, for notices: reason when sandboxd killed it.
func describeEnd(ps *os.ProcessState, reason string) string {
	if reason != "" {
		return reason
	}
	code, sig := procgroup.ExitStatus(ps)
	if sig != "" {
		return "killed by " + sig
	}
	return fmt.Sprintf("exit status %d", code)
}

// execPython runs req.Code in python context c (whose turn it is).
func (r *Runtime) execPython(ctx context.Context, c *codeContext, req ExecRequest, cwd string, out Streams) (Result, error) {
	c.mu.Lock()
	py := c.py
	c.mu.Unlock()
	if py == nil || !py.alive() {
		var err error
		if py, err = r.startPython(c.name); err != nil {
			return Result{}, err
		}
		if err := r.setPython(c, py); err != nil {
			return Result{}, err
		}
		c.mu.Lock()
		c.executions = 1 // this one, in the fresh interpreter
		c.mu.Unlock()
	}

	capt, stdout, stderr, err := newCapture(out, req.MaxOutput)
	if err != nil {
		return Result{}, fmt.Errorf("sandboxd: making output pipes: %w", err)
	}
	in := stdinOf(req)
	if h := req.hooks; h != nil {
		if h.stdin != nil {
			in = h.stdin
		}
		if h.onStart != nil {
			h.onStart(0, nil)
		}
	}
	if in == nil {
		in = strings.NewReader("")
	}
	stdin, stdinFeed, err := newFeeder(in, r.drainDelay)
	if err != nil {
		closeFiles([]*os.File{stdout, stderr})
		capt.drain(0)
		return Result{}, fmt.Errorf("sandboxd: making the stdin pipe: %w", err)
	}
	code, codeFeed, err := newFeeder(strings.NewReader(req.Code), r.drainDelay)
	if err != nil {
		closeFiles([]*os.File{stdout, stderr, stdin})
		stdinFeed.stop()
		capt.drain(0)
		return Result{}, fmt.Errorf("sandboxd: making the code pipe: %w", err)
	}
	var deadline <-chan time.Time
	if req.Timeout > 0 {
		timer := time.NewTimer(req.Timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	oomBefore := oomKills()
	results := newRichResults(req, out)
	r.givePrograms([]*os.File{stdin, stdout, stderr, code})
	sendErr := py.send(pyRequest{Env: req.Env, Dir: cwd, MaxResults: results.limit}, stdin, stdout, stderr, code)
	closeFiles([]*os.File{stdin, stdout, stderr, code})

	ectx, cancel := r.execContext(ctx)
	defer cancel(nil)
	var (
		rep      pyReply
		replied  bool
		timedOut bool
		ctxErr   error
	)
	// answer reports whether a message is the cell's answer; a result is taken on the way.
	answer := func(m pyReply, ok bool) bool {
		if ok && m.Status == "result" {
			results.add(m.Data, m.Main, m.Dropped)
			return false
		}
		rep, replied = m, ok
		return true
	}
	if sendErr == nil {
	wait:
		for {
			select {
			case m, ok := <-py.replies:
				if answer(m, ok) {
					break wait
				}
			case <-py.dead:
				break wait
			case <-deadline:
				timedOut = true
				break wait
			case <-ectx.Done():
				ctxErr = r.cancelled(ctx, ectx)
				break wait
			}
		}
	} else {
		r.log.Debug("sandboxd: python context did not take the cell", "context", c.name, "error", sendErr)
		py.kill("it did not take the code")
	}
	if timedOut || ctxErr != nil {
		// Like Ctrl-C in a terminal: SIGINT to the session, the driver included. A cell that
		// stops on KeyboardInterrupt keeps the context; one that does not stop in time is
		// killed with the whole session.
		py.proc.SignalSession(syscall.SIGINT)
		grace := time.NewTimer(r.killGrace)
	interrupted:
		for {
			select {
			case m, ok := <-py.replies:
				if answer(m, ok) {
					break interrupted
				}
			case <-py.dead:
				break interrupted
			case <-grace.C:
				what := "timeout"
				if ctxErr != nil {
					what = "cancellation"
				}
				py.kill(fmt.Sprintf("killed: it did not stop within %s of the interrupt after the %s", r.killGrace, what))
				break interrupted
			}
		}
		grace.Stop()
	}
	if !replied {
		// The control socket ended or the driver is being killed: wait until it is gone,
		// taking what it sent before (it may have answered just before dying).
		<-py.dead
	drain:
		for {
			select {
			case m, ok := <-py.replies:
				if !ok || answer(m, ok) {
					break drain
				}
			default:
				break drain
			}
		}
	}
	// What the cell started ends with it (a child, a daemon in a session of its own, one a
	// shell left behind): the interpreter alone runs on. Escapees handed to the runtime as
	// their subreaper go when the execution ends (orphans).
	py.proc.KillOthers()
	capt.drain(r.drainDelay)
	stdinFeed.stop()
	codeFeed.stop()

	res := Result{TimedOut: timedOut, Truncated: capt.truncated.Load(), OOMKilled: oomKills() > oomBefore, Results: results.list}
	switch {
	case !replied:
		res.ExitCode, res.Signal = procgroup.ExitStatus(py.state)
		res.ContextLost = true
		why := describeEnd(py.state, py.killReason())
		if res.OOMKilled && py.killReason() == "" {
			why = "killed by the out-of-memory killer"
		}
		c.mu.Lock()
		if c.py == py {
			c.py = nil
		}
		c.mu.Unlock()
		if out.Stderr != nil {
			_, _ = fmt.Fprintf(out.Stderr, "sandboxd: the python context '%s' ended (%s); its state is lost and the next execution starts a fresh one\n", c.name, why)
		}
	case rep.Status == "ok":
	case rep.Status == "exit":
		res.ExitCode = rep.Code
	case rep.Status == "error":
		res.ExitCode = 1
		res.Error = &ExecError{Name: rep.Name, Value: rep.Value, Traceback: rep.Traceback}
	default:
		res.ExitCode = 1
		r.log.Warn("sandboxd: unexpected reply from a python context", "context", c.name, "status", rep.Status)
	}
	if ctxErr != nil {
		return res, ctxErr
	}
	if res.ContextLost && r.life.Err() != nil {
		return res, fault.New(fault.Gone, "%s: the execution was killed", errShutdown)
	}
	return res, nil
}
