package docker

// PoolQueued returns how many opened pool containers p holds in memory, ready to claim
// without asking the engine for a list (0 without a warm pool).
func PoolQueued(p *Provider) int {
	if p.pool == nil {
		return 0
	}
	return p.pool.queued()
}
