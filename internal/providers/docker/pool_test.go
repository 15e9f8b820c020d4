package docker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

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
