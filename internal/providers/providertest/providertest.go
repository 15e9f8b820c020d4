// Package providertest is the contract suite every Sandgate provider runs (the seed's
// SandboxProviderContract, docs/semantics.md §4, plus the fault classes of the field notes).
//
// A provider's test calls Run with a Harness:
//
//	func TestContract(t *testing.T) {
//		providertest.Run(t, providertest.Harness{
//			New: func(t *testing.T) providers.Provider { return newProvider(t) },
//		})
//	}
//
// Every test creates its own sandbox and destroys it afterwards, and runs in parallel with the
// others. Tests that need a capability the provider does not declare are skipped, except the
// capability-honesty tests, which then check for the capability error instead. Individual
// tests can be skipped with Harness.Skip.
//
// Programs used by the suite are POSIX sh commands (sleep, cat, printf, ln, mkdir, kill,
// head) and Python 3 code.
package providertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// FailMarker is the seed's default failing program: in Python an undefined name, so running
// it exits non-zero (docs/semantics.md §4).
const FailMarker = "__nonzero_exit__"

// Harness describes the provider under test.
type Harness struct {
	// New returns the provider a test uses; it is called once per test (it may return a
	// shared provider). Required.
	New func(t *testing.T) providers.Provider
	// Principal is passed to Create and Attach; default {Mode: "agent", Subject:
	// "contract-agent"} (seed fixture principal_policy).
	Principal providers.Principal
	// Policy is passed to Create and Attach; default the seed's SandboxPolicy(): egress allow,
	// timeout 120 s, strict. A zero Policy.Timeout means the default policy is used.
	Policy providers.Policy
	// FailingProgram returns code and language that exit non-zero; default
	// (FailMarker, "python") (seed hook failing_program).
	FailingProgram func() (code, language string)
	// Skip maps test names, relative to the test that called Run (e.g.
	// "files/unusual_names"), to the reason they are skipped.
	Skip map[string]string
	// KillGrace is the longest the provider waits between SIGTERM and SIGKILL when it kills
	// a timed-out program; the process-tree tests wait that much longer. Default 5 s.
	KillGrace time.Duration
	// RichResults says the provider gives the rich results of Python code in a context
	// (ExitStatus.Results, Output.ResultFunc: sandboxd's python contexts); the results tests
	// skip without it.
	RichResults bool
}

// Run runs the contract suite against h's provider. The subtests are grouped as:
//
//   - contract/…: the seed's seven tests (python mandatory, undeclared language, capability
//     honesty for shell, files and package_install, failure is a result, close and destroy
//     idempotent, attach honesty);
//   - exec/…: process execution and output (timeouts kill the whole tree, background children
//     do not hang, stdin, exit codes and signals, streams, partial output, environment,
//     working folder, bytes that are not UTF-8, large output and code);
//   - files/…: byte-exact round trips, unusual names, path and symlink escapes, size limit,
//     listings and removal;
//   - tree/…: for sandboxes implementing providers.FileTree, a folder made with its parents,
//     a file and a folder moved (parents made, a file replaced; a folder at the destination, a
//     folder onto a file and a folder into itself refused), a tree removed
//     (missing is no error), and paths that leave the workspace (policy, also through
//     symlinks) or name the workspace itself (validation) refused;
//   - lifecycle/…: attach keeps the workspace, a destroyed sandbox is gone;
//   - stateful/…: for providers declaring stateful, contexts keep Python globals and shell
//     state, a call's env (its time zone too) applies to that call only, restart clears
//     them, a crashed context is reported and replaced; otherwise a named context is a
//     capability error;
//   - executions/…: for providers declaring background or interactive, background processes
//     outlive their call, stop on request and keep their output for followers that come
//     after the stop, an open stdin is fed while a program runs, a terminal is resized;
//     otherwise those are capability errors;
//   - snapshots/…: for providers declaring snapshots (providers.Snapshotter), a restore is
//     the same everywhere: entries, contents, modes and modification times kept, setuid and
//     setgid dropped (sticky kept), symlinks kept as links (also ones out of the workspace,
//     never followed), empty folders and hard links kept, a sparse file comes back sparse;
//     restores are independent; unknown and deleted refs are not found, a destroyed
//     sandbox is gone;
//   - processes/…: what code in a context starts ends with its execution (the context lives
//     on), and a stopped background process takes its whole tree along, a descendant in a
//     session of its own included;
//   - faults/…: the same bad input gets the same fault on every provider — the workspace
//     folder itself written or removed (validation), NUL bytes, absolute paths and escapes
//     (policy), names and paths too long (validation), a folder read or written as a file or a
//     file listed as a folder (conflict), missing paths (not found, or nothing to remove) —
//     and every operation on a closed handle is a conflict, once its input passed the checks
//     above;
//   - results/…: for harnesses declaring RichResults, code in a context gives its last
//     expression's value (6*7: text/plain 42), a pandas DataFrame's HTML and text table, a
//     matplotlib figure as a PNG that decodes, and drops a result over the limit whole.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("providertest: Harness.New is required")
	}
	if h.Principal.Subject == "" {
		h.Principal = providers.Principal{Mode: "agent", Subject: "contract-agent"}
	}
	if h.Policy.Timeout == 0 {
		h.Policy = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: 120 * time.Second, Strict: true}
	}
	if h.FailingProgram == nil {
		h.FailingProgram = func() (string, string) { return FailMarker, "python" }
	}
	if h.KillGrace <= 0 {
		h.KillGrace = 5 * time.Second
	}
	s := &suite{h: h, root: t.Name()}
	t.Run("contract", s.contract)
	t.Run("exec", s.exec)
	t.Run("files", s.files)
	t.Run("tree", s.tree)
	t.Run("lifecycle", s.lifecycle)
	t.Run("stateful", s.stateful)
	t.Run("executions", s.executions)
	t.Run("snapshots", s.snapshots)
	t.Run("processes", s.processes)
	t.Run("faults", s.faults)
	t.Run("results", s.results)
}

type suite struct {
	h    Harness
	root string
}

// need lists the capabilities a test depends on.
type need uint

const (
	needShell need = 1 << iota
	needFiles
	needAttach
	needBash
	needStateful
	needInteractive
	needBackground
	needSnapshots
	needRichResults // Harness.RichResults
)

// env is one test's provider and context.
type env struct {
	t    *testing.T
	h    *Harness
	p    providers.Provider
	caps providers.Capabilities
	ctx  context.Context
}

// leaf runs fn as a parallel subtest with a fresh provider, skipped when listed in
// Harness.Skip or when the provider lacks a needed capability.
func (s *suite) leaf(t *testing.T, name string, needs need, fn func(e *env)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		if reason, ok := s.h.Skip[strings.TrimPrefix(t.Name(), s.root+"/")]; ok {
			t.Skip(reason)
		}
		p := s.h.New(t)
		require.NotNil(t, p, "Harness.New returned nil")
		caps := p.Capabilities()
		switch {
		case needs&needShell != 0 && !caps.Shell:
			t.Skip("the provider does not declare shell")
		case needs&needFiles != 0 && !caps.Files:
			t.Skip("the provider does not declare files")
		case needs&needAttach != 0 && !caps.Attach:
			t.Skip("the provider does not declare attach")
		case needs&needBash != 0 && !caps.SupportsLanguage("bash"):
			t.Skip("the provider does not declare language bash")
		case needs&needStateful != 0 && !caps.Stateful:
			t.Skip("the provider does not declare stateful")
		case needs&needInteractive != 0 && !caps.Interactive:
			t.Skip("the provider does not declare interactive")
		case needs&needBackground != 0 && !caps.Background:
			t.Skip("the provider does not declare background")
		case needs&needSnapshots != 0 && !caps.Snapshots:
			t.Skip("the provider does not declare snapshots")
		case needs&needRichResults != 0 && !s.h.RichResults:
			t.Skip("the harness does not declare rich results (Harness.RichResults)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		t.Cleanup(cancel)
		fn(&env{t: t, h: &s.h, p: p, caps: caps, ctx: ctx})
	})
}

// create makes a sandbox that is closed and destroyed when the test ends.
func (e *env) create() providers.Sandbox {
	e.t.Helper()
	sb, err := e.p.Create(e.ctx, e.h.Principal, e.h.Policy)
	require.NoError(e.t, err, "Create")
	require.NotNil(e.t, sb, "Create returned no sandbox")
	id := sb.ID()
	require.NotEmpty(e.t, id, "sandbox id")
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(e.t, sb.Close(), "Close")
		assert.NoError(e.t, e.p.Destroy(ctx, id), "Destroy")
	})
	return sb
}

// result is how one execution went.
type result struct {
	status         providers.ExitStatus
	err            error
	stdout, stderr []byte
	elapsed        time.Duration
}

// run executes spec under ctx, collecting both streams unless spec sets its own writers. It
// fails the test when the provider writes output after Exec returned.
func (e *env) run(ctx context.Context, sb providers.Sandbox, spec providers.ExecSpec) result {
	e.t.Helper()
	var out, errOut guardedBuffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errOut
	}
	start := time.Now()
	st, err := sb.Exec(ctx, spec)
	r := result{status: st, err: err, elapsed: time.Since(start), stdout: out.finish(), stderr: errOut.finish()}
	e.t.Cleanup(func() {
		assert.False(e.t, out.late.Load() || errOut.late.Load(), "the provider wrote output after Exec returned")
	})
	return r
}

// sh runs command and requires it to succeed; it returns stdout.
func (e *env) sh(sb providers.Sandbox, command string) string {
	e.t.Helper()
	r := e.run(e.ctx, sb, providers.ExecSpec{Command: command, Timeout: time.Minute})
	require.NoError(e.t, r.err, "Exec %q", command)
	require.Equal(e.t, 0, r.status.ExitCode, "Exec %q: exit code; stderr: %s", command, r.stderr)
	require.False(e.t, r.status.TimedOut, "Exec %q timed out", command)
	return string(r.stdout)
}

// python runs code and requires it to succeed; it returns stdout.
func (e *env) python(sb providers.Sandbox, code string) string {
	e.t.Helper()
	r := e.run(e.ctx, sb, providers.ExecSpec{Code: code, Language: "python", Timeout: time.Minute})
	require.NoError(e.t, r.err, "Exec python")
	require.Equal(e.t, 0, r.status.ExitCode, "Exec python: exit code; stderr: %s", r.stderr)
	return string(r.stdout)
}

func (e *env) write(sb providers.Sandbox, path string, data []byte) {
	e.t.Helper()
	n, err := sb.WriteFile(e.ctx, path, bytes.NewReader(data), math.MaxInt32)
	require.NoError(e.t, err, "WriteFile %q", path)
	require.Equal(e.t, int64(len(data)), n, "WriteFile %q: bytes written", path)
}

func (e *env) read(sb providers.Sandbox, path string) []byte {
	e.t.Helper()
	rc, err := sb.ReadFile(e.ctx, path)
	require.NoError(e.t, err, "ReadFile %q", path)
	defer rc.Close()
	data, err := io.ReadAll(rc)
	require.NoError(e.t, err, "ReadFile %q: reading", path)
	return data
}

func (e *env) list(sb providers.Sandbox, dir string) []providers.FileInfo {
	e.t.Helper()
	infos, err := sb.ListFiles(e.ctx, dir)
	require.NoError(e.t, err, "ListFiles %q", dir)
	return infos
}

// requireKind fails the test unless err is a fault of kind k.
func requireKind(t *testing.T, err error, k fault.Kind, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Truef(t, fault.IsKind(err, k), "want a %s fault, got %s: %v (%s)", k, fault.KindOf(err), err, describe(msgAndArgs))
}

// describe renders testify-style msgAndArgs: a format and its arguments.
func describe(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

func names(infos []providers.FileInfo) []string {
	out := make([]string, len(infos))
	for i, fi := range infos {
		out[i] = fi.Name
	}
	return out
}

// guardedBuffer is a goroutine-safe buffer that notes writes after finish.
type guardedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
	late atomic.Bool
}

func (b *guardedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		b.late.Store(true)
	}
	return b.buf.Write(p)
}

func (b *guardedBuffer) finish() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	return bytes.Clone(b.buf.Bytes())
}

// countingWriter counts bytes and remembers whether they were all equal to want.
type countingWriter struct {
	n     atomic.Int64
	other atomic.Bool
	want  byte
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	for _, b := range p {
		if b != c.want {
			c.other.Store(true)
			break
		}
	}
	return len(p), nil
}

// failingReader yields n bytes, then fails.
type failingReader struct{ n int }

var errBrokenUpload = errors.New("providertest: upload broken off")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errBrokenUpload
	}
	k := min(len(p), f.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return fmt.Sprintf("%x", s)
}
