package docker

// PoolQueued returns how many opened pool containers p holds in memory, ready to claim
// without asking the engine for a list (0 without a warm pool).
func PoolQueued(p *Provider) int {
	if p.pool == nil {
		return 0
	}
	return p.pool.queued()
}

// AssumeStorageOpt makes p believe its engine can bound a container's size with storage-opt
// (as an engine on xfs with pquota, btrfs or zfs would), so that a test on another engine
// sees the refusal and the fall-back to a loop disk.
func AssumeStorageOpt(p *Provider) {
	yes := true
	p.disk.mu.Lock()
	p.disk.storageOpt = &yes
	p.disk.mu.Unlock()
}

// DiskError says why p cannot make loop disks (nil when it can).
func DiskError(p *Provider) error { return p.disk.loopErr }
