package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
)

// RateLimit is the per-principal request rate of the REST API and the authenticated mounts
// (MCP): a token bucket of Burst requests refilled at PerSecond, per principal and per
// replica. PerSecond ≤ 0: no limit. A request counts once, except one that carries several
// calls (a JSON-RPC batch to /mcp, Mount.Calls), which counts once per call. Answers carry the
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers (IETF
// draft-ietf-httpapi-ratelimit-headers); over the rate, 429 problem "quota" with Retry-After.
type RateLimit struct {
	PerSecond    float64
	Burst        int
	AdminsExempt bool
}

// rateLimiter keeps one bucket per principal, forgetting those idle for rateIdle.
type rateLimiter struct {
	cfg RateLimit
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

const rateIdle = 10 * time.Minute

func newRateLimiter(cfg RateLimit, now func() time.Time) *rateLimiter {
	if cfg.Burst < 1 {
		cfg.Burst = max(1, int(math.Ceil(cfg.PerSecond)))
	}
	return &rateLimiter{cfg: cfg, now: now, buckets: map[string]*bucket{}}
}

// middleware runs after authentication (it needs the principal).
func (l *rateLimiter) middleware(next http.Handler) http.Handler {
	if l == nil || l.cfg.PerSecond <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.spend(w, r, 1, 1) {
			next.ServeHTTP(w, r)
		}
	})
}

// spend takes n requests of the bucket of r's principal for a request that carries calls
// calls (a JSON-RPC batch costs one request per message, Mount.Calls: the rate limiter takes
// the first, spend the rest) and sets the RateLimit-* fields. Refused, it answers 429 (or
// 413, for more calls than a full bucket holds) and reports false. Without a limit, without
// a principal, or for an exempt admin it takes nothing and reports true.
func (l *rateLimiter) spend(w http.ResponseWriter, r *http.Request, n, calls int) bool {
	if l == nil || l.cfg.PerSecond <= 0 || n <= 0 {
		return true
	}
	p, ok := principal.FromContext(r.Context())
	if !ok || (p.Admin && l.cfg.AdminsExempt) {
		return true
	}
	if calls > l.cfg.Burst {
		writeProblem(w, r, Problem{Type: ProblemTypeBase + string(fault.TooLarge), Title: "Too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("this request carries %d calls, each counted as one request, and this principal may send at most %d at once "+
				"(sandbox.quotas.requests_burst); send fewer per batch", calls, l.cfg.Burst)})
		return false
	}
	allowed, remaining, reset, retry := l.take(p.Key(), n)
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(l.cfg.Burst))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(reset))
	if !allowed {
		what := "too many requests: "
		if calls > 1 {
			what = fmt.Sprintf("too many requests: this one carries %d calls, each counted as one request, and ", calls)
		}
		writeProblem(w, r, Problem{Type: ProblemTypeBase + "quota", Title: "Quota exceeded", Status: http.StatusTooManyRequests,
			Detail: what + "this principal may send " + strconv.FormatFloat(l.cfg.PerSecond, 'g', -1, 64) +
				" per second (bursts of " + strconv.Itoa(l.cfg.Burst) + "; sandbox.quotas.requests_per_second); wait Retry-After seconds",
			retryAfter: retry})
		return false
	}
	return true
}

// take spends n requests (at most a full bucket) of key's bucket, all or none; it reports
// what is left, the seconds until the bucket is full again, and, when refused, how long until
// n requests are allowed.
func (l *rateLimiter) take(key string, n int) (allowed bool, remaining, reset int, retry time.Duration) {
	now := l.now()
	l.mu.Lock()
	if now.Sub(l.swept) > time.Minute {
		for k, b := range l.buckets {
			if now.Sub(b.seen) > rateIdle {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(rate.Limit(l.cfg.PerSecond), l.cfg.Burst)}
		l.buckets[key] = b
	}
	b.seen = now
	l.mu.Unlock()

	res := b.lim.ReserveN(now, n)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		retry = d
	} else {
		allowed = true
	}
	tokens := b.lim.TokensAt(now)
	remaining = max(0, int(math.Floor(tokens)))
	reset = int(math.Ceil((float64(l.cfg.Burst) - tokens) / l.cfg.PerSecond))
	return allowed, remaining, max(reset, 0), retry
}

// allow spends one request of key's bucket and reports whether it may go on, and if not,
// when one request will be allowed again. With no rate configured, everything is allowed.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	if l == nil || l.cfg.PerSecond <= 0 {
		return true, 0
	}
	ok, _, _, retry := l.take(key, 1)
	return ok, retry
}
