package quota

import (
	"slices"
	"sync"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
)

// The MCP-sessions quota (sandbox.quotas.mcp_sessions) bounds the MCP sessions one principal
// holds on this replica. MCP sessions live in the memory of the replica that opened them
// (internal/mcp), so they are counted here, per replica, not in the store: the MCP edge
// holds one for each session it initializes and tells how to find out whether it is still
// open; closed sessions (DELETE, idle timeout, shutdown) stop counting the next time the
// count is taken.

// mcpSessions is what each principal (by key) holds on this replica: one liveness check per
// open MCP session.
type mcpSessions struct {
	mu   sync.Mutex
	held map[string][]*mcpHolding
}

type mcpHolding struct{ alive func() bool }

// liveLocked drops key's closed sessions and returns how many stay. Call with mu held.
func (m *mcpSessions) liveLocked(key string) int {
	live := slices.DeleteFunc(m.held[key], func(h *mcpHolding) bool { return !h.alive() })
	if len(live) == 0 {
		delete(m.held, key)
	} else {
		m.held[key] = live
	}
	return len(live)
}

func (m *mcpSessions) live(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveLocked(key)
}

// HoldMCPSession counts an MCP session that p opens on this replica against p's
// sandbox.quotas.mcp_sessions; alive reports whether the session is still open (it is called
// under a lock, whenever the count is taken, and must be quick). release gives the place back
// at once (an initialize that failed). Errors: fault.Quota (Retry-After 60 s) when p already
// holds the limit of open sessions here.
func (r *Room) HoldMCPSession(p principal.Principal, alive func() bool) (release func(), err error) {
	m := &r.mcp
	key := p.Key()
	limit := r.MCPSessions(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[string][]*mcpHolding{}
	}
	if limit > 0 && m.liveLocked(key) >= limit {
		return nil, fault.OverQuota(mcpSessionRetry,
			"you hold %d MCP sessions on this gateway replica, the limit of sandbox.quotas.mcp_sessions", limit).
			WithHint("close an MCP session you no longer use (DELETE /mcp with its Mcp-Session-Id, or end its client) and connect again",
				"close an MCP client you no longer use and connect again")
	}
	h := &mcpHolding{alive: alive}
	m.held[key] = append(m.held[key], h)
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.held[key] = slices.DeleteFunc(m.held[key], func(o *mcpHolding) bool { return o == h })
		if len(m.held[key]) == 0 {
			delete(m.held, key)
		}
	}, nil
}
