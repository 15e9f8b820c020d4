package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Metric names (docs/operations.md).
const (
	MetricExecutionDuration = "sandgate_execution_duration_seconds"
	MetricProviderErrors    = "sandgate_provider_errors_total"
	MetricAuthFailures      = "sandgate_auth_failures_total"
	MetricSessions          = "sandgate_sessions"
	MetricTasks             = "sandgate_tasks"
	MetricQueueDepth        = "sandgate_queue_depth"
	MetricQueueDeliveries   = "sandgate_queue_deliveries_total"
	MetricQueueRedeliveries = "sandgate_queue_redeliveries_total"
	MetricWarmPoolSize      = "sandgate_warm_pool_size"
	MetricWarmPoolReady     = "sandgate_warm_pool_ready"
	MetricWarmPoolClaims    = "sandgate_warm_pool_claims_total"
	MetricHTTPDuration      = "sandgate_http_request_duration_seconds"
	MetricStoreCountsUp     = "sandgate_store_counts_up"
	MetricBuildInfo         = "sandgate_build_info"
)

// TaskStatuses are the task statuses the tasks gauge always reports (0 when none).
var TaskStatuses = []string{"pending", "running", "succeeded", "failed", "timed_out", "cancelled", "lost"}

// DefaultCountsTTL is how long counts read from the database are reused.
const DefaultCountsTTL = 15 * time.Second

// WarmPool is one profile's provider that may keep a warm pool.
type WarmPool struct {
	Profile string
	Pooler  providers.WarmPooler
}

// Options build Metrics. Every field is optional.
type Options struct {
	// Version is reported by sandgate_build_info.
	Version string
	// Role is "gateway" or "worker" (a label of sandgate_build_info).
	Role string
	// Profiles are the configured profile names: the sessions and tasks gauges report each
	// with 0 rather than leave it out. Any other profile is reported as LabelOther.
	Profiles []string
	// Providers are the configured profiles' provider types; any other is LabelOther.
	Providers []string
	// Counts reads the database-wide counts (store.(*Store).Counts); nil: no such gauges.
	Counts func(ctx context.Context) (store.Counts, error)
	// CountsTTL bounds how often Counts runs; default DefaultCountsTTL.
	CountsTTL time.Duration
	Logger    *slog.Logger
}

// Metrics holds one process's metrics on a registry of its own (two gateways in one test
// process do not share counters). It implements sandbox.Observer. Safe for concurrent use.
type Metrics struct {
	profiles     labelSet // Options.Profiles
	providers    labelSet // Options.Providers
	reg          *prometheus.Registry
	execDuration *prometheus.HistogramVec
	providerErrs *prometheus.CounterVec
	authFailures *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	redeliveries prometheus.Counter
	httpDuration *prometheus.HistogramVec
}

// New registers every metric (and the Go runtime's and the process's) on a new registry.
func New(o Options) *Metrics {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CountsTTL <= 0 {
		o.CountsTTL = DefaultCountsTTL
	}
	m := &Metrics{
		profiles:  newLabelSet(o.Profiles...),
		providers: newLabelSet(o.Providers...),
		reg:       prometheus.NewRegistry(),
		execDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricExecutionDuration,
			Help: "Executions this process ran, by how they ended (task status): seconds from the start of their run (waiting for the session's turn, acquiring the sandbox, the program) to their completion.",
			// From a warm `echo` to a long job at the default 120 s timeout and beyond.
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"profile", "provider", "status"}),
		providerErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProviderErrors,
			Help: "Provider calls that failed on the provider's side, by profile, provider type, operation (create, attach, exec, write_file, destroy) and fault kind (provision, gone, broker, unavailable, timeout, internal); a caller's mistake the provider refused (conflict, validation, not-found, policy, too-large, capability) is not counted.",
		}, []string{"profile", "provider", "operation", "kind"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricAuthFailures,
			Help: "Requests refused authentication, by reason.",
		}, []string{"reason"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricQueueDeliveries,
			Help: "Queue deliveries this worker handled, by outcome (run, duplicate, deferred, failed).",
		}, []string{"outcome"}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricQueueRedeliveries,
			Help: "Queue deliveries of tasks that had already started on a worker (one that died or failed): each runs the task again from the start.",
		}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricHTTPDuration,
			Help:    "HTTP requests answered, by route pattern (unmatched: none), method (other: not a standard one) and status code: seconds to the end of the answer.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "code"}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBuildInfo, Help: "Always 1: this process's version and role."}, []string{"version", "role"})
	build.WithLabelValues(o.Version, o.Role).Set(1)
	m.reg.MustRegister(m.execDuration, m.providerErrs, m.authFailures, m.deliveries, m.redeliveries, m.httpDuration, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.Counts != nil {
		m.reg.MustRegister(&countsCollector{read: o.Counts, ttl: o.CountsTTL, profiles: o.Profiles, known: m.profiles, log: o.Logger})
	}
	return m
}

// WatchWarmPools reports pools' stats at each scrape (the providers are built after the
// metrics, which their builders may already use). Call it once.
func (m *Metrics) WatchWarmPools(pools []WarmPool) {
	if len(pools) > 0 {
		m.reg.MustRegister(&poolCollector{pools: pools})
	}
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// Registry is the registry (for tests and further collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ExecutionFinished implements sandbox.Observer.
func (m *Metrics) ExecutionFinished(profile, provider, status string, d time.Duration) {
	m.execDuration.WithLabelValues(m.profiles.of(profile), m.providers.of(provider), taskStatuses.of(status)).Observe(d.Seconds())
}

// ProviderError implements sandbox.Observer.
func (m *Metrics) ProviderError(profile, provider, op, kind string) {
	m.providerErrs.WithLabelValues(m.profiles.of(profile), m.providers.of(provider), providerOps.of(op), faultKinds.of(kind)).Inc()
}

// AuthFailed counts a request refused authentication for reason (auth.Reason*).
func (m *Metrics) AuthFailed(reason string) {
	m.authFailures.WithLabelValues(authReasons.of(reason)).Inc()
}

// Delivery counts a queue delivery's outcome (broker.Delivery*), and a redelivery.
func (m *Metrics) Delivery(outcome string, redelivered bool) {
	m.deliveries.WithLabelValues(deliveries.of(outcome)).Inc()
	if redelivered {
		m.redeliveries.Inc()
	}
}

// observeHTTP records one answered request; route and method are labels already
// (ServerHandler).
func (m *Metrics) observeHTTP(route, method string, code int, d time.Duration) {
	m.httpDuration.WithLabelValues(route, method, codeLabel(code)).Observe(d.Seconds())
}

var (
	descSessions   = prometheus.NewDesc(MetricSessions, "Sessions in the database, by profile and state (provisioned: holds a sandbox; unprovisioned: none yet, or freed by an idle reset; destroy_failed: destroying its sandbox failed, retried until it is gone). Database-wide: every replica reports the same value.", []string{"profile", "state"}, nil)
	descTasks      = prometheus.NewDesc(MetricTasks, "Tasks in the database, by profile and status (finished ones are kept for broker.response_ttl). Database-wide.", []string{"profile", "status"}, nil)
	descQueueDepth = prometheus.NewDesc(MetricQueueDepth, "Queued executions no worker has started yet (queue flavor). Database-wide.", nil, nil)
	descCountsUp   = prometheus.NewDesc(MetricStoreCountsUp, "1 when the last read of the database-wide counts succeeded, else 0 (the counts are then left out).", nil, nil)

	descPoolSize   = prometheus.NewDesc(MetricWarmPoolSize, "The warm pool's configured size, by profile.", []string{"profile"}, nil)
	descPoolReady  = prometheus.NewDesc(MetricWarmPoolReady, "Warm-pool sandboxes this process has ready to claim, by profile.", []string{"profile"}, nil)
	descPoolClaims = prometheus.NewDesc(MetricWarmPoolClaims, "Sandbox creations on a warm-pool profile, by whether a ready sandbox served them (hit) or one had to be started (miss).", []string{"profile", "result"}, nil)
)

// countsCollector reads the database-wide counts when scraped, reusing them for ttl.
type countsCollector struct {
	read     func(ctx context.Context) (store.Counts, error)
	ttl      time.Duration
	profiles []string
	known    labelSet // profiles; rows of any other count as LabelOther
	log      *slog.Logger

	mu     sync.Mutex // held while reading: concurrent scrapes wait for one read
	last   store.Counts
	ok     bool
	readAt time.Time
}

func (c *countsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSessions
	ch <- descTasks
	ch <- descQueueDepth
	ch <- descCountsUp
}

// countsTimeout bounds one read of the counts.
const countsTimeout = 5 * time.Second

func (c *countsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if time.Since(c.readAt) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), countsTimeout)
		counts, err := c.read(ctx)
		cancel()
		c.readAt, c.ok = time.Now(), err == nil
		if err != nil {
			c.log.Warn("metrics: reading the database-wide counts failed", "err", err)
		} else {
			c.last = counts
		}
	}
	counts, ok := c.last, c.ok
	c.mu.Unlock()
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descCountsUp, prometheus.GaugeValue, up)
	if !ok {
		return
	}
	sessions := map[[2]string]int64{}
	tasks := map[[2]string]int64{}
	for _, p := range c.profiles {
		sessions[[2]string{p, store.SessionProvisioned}] = 0
		sessions[[2]string{p, store.SessionUnprovisioned}] = 0
		sessions[[2]string{p, store.SessionDestroyFailed}] = 0
		for _, st := range TaskStatuses {
			tasks[[2]string{p, st}] = 0
		}
	}
	// Rows of a profile no longer configured add up under LabelOther.
	for _, n := range counts.Sessions {
		sessions[[2]string{c.known.of(n.Profile), sessionState.of(n.State)}] += n.N
	}
	for _, n := range counts.Tasks {
		tasks[[2]string{c.known.of(n.Profile), taskStatuses.of(n.State)}] += n.N
	}
	for k, n := range sessions {
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for k, n := range tasks {
		ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(counts.QueueDepth))
}

// poolCollector reads the warm pools' stats when scraped.
type poolCollector struct{ pools []WarmPool }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPoolSize
	ch <- descPoolReady
	ch <- descPoolClaims
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.pools {
		st, ok := p.Pooler.WarmPoolStats()
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(st.Size), p.Profile)
		ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(st.Ready), p.Profile)
		ch <- prometheus.MustNewConstMetric(descPoolClaims, prometheus.CounterValue, float64(st.Hits), p.Profile, "hit")
		ch <- prometheus.MustNewConstMetric(descPoolClaims, prometheus.CounterValue, float64(st.Misses), p.Profile, "miss")
	}
}
