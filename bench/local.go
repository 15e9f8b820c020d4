package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// localExec: scenario 1 (exec round trip, local) and 1b (broker flavors). It returns the
// session it used.
func localExec(ctx context.Context, g *gateway, tok string) string {
	sid := g.newSession(tok, "local")
	g.exec(tok, sid, "true") // warm up
	for i := 0; i < 20; i++ {
		g.exec(tok, sid, "true")
	}
	nExec := n(300, 50)
	gw := Summarize(timeN(nExec, func() { g.exec(tok, sid, "true") }))
	direct := Summarize(timeN(nExec, func() {
		if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
			panic(err)
		}
	}))
	add(Row{Scenario: "1 exec round trip", Variant: "local: through gateway", Summary: &gw})
	add(Row{Scenario: "1 exec round trip", Variant: "local: direct fork/exec sh -c", Summary: &direct})
	add(Row{Scenario: "1 exec round trip", Variant: "local: overhead", Value: fmt.Sprintf("+%.2f ms p50 (%.2fx), +%.2f ms p99", gw.P50-direct.P50, gw.P50/direct.P50, gw.P99-direct.P99)})

	// Postgres transactions per execution (see txPerExec on pg_stat_database flushes).
	xactRows(ctx, g, tok, sid, "local")
	if rtt, err := pgRoundTrip(ctx, g); err == nil {
		add(Row{Scenario: "1 exec round trip", Variant: "floor: one Postgres round trip (SELECT 1, pgx, loopback)", Summary: &rtt})
	} else {
		skip("postgres transactions per exec: " + err.Error())
	}

	// Queue flavor vs thread flavor: a second child with the in_memory queue (it consumes the
	// queue itself), the main one stays idle meanwhile.
	if qg, err := startChild(gwOpts{name: "queue", queued: true}); err != nil {
		skip("queue flavor: " + err.Error())
	} else {
		qtok := qg.token("bench-queue")
		qsid := qg.newSession(qtok, "local")
		for i := 0; i < 20; i++ {
			qg.exec(qtok, qsid, "true")
		}
		q := Summarize(timeN(n(200, 30), func() { qg.exec(qtok, qsid, "true") }))
		add(Row{Scenario: "1b broker flavor", Variant: "local: thread flavor", Summary: &gw})
		add(Row{Scenario: "1b broker flavor", Variant: "local: queue flavor (in_memory)", Summary: &q,
			Value: fmt.Sprintf("+%.2f ms p50 per exec vs thread", q.P50-gw.P50)})
		qg.close()
	}
	return sid
}

// xactRows adds the rows "Postgres transactions per short execution" and, on a server
// that flushes its commits (fsync=on), "Postgres WAL flushes per short execution" for
// executions of `true` in session sid (variant label): what g's database counted while they
// ran, less what an idle window of the same length counted (the heartbeat and the sweeps).
// Transactions count every commit, the ones that do not wait for the disk
// (synchronous_commit=off) too; WAL flushes (pg_stat_wal.wal_sync) count the waits for the
// disk, of commits and of the WAL writer's own rounds.
func xactRows(ctx context.Context, g *gateway, tok, sid, label string) {
	busy, idle, err := txPerExec(ctx, g, tok, sid)
	if err != nil {
		skip("postgres transactions per exec (" + label + "): " + err.Error())
		return
	}
	add(Row{Scenario: "1 exec round trip", Variant: label + ": Postgres transactions per short execution", Value: fmt.Sprintf("%.2f", busy.xacts-idle.xacts),
		Note: fmt.Sprintf("pg_stat_database xact_commit+xact_rollback over %d serial execs of `true`, %.2f/exec, less an idle window's %.2f/exec (heartbeat, sweeps)", txExecs, busy.xacts, idle.xacts)})
	if busy.fsync {
		add(Row{Scenario: "1 exec round trip", Variant: label + ": Postgres WAL flushes per short execution", Value: fmt.Sprintf("%.2f", busy.walSyncs-idle.walSyncs),
			Note: fmt.Sprintf("pg_stat_wal.wal_sync (the whole server) over the same execs, %.2f/exec, less the idle window's %.2f/exec", busy.walSyncs, idle.walSyncs)})
	}
}

// txExecs is how many executions txPerExec counts over.
const txExecs = 100

// txCounts are what a window of txPerExec counted, per execution.
type txCounts struct {
	xacts    float64 // committed and rolled back transactions of the database
	walSyncs float64 // WAL flushes of the server (pg_stat_wal.wal_sync)
	fsync    bool    // the server flushes (fsync=on): walSyncs means something
}

// txPerExec counts, per execution over txExecs serial executions, what the bench database
// counted (busy), and what an idle window as long would have counted (idle).
func txPerExec(ctx context.Context, g *gateway, tok, sid string) (busy, idle txCounts, err error) {
	conn, err := pgx.Connect(ctx, g.dbURL)
	if err != nil {
		return busy, idle, err
	}
	defer conn.Close(ctx)
	var fsync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync')").Scan(&fsync); err != nil {
		return busy, idle, err
	}
	// Postgres ≥ 15 backends flush their statistics at most once a second, and an idle one
	// whose last flush was too recent only after 10 s: wait that out (quick: 1.5 s, rougher).
	wait := time.Duration(n(11000, 1500)) * time.Millisecond
	type reading struct{ xacts, walSyncs int64 }
	read := func() (r reading, err error) {
		time.Sleep(wait)
		_, _ = conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
		err = conn.QueryRow(ctx, `SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
			(SELECT wal_sync FROM pg_stat_wal)`).Scan(&r.xacts, &r.walSyncs)
		return r, err
	}
	// Each window is a wait and a read, plus (the first) the executions; each read's own
	// transactions count in the window after it, alike in both.
	before, err := read()
	if err != nil {
		return busy, idle, err
	}
	t := time.Now()
	for i := 0; i < txExecs; i++ {
		g.exec(tok, sid, "true")
	}
	took := time.Since(t)
	after, err := read()
	if err != nil {
		return busy, idle, err
	}
	time.Sleep(took)
	end, err := read()
	if err != nil {
		return busy, idle, err
	}
	per := func(a, b reading) txCounts {
		return txCounts{xacts: float64(b.xacts-a.xacts) / txExecs, walSyncs: float64(b.walSyncs-a.walSyncs) / txExecs, fsync: fsync == "on"}
	}
	return per(before, after), per(after, end), nil
}

// pgRoundTrip times one round trip to the bench database from this process: the floor of
// the gateway's two per execution.
func pgRoundTrip(ctx context.Context, g *gateway) (Summary, error) {
	conn, err := pgx.Connect(ctx, g.dbURL)
	if err != nil {
		return Summary{}, err
	}
	defer conn.Close(ctx)
	var one int
	return Summarize(timeN(n(2000, 200), func() { _ = conn.QueryRow(ctx, "SELECT 1").Scan(&one) })), nil
}

// metadata: scenario 4.
func metadata(g *gateway, tok, sid string) {
	for _, c := range []int{1, 16} {
		lat, rate, _ := load(c, n(3, 1)*int(time.Second), n(50000, 3000), func(int) bool { g.mustGet(tok, "/v1/sessions/"+sid); return true })
		s := Summarize(lat)
		add(Row{Scenario: "4 GET /v1/sessions/{id}", Variant: fmt.Sprintf("%d concurrent clients", c), Summary: &s, Rate: rate})
	}
}

// bigOutput runs a program writing 100 MB to stdout and samples the gateway's RSS.
func bigOutput(g *gateway, tok, sid string) {
	var b []byte
	r := peakRSSGrowth(g.pid, func() { b = g.exec(tok, sid, "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 100000000") })
	add(Row{Scenario: "6 100 MB stdout", Variant: "local: gateway peak RSS growth", Value: fmt.Sprintf("%.1f MB (%.0f ms, reply %d bytes)%s", mb(r.growthKB), float64(r.took.Milliseconds()), len(b), r.hwmNote()),
		Note: "gateway child process VmRSS, sampled every 5 ms, over its RSS before"})
}

type rssGrowth struct {
	growthKB, beforeKB int64
	hwmKB              int64 // VmHWM after f, when it could be reset before f (else 0)
	took               time.Duration
}

// hwmNote is the absolute figures: RSS before, sampled peak and, where it could be reset,
// VmHWM.
func (r rssGrowth) hwmNote() string {
	s := fmt.Sprintf("; VmRSS %.1f -> peak %.1f MB", mb(r.beforeKB), mb(r.beforeKB+r.growthKB))
	if r.hwmKB != 0 {
		s += fmt.Sprintf(", VmHWM %.1f MB (growth %.1f)", mb(r.hwmKB), mb(r.hwmKB-r.beforeKB))
	}
	return s
}

// peakRSSGrowth runs f while sampling pid's VmRSS every 5 ms and returns the peak's growth
// over the RSS before f and f's duration; and, where VmHWM could be reset before f, the
// high-water mark after it (catches peaks between samples).
func peakRSSGrowth(pid int, f func()) rssGrowth {
	time.Sleep(200 * time.Millisecond) // let the previous request's garbage settle a little
	hwmOK := resetHWM(pid)
	r := rssGrowth{beforeKB: statusKB(pid, "VmRSS")}
	var peak atomic.Int64
	peak.Store(r.beforeKB)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v := statusKB(pid, "VmRSS"); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t := time.Now()
	f()
	r.took = time.Since(t)
	close(stop)
	<-sampled
	r.growthKB = peak.Load() - r.beforeKB
	if hwmOK {
		r.hwmKB = statusKB(pid, "VmHWM")
	}
	return r
}

// upload PUTs size zero bytes, chunked, as upload.bin of session sid.
func upload(g *gateway, tok, sid string, size int64) (int, error) {
	req, err := http.NewRequest(http.MethodPut, g.URL+"/v1/sessions/"+sid+"/files/upload.bin", &zeros{left: size})
	if err != nil {
		return 0, err
	}
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// zeros is an endless reader of zero bytes that allocates nothing.
type zeros struct{ left int64 }

func (z *zeros) Read(b []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > z.left {
		b = b[:z.left]
	}
	clear(b)
	z.left -= int64(len(b))
	return len(b), nil
}

// bigUpload streams a 1 GiB file (chunked) into the workspace and samples the gateway's RSS:
// it must stream it from the socket to the sandbox in constant memory (goal ≤ 32 MB).
func bigUpload(g *gateway, tok, sid string) {
	var status int
	var err error
	r := peakRSSGrowth(g.pid, func() { status, err = upload(g, tok, sid, 1<<30) })
	if err != nil || status != http.StatusOK {
		skip(fmt.Sprintf("1 GiB upload: status %d, %v", status, err))
		return
	}
	_, _, _ = g.try(tok, http.MethodDelete, "/v1/sessions/"+sid+"/files/upload.bin", nil)
	add(Row{Scenario: "7 1 GiB upload", Variant: "local: gateway peak RSS growth", Value: fmt.Sprintf("%.1f MB (%.0f ms; goal <= 32 MB)%s", mb(r.growthKB), float64(r.took.Milliseconds()), r.hwmNote()),
		Note: "gateway child process VmRSS, sampled every 5 ms; chunked body"})
}

// scale seeds 10,000 sessions and 100,000 finished tasks for one principal, through the
// response store's own statements (gatewaytest.SeedListing, as a gateway writes them), and
// measures listing.
func scale(ctx context.Context, g *gateway) error {
	tok := g.token("bench-scale")
	t := time.Now()
	l, err := gatewaytest.SeedListing(ctx, g.dbURL, gatewaytest.ListingSeed{
		Issuer: g.iss.URL(), Subject: "bench-scale", Profile: "local", Provider: local.TypeName, Sessions: 10000, Tasks: 100000,
	})
	if err != nil {
		return err
	}
	add(Row{Scenario: "5 scale", Variant: "seed 10k sessions + 100k tasks (store statements, 8 at once)", Value: time.Since(t).Round(time.Millisecond).String(),
		Note: "through gatewaytest.SeedListing: one insert per session, an insert and a completion per task, as a gateway writes them"})

	k := n(200, 30)
	for _, q := range []struct{ name, path string }{
		{"GET /v1/sessions?limit=50", "/v1/sessions?limit=50"},
		{"GET /v1/sessions?limit=500", "/v1/sessions?limit=500"},
		{"GET /v1/sessions/{id} (10k rows)", "/v1/sessions/" + l.Sessions[4999]},
		{"GET /v1/tasks?limit=50", "/v1/tasks?limit=50"},
		{"GET /v1/tasks/{id} (100k rows)", "/v1/tasks/" + l.Tasks[49999]},
	} {
		g.mustGet(tok, q.path)
		s := Summarize(timeN(k, func() { g.mustGet(tok, q.path) }))
		add(Row{Scenario: "5 scale", Variant: q.name, Summary: &s})
	}
	// Page through all 10k sessions.
	pages := Summarize(timeN(n(3, 1), func() {
		cursor := ""
		total := 0
		for {
			var page struct {
				Sessions   []json.RawMessage `json:"sessions"`
				NextCursor string            `json:"next_cursor"`
			}
			_ = json.Unmarshal(g.mustGet(tok, "/v1/sessions?limit=500&cursor="+cursor), &page)
			total += len(page.Sessions)
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if total < 10000 {
			panic(fmt.Sprintf("listed %d sessions", total))
		}
	}))
	add(Row{Scenario: "5 scale", Variant: "list all 10k sessions (20 pages of 500)", Summary: &pages})
	add(Row{Scenario: "5 scale", Variant: "gateway RSS after scale", Value: fmt.Sprintf("%.1f MB (VmHWM %.1f MB)", mb(statusKB(g.pid, "VmRSS")), mb(statusKB(g.pid, "VmHWM"))), Note: "gateway child process"})
	return nil
}

func maxConnsLabel(conns int32) string {
	if conns == 0 {
		return "database.max_conns 20, the default"
	}
	return fmt.Sprintf("database.max_conns %d", conns)
}

// localThroughput: scenario 3, `true` from 1, 16 and 64 clients, one session each. It
// returns false when the gateway failed requests (it may be wedged: see docs/benchmarks.md).
func localThroughput(g *gateway) bool {
	tok := g.token("bench-load")
	for _, c := range []int{1, 16, 64} {
		sessions := make([]string, c)
		for i := range sessions {
			sessions[i] = g.newSession(tok, "local")
		}
		self0, kids0 := g.cpu()
		pg0 := pgCPU()
		lat, rate, fails := load(c, n(5, 1)*int(time.Second), n(20000, 2000), func(i int) bool { return g.tryExec(tok, sessions[i], "true") })
		self1, kids1 := g.cpu()
		pg1 := pgCPU()
		s := Summarize(lat)
		label := ""
		if c == 64 {
			label = " (" + maxConnsLabel(g.conns) + ")"
		}
		r := Row{Scenario: "3 local throughput", Variant: fmt.Sprintf("%d concurrent clients%s", c, label), Summary: &s, Rate: rate}
		if fails > 0 {
			r.Value = fmt.Sprintf("%d FAILED (30 s client timeout or non-200)", fails)
		}
		add(r)
		if c == 16 && len(lat) > 0 {
			add(Row{Scenario: "3 local throughput", Variant: "gateway CPU-ms per exec (16 clients)",
				Value: fmt.Sprintf("%.2f ms (gateway threads); +%.2f ms in waited-for children (the sh -c true programs)",
					perExec(self1-self0, len(lat)), perExec(kids1-kids0, len(lat))),
				Note: "utime+stime of the child gateway (/proc/<pid>/stat) over the run / completed execs"})
			add(Row{Scenario: "3 local throughput", Variant: "Postgres CPU-ms per exec (16 clients)",
				Value: fmt.Sprintf("%.2f ms", perExec(pg1-pg0, len(lat))),
				Note:  "utime+stime of the bench Postgres (postmaster, its backends, ended ones included) over the run / completed execs"})
		}
		if fails > 0 {
			return false // cleaning up would only wait
		}
		g.destroy(tok, sessions, 8)
	}
	return true
}

func perExec(d time.Duration, execs int) float64 {
	if execs == 0 {
		return 0
	}
	return float64(d) / float64(time.Millisecond) / float64(execs)
}

// scaleOut: scenario 9, two gateway processes on one database, each driven by 32 clients
// (local provider, `true`, one session per client), next to one of them driven by 64.
func scaleOut(a *gateway) {
	b, err := startChild(gwOpts{name: "replica2", conns: a.conns})
	if err != nil {
		skip("scale-out: second replica: " + err.Error())
		return
	}
	defer b.close()
	per := n(32, 4)
	d, max := n(5, 1)*int(time.Second), n(20000, 2000)
	ta, tb := a.token("bench-scaleout"), b.token("bench-scaleout")
	sa, sb := make([]string, 2*per), make([]string, per)
	for i := range sa {
		sa[i] = a.newSession(ta, "local")
	}
	for i := range sb {
		sb[i] = b.newSession(tb, "local")
	}
	defer a.destroy(ta, sa, 8)
	defer b.destroy(tb, sb, 8)
	// One exec per session first: the second replica is fresh.
	parallel(len(sa), 8, func(i int) { a.exec(ta, sa[i], "true") })
	parallel(len(sb), 8, func(i int) { b.exec(tb, sb[i], "true") })

	lat, rate, fails := load(2*per, d, max, func(i int) bool { return a.tryExec(ta, sa[i], "true") })
	one := Summarize(lat)
	r := Row{Scenario: "9 scale-out (local, true)", Variant: fmt.Sprintf("1 replica, %d clients", 2*per), Summary: &one, Rate: rate}
	if fails > 0 {
		r.Value = fmt.Sprintf("%d FAILED", fails)
	}
	add(r)

	type res struct {
		lat   []time.Duration
		rate  float64
		fails int64
	}
	var wg sync.WaitGroup
	var ra, rb res
	wg.Add(2)
	go func() {
		defer wg.Done()
		ra.lat, ra.rate, ra.fails = load(per, d, max, func(i int) bool { return a.tryExec(ta, sa[i], "true") })
	}()
	go func() {
		defer wg.Done()
		rb.lat, rb.rate, rb.fails = load(per, d, max, func(i int) bool { return b.tryExec(tb, sb[i], "true") })
	}()
	wg.Wait()
	sA, sB := Summarize(append([]time.Duration(nil), ra.lat...)), Summarize(append([]time.Duration(nil), rb.lat...))
	two := Summarize(append(ra.lat, rb.lat...))
	r = Row{Scenario: "9 scale-out (local, true)", Variant: fmt.Sprintf("2 replicas x %d clients (aggregate)", per), Summary: &two, Rate: ra.rate + rb.rate,
		Value: fmt.Sprintf("replica 1: %.1f/s p99 %.2f ms; replica 2: %.1f/s p99 %.2f ms", ra.rate, sA.P99, rb.rate, sB.P99)}
	if ra.fails+rb.fails > 0 {
		r.Value += fmt.Sprintf("; %d FAILED", ra.fails+rb.fails)
	}
	add(r)
	if rate > 0 {
		add(Row{Scenario: "9 scale-out (local, true)", Variant: "2 replicas vs 1",
			Value: fmt.Sprintf("%.2fx exec/s, p99 %.2f -> %.2f ms", (ra.rate+rb.rate)/rate, one.P99, two.P99),
			Note:  fmt.Sprintf("same database, %s each, %d CPUs shared with the clients", maxConnsLabel(a.conns), numCPU())})
	}
}
