package docker_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// waitQueued waits until p holds n opened pool containers in memory.
func waitQueued(t testing.TB, p *docker.Provider, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for docker.PoolQueued(p) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool's queue did not fill up: %d of %d", docker.PoolQueued(p), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// engineProxy is a Unix socket in front of the real engine that records every API request.
type engineProxy struct {
	host string // the address to give the provider (unix://…)
	mu   sync.Mutex
	reqs []string // "METHOD /path", without the API version
}

var apiVersion = regexp.MustCompile(`^/v[0-9.]+/`)

func newEngineProxy(t *testing.T) *engineProxy {
	t.Helper()
	requireEngine(t)
	cli := engineClient(t)
	target := cli.DaemonHost()
	_ = cli.Close()
	sockPath, ok := strings.CutPrefix(target, "unix://")
	if !ok {
		t.Skipf("the engine is not on a local Unix socket (%s)", target)
	}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "engine.sock"))
	require.NoError(t, err)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sockPath)
	}}
	ep := &engineProxy{host: "unix://" + ln.Addr().String()}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: "http", Host: "docker"}) },
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler:  func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep.mu.Lock()
		ep.reqs = append(ep.reqs, r.Method+" "+apiVersion.ReplaceAllString(r.URL.Path, "/"))
		ep.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		tr.CloseIdleConnections()
	})
	return ep
}

// take returns the requests recorded since the last take.
func (ep *engineProxy) take() []string {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	r := ep.reqs
	ep.reqs = nil
	return r
}

// TestWarmPoolClaimFromMemory: a claim from a full pool asks the engine for one rename and
// nothing else (no list, no inspect), then the sandbox runs at once.
func TestWarmPoolClaimFromMemory(t *testing.T) {
	t.Parallel()
	ep := newEngineProxy(t)
	p := newProvider(t, func(o *docker.Options) {
		o.Config.Host = ep.host
		o.Config.WarmPoolSize = 2
		o.PoolRefillInterval = time.Hour // the refill runs after claims only
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close()
		assert.NoError(t, p.DrainPool(ctx))
	})
	for range 3 {
		waitQueued(t, p, 2) // and the refill, woken by the last claim, is done
		pool, err := p.PoolReady(t.Context())
		require.NoError(t, err)
		require.Len(t, pool, 2)
		ep.take()
		sb := create(t, p, allowPol)
		reqs := ep.take()
		assert.Contains(t, pool, sb.ID(), "taken from the pool")
		// The claim's requests all come before Create returns; the refill it wakes starts
		// with a list. So what precedes the first list is the claim's.
		first := slices.IndexFunc(reqs, func(r string) bool { return r == "GET /containers/json" })
		if first < 0 {
			first = len(reqs)
		}
		claimReqs := reqs[:first]
		require.Len(t, claimReqs, 1, "engine requests of the claim: %v", reqs)
		assert.Regexp(t, `^POST /containers/sandgate-pool-[^/]+/rename$`, claimReqs[0])
		assert.Equal(t, "ok\n", sh(t, sb, "echo ok"))
		ins, err := inspect(t, sb.ID())
		require.NoError(t, err)
		assert.Equal(t, "/sandgate-"+ins.Config.Labels[docker.LabelProfile]+"-w"+sb.ID()[:12], ins.Name)
	}
}

// TestWarmPoolReplicasClaimQueued: two replicas that queued the same pool containers claim
// them at once; the rename hands each container to one of them only.
func TestWarmPoolReplicasClaimQueued(t *testing.T) {
	t.Parallel()
	const size, perReplica = 3, 4
	profile := testProfile(t)
	replica := func() *docker.Provider {
		return newProvider(t, func(o *docker.Options) {
			o.Profile = profile
			o.Config.WarmPoolSize = size
			o.PoolRefillInterval = 300 * time.Millisecond
		})
	}
	a, b := replica(), replica()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = a.Close()
		_ = b.Close()
		assert.NoError(t, a.DrainPool(ctx))
	})
	waitQueued(t, a, size)
	waitQueued(t, b, size)
	// Each queues the other's containers too: wait until both queued every one.
	require.Eventually(t, func() bool {
		ids, err := a.PoolReady(t.Context())
		return err == nil && docker.PoolQueued(a) == len(ids) && docker.PoolQueued(b) == len(ids)
	}, time.Minute, 50*time.Millisecond)
	pool, err := a.PoolReady(t.Context())
	require.NoError(t, err)

	var mu sync.Mutex
	var sbs []providers.Sandbox
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, p := range []*docker.Provider{a, b, a, b} {
		for range perReplica / 2 {
			wg.Go(func() {
				<-start
				sb, err := p.Create(t.Context(), agent, allowPol)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				sbs = append(sbs, sb)
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, sb := range sbs {
			assert.NoError(t, a.Destroy(ctx, sb.ID()))
		}
	})
	require.Len(t, sbs, 2*perReplica)
	seen := map[string]bool{}
	fromPool := 0
	for _, sb := range sbs {
		assert.False(t, seen[sb.ID()], "container %s was handed to two sessions", sb.ID())
		seen[sb.ID()] = true
		if slices.Contains(pool, sb.ID()) {
			fromPool++
		}
	}
	assert.Positive(t, fromPool, "some sessions got a queued container")
	for _, sb := range sbs {
		assert.Equal(t, "ok\n", sh(t, sb, "echo ok"))
	}
	t.Logf("%d sessions, %d from the pool of %d", len(sbs), fromPool, len(pool))
}

// TestWarmPoolQueuedContainerGoneBehindItsBack: a queued container that was stopped or removed
// by someone else is not handed out; the claim goes on to another one or a fresh container.
func TestWarmPoolQueuedContainerGoneBehindItsBack(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) {
		o.Config.WarmPoolSize = 1
		o.PoolRefillInterval = time.Hour // nothing notices before the claim
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close()
		assert.NoError(t, p.DrainPool(ctx))
	})
	cli := engineClient(t)
	defer cli.Close()
	for _, how := range []string{"killed", "removed"} {
		waitQueued(t, p, 1)
		pool, err := p.PoolReady(t.Context())
		require.NoError(t, err)
		require.Len(t, pool, 1)
		queued := pool[0]
		if how == "killed" {
			require.NoError(t, cli.ContainerKill(t.Context(), queued, "KILL"))
			waited, errc := cli.ContainerWait(t.Context(), queued, container.WaitConditionNotRunning)
			select {
			case <-waited:
			case err := <-errc:
				require.NoError(t, err)
			}
		} else {
			require.NoError(t, cli.ContainerRemove(t.Context(), queued, container.RemoveOptions{Force: true, RemoveVolumes: true}))
		}
		sb := create(t, p, allowPol)
		assert.NotEqual(t, queued, sb.ID(), how)
		assert.Equal(t, "ok\n", sh(t, sb, "echo ok"), how)
		_, err = cli.ContainerInspect(t.Context(), queued)
		assert.True(t, cerrdefs.IsNotFound(err), "%s: the claimer removes a dead container it claimed: %v", how, err)
	}
}

// waitReady waits until p's pool holds n ready containers.
func waitReady(t *testing.T, p *docker.Provider, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		ids, err := p.PoolReady(t.Context())
		return err == nil && len(ids) >= n
	}, 2*time.Minute, 200*time.Millisecond, "the warm pool did not fill up")
}

func TestWarmPoolConcurrentClaims(t *testing.T) {
	t.Parallel()
	const size, perReplica = 4, 5
	profile := testProfile(t)
	replica := func() *docker.Provider {
		p := newProvider(t, func(o *docker.Options) {
			o.Profile = profile
			o.Config.WarmPoolSize = size
			o.PoolRefillInterval = 500 * time.Millisecond
		})
		return p
	}
	a, b := replica(), replica()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = a.Close()
		_ = b.Close()
		assert.NoError(t, a.DrainPool(ctx))
	})
	waitReady(t, a, size)
	pool, err := a.PoolReady(t.Context())
	require.NoError(t, err)

	// Two replicas, many sessions at once.
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, p := range []*docker.Provider{a, b} {
		for range perReplica {
			wg.Go(func() {
				<-start
				sb, err := p.Create(t.Context(), agent, allowPol)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				ids = append(ids, sb.ID())
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, id := range ids {
			assert.NoError(t, a.Destroy(ctx, id))
		}
	})

	seen := map[string]bool{}
	for _, id := range ids {
		assert.False(t, seen[id], "container %s was handed to two sessions", id)
		seen[id] = true
	}
	fromPool := 0
	for _, id := range pool {
		if seen[id] {
			fromPool++
		}
	}
	assert.Positive(t, fromPool, "some sessions got a pooled container")
	t.Logf("%d sessions, %d from the pool of %d", len(ids), fromPool, size)

	// A claimed container is an ordinary sandbox: named as claimed, usable, destroyed alone.
	for _, id := range pool {
		if !seen[id] {
			continue
		}
		ins, err := inspect(t, id)
		require.NoError(t, err)
		assert.False(t, strings.HasPrefix(ins.Name, "/sandgate-pool-"), ins.Name)
		sb, err := b.Attach(t.Context(), id, agent, allowPol)
		require.NoError(t, err)
		assert.Equal(t, "ok\n", sh(t, sb, "echo ok"))
		break
	}

	// The pool refills.
	waitReady(t, a, size)

	// A claimed container carries no claim time: the sweep counts it orphaned from the first
	// sweep that finds it unclaimed. Ready pool containers are never swept.
	var claimed string
	for _, id := range pool {
		if seen[id] {
			claimed = id
		}
	}
	a.OrphanMinAge = time.Nanosecond
	keep := func(id string) bool { return id != claimed }
	removed, err := a.SweepOrphans(t.Context(), keep)
	require.NoError(t, err)
	assert.Empty(t, removed, "not at first sight")
	removed, err = a.SweepOrphans(t.Context(), keep)
	require.NoError(t, err)
	assert.Equal(t, []string{claimed}, removed)
	ready, err := a.PoolReady(t.Context())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(ready), size, "ready pool containers are not swept")
}

func TestWarmPoolOnlyServesItsPolicy(t *testing.T) {
	t.Parallel()
	p := newProvider(t, func(o *docker.Options) {
		o.Config.WarmPoolSize = 1
		o.PoolRefillInterval = 500 * time.Millisecond
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close()
		assert.NoError(t, p.DrainPool(ctx))
	})
	waitReady(t, p, 1)
	pooled, err := p.PoolReady(t.Context())
	require.NoError(t, err)

	deny := allowPol
	deny.NetworkEgress = providers.EgressDeny
	sb := create(t, p, deny)
	assert.NotEqual(t, pooled[0], sb.ID(), "a pool made for another policy is not used")
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, "none", string(ins.HostConfig.NetworkMode))

	sb = create(t, p, allowPol)
	assert.Equal(t, pooled[0], sb.ID())
}

// benchProvider is newProvider for benchmarks (skipped without an engine or the test image).
func benchProvider(b *testing.B, mutate func(*docker.Options)) *docker.Provider {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	defer cancel()
	if !docker.Available(ctx, "") {
		b.Skip("no Docker engine is reachable (run scripts/docker-setup.sh)")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(b, err)
	_, err = cli.ImageInspect(ctx, testImage)
	_ = cli.Close()
	if err != nil {
		b.Skip("the test image " + testImage + " is missing (run scripts/docker-setup.sh)")
	}
	opts := docker.Options{
		Profile:      "t-bench-" + randomSuffix(),
		Installation: testInstallation,
		Config:       docker.Config{Image: testImage, NeverPull: true},
		Policy:       allowPol,
		Logger:       quietLogs,
	}
	if mutate != nil {
		mutate(&opts)
	}
	p, err := docker.New(opts)
	require.NoError(b, err)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close()
		assert.NoError(b, p.DrainPool(ctx))
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		defer cli.Close()
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelProfile+"="+opts.Profile))})
		if err != nil {
			return
		}
		for _, c := range list {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	})
	return p
}

// benchCreateExec times Create + the first execution (`true`) per iteration, the sandbox
// destroyed off the clock; before (off the clock too) runs ahead of each iteration. It
// reports the median and the 90th percentile besides the mean, and the median of Create
// alone.
func benchCreateExec(b *testing.B, p *docker.Provider, before func()) {
	var ds, creates []time.Duration
	for b.Loop() {
		b.StopTimer()
		before()
		b.StartTimer()
		start := time.Now()
		sb, err := p.Create(b.Context(), agent, allowPol)
		require.NoError(b, err)
		creates = append(creates, time.Since(start))
		st, err := sb.Exec(b.Context(), providers.ExecSpec{Command: "true", Timeout: time.Minute})
		ds = append(ds, time.Since(start))
		b.StopTimer()
		require.NoError(b, err)
		require.Zero(b, st.ExitCode)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		require.NoError(b, p.Destroy(ctx, sb.ID()))
		cancel()
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	slices.Sort(ds)
	slices.Sort(creates)
	b.ReportMetric(ms(ds[len(ds)/2]), "p50-ms")
	b.ReportMetric(ms(ds[len(ds)*9/10]), "p90-ms")
	b.ReportMetric(ms(creates[len(creates)/2]), "create-p50-ms")
}

// BenchmarkWarmPoolClaim: Create + first execution with the warm pool's queue full (the pool
// refills between iterations, off the clock).
func BenchmarkWarmPoolClaim(b *testing.B) {
	const size = 2
	p := benchProvider(b, func(o *docker.Options) {
		o.Config.WarmPoolSize = size
		o.PoolRefillInterval = 200 * time.Millisecond
	})
	benchCreateExec(b, p, func() { waitQueued(b, p, size) })
}

// BenchmarkColdCreate: Create + first execution without a warm pool (a container created and
// started for the sandbox), for the ratio to BenchmarkWarmPoolClaim in the same run.
func BenchmarkColdCreate(b *testing.B) {
	p := benchProvider(b, nil)
	benchCreateExec(b, p, func() {})
}

// BenchmarkWarmPoolBurst: 20 concurrent Creates + first executions against a full pool of 20
// (each iteration is one burst; the pool refills off the clock between them). Reports the
// median and slowest Create + first `true` of the burst.
func BenchmarkWarmPoolBurst(b *testing.B) {
	const size = 20
	p := benchProvider(b, func(o *docker.Options) {
		o.Config.WarmPoolSize = size
		o.PoolRefillInterval = 200 * time.Millisecond
	})
	var all []time.Duration
	for b.Loop() {
		b.StopTimer()
		waitQueued(b, p, size)
		b.StartTimer()
		ds := make([]time.Duration, size)
		ids := make([]string, size)
		var wg sync.WaitGroup
		for i := range size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				sb, err := p.Create(b.Context(), agent, allowPol)
				if !assert.NoError(b, err) {
					return
				}
				ids[i] = sb.ID()
				_, err = sb.Exec(b.Context(), providers.ExecSpec{Command: "true", Timeout: time.Minute})
				ds[i] = time.Since(start)
				assert.NoError(b, err)
			}()
		}
		wg.Wait()
		b.StopTimer()
		all = append(all, ds...)
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_ = p.Destroy(ctx, id)
			cancel()
		}
		b.StartTimer()
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max-ms")
}
