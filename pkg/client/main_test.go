package client_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// shared is the gateway the examples and most tests call: the harness's two local profiles
// ("default" made stateful, "oneshot"), on a real Postgres database.
var shared *gatewaytest.Env

// TestMain starts the shared gateway (examples take no *testing.T, so it is started here),
// runs the tests and examples, stops it and fails the package when a goroutine is left
// behind. Without Postgres the package skips with the reason (fails under CI=true).
func TestMain(m *testing.M) {
	flag.Parse() // gatewaytest reads testing.Verbose
	tb := &mainTB{ctx: context.Background()}
	tb.ctx, tb.cancel = context.WithCancel(tb.ctx)
	done := make(chan struct{})
	go func() { // Skipf and Fatalf end this goroutine, as they end a test's
		defer close(done)
		workdir := tb.TempDir()
		shared = gatewaytest.Start(tb, gatewaytest.Options{Workdir: workdir, Config: statefulProfiles(workdir)})
	}()
	<-done
	if shared == nil {
		tb.cleanup()
		fmt.Fprintln(os.Stderr, "pkg/client: no gateway for the tests:", tb.reason)
		if os.Getenv("CI") == "true" || !tb.skipped {
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	tb.cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// statefulProfiles are the harness's two local profiles (in workdir) with "default" keeping
// Python state between calls.
func statefulProfiles(workdir string) func(*config.Config) {
	return func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: "local_subprocess", Stateful: true, Blocks: lb},
			"oneshot": {Type: "local_subprocess", Scope: "per_call", Blocks: lb},
		}
	}
}

// mainTB is the testing.TB of TestMain's gateway: enough of one for gatewaytest and pgtest
// (the embedded nil TB panics on anything else).
type mainTB struct {
	testing.TB
	ctx      context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	cleanups []func()
	reason   string
	skipped  bool
}

func (t *mainTB) Helper()                  {}
func (t *mainTB) Name() string             { return "TestMain" }
func (t *mainTB) Context() context.Context { return t.ctx }
func (t *mainTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *mainTB) cleanup() {
	t.cancel()
	t.mu.Lock()
	fs := slices.Clone(t.cleanups)
	t.mu.Unlock()
	slices.Reverse(fs)
	for _, f := range fs {
		f()
	}
}

func (t *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "pkg-client-")
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func (t *mainTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *mainTB) Errorf(format string, args ...any) {
	t.reason += fmt.Sprintf(format, args...) + "\n"
}
func (t *mainTB) Fatalf(format string, args ...any) { t.Errorf(format, args...); t.FailNow() }
func (t *mainTB) Fatal(args ...any)                 { t.Errorf("%s", fmt.Sprint(args...)); t.FailNow() }
func (t *mainTB) FailNow()                          { runtime.Goexit() }
func (t *mainTB) Skipf(format string, args ...any) {
	t.reason, t.skipped = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}
func (t *mainTB) Skip(args ...any) { t.Skipf("%s", fmt.Sprint(args...)) }
