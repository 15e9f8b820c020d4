package docker

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// pool keeps containers of one profile started ahead of use (docker.warm_pool).
//
// A ready pool container is named sandgate-pool-<profile>-<random> and labelled with the
// installation (LabelInstallation), the profile (LabelPool) and the hash of its configuration
// (LabelSpec); the pool is the installation's, so only its containers are claimed, refilled
// and drained. Claiming one is a rename
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
// Each provider also holds, in memory, a queue of the pool containers it has already opened:
// inspected, and their sandboxd reached and answering /readyz (a client of its own per entry,
// cached as the sandbox's client only once claimed). A claim pops one (at random, so that
// replicas claiming at once rarely race for the same container) and does only the rename,
// from the pool name it was queued under; when the rename fails (another replica, or a
// list-based claim of this one, was first, or the container is gone) the entry is closed and
// the next one tried, and with the queue empty the claim falls back to listing the pool's
// running containers and renaming one, as without a queue. A queued container is handed out
// only after its sandboxd answered /readyz once more (within claimReadyTimeout), over the
// entry's kept-alive connection: with the socket transport that never involves the engine;
// with the exec transport it does only when that connection was lost (a new `sandboxd proxy`
// exec). A container that fails it is already claimed, so it is removed and the claim goes
// on. So a container handed out exists (the rename found it under its pool name) and its
// sandboxd answers; its configuration is the one the refill checked when it queued it
// (labels and configuration never change); whether it was paused or restarted since is
// not asked of the engine.
//
// The refill goroutine (one per provider) tops the pool up after each claim and every refill
// interval, and removes pool containers that exited or were made for another configuration.
// It opens and queues every container it starts (after running `true` in it once, so that a
// session's first execution is not the container's; another replica's list-based claim may,
// rarely, have taken the container between its start and that `true`, which reads and
// writes nothing), and every running pool container of the current configuration it finds
// unqueued (started by another replica, or before a restart). It drops (and closes) the queued entries whose container is no longer listed as
// a running pool container (claimed elsewhere, removed, stopped) or whose sandboxd no longer
// answers /readyz (the next refill opens it afresh); a pool container that cannot be opened
// is removed by its pool name, so a claimer that renamed it meanwhile keeps it. Every
// replica queues every pool container, so replicas' queues overlap: the rename decides.
// Replicas refill independently, so the pool may briefly hold more than its size. stop (the
// provider's Close) closes every queued entry.
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

	mu     sync.Mutex
	queue  []*pooled           // opened pool containers, ready to claim
	taken  map[string]struct{} // ids popped by a claim still under way
	closed bool                // stop ran: nothing is queued any more
	later  *time.Timer         // wakeLater's timer

	hits, misses atomic.Uint64 // Creates served from the pool, and not (WarmPoolStats)
}

// pooled is an opened pool container in the queue.
type pooled struct {
	id   string // the container's full id
	name string // its pool name, which the claim renames from
	c    sdConn // its sandboxd client, owned by the entry until the claim caches it
}

func (e *pooled) close() { _ = e.c.rt.Close() }

func newPool(p *Provider, size int, interval time.Duration) *pool {
	if interval <= 0 {
		interval = DefaultPoolRefillInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	pl := &pool{
		p: p, size: size, spec: p.spec(p.policy), interval: interval,
		ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1), done: make(chan struct{}),
		taken: map[string]struct{}{},
	}
	go pl.run()
	return pl
}

// stop ends the refill goroutine, waits for it and closes the queued entries.
func (pl *pool) stop() {
	pl.once.Do(pl.cancel)
	<-pl.done
	pl.mu.Lock()
	q := pl.queue
	pl.queue, pl.closed = nil, true
	if pl.later != nil {
		pl.later.Stop()
	}
	pl.mu.Unlock()
	for _, e := range q {
		e.close()
	}
}

// refillDelay is how long after the last claim the refill starts: a burst of claims is not
// slowed down by the engine creating their replacements at the same time (container
// creation takes most of a small machine's CPU for a while).
const refillDelay = 500 * time.Millisecond

// wakeLater wakes the refill refillDelay after the last call.
func (pl *pool) wakeLater() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		return
	}
	if pl.later == nil {
		pl.later = time.AfterFunc(refillDelay, pl.wake)
	} else {
		pl.later.Reset(refillDelay)
	}
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

// pop takes a random entry off the queue and marks its container taken (nil: none queued).
// The caller calls untake once its claim is decided.
func (pl *pool) pop() *pooled {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := len(pl.queue)
	if n == 0 || pl.closed {
		return nil
	}
	i := rand.IntN(n)
	e := pl.queue[i]
	pl.queue[i] = pl.queue[n-1]
	pl.queue[n-1] = nil
	pl.queue = pl.queue[:n-1]
	pl.taken[e.id] = struct{}{}
	return e
}

func (pl *pool) untake(id string) {
	pl.mu.Lock()
	delete(pl.taken, id)
	pl.mu.Unlock()
}

// push queues e, or closes it when its container is queued or taken already, or the pool
// stopped.
func (pl *pool) push(e *pooled) {
	pl.mu.Lock()
	_, taken := pl.taken[e.id]
	ok := !pl.closed && !taken && pl.indexLocked(e.id) < 0
	if ok {
		pl.queue = append(pl.queue, e)
	}
	pl.mu.Unlock()
	if !ok {
		e.close()
	}
}

func (pl *pool) indexLocked(id string) int {
	for i, e := range pl.queue {
		if e.id == id {
			return i
		}
	}
	return -1
}

// has reports whether container id is queued or taken.
func (pl *pool) has(id string) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	_, taken := pl.taken[id]
	return taken || pl.indexLocked(id) >= 0
}

// drop removes from the queue, and closes, the entries keep returns false for.
func (pl *pool) drop(keep func(*pooled) bool) {
	pl.mu.Lock()
	var gone []*pooled
	q := pl.queue[:0]
	for _, e := range pl.queue {
		if keep(e) {
			q = append(q, e)
		} else {
			gone = append(gone, e)
		}
	}
	clear(pl.queue[len(q):])
	pl.queue = q
	pl.mu.Unlock()
	for _, e := range gone {
		e.close()
	}
}

// snapshot returns the queued entries.
func (pl *pool) snapshot() []*pooled {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return slices.Clone(pl.queue)
}

// queued returns how many entries are queued.
func (pl *pool) queued() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.queue)
}

// list returns the profile's ready pool containers of this installation (all states) with
// their names: another installation's pool of a profile with the same name is never
// claimed, refilled or drained.
func (pl *pool) list(ctx context.Context, extra ...filters.KeyValuePair) ([]container.Summary, error) {
	args := filters.NewArgs(
		filters.Arg("label", LabelManagedBy+"="+ManagedBy),
		filters.Arg("label", LabelInstallation+"="+pl.p.installation),
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

// Bounds of the /readyz of a queued entry: in a refill, and when it is claimed (a paused or
// wedged container's sandboxd never answers).
const (
	poolCheckTimeout  = 5 * time.Second
	claimReadyTimeout = 5 * time.Second
)

// refill removes stale pool containers, creates the missing ones and keeps the queue in step
// with the engine (see pool).
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
	running := map[string]string{} // id → pool name, of the current configuration
	var unqueued []container.Summary
	for _, c := range list {
		current := c.Labels[LabelSpec] == pl.spec.hash
		switch {
		case current && c.State == container.StateRunning:
			ready++
			running[c.ID] = primaryName(c.Names)
			if !pl.has(c.ID) {
				unqueued = append(unqueued, c)
			}
			continue
		case current && c.State == container.StateCreated && time.Since(time.Unix(c.Created, 0)) < time.Minute:
			continue // being started, perhaps by another replica
		}
		// Stopped, or made for an older configuration. Removing it by name: a claimer that
		// renamed it meanwhile keeps it.
		name := primaryName(c.Names)
		if err := pl.p.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			if !cerrdefs.IsNotFound(err) && ctx.Err() == nil {
				pl.p.log.Warn("warm pool: removing a stale container failed", "container", name, "err", err)
			}
		} else {
			pl.p.removeDisk(c.Labels)
		}
	}
	// Queued entries no longer listed as running pool containers: claimed by another replica
	// (or by a list-based claim here), removed, stopped.
	pl.drop(func(e *pooled) bool { return running[e.id] == e.name })
	for _, e := range pl.snapshot() {
		cctx, cancel := context.WithTimeout(ctx, poolCheckTimeout)
		err := e.c.rt.Ready(cctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			// Dropped only: the next refill opens it afresh, and removes it if that fails.
			pl.p.log.Warn("warm pool: a queued container's sandboxd does not answer; dropping it", "container", e.id, "err", err)
			pl.drop(func(q *pooled) bool { return q != e })
		}
	}
	for _, c := range unqueued {
		if ctx.Err() != nil {
			return
		}
		if !pl.openAndQueue(ctx, c.ID, primaryName(c.Names), false) {
			ready-- // claimed, gone or broken meanwhile: made up for below
		}
	}
	for ; ready < pl.size && ctx.Err() == nil; ready++ {
		name := poolPrefix + pl.p.slug + "-" + randomHex(5)
		id, err := pl.p.createContainer(ctx, pl.spec, name, map[string]string{LabelPool: pl.p.profile})
		if err != nil {
			if ctx.Err() == nil {
				pl.p.log.Warn("warm pool: creating a container failed; retrying later", "err", err)
			} else {
				pl.removeByName(name) // cancelled halfway
			}
			return
		}
		if !pl.openAndQueue(ctx, id, name, true) && ctx.Err() == nil {
			return // retried at the next refill
		}
	}
}

// openAndQueue opens pool container id, named name, and queues it; with warm set (a
// container this refill just started) it first runs `true` in it once. A container that
// cannot be opened (or run `true`) is removed by that name (a claimer that renamed it
// meanwhile keeps it). It reports whether the container is queued (or being claimed) now.
func (pl *pool) openAndQueue(ctx context.Context, id, name string, warm bool) bool {
	ins, err := pl.p.cli.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return false // removed meanwhile
	case err != nil:
		if ctx.Err() == nil {
			pl.p.log.Warn("warm pool: inspecting a container failed", "container", id, "err", err)
		}
		return false
	case ins.Name != "/"+name:
		return false // claimed meanwhile
	case ins.State == nil || !ins.State.Running || ins.State.Paused:
		return false // the next refill removes it, or it is someone's business
	}
	c, err := pl.p.dialSandboxd(ctx, ins, true)
	if err != nil {
		if ctx.Err() == nil {
			pl.p.log.Warn("warm pool: a pool container's sandboxd does not answer; removing it", "container", id, "err", err)
			pl.removeByName(name)
		}
		return false
	}
	if warm {
		// The first execution in a fresh container costs a few ms more than the next ones
		// (the shell and its libraries are looked up through the container's new overlay
		// mount for the first time): paid here, off the session's path.
		_, err := c.rt.Exec(ctx, sandboxd.ExecRequest{Command: "true", Timeout: time.Minute}, sandboxd.Streams{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			_ = c.rt.Close()
			if ctx.Err() == nil {
				pl.p.log.Warn("warm pool: a pool container cannot run a program; removing it", "container", id, "err", err)
				pl.removeByName(name)
			}
			return false
		}
	}
	pl.push(&pooled{id: id, name: name, c: c})
	return true
}

func (pl *pool) removeByName(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ins, ierr := pl.p.cli.ContainerInspect(ctx, name)
	if err := pl.p.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}); err == nil && ierr == nil && ins.Config != nil {
		pl.p.removeDisk(ins.Config.Labels)
	}
}

// claim takes a ready container out of the pool and opens it, or returns nil when none can
// be had (the caller then creates a fresh one): from the queue, else from the engine's list
// (see pool). It wakes the refill goroutine either way.
func (pl *pool) claim(ctx context.Context) *Sandbox {
	defer pl.wakeLater()
	for {
		e := pl.pop()
		if e == nil {
			break
		}
		sb := pl.claimQueued(ctx, e)
		if sb != nil {
			return sb
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return pl.claimListed(ctx)
}

// claimQueued claims popped entry e: the rename, then its sandboxd's /readyz (see pool).
func (pl *pool) claimQueued(ctx context.Context, e *pooled) *Sandbox {
	defer pl.untake(e.id)
	if err := pl.p.cli.ContainerRename(ctx, e.name, claimedName(pl.p.slug, e.id)); err != nil {
		e.close() // another claimer was first, or the container is gone
		return nil
	}
	// Ours alone from here on; never rename it again (see pool).
	rctx, cancel := context.WithTimeout(ctx, claimReadyTimeout)
	err := e.c.rt.Ready(rctx)
	cancel()
	if err != nil {
		e.close()
		pl.p.log.Warn("warm pool: a claimed container is not usable; discarding it", "container", e.id, "err", err)
		pl.p.remove(e.id)
		return nil
	}
	sb := pl.p.handle(e.id, pl.p.keepClient(e.id, e.c))
	pl.p.log.Debug("sandbox taken from the warm pool", "sandbox_id", e.id)
	return sb
}

// claimListed claims one of the pool's running containers the engine lists (the queue is
// empty).
func (pl *pool) claimListed(ctx context.Context) *Sandbox {
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
		// Ours alone from here on; never rename it again (see pool). The refill may have
		// queued it meanwhile.
		pl.drop(func(e *pooled) bool { return e.id != c.ID })
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

// DrainPool removes the profile's ready warm-pool containers of this installation (of every
// replica). Claimed ones are sandboxes and stay. It does not stop the refill goroutine (Close does): call it
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
		if err == nil {
			p.removeDisk(c.Labels)
		}
		p.pool.drop(func(e *pooled) bool { return e.id != c.ID })
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
