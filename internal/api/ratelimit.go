package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandgate/sandgate/internal/principal"
)

// RateLimit is the per-principal request rate of the REST API and the authenticated mounts
// (MCP): a token bucket of Burst
// requests refilled at PerSecond, per principal and per replica. PerSecond ≤ 0: no limit.
// Answers carry the RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers (IETF
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
		p, ok := principal.FromContext(r.Context())
		if !ok || (p.Admin && l.cfg.AdminsExempt) {
			next.ServeHTTP(w, r)
			return
		}
		allowed, remaining, reset, retry := l.take(p.Key())
		h := w.Header()
		h.Set("RateLimit-Limit", strconv.Itoa(l.cfg.Burst))
		h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("RateLimit-Reset", strconv.Itoa(reset))
		if !allowed {
			writeProblem(w, r, Problem{Type: ProblemTypeBase + "quota", Title: "Quota exceeded", Status: http.StatusTooManyRequests,
				Detail: "too many requests: this principal may send " + strconv.FormatFloat(l.cfg.PerSecond, 'g', -1, 64) +
					" per second (bursts of " + strconv.Itoa(l.cfg.Burst) + "; sandbox.quotas.requests_per_second); wait Retry-After seconds",
				retryAfter: retry})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// take spends one request of key's bucket; it reports what is left, the seconds until the
// bucket is full again, and, when refused, how long until one request is allowed.
func (l *rateLimiter) take(key string) (allowed bool, remaining, reset int, retry time.Duration) {
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

	res := b.lim.ReserveN(now, 1)
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
	ok, _, _, retry := l.take(key)
	return ok, retry
}
