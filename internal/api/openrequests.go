package api

import (
	"net/http"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
)

// OpenRequests bounds each principal's requests in progress at once on this replica
// (sandbox.quotas.open_requests): every authenticated request — REST, MCP, preview ports —
// counts from the moment it is authenticated until its handler returns, so a stream (standard
// input fed by a chunked body, an upload or a download, an event stream, a preview port's
// WebSocket, an MCP stream) counts for as long as it stays open. Each holds a connection and
// its file descriptor; without a bound one principal at the request rate reaches the
// process's descriptor limit in minutes (issue 33: 300 slow standard-input streams held open
// for the whole read timeout). Over the limit, 429 problem "quota" with Retry-After
// (openRetry). Limit ≤ 0: none.
type OpenRequests struct {
	Limit        int
	AdminsExempt bool
}

// openRetry is the Retry-After of a request over OpenRequests: streams end when their
// client closes them, or after server.stream_idle_timeout without a byte.
const openRetry = 5 * time.Second

// openLimiter counts each principal's requests in progress (by principal key).
type openLimiter struct {
	cfg OpenRequests

	mu   sync.Mutex
	open map[string]int
}

func newOpenLimiter(cfg OpenRequests) *openLimiter {
	return &openLimiter{cfg: cfg, open: map[string]int{}}
}

// limitFor is p's limit (≤ 0: none).
func (l *openLimiter) limitFor(p principal.Principal) int {
	if l == nil || l.cfg.Limit <= 0 || (p.Admin && l.cfg.AdminsExempt) {
		return 0
	}
	return l.cfg.Limit
}

// inUse is how many requests p has in progress here.
func (l *openLimiter) inUse(p principal.Principal) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[p.Key()]
}

// hold counts one more request of p; release ends it. Errors: fault.Quota when p has its
// limit of requests in progress.
func (l *openLimiter) hold(p principal.Principal) (release func(), err error) {
	key, limit := p.Key(), l.limitFor(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit > 0 && l.open[key] >= limit {
		return nil, fault.OverQuota(openRetry, "you have %d requests in progress on this gateway replica, the limit of sandbox.quotas.open_requests "+
			"(streams count while they stay open: standard input, uploads and downloads, event streams, preview ports and their WebSockets, MCP)", limit).
			WithHint("end streams you no longer read or feed, then retry after Retry-After seconds", "")
	}
	l.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[key]--; l.open[key] <= 0 {
				delete(l.open, key)
			}
		})
	}, nil
}

// middleware runs after authentication (it needs the principal): it holds a place for the
// request until next returns, or answers 429.
func (l *openLimiter) middleware(next http.Handler) http.Handler {
	if l == nil || l.cfg.Limit <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := principal.FromContext(r.Context())
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		release, err := l.hold(p)
		if err != nil {
			writeProblem(w, r, ProblemFor(err))
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// openRequests is p's quota of requests in progress, for GET /v1/me (-1: no limit).
func (s *Server) openRequests(p principal.Principal) apigen.Quota {
	limit := s.open.limitFor(p)
	if limit <= 0 {
		limit = -1
	}
	return apigen.Quota{Used: s.open.inUse(p), Limit: limit}
}
