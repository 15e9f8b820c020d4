package daytona

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Exec runs spec to completion and returns how it ended; a non-zero exit is a status, never
// an error. Commands and code without a context run through a fresh toolbox session (see the
// package doc: the program runs in its own process session, so a timeout or cancellation
// kills its whole tree and output already written is kept); code in a context runs in the
// context (contexts.go).
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.NotFound
// for a working folder that does not exist, fault.Validation for one that is a file;
// fault.Conflict on a closed handle; an error wrapping providers.ErrUnreached when the
// sandbox could not be reached before anything ran (fault.Gone when it no longer exists);
// fault.Provision when the toolbox failed during the execution; ctx.Err() when ctx ends.
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
	if spec.Context != "" {
		return s.execInContext(ctx, spec)
	}
	rs := runSpec{env: spec.Env, dir: spec.Dir, stdin: spec.Stdin, timeout: spec.Timeout, out: spec.Output}
	switch {
	case spec.Command != "":
		rs.program, rs.launch = spec.Command, `/bin/sh @D@/prog`
	case spec.Language == "python":
		rs.program, rs.launch = spec.Code, `python3 @D@/prog`
	default: // bash, the only other declared language
		rs.program, rs.launch = spec.Code, `bash @D@/prog`
	}
	return s.run(ctx, rs)
}

// InstallPackages runs `python3 -m pip install --no-input -- <packages>` in the sandbox, with
// no time limit but ctx. A failed installation is a status, never an error. Package names
// must not be empty, start with "-" or contain a line break (fault.Validation), so none can
// pass pip an option.
func (s *Sandbox) InstallPackages(ctx context.Context, packages []string, out providers.Output) (providers.ExitStatus, error) {
	if len(packages) == 0 {
		return providers.ExitStatus{}, fault.New(fault.Validation, "give at least one package to install")
	}
	words := []string{"exec", "python3", "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--"}
	for _, pkg := range packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") || strings.ContainsAny(pkg, "\x00\n\r") {
			return providers.ExitStatus{}, fault.New(fault.Validation, "invalid package name %q", pkg)
		}
		words = append(words, shQuote(pkg))
	}
	if err := s.usable(); err != nil {
		return providers.ExitStatus{}, err
	}
	return s.run(ctx, runSpec{
		program: strings.Join(words, " ") + "\n",
		launch:  `/bin/sh @D@/prog`,
		env:     map[string]string{"PIP_ROOT_USER_ACTION": "ignore", "PIP_BREAK_SYSTEM_PACKAGES": "1"},
		out:     out,
	})
}

// runSpec is one program to run through a fresh toolbox session.
type runSpec struct {
	program string // the program's text, uploaded as prog in the execution's folder
	// launch is the shell words (ours, never the caller's) that start the program; @D@
	// stands for the execution's folder in the sandbox (quoted when put in: no shell
	// variable, which a caller's variable of the same name could replace).
	launch  string
	env     map[string]string
	dir     string // relative to the workspace; "" = the workspace
	stdin   io.Reader
	timeout time.Duration
	out     providers.Output
	extra   map[string]string // more files of the execution's folder: name → content
}

// runScript is the wrapper the session runs (`sh <folder>/run`). It changes to the working folder,
// exports the variables, starts the program in a process session of its own (setsid, when
// the image has it) with its standard input from a file, records its process id for the kill
// script, waits for it and kills what it left running. Every value in it is single-quoted.
//
// Daytona's daemon logs a command's output line by line and ends a last line that has no
// line break with one; so that the provider can tell, the wrapper ends both streams with
// the line endMarker(id), which the provider removes (endFilter): every line break before it
// is the program's own.
func runScript(d, id, dir string, env map[string]string, launch string, stdin bool) string {
	var b strings.Builder
	qd := shQuote(d)
	launch = strings.ReplaceAll(launch, "@D@", qd)
	fmt.Fprintf(&b, "cd -- %s || exit 126\n", shQuote(dir))
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	sort.Strings(names)
	b.WriteString("export PYTHONUNBUFFERED=1\n")
	for _, n := range names { // names are validated: letters, digits, underscores
		fmt.Fprintf(&b, "export %s=%s\n", n, shQuote(env[n]))
	}
	in := "/dev/null"
	if stdin {
		in = qd + "/in"
	}
	fmt.Fprintf(&b, "if command -v setsid >/dev/null 2>&1; then setsid %s <%s & else %s <%s & fi\n", launch, in, launch, in)
	fmt.Fprintf(&b, "pid=$!\necho \"$pid\" >%s/pid\n", qd)
	b.WriteString(`wait "$pid" 2>/dev/null
ec=$?
kill -KILL -"$pid" 2>/dev/null
`)
	fmt.Fprintf(&b, "printf '\\003SANDGATE-END-%%s\\n' %s\n", id)
	fmt.Fprintf(&b, "printf '\\003SANDGATE-END-%%s\\n' %s >&2\n", id)
	b.WriteString("exit \"$ec\"\n")
	return b.String()
}

// endMarker is the line the wrapper of execution id ends each stream with.
func endMarker(id string) []byte { return []byte("\x03SANDGATE-END-" + id + "\n") }

// endFilter passes a stream on without its end marker and whatever follows it. Bytes that
// may be the start of the marker are held back until they are known not to be.
type endFilter struct {
	w      io.Writer
	marker []byte
	held   []byte
	ended  bool
}

func (f *endFilter) Write(p []byte) (int, error) {
	n := len(p)
	if f.ended {
		return n, nil
	}
	buf := append(f.held, p...)
	f.held = nil
	if i := bytes.Index(buf, f.marker); i >= 0 {
		f.ended = true
		f.emit(buf[:i])
		return n, nil
	}
	// Hold back the longest tail that is a prefix of the marker.
	keep := 0
	for k := min(len(buf), len(f.marker)-1); k > 0; k-- {
		if bytes.HasPrefix(f.marker, buf[len(buf)-k:]) {
			keep = k
			break
		}
	}
	f.emit(buf[:len(buf)-keep])
	f.held = append([]byte(nil), buf[len(buf)-keep:]...)
	return n, nil
}

func (f *endFilter) emit(p []byte) {
	if len(p) > 0 {
		_, _ = f.w.Write(p)
	}
}

// close writes what was held back (a stream that ended without its marker: the wrapper was
// killed).
func (f *endFilter) close() {
	if !f.ended {
		f.emit(f.held)
	}
	f.held = nil
}

// killScript signals the program's process group (its session), or the program alone when
// it could not have one: `sh <folder>/kill TERM`.
const killScript = `pid=$(cat "$(dirname "$0")/pid" 2>/dev/null) || exit 0
[ -n "$pid" ] || exit 0
kill -"$1" -"$pid" 2>/dev/null || kill -"$1" "$pid" 2>/dev/null
exit 0
`

// run uploads rs's files into a fresh folder of the scratch folder, runs the wrapper in a
// fresh session, follows its output, enforces the timeout and cleans up.
func (s *Sandbox) run(ctx context.Context, rs runSpec) (providers.ExitStatus, error) {
	ws, sc, err := s.paths(ctx)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	dir := ws
	if rs.dir != "" {
		abs, rel, err := s.abs(ctx, rs.dir)
		if err != nil {
			return providers.ExitStatus{}, err
		}
		if rel != "." {
			fi, err := s.tb.info(ctx, abs)
			switch {
			case statusOf(err) == http.StatusNotFound || statusOf(err) == http.StatusBadRequest:
				return providers.ExitStatus{}, fault.New(fault.NotFound, "working folder '%s' does not exist", rel)
			case err != nil:
				return providers.ExitStatus{}, s.unreached(ctx, err, "checking the working folder")
			case !fi.IsDir:
				return providers.ExitStatus{}, fault.New(fault.Validation, "working folder '%s' is not a folder", rel)
			}
		}
		dir = abs
	}
	id := newID()
	d := sc + "/x-" + id
	files := []uploadFile{
		{path: d + "/run", r: strings.NewReader(runScript(d, id, dir, rs.env, rs.launch, rs.stdin != nil))},
		{path: d + "/kill", r: strings.NewReader(killScript)},
		{path: d + "/prog", r: strings.NewReader(rs.program)},
	}
	for name, content := range rs.extra {
		files = append(files, uploadFile{path: d + "/" + name, r: strings.NewReader(content)})
	}
	if rs.stdin != nil {
		files = append(files, uploadFile{path: d + "/in", r: rs.stdin})
	}
	defer s.removeLater(d)
	if err := s.tb.upload(ctx, files); err != nil {
		var se *sourceError
		if errors.As(err, &se) {
			return providers.ExitStatus{}, fmt.Errorf("reading standard input: %w", se.err)
		}
		return providers.ExitStatus{}, s.unreached(ctx, err, "uploading the program")
	}
	sid := "sandgate-" + id
	if err := s.tb.createSession(ctx, sid); err != nil {
		return providers.ExitStatus{}, s.unreached(ctx, err, "opening a session")
	}
	defer func() {
		bctx, cancel := background()
		defer cancel()
		_ = s.tb.deleteSession(bctx, sid)
	}()
	cid, err := s.tb.sessionExec(ctx, sid, "sh "+shQuote(d+"/run"))
	if err != nil {
		return providers.ExitStatus{}, s.failed(ctx, err, "starting the program")
	}
	return s.follow(ctx, sid, cid, d, id, rs)
}

// follow streams the command's output until it ends, killing it at the timeout or when ctx
// ends, and returns its status.
func (s *Sandbox) follow(ctx context.Context, sid, cid, d, id string, rs runSpec) (providers.ExitStatus, error) {
	streams := providers.RuntimeStreams(rs.out)
	outF := &endFilter{w: streams.Stdout, marker: endMarker(id)}
	errF := &endFilter{w: streams.Stderr, marker: endMarker(id)}
	lctx, lcancel := context.WithCancel(context.Background())
	defer lcancel()
	logDone := make(chan error, 1)
	go func() {
		err := s.tb.followLogs(lctx, sid, cid, outF, errF)
		outF.close()
		errF.close()
		logDone <- err
	}()

	var deadline <-chan time.Time
	if rs.timeout > 0 {
		t := time.NewTimer(rs.timeout)
		defer t.Stop()
		deadline = t.C
	}
	// A safety net for a toolbox that does not close the stream when the command ends.
	check := time.NewTicker(5 * time.Second)
	defer check.Stop()
	var timedOut bool
	var logErr error
wait:
	for {
		select {
		case logErr = <-logDone:
			break wait
		case <-deadline:
			timedOut, deadline = true, nil
			s.kill(d, "TERM")
			select {
			case logErr = <-logDone:
				break wait
			case <-time.After(s.p.killGrace()):
				s.kill(d, "KILL")
			}
		case <-ctx.Done():
			s.kill(d, "KILL")
			lcancel()
			<-logDone
			return providers.ExitStatus{}, ctx.Err()
		case <-check.C:
			if timedOut {
				// The program may have been starting when the first signals were sent.
				s.kill(d, "KILL")
			}
			if code, err := s.tb.commandExit(ctx, sid, cid); err == nil && code != nil {
				select {
				case logErr = <-logDone:
				case <-time.After(5 * time.Second):
					lcancel()
					logErr = <-logDone
				}
				break wait
			}
		}
	}
	if logErr != nil {
		return providers.ExitStatus{}, s.failed(ctx, logErr, "following the program's output")
	}
	code, err := s.exitCode(ctx, sid, cid)
	if err != nil {
		return providers.ExitStatus{}, s.failed(ctx, err, "reading the program's exit code")
	}
	return providers.ExitStatus{ExitCode: code, TimedOut: timedOut}, nil
}

// exitCode reads the command's exit code, which the toolbox writes once its output is
// flushed; it waits a little for it.
func (s *Sandbox) exitCode(ctx context.Context, sid, cid string) (int, error) {
	for i := 0; ; i++ {
		code, err := s.tb.commandExit(ctx, sid, cid)
		if err != nil {
			return 0, err
		}
		if code != nil {
			return *code, nil
		}
		if i >= 100 {
			return 0, fault.New(fault.Provision, "%s: the toolbox closed the output of a command that has no exit code", TypeName)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill signals the program of execution folder d (best effort, outside the caller's
// context, which may be what ended).
func (s *Sandbox) kill(d, signal string) {
	bctx, cancel := background()
	defer cancel()
	if _, _, err := s.tb.execute(bctx, "sh "+d+"/kill "+signal, 20*time.Second); err != nil {
		s.p.log.Warn("daytona: could not signal a program", "sandbox_id", s.id, "signal", signal, "error", err)
	}
}

// removeLater removes an execution folder, best effort.
func (s *Sandbox) removeLater(d string) {
	bctx, cancel := background()
	defer cancel()
	_ = s.tb.remove(bctx, d, true)
}
