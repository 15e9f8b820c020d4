package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// helperSource is the in-pod supervisor; see the package doc and helper.py.
//
//go:embed helper.py
var helperSource []byte

// boot is the program text of every exec: it reads the helper from standard input (8 hex
// digits of length, then the source) and runs it, so neither the URL nor the audit log carries
// the helper.
const boot = `import os
def r(n):
 b=b''
 while len(b)<n:
  c=os.read(0,n-len(b))
  if not c: raise SystemExit(3)
  b+=c
 return b
exec(compile(r(int(r(8),16)),'sandgate-helper','exec'))`

// argvMax is the longest program text passed as an argument; longer text reaches the program
// on file descriptor 3 (Linux limits one argument to 128 KiB).
const argvMax = 64 << 10

// pythonFromFD3 runs the code read from file descriptor 3 the way `python -c` would.
const pythonFromFD3 = `exec(compile(open(3, encoding="utf-8", errors="surrogateescape").read(), "<string>", "exec"))`

// Frame types (see helper.py).
const (
	frameHeader     = 'h'
	frameStdin      = 'i'
	frameStdinEnd   = 'I'
	frameData       = 'd'
	frameDataEnd    = 'D'
	frameAbort      = 'A'
	frameStdout     = 'o'
	frameStderr     = 'e'
	frameExit       = 'x'
	frameResult     = 'r'
	frameError      = 'E'
	maxFramePayload = 64 << 20
)

// chunkSize is the payload of the data frames the gateway sends.
const chunkSize = 64 << 10

// header is the helper's first frame.
type header struct {
	Op       string            `json:"op"`
	WS       string            `json:"ws"`
	Argv     []string          `json:"argv,omitempty"`
	Script   *string           `json:"script,omitempty"`
	Dir      string            `json:"dir,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Stdin    bool              `json:"stdin,omitempty"`
	Backstop float64           `json:"backstop,omitempty"`
	Grace    float64           `json:"grace,omitempty"`
	Drain    float64           `json:"drain,omitempty"`
	Token    string            `json:"token,omitempty"`
	Path     string            `json:"path,omitempty"`
	Max      *int64            `json:"max,omitempty"`
}

// helperError is an E frame.
type helperError struct {
	Kind string `json:"kind"`
	Msg  string `json:"msg"`
}

func (e *helperError) fault() error {
	kinds := map[string]fault.Kind{
		"policy":     fault.Policy,
		"not-found":  fault.NotFound,
		"conflict":   fault.Conflict,
		"validation": fault.Validation,
		"too-large":  fault.TooLarge,
	}
	if k, ok := kinds[e.Kind]; ok {
		return fault.New(k, "%s", e.Msg)
	}
	return fmt.Errorf("%s: in the pod: %s", TypeName, e.Msg)
}

// exitRecord is an x frame.
type exitRecord struct {
	Code     int    `json:"code"`
	Signal   string `json:"signal"`
	TimedOut bool   `json:"timed_out"`
}

// frameWriter writes frames to the helper's standard input.
type frameWriter struct{ w io.Writer }

func (f frameWriter) frame(kind byte, payload []byte) error {
	var head [5]byte
	head[0] = kind
	binary.BigEndian.PutUint32(head[1:], uint32(len(payload)))
	if _, err := f.w.Write(head[:]); err != nil {
		return err
	}
	if len(payload) == 0 {
		return nil
	}
	_, err := f.w.Write(payload)
	return err
}

// readFrame reads one frame of the helper's standard output.
func readFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > maxFramePayload {
		return 0, nil, fmt.Errorf("%s: malformed output from the in-pod helper (frame of %d bytes)", TypeName, n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	return head[0], payload, nil
}

// call is one helper run through pods/exec.
type call struct {
	h header
	// feed writes the frames that follow the header; nil writes none. Standard input is
	// closed when it returns; its error only ends the feeding.
	feed func(fw frameWriter) error
	// onFrame receives every frame of the helper's output, in order, on one goroutine; its
	// error aborts the call.
	onFrame func(kind byte, payload []byte) error
}

// callResult is how a call ended.
type callResult struct {
	streamErr error  // the exec stream's error, if any
	frameErr  error  // onFrame's or the frame parser's error
	stderr    string // the helper's own standard error (its crash)
}

// stream runs c in the sandbox's pod with token as the helper's token, until the exec ends or
// ctx ends (which abandons the stream, leaving whatever runs in the pod to the caller).
func (s *Sandbox) stream(ctx context.Context, token string, c call) callResult {
	argv := []string{"python3", "-I", "-S", "-c", boot, "sandgate-helper", token}
	ex, err := s.p.executor(s.c, s.ns, s.pod, s.container, argv)
	if err != nil {
		return callResult{streamErr: err}
	}
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &capped{max: 16 << 10}

	var res callResult
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		fw := frameWriter{stdinW}
		// A failed write means the exec has ended; the call's outcome says why.
		prefix := fmt.Appendf(nil, "%08x", len(helperSource))
		if _, err := stdinW.Write(append(prefix, helperSource...)); err == nil {
			h, _ := json.Marshal(c.h)
			if err := fw.frame(frameHeader, h); err == nil && c.feed != nil {
				_ = c.feed(fw)
			}
		}
		_ = stdinW.Close()
	}()

	parsed := make(chan struct{})
	go func() {
		defer close(parsed)
		for {
			kind, payload, err := readFrame(outR)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
					res.frameErr = err
				}
				break
			}
			if c.onFrame != nil {
				if err := c.onFrame(kind, payload); err != nil {
					res.frameErr = err
					break
				}
			}
		}
		// Keep reading so the exec never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, outR)
	}()

	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: outW, Stderr: stderr})
	_ = outW.Close()
	<-parsed
	_ = stdinR.CloseWithError(io.ErrClosedPipe) // unblocks the feeder's writes
	select {
	case <-fed:
	case <-time.After(time.Second):
		// feed blocks reading a caller's reader; it ends when that read returns.
	}
	res.streamErr = err
	res.stderr = stderr.String()
	return res
}

// executor returns the remotecommand executor of one exec of argv in the sandbox's container:
// WebSocket, falling back to SPDY when the upgrade fails (as kubectl does).
func (p *Provider) executor(c *clients, ns, pod, container string, argv []string) (remotecommand.Executor, error) {
	req := c.core.CoreV1().RESTClient().Post().
		Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: argv, Stdin: true, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	u := req.URL()
	spdyExec, err := remotecommand.NewSPDYExecutor(c.cfg, "POST", u)
	if err != nil {
		return nil, err
	}
	if p.spdyOnly {
		return spdyExec, nil
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(c.cfg, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(wsExec, spdyExec, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// streamFailure classifies a call that ended without its final frame.
func (s *Sandbox) streamFailure(res callResult, what string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if gone := s.p.podGone(ctx, s.c, s.ns, s.pod); gone != nil {
		return gone
	}
	err := res.streamErr
	if err == nil {
		err = res.frameErr
	}
	if err == nil {
		err = errors.New("the in-pod helper ended without a result")
	}
	var exitErr utilexec.CodeExitError
	if errors.As(err, &exitErr) {
		detail := strings.TrimSpace(res.stderr)
		if exitErr.Code == 126 || exitErr.Code == 127 {
			return fault.New(fault.Provision, "%s: cannot %s in pod %s/%s: the image needs python3 on PATH (%s)", TypeName, what, s.ns, s.pod, detail)
		}
		return fmt.Errorf("%s: cannot %s in pod %s/%s: the in-pod helper failed (exit code %d): %s", TypeName, what, s.ns, s.pod, exitErr.Code, detail)
	}
	if apierrors.IsForbidden(err) || strings.Contains(strings.ToLower(err.Error()), "forbidden") {
		return fault.Wrap(fault.Forbidden, err, "%s: %s may not %s in pod %s/%s (pods/exec needs both the create and the get verbs)", TypeName, s.c.who, what, s.ns, s.pod)
	}
	return fault.Wrap(fault.Provision, err, "%s: cannot %s in pod %s/%s", TypeName, what, s.ns, s.pod)
}

// podGone returns a fault.Gone error when pod ns/name no longer exists, is being deleted or
// has ended, and nil otherwise (also when that cannot be told).
func (p *Provider) podGone(ctx context.Context, c *clients, ns, name string) error {
	pod, err := c.core.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fault.New(fault.Gone, "%s: pod %s/%s no longer exists", TypeName, ns, name)
	}
	if err != nil {
		return nil
	}
	return goneErr(pod)
}

// Exec runs spec to completion in the pod (see the package doc for how) and returns how it
// ended; a non-zero exit is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.Policy or
// fault.NotFound for a working folder that escapes or is missing, fault.Validation when it is
// not a folder; fault.Gone when the pod is gone or Destroy ran meanwhile; fault.Conflict on a
// closed handle; fault.Forbidden when the identity may not use pods/exec; ctx.Err() (with the
// status of the killed program) when ctx ends first.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	if err := ctx.Err(); err != nil {
		return providers.ExitStatus{}, err
	}
	dir, _ := providers.CleanPath(spec.Dir) // checked by CheckExecSpec
	argv, script := argvFor(spec)
	return s.run(ctx, runSpec{argv: argv, script: script, dir: dir, env: spec.Env, stdin: spec.Stdin, out: spec.Output, timeout: spec.Timeout})
}

// InstallPackages runs `python3 -m pip install --user --no-input -- <packages>` in the pod
// (the root file system is read-only; packages go under HOME, the workspace), with no time
// limit but ctx. A failed installation is a status, never an error. Package names must not be
// empty or start with "-" (fault.Validation), so none can pass pip an option.
func (s *Sandbox) InstallPackages(ctx context.Context, packages []string, out providers.Output) (providers.ExitStatus, error) {
	if len(packages) == 0 {
		return providers.ExitStatus{}, fault.New(fault.Validation, "give at least one package to install")
	}
	for _, pkg := range packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") || strings.ContainsAny(pkg, "\x00\n\r") {
			return providers.ExitStatus{}, fault.New(fault.Validation, "invalid package name %q", pkg)
		}
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	argv := append([]string{"@python", "-m", "pip", "install", "--user", "--no-input", "--disable-pip-version-check", "--"}, packages...)
	env := map[string]string{
		"PIP_BREAK_SYSTEM_PACKAGES": "1", // the sandbox is disposable: no "externally managed" refusal
		"PIP_NO_CACHE_DIR":          "1",
	}
	return s.run(ctx, runSpec{argv: argv, dir: ".", env: env, out: out})
}

// argvFor returns the program's argument vector ("@python" stands for the pod's interpreter)
// and, when the text is too long for argv, the text to feed on file descriptor 3.
func argvFor(spec providers.ExecSpec) (argv []string, script *string) {
	interp, text := "/bin/sh", spec.Command
	if spec.Command == "" {
		interp, text = "@python", spec.Code
	}
	if len(text) <= argvMax {
		return []string{interp, "-c", text}, nil
	}
	if interp == "@python" {
		return []string{interp, "-c", pythonFromFD3}, &text
	}
	return []string{interp, "/dev/fd/3"}, &text
}

// runSpec is one supervised execution.
type runSpec struct {
	argv    []string
	script  *string
	dir     string
	env     map[string]string
	stdin   io.Reader
	out     providers.Output
	timeout time.Duration
}

// run executes r through the helper, enforcing its timeout and ctx by killing the program's
// session through a second exec.
func (s *Sandbox) run(ctx context.Context, r runSpec) (providers.ExitStatus, error) {
	start := time.Now()
	token := newToken()
	grace := s.p.killGrace()
	h := header{
		Op: "exec", WS: s.ws, Argv: r.argv, Script: r.script, Dir: r.dir, Env: r.env,
		Stdin: r.stdin != nil, Grace: grace.Seconds(), Drain: 1,
	}
	if r.timeout > 0 {
		// The helper's own deadline only backs up the gateway's kill (see the package doc).
		h.Backstop = (r.timeout + grace + 10*time.Second).Seconds()
	}
	var (
		status *exitRecord
		herr   *helperError
		stdout = r.out.Stdout
		stderr = r.out.Stderr
		final  = make(chan struct{}) // closed once status or herr is set
	)
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	c := call{h: h}
	if r.stdin != nil {
		c.feed = func(fw frameWriter) error {
			buf := make([]byte, chunkSize)
			for {
				n, err := r.stdin.Read(buf)
				if n > 0 {
					if werr := fw.frame(frameStdin, buf[:n]); werr != nil {
						return werr
					}
				}
				if errors.Is(err, io.EOF) {
					return fw.frame(frameStdinEnd, nil)
				}
				if err != nil {
					_ = fw.frame(frameStdinEnd, nil)
					return nil // the program sees the end of its input
				}
			}
		}
	}
	c.onFrame = func(kind byte, payload []byte) error {
		switch kind {
		case frameStdout:
			_, _ = stdout.Write(payload)
		case frameStderr:
			_, _ = stderr.Write(payload)
		case frameExit:
			var rec exitRecord
			if err := json.Unmarshal(payload, &rec); err != nil {
				return err
			}
			status = &rec
			close(final)
		case frameError:
			var e helperError
			if err := json.Unmarshal(payload, &e); err != nil {
				return err
			}
			herr = &e
			close(final)
		}
		return nil
	}

	sctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	untrack := s.p.track(s.id, cancel)
	defer untrack()
	done := make(chan callResult, 1)
	go func() { done <- s.stream(sctx, token, c) }()

	var deadline <-chan time.Time
	if r.timeout > 0 {
		timer := time.NewTimer(r.timeout - time.Since(start))
		defer timer.Stop()
		deadline = timer.C
	}
	finished := func() bool {
		select {
		case <-final:
			return true
		default:
			return false
		}
	}
	var (
		timedOut bool
		ctxErr   error
		res      callResult
		killed   chan struct{}
		ctxDone  = ctx.Done()
	)
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-deadline:
			deadline = nil
			if !finished() {
				timedOut = true
				killed = s.killAsync(token)
			}
		case <-ctxDone:
			ctxDone = nil
			if !finished() && killed == nil {
				ctxErr = ctx.Err()
				killed = s.killAsync(token)
			}
		}
		if killed != nil {
			// The helper reports the program's end once its session is dead.
			select {
			case res = <-done:
			case <-time.After(grace + 20*time.Second):
				cancel(errors.New("the in-pod helper did not end after the kill"))
				res = <-done
			}
			<-killed
			break wait
		}
	}
	if cause := context.Cause(sctx); errors.Is(cause, errDestroyed) {
		return providers.ExitStatus{}, fault.New(fault.Gone, "%s: sandbox '%s' was destroyed during the execution", TypeName, s.id)
	}
	if herr != nil {
		return providers.ExitStatus{}, herr.fault()
	}
	if status == nil {
		if ctxErr != nil {
			return providers.ExitStatus{TimedOut: timedOut}, ctxErr
		}
		return providers.ExitStatus{TimedOut: timedOut}, s.streamFailure(res, "run a program")
	}
	st := providers.ExitStatus{ExitCode: status.Code, Signal: status.Signal, TimedOut: timedOut || status.TimedOut}
	if ctxErr != nil {
		return st, ctxErr
	}
	return st, nil
}

// killAsync runs kill(token) on a goroutine; the channel is closed when it is done.
func (s *Sandbox) killAsync(token string) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.kill(token)
	}()
	return done
}

// kill ends the session of the program run by the helper with token, through a second exec:
// SIGTERM, then SIGKILL after the kill grace (see helper.py op_kill).
func (s *Sandbox) kill(token string) {
	grace := s.p.killGrace()
	ctx, cancel := context.WithTimeout(context.Background(), grace+20*time.Second)
	defer cancel()
	var result []byte
	res := s.stream(ctx, newToken(), call{
		h: header{Op: "kill", WS: s.ws, Token: token, Grace: grace.Seconds()},
		onFrame: func(kind byte, payload []byte) error {
			if kind == frameResult || kind == frameError {
				result = payload
			}
			return nil
		},
	})
	if res.streamErr != nil || result == nil {
		s.p.log.Warn("killing a program in a sandbox pod failed", "sandbox_id", s.id, "error", res.streamErr, "stderr", res.stderr)
		return
	}
	s.p.log.Debug("execution killed", "sandbox_id", s.id, "result", string(result))
}

// newToken returns 16 random hex digits.
func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
