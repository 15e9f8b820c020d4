package sandboxtest_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/providertest"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// contractPrograms are the Python programs the contract suite runs on a provider without
// shell, written as Programs: the fake has no interpreter, but what the suite checks with
// them — stdin, the two streams, exit codes, environment values passed as they are, bytes
// that are not UTF-8, large output, timeouts that keep partial output, files shared with
// programs — is the fake's own plumbing. A program the suite adds or rewords finds no entry
// here and fails with exit 127 (contractProgram), so the table cannot silently go stale.
var contractPrograms = map[string]sandboxtest.Program{
	"print('hi')": sandboxtest.Reply(0, "hi\n", ""),
	providertest.FailMarker: sandboxtest.Reply(1, "",
		"Traceback (most recent call last):\nNameError: name '"+providertest.FailMarker+"' is not defined\n"),
	"import sys\nsys.stdout.write(sys.stdin.read().upper())": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		in, err := io.ReadAll(r.Stdin)
		if err != nil {
			return providers.ExitStatus{}, err
		}
		_, _ = r.Stdout.Write([]byte(strings.ToUpper(string(in))))
		return providers.ExitStatus{}, nil
	},
	"import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nprint('out again')": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		_, _ = io.WriteString(r.Stdout, "to out\n")
		_, _ = io.WriteString(r.Stderr, "to err\n")
		_, _ = io.WriteString(r.Stdout, "out again\n")
		return providers.ExitStatus{}, nil
	},
	"import time\nprint('before')\ntime.sleep(600)": func(ctx context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		_, _ = io.WriteString(r.Stdout, "before\n")
		<-ctx.Done() // the sleep outlives the timeout
		return providers.ExitStatus{}, ctx.Err()
	},
	"import os, sys\nsys.stdout.write(os.environ['SANDGATE_VALUE'])\nsys.stderr.write(repr(os.environ['SANDGATE_EMPTY']))": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		_, _ = io.WriteString(r.Stdout, r.Spec.Env["SANDGATE_VALUE"])
		_, _ = io.WriteString(r.Stderr, "'"+r.Spec.Env["SANDGATE_EMPTY"]+"'")
		return providers.ExitStatus{}, nil
	},
	"import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.buffer.write(b'\\xff\\xfe\\xe2\\x82')": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		_, _ = r.Stdout.Write(all)
		_, _ = r.Stderr.Write([]byte{0xff, 0xfe, 0xe2, 0x82})
		return providers.ExitStatus{}, nil
	},
	fmt.Sprintf("import sys\nfor _ in range(%d):\n    sys.stdout.buffer.write(b'o' * 65536)\n    sys.stderr.buffer.write(b'e' * 16384)\n", (16<<20)/65536): func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		o, e := []byte(strings.Repeat("o", 65536)), []byte(strings.Repeat("e", 16384))
		for range (16 << 20) / 65536 {
			_, _ = r.Stdout.Write(o)
			_, _ = r.Stderr.Write(e)
		}
		return providers.ExitStatus{}, nil
	},
	"x = '" + strings.Repeat("a", 300<<10) + "'\nprint(len(x))\n": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		literal := strings.TrimSuffix(strings.TrimPrefix(r.Spec.Code, "x = '"), "'\nprint(len(x))\n")
		_, _ = fmt.Fprintf(r.Stdout, "%d\n", len(literal))
		return providers.ExitStatus{}, nil
	},
	"import hashlib\nprint(hashlib.sha256(open('dir/large.bin','rb').read()).hexdigest())": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		data, err := r.ReadFile("dir/large.bin")
		if err != nil {
			return providers.ExitStatus{}, err
		}
		_, _ = fmt.Fprintf(r.Stdout, "%x\n", sha256.Sum256(data))
		return providers.ExitStatus{}, nil
	},
	"print(open('kept.txt').read())": func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		data, err := r.ReadFile("kept.txt")
		if err != nil {
			return providers.ExitStatus{}, err
		}
		_, _ = fmt.Fprintf(r.Stdout, "%s\n", data)
		return providers.ExitStatus{}, nil
	},
}

// contractProgram runs contractPrograms, and exits 127 for any other program.
func contractProgram(ctx context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
	if prog, ok := contractPrograms[r.Spec.Code]; ok {
		return prog(ctx, r)
	}
	_, _ = fmt.Fprintf(r.Stderr, "sandboxtest: no contract program for %.80q\n", r.Spec.Code+r.Spec.Command)
	return providers.ExitStatus{ExitCode: 127}, nil
}

// TestContract: the fake passes the provider contract for what it declares (the shell,
// bash and stateful groups skip themselves: it declares none of them).
func TestContract(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New: func(*testing.T) providers.Provider {
			return sandboxtest.NewProvider(sandboxtest.ProviderOptions{Program: contractProgram})
		},
	})
}

var (
	agent  = providers.Principal{Mode: providers.ModeAgent, Subject: "sandboxtest"}
	policy = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
)

func create(t *testing.T, p *sandboxtest.Provider) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), agent, policy)
	require.NoError(t, err)
	return sb
}

func execCode(ctx context.Context, sb providers.Sandbox, code string) (providers.ExitStatus, string, error) {
	var out strings.Builder
	st, err := sb.Exec(ctx, providers.ExecSpec{Code: code, Language: "python", Output: providers.Output{Stdout: &out, Stderr: io.Discard}})
	return st, out.String(), err
}

// waitFor fails the test unless ch is closed within a generous bound.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestProviderScriptsAndRecords(t *testing.T) {
	t.Parallel()
	p := sandboxtest.NewProvider(sandboxtest.ProviderOptions{Type: "fakey", Program: sandboxtest.Reply(0, "default\n", "")})
	require.Equal(t, "fakey", p.Type())
	sb := create(t, p)
	p.Handle("special", sandboxtest.Reply(0, "handled\n", ""))
	p.Next(sandboxtest.Reply(3, "first\n", ""), sandboxtest.Fail(fault.New(fault.Provision, "no luck")))

	st, out, err := execCode(t.Context(), sb, "a")
	require.NoError(t, err)
	assert.Equal(t, 3, st.ExitCode)
	assert.Equal(t, "first\n", out)
	_, out, err = execCode(t.Context(), sb, "special")
	require.NoError(t, err)
	assert.Equal(t, "handled\n", out, "Handle comes before the queue")
	_, _, err = execCode(t.Context(), sb, "b")
	assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	_, out, err = execCode(t.Context(), sb, "c")
	require.NoError(t, err)
	assert.Equal(t, "default\n", out)

	execs := p.Execs()
	require.Len(t, execs, 4)
	for i, code := range []string{"a", "special", "b", "c"} {
		assert.Equal(t, code, execs[i].Spec.Code)
		assert.Equal(t, sb.ID(), execs[i].SandboxID)
		assert.Equal(t, agent, execs[i].Principal)
		assert.True(t, execs[i].Finished)
	}
	assert.Equal(t, 1, p.MaxParallel(sb.ID()))

	again, err := p.Attach(t.Context(), sb.ID(), agent, policy)
	require.NoError(t, err)
	require.NoError(t, again.Close())
	require.NoError(t, p.Destroy(t.Context(), sb.ID()))
	assert.Equal(t, sandboxtest.Counts{Create: 1, Attach: 1, Destroy: 1}, p.Counts())
	assert.Equal(t, []string{sb.ID()}, p.Created())
	assert.Equal(t, []string{sb.ID()}, p.Destroyed())
	assert.Empty(t, p.Live())

	p.FailCreate(fault.New(fault.Provision, "quota exhausted"))
	_, err = p.Create(t.Context(), agent, policy)
	assert.True(t, fault.IsKind(err, fault.Provision))
	create(t, p)
	assert.Equal(t, 3, p.Counts().Create)
}

func TestGateBlocksUntilReleasedOrCancelled(t *testing.T) {
	t.Parallel()
	p := sandboxtest.NewProvider(sandboxtest.ProviderOptions{})
	sb := create(t, p)

	g := p.Hold()
	type result struct {
		st  providers.ExitStatus
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, out, err := execCode(t.Context(), sb, "long")
		done <- result{st, out, err}
	}()
	waitFor(t, g.Started(), "the execution to start")
	select {
	case <-done:
		t.Fatal("a held execution returned before its release")
	default:
	}
	g.Release(7, "released\n", "")
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, 7, r.st.ExitCode)
	assert.Equal(t, "released\n", r.out)
	assert.NoError(t, g.Err())

	g = p.Hold()
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		st, out, err := execCode(ctx, sb, "cancelled")
		done <- result{st, out, err}
	}()
	waitFor(t, g.Started(), "the execution to start")
	cancel()
	r = <-done
	require.ErrorIs(t, r.err, context.Canceled)
	waitFor(t, g.Done(), "the program to return")
	assert.ErrorIs(t, g.Err(), context.Canceled, "the program saw its ctx cancelled")
	execs := p.Execs()
	assert.True(t, execs[len(execs)-1].Cancelled)

	// The spec's timeout ends a held program: a status, not an error.
	g = p.Hold()
	st, err := sb.Exec(t.Context(), providers.ExecSpec{Code: "slow", Language: "python", Timeout: time.Millisecond})
	require.NoError(t, err)
	assert.True(t, st.TimedOut)
	assert.ErrorIs(t, g.Err(), context.DeadlineExceeded)
}

func TestLostSandboxIsGone(t *testing.T) {
	t.Parallel()
	p := sandboxtest.NewProvider(sandboxtest.ProviderOptions{})
	sb := create(t, p)
	_, err := sb.WriteFile(t.Context(), "f.txt", strings.NewReader("x"), 10)
	require.NoError(t, err)

	g := p.Hold()
	done := make(chan error, 1)
	go func() {
		_, _, err := execCode(t.Context(), sb, "running")
		done <- err
	}()
	waitFor(t, g.Started(), "the execution to start")
	require.True(t, p.Lose(sb.ID()))
	err = <-done
	assert.Equal(t, fault.Gone, fault.KindOf(err), "a running execution ends with its sandbox: %v", err)

	_, err = p.Attach(t.Context(), sb.ID(), agent, policy)
	assert.Equal(t, fault.Gone, fault.KindOf(err))
	_, _, err = execCode(t.Context(), sb, "after")
	assert.Equal(t, fault.Gone, fault.KindOf(err))
	_, err = sb.ReadFile(t.Context(), "f.txt")
	assert.Equal(t, fault.Gone, fault.KindOf(err))
	assert.Zero(t, p.Counts().Destroy, "lost, not destroyed")
	assert.False(t, p.Lose(sb.ID()))
}

func TestExecutionsMayOverlapInTheFake(t *testing.T) {
	t.Parallel()
	// The fake does not serialise executions (the domain must): MaxParallel shows overlap.
	p := sandboxtest.NewProvider(sandboxtest.ProviderOptions{})
	sb := create(t, p)
	g1, g2 := p.Hold(), p.Hold()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, err := execCode(t.Context(), sb, "x")
			errs <- err
		}()
	}
	waitFor(t, g1.Started(), "the first execution")
	waitFor(t, g2.Started(), "the second execution")
	assert.Equal(t, 2, p.MaxParallel(sb.ID()))
	g1.Release(0, "", "")
	g2.Release(0, "", "")
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

func TestStatefulContexts(t *testing.T) {
	t.Parallel()
	caps := sandboxtest.DefaultCapabilities()
	caps.Stateful = true
	p := sandboxtest.NewProvider(sandboxtest.ProviderOptions{Capabilities: caps})
	sb := create(t, p)
	cm := sb.(providers.Contexts)

	_, err := sb.Exec(t.Context(), providers.ExecSpec{Code: "x = 1", Context: providers.DefaultContext})
	require.NoError(t, err)
	_, err = cm.CreateContext(t.Context(), "sh", "bash")
	require.NoError(t, err)
	_, err = cm.CreateContext(t.Context(), "sh", "bash")
	assert.True(t, fault.IsKind(err, fault.Conflict))
	_, err = sb.Exec(t.Context(), providers.ExecSpec{Code: "print(1)", Language: "python", Context: "sh"})
	assert.True(t, fault.IsKind(err, fault.Validation), "a context's language is fixed: %v", err)

	list, err := cm.ListContexts(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, providers.DefaultContext, list[0].Name)
	assert.Equal(t, "python", list[0].Language)
	assert.Equal(t, 1, list[0].Executions)
	info, err := cm.RestartContext(t.Context(), providers.DefaultContext)
	require.NoError(t, err)
	assert.Zero(t, info.Executions)
	require.NoError(t, cm.DeleteContext(t.Context(), "sh"))
	assert.True(t, fault.IsKind(cm.DeleteContext(t.Context(), "sh"), fault.NotFound))
	assert.Equal(t, providers.DefaultContext, p.Execs()[0].Spec.Context)

	plain := create(t, sandboxtest.NewProvider(sandboxtest.ProviderOptions{}))
	_, err = plain.(providers.Contexts).ListContexts(t.Context())
	var fe *fault.Error
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "stateful", fe.Capability, "without the capability")
}
