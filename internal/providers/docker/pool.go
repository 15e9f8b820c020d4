package docker

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// pool keeps containers of one profile started ahead of use (docker.warm_pool).
//
// A ready pool container is named sandgate-pool-<profile>-<random> and labelled with the
// profile (LabelPool) and the hash of its configuration (LabelSpec). Claiming one is a rename
// to a name derived from the container's own id, sandgate-<profile>-w<id12>, which it then
// keeps: every claimer of that container asks for the same new name, and the engine renames a
// container under its lock, comparing with the name it has then, so exactly one claimer
// succeeds; the others are told the container is not found (the pool name is gone) or already
// has that name. Two things would break this, and neither is done: renaming to distinct
// names (the engine resolves the old name before it takes the lock, so two claimers could both
// succeed), and renaming the claimed container again (a claimer still holding the old
// resolution would then succeed). The claim works the same across gateway replicas sharing an
// engine.
//
// The refill goroutine (one per provider) tops the pool up after each claim and every refill
// interval, and removes pool containers that exited or were made for another configuration.
// Replicas refill independently, so the pool may briefly hold more than its size.
type pool struct {
	p        *Provider
	size     int
	spec     containerSpec
	interval time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func newPool(p *Provider, size int, interval time.Duration) *pool {
	if interval <= 0 {
		interval = DefaultPoolRefillInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	pl := &pool{
		p: p, size: size, spec: p.spec(p.policy), interval: interval,
		ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	go pl.run()
	return pl
}

// stop ends the refill goroutine and waits for it.
func (pl *pool) stop() {
	pl.once.Do(pl.cancel)
	<-pl.done
}

func (pl *pool) wake() {
	select {
	case pl.kick <- struct{}{}:
	default:
	}
}

func (pl *pool) run() {
	defer close(pl.done)
	tick := time.NewTicker(pl.interval)
	defer tick.Stop()
	for {
		pl.refill(pl.ctx)
		select {
		case <-pl.ctx.Done():
			return
		case <-pl.kick:
		case <-tick.C:
		}
	}
}

// list returns the profile's ready pool containers (all states) with their names.
func (pl *pool) list(ctx context.Context, extra ...filters.KeyValuePair) ([]container.Summary, error) {
	args := filters.NewArgs(
		filters.Arg("label", LabelManagedBy+"="+ManagedBy),
		filters.Arg("label", LabelPool+"="+pl.p.profile),
	)
	for _, kv := range extra {
		args.Add(kv.Key, kv.Value)
	}
	list, err := pl.p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for _, c := range list {
		if strings.HasPrefix(primaryName(c.Names), poolPrefix) {
			out = append(out, c)
		}
	}
	return out, nil
}

// refill removes stale pool containers and creates the missing ones.
func (pl *pool) refill(ctx context.Context) {
	if err := pl.p.connect(ctx); err != nil {
		if ctx.Err() == nil {
			pl.p.log.Warn("warm pool: the engine does not answer; retrying later", "err", err)
		}
		return
	}
	list, err := pl.list(ctx)
	if err != nil {
		if ctx.Err() == nil {
			pl.p.log.Warn("warm pool: listing containers failed", "err", err)
		}
		return
	}
	ready := 0
	for _, c := range list {
		current := c.Labels[LabelSpec] == pl.spec.hash
		switch {
		case current && c.State == container.StateRunning:
			ready++
			continue
		case current && c.State == container.StateCreated && time.Since(time.Unix(c.Created, 0)) < time.Minute:
			continue // being started, perhaps by another replica
		}
		// Stopped, or made for an older configuration. Removing it by name: a claimer that
		// renamed it meanwhile keeps it.
		name := primaryName(c.Names)
		if err := pl.p.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) && ctx.Err() == nil {
			pl.p.log.Warn("warm pool: removing a stale container failed", "container", name, "err", err)
		}
	}
	for ; ready < pl.size && ctx.Err() == nil; ready++ {
		name := poolPrefix + pl.p.slug + "-" + randomHex(5)
		if _, err := pl.p.createContainer(ctx, pl.spec, name, map[string]string{LabelPool: pl.p.profile}); err != nil {
			if ctx.Err() == nil {
				pl.p.log.Warn("warm pool: creating a container failed; retrying later", "err", err)
			} else {
				pl.removeByName(name) // cancelled halfway
			}
			return
		}
	}
}

func (pl *pool) removeByName(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = pl.p.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// claim takes a ready container out of the pool and opens it, or returns nil when none can
// be had (the caller then creates a fresh one). It wakes the refill goroutine either way.
func (pl *pool) claim(ctx context.Context) *Sandbox {
	defer pl.wake()
	list, err := pl.list(ctx,
		filters.Arg("label", LabelSpec+"="+pl.spec.hash),
		filters.Arg("status", container.StateRunning))
	if err != nil {
		pl.p.log.Warn("warm pool: listing containers failed", "err", err)
		return nil
	}
	rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	for _, c := range list {
		if len(c.ID) < 12 {
			continue
		}
		if err := pl.p.cli.ContainerRename(ctx, primaryName(c.Names), claimedName(pl.p.slug, c.ID)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue // another claimer was first
		}
		// Ours alone from here on; never rename it again (see pool).
		sb, err := pl.p.openID(ctx, c.ID)
		if err != nil {
			pl.p.log.Warn("warm pool: a claimed container is not usable; discarding it", "container", c.ID, "err", err)
			pl.p.remove(c.ID)
			continue
		}
		pl.p.log.Debug("sandbox taken from the warm pool", "sandbox_id", c.ID)
		return sb
	}
	return nil
}

// DrainPool removes the profile's ready warm-pool containers (of every replica). Claimed
// ones are sandboxes and stay. It does not stop the refill goroutine (Close does): call it
// after Close to leave no pool behind.
func (p *Provider) DrainPool(ctx context.Context) error {
	if p.pool == nil {
		return nil
	}
	defer p.releaseIfClosed()
	if err := p.connect(ctx); err != nil {
		return err
	}
	list, err := p.pool.list(ctx)
	if err != nil {
		return p.engineErr(err, "listing warm-pool containers")
	}
	var errs []error
	for _, c := range list {
		err := p.cli.ContainerRemove(ctx, primaryName(c.Names), container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) { // conflict: already being removed
			errs = append(errs, err)
			continue
		}
		p.removeSocketFolder(c.Labels)
	}
	return errors.Join(errs...)
}

// PoolReady returns the ids of the profile's ready warm-pool containers made for the
// profile's current configuration (0 without a pool).
func (p *Provider) PoolReady(ctx context.Context) ([]string, error) {
	if p.pool == nil {
		return nil, nil
	}
	defer p.releaseIfClosed()
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	list, err := p.pool.list(ctx,
		filters.Arg("label", LabelSpec+"="+p.pool.spec.hash),
		filters.Arg("status", container.StateRunning))
	if err != nil {
		return nil, p.engineErr(err, "listing warm-pool containers")
	}
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	return ids, nil
}
