package sdadapter_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/providertest"
	"github.com/sandgate/sandgate/internal/providers/sdadapter"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The adapter is tested over real sandboxd daemons: each sandbox is a runtime of this process
// in a folder of its own, served over HTTP on loopback by sandboxd's own handler
// (remote.Handler), as a container's or a pod's sandboxd serves the gateway.

const (
	subject = "sdadapter_test"
	token   = "a-test-token-of-more-than-32-characters"
	grace   = 300 * time.Millisecond
)

var (
	agent = providers.Principal{Mode: "agent", Subject: "sdadapter-test"}
	pol   = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
)

// daemons is a provider whose sandboxes are sandboxd daemons of this process; the adapter
// (sdadapter.Config) is configured as docker and kubernetes configure it.
type daemons struct {
	t         testing.TB
	caps      providers.Capabilities
	transient bool // handles as of docker's attach_to targets
	running   sdadapter.Running

	mu   sync.Mutex
	live map[string]*daemon

	unreached, served atomic.Int64
	// wrap, when set, wraps each daemon's handler (to break connections on purpose).
	wrap func(http.Handler) http.Handler
}

type daemon struct {
	rt  *sandboxd.Runtime
	srv *httptest.Server
	cl  *remote.Client
}

func newDaemons(t testing.TB) *daemons {
	langs := []string{"python"}
	if _, err := exec.LookPath("bash"); err == nil {
		langs = append(langs, "bash")
	}
	d := &daemons{t: t, live: map[string]*daemon{}, caps: providers.Capabilities{
		Isolation: providers.IsolationNone, Shell: true, Languages: langs, Files: true,
		Stateful: true, Attach: true, Provisions: true, Interactive: true, Background: true,
	}}
	t.Cleanup(func() {
		d.mu.Lock()
		ids := make([]string, 0, len(d.live))
		for id := range d.live {
			ids = append(ids, id)
		}
		d.mu.Unlock()
		for _, id := range ids {
			_ = d.Destroy(context.Background(), id)
		}
	})
	return d
}

func (d *daemons) Type() string                         { return subject }
func (d *daemons) Capabilities() providers.Capabilities { return d.caps }

func (d *daemons) Create(context.Context, providers.Principal, providers.Policy) (providers.Sandbox, error) {
	ws, err := os.MkdirTemp("", "sdadapter-test-*")
	if err != nil {
		return nil, fault.Wrap(fault.Provision, err, "making a workspace")
	}
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws, KillGrace: grace, DrainDelay: grace, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		_ = os.RemoveAll(ws)
		return nil, fault.Wrap(fault.Provision, err, "starting sandboxd")
	}
	h := remote.Handler(rt, token, nil)
	if d.wrap != nil {
		h = d.wrap(h)
	}
	srv := httptest.NewServer(h)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := ws + "#" + hex.EncodeToString(b)
	d.mu.Lock()
	d.live[id] = &daemon{rt: rt, srv: srv, cl: remote.NewTCPClient(srv.URL, token)}
	d.mu.Unlock()
	return d.handle(id), nil
}

func (d *daemons) Attach(_ context.Context, id string, _ providers.Principal, _ providers.Policy) (providers.Sandbox, error) {
	d.mu.Lock()
	_, ok := d.live[id]
	d.mu.Unlock()
	if !ok {
		return nil, fault.New(fault.Gone, "%s: sandbox '%s' no longer exists", subject, id)
	}
	return d.handle(id), nil
}

// Destroy ends the sandbox's executions (Running), then its daemon and workspace.
func (d *daemons) Destroy(_ context.Context, id string) error {
	d.running.Stop(id)
	d.mu.Lock()
	dm, ok := d.live[id]
	delete(d.live, id)
	d.mu.Unlock()
	if !ok {
		return nil
	}
	_ = dm.rt.Close()
	_ = dm.cl.Close()
	dm.srv.CloseClientConnections()
	dm.srv.Close()
	ws, _, _ := strings.Cut(id, "#")
	return os.RemoveAll(ws)
}

func (d *daemons) client(id string) *remote.Client {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dm, ok := d.live[id]; ok {
		return dm.cl
	}
	// A destroyed sandbox: a client of no daemon, whose requests are never served.
	return remote.NewTCPClient("http://127.0.0.1:1", token)
}

func (d *daemons) handle(id string) *sdadapter.Sandbox {
	return sdadapter.New(sdadapter.Config{
		Subject:       subject,
		ID:            id,
		CapsFunc:      d.Capabilities,
		ClientFunc:    func() *remote.Client { return d.client(id) },
		Transient:     d.transient,
		UnreachedFunc: func() { d.unreached.Add(1) },
		ServedFunc:    func() { d.served.Add(1) },
		BrokenFunc: func(err error) error {
			d.mu.Lock()
			_, ok := d.live[id]
			d.mu.Unlock()
			if !ok {
				return fault.Wrap(fault.Gone, err, "%s: sandbox '%s' is gone", subject, id)
			}
			return fault.Wrap(fault.Provision, err, "%s: sandboxd in sandbox '%s' broke off", subject, id)
		},
		Running: &d.running,
		Logger:  slog.New(slog.DiscardHandler),
	})
}

// TestContract runs the provider contract suite over the adapter.
func TestContract(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New:       func(t *testing.T) providers.Provider { return newDaemons(t) },
		KillGrace: grace,
	})
}

func create(t *testing.T, d *daemons) providers.Sandbox {
	t.Helper()
	sb, err := d.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func requireKind(t *testing.T, err error, k fault.Kind, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Truef(t, fault.IsKind(err, k), "want %s, got %s: %v", k, fault.KindOf(err), err)
}

// TestTransient: a sandbox without a daemon of its own holds nothing past a call — no
// contexts, no kept or held executions — but runs programs and moves files.
func TestTransient(t *testing.T) {
	d := newDaemons(t)
	d.transient = true
	sb := create(t, d)
	ctx := t.Context()

	var out bytes.Buffer
	st, err := sb.Exec(ctx, providers.ExecSpec{Command: "echo hi", ID: "held", Output: providers.Output{Stdout: &out}})
	require.NoError(t, err)
	assert.Equal(t, 0, st.ExitCode)
	assert.Equal(t, "hi\n", out.String())
	_, err = sb.(providers.Reattacher).Reattach(ctx, "held", providers.Output{})
	requireKind(t, err, fault.NotFound, "nothing is held in a transient sandbox")

	_, err = sb.Exec(ctx, providers.ExecSpec{Code: "x = 1", Language: "python", Context: "c"})
	requireKind(t, err, fault.Capability)
	_, err = sb.(providers.Contexts).ListContexts(ctx)
	requireKind(t, err, fault.Capability)
	_, err = sb.(providers.Executions).Start(ctx, providers.ExecSpec{Command: "sleep 1", ID: "bg", Background: true})
	requireKind(t, err, fault.Capability)

	_, err = sb.WriteFile(ctx, "f.txt", strings.NewReader("data"), 1<<20)
	require.NoError(t, err)
	rc, err := sb.ReadFile(ctx, "f.txt")
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, "data", string(data))
}

// TestDestroyEndsExecutionsAsGone: the provider's Destroy (Running.Stop) ends an execution at
// once, which returns fault.Gone; ServedFunc hears of executions that ran to their end.
func TestDestroyEndsExecutionsAsGone(t *testing.T) {
	d := newDaemons(t)
	sb := create(t, d)
	_, err := sb.Exec(t.Context(), providers.ExecSpec{Command: "true"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.served.Load())

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), providers.ExecSpec{Command: "echo up; exec sleep 600", Output: providers.Output{Stdout: signalWriter{started}}})
		done <- err
	}()
	<-started
	require.NoError(t, d.Destroy(t.Context(), sb.ID()))
	requireKind(t, <-done, fault.Gone)
	assert.Equal(t, int64(1), d.served.Load(), "an execution cut short was not served")
}

// signalWriter closes its channel at the first write.
type signalWriter struct{ c chan struct{} }

func (w signalWriter) Write(p []byte) (int, error) {
	select {
	case <-w.c:
	default:
		close(w.c)
	}
	return len(p), nil
}

// TestUnreached: a request sandboxd never served (here: refused for a token that is not its
// own) is fault.Provision wrapping providers.ErrUnreached, and UnreachedFunc hears of it.
func TestUnreached(t *testing.T) {
	d := newDaemons(t)
	created := create(t, d)
	d.mu.Lock()
	dm := d.live[created.ID()]
	wrong := remote.NewTCPClient(dm.srv.URL, strings.Repeat("w", 40))
	d.mu.Unlock()
	t.Cleanup(func() { _ = wrong.Close() })
	sb := sdadapter.New(sdadapter.Config{
		Subject: subject, ID: created.ID(), CapsFunc: d.Capabilities,
		ClientFunc:    func() *remote.Client { return wrong },
		UnreachedFunc: func() { d.unreached.Add(1) },
	})
	_, err := sb.Exec(t.Context(), providers.ExecSpec{Command: "true"})
	requireKind(t, err, fault.Provision)
	assert.ErrorIs(t, err, providers.ErrUnreached)
	_, err = sb.ListFiles(t.Context(), "")
	assert.ErrorIs(t, err, providers.ErrUnreached)
	assert.Equal(t, int64(2), d.unreached.Load())
}

// TestBrokenConnection: a connection that breaks during a request is BrokenFunc's fault —
// fault.Provision while the sandbox lives, fault.Gone once it is gone.
func TestBrokenConnection(t *testing.T) {
	d := newDaemons(t)
	d.wrap = func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/files/list" && r.URL.Query().Get("path") == "break" {
				panic(http.ErrAbortHandler) // the connection is cut without an answer
			}
			h.ServeHTTP(w, r)
		})
	}
	sb := create(t, d)
	_, err := sb.ListFiles(t.Context(), "break")
	requireKind(t, err, fault.Provision)
	assert.False(t, fault.IsKind(err, fault.Gone), "the sandbox lives: %v", err)
	assert.False(t, errors.Is(err, providers.ErrUnreached), "the request was sent: %v", err)
	_, err = sb.ListFiles(t.Context(), "")
	require.NoError(t, err, "the next request gets a new connection")
}

// TestReadFileOutlivesItsContext: once a file is open, its reader lives until it is closed or
// read to the end, whatever becomes of the context that opened it.
func TestReadFileOutlivesItsContext(t *testing.T) {
	d := newDaemons(t)
	sb := create(t, d)
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	_, err := sb.WriteFile(t.Context(), "big.bin", bytes.NewReader(data), -1)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	rc, err := sb.ReadFile(ctx, "big.bin")
	require.NoError(t, err)
	cancel()
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, len(data), len(got))
	assert.True(t, bytes.Equal(data, got))

	_, err = sb.ReadFile(ctx, "big.bin")
	require.ErrorIs(t, err, context.Canceled, "opening is bound to the context")
}
