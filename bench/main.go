// Command bench measures Sandgate end to end: it starts a real gateway in this process (a
// throwaway Postgres from internal/devdb, the development OIDC issuer, the local and — when
// an engine is reachable — docker providers) behind a real HTTP listener, drives it over
// HTTP, and prints a table plus a JSON report (bench/results/latest.json). Every scenario is
// bounded in count and time. See docs/benchmarks.md.
package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/devdb"
	gw "github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
	"github.com/sandgate/sandgate/internal/store"
)

var (
	outPath    = flag.String("out", "bench/results/latest.json", "JSON report path")
	profPath   = flag.String("cpuprofile", "bench/results/exec-cpu.pprof", "CPU profile of the local exec path (empty: none)")
	image      = flag.String("image", "sandgate/sandbox-python:latest", "docker sandbox image (never pulled)")
	quick      = flag.Bool("quick", false, "smaller counts (smoke run)")
	skipScale  = flag.Bool("skip-scale", false, "skip the 10k sessions / 100k tasks scenario")
	skipDocker = flag.Bool("skip-docker", false, "skip the docker rows")
)

// Row is one line of the table.
type Row struct {
	Scenario string   `json:"scenario"`
	Variant  string   `json:"variant"`
	Summary  *Summary `json:"latency,omitempty"`
	Rate     float64  `json:"per_second,omitempty"`
	Value    string   `json:"value,omitempty"`
	Note     string   `json:"note,omitempty"`
}

// Report is the JSON file.
type Report struct {
	StartedAt time.Time         `json:"started_at"`
	Duration  string            `json:"duration"`
	Machine   map[string]string `json:"machine"`
	Rows      []Row             `json:"rows"`
	Skipped   []string          `json:"skipped,omitempty"`
}

// capPerSeries bounds the time of one latency series (the machine may be loaded).
const capPerSeries = 20 * time.Second

var rep = &Report{StartedAt: time.Now().UTC()}

func add(r Row) {
	rep.Rows = append(rep.Rows, r)
	lat := ""
	if r.Summary != nil {
		lat = fmt.Sprintf("p50 %8.2f ms  p99 %8.2f ms  (n=%d)", r.Summary.P50, r.Summary.P99, r.Summary.N)
	}
	rate := ""
	if r.Rate > 0 {
		rate = fmt.Sprintf("%9.1f/s", r.Rate)
	}
	fmt.Printf("%-26s %-34s %-44s %-11s %s %s\n", r.Scenario, r.Variant, lat, rate, r.Value, r.Note)
}

func skip(why string) {
	rep.Skipped = append(rep.Skipped, why)
	fmt.Println("SKIP:", why)
}

func n(full, small int) int {
	if *quick {
		return small
	}
	return full
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(*outPath), 0o755); err != nil {
		return err
	}
	rep.Machine = machine()

	// Postgres: a throwaway server shared with the tests' location convention, and a fresh
	// database per run.
	pgDir := filepath.Join(os.TempDir(), "sandgate-bench-pg")
	if err := os.MkdirAll(pgDir, 0o755); err != nil {
		return err
	}
	inst, err := devdb.Start(ctx, pgDir)
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	dbURL, err := freshDB(ctx, inst)
	if err != nil {
		return err
	}

	dockerOK := false
	if *skipDocker {
		skip("docker rows: -skip-docker given")
	} else if !docker.Available(ctx, "") {
		skip("docker rows: no Docker engine reachable (DOCKER_HOST / /var/run/docker.sock)")
	} else if cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
		skip("docker rows: " + err.Error())
	} else {
		if _, err := cli.ImageInspect(ctx, *image); err != nil {
			skip("docker rows: image " + *image + " missing (run scripts/docker-setup.sh)")
		} else {
			dockerOK = true
		}
		cli.Close()
	}

	g, err := startGateway(ctx, dbURL, false, dockerOK, 20)
	if err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	tok := g.token("bench")

	// 1. exec round trip, local.
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

	// Postgres transactions per execution (pg_stat_database is flushed at most once a second).
	if tx, err := txPerExec(ctx, g, tok, sid); err == nil {
		add(Row{Scenario: "1 exec round trip", Variant: "local: Postgres xacts per exec", Value: fmt.Sprintf("%.1f", tx)})
	} else {
		skip("postgres transactions per exec: " + err.Error())
	}

	// Queue flavor vs thread flavor.
	if qg, err := startGateway(ctx, dbURL, true, false, 20); err != nil {
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

	if dockerOK {
		dockerScenarios(ctx, g, tok)
		// The warm pool would refill during the remaining scenarios and outlive the run.
		for _, prof := range g.svc.Profiles(principal.Principal{Admin: true}) {
			if dp, ok := prof.Provider.(*docker.Provider); ok && prof.Name == "docker-warm" {
				_ = dp.Close()
				_ = dp.DrainPool(ctx)
			}
		}
	}

	// 4. metadata calls.
	for _, c := range []int{1, 16} {
		lat, rate, _ := load(c, n(3, 1)*int(time.Second), n(50000, 3000), func(int) bool { g.mustGet(tok, "/v1/sessions/"+sid); return true })
		s := Summarize(lat)
		add(Row{Scenario: "4 GET /v1/sessions/{id}", Variant: fmt.Sprintf("%d concurrent clients", c), Summary: &s, Rate: rate})
	}

	// 6. 100 MB stdout.
	bigOutput(g, tok, sid)
	bigUpload(g, tok, sid)

	// 5. scale.
	if *skipScale {
		skip("scale scenario: -skip-scale given")
	} else if err := scale(ctx, g); err != nil {
		skip("scale scenario: " + err.Error())
	}

	// 3. throughput on local.
	var prof *os.File
	type tp struct {
		g       *gateway
		clients int
		label   string
	}
	runs := []tp{{g, 1, ""}, {g, 16, ""}, {g, 64, " (database.max_conns 20, the default)"}}
	for _, run := range runs {
		g, c := run.g, run.clients
		tok := g.token("bench-load")
		sessions := make([]string, c)
		for i := range sessions {
			sessions[i] = g.newSession(tok, "local")
		}
		if c == 16 && *profPath != "" {
			if f, err := os.Create(*profPath); err == nil {
				prof = f
				_ = pprof.StartCPUProfile(f)
			}
		}
		lat, rate, fails := load(c, n(5, 1)*int(time.Second), n(20000, 2000), func(i int) bool { return g.tryExec(tok, sessions[i], "true") })
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
			fmt.Println("  (CPU profile of the 16-client run written to", *profPath+")")
		}
		s := Summarize(lat)
		r := Row{Scenario: "3 local throughput", Variant: fmt.Sprintf("%d concurrent clients%s", c, run.label), Summary: &s, Rate: rate}
		if fails > 0 {
			r.Value = fmt.Sprintf("%d FAILED (30 s client timeout or non-200)", fails)
		}
		add(r)
		if fails > 0 {
			break // the gateway is wedged (see docs/benchmarks.md); cleaning up would only wait
		}
		for _, id := range sessions {
			_, _, _ = g.try(tok, "DELETE", "/v1/sessions/"+id, nil)
		}
	}

	rep.Duration = time.Since(start).Round(time.Second).String()
	rep.Machine["load_after"] = loadavg()
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(*outPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	// Close the gateway (stops the docker warm pool) unless it is wedged.
	closed := make(chan struct{})
	go func() { defer close(closed); g.close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		fmt.Println("gateway did not close within 30 s; leaving it")
	}
	fmt.Printf("\nwrote %s in %s (load average before: %s, after: %s)\n", *outPath, rep.Duration, rep.Machine["load_before"], rep.Machine["load_after"])
	return nil
}

// freshDB (re)creates database sandgate_bench and migrates it.
func freshDB(ctx context.Context, inst *devdb.Instance) (string, error) {
	conn, err := pgx.Connect(ctx, inst.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS sandgate_bench WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE sandgate_bench"); err != nil {
		return "", err
	}
	u := inst.URL("sandgate_bench")
	st, err := store.Open(ctx, u, 2)
	if err != nil {
		return "", err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return "", err
	}
	return u, nil
}

type gateway struct {
	URL    string
	iss    *devissuer.Issuer
	gw     *gw.Gateway
	st     *store.Store
	svc    *sandbox.Service
	cancel context.CancelFunc
	served chan error
	client *http.Client
	dbURL  string
}

// startGateway builds a gateway through internal/gateway (as `gateway serve` does) and serves
// it on 127.0.0.1.
func startGateway(parent context.Context, dbURL string, queued, withDocker bool, conns int32) (*gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gateway{dbURL: dbURL, URL: "http://" + ln.Addr().String()}
	tmp, err := os.MkdirTemp("", "sandgate-bench-")
	if err != nil {
		return nil, err
	}
	g.iss, err = devissuer.Open(g.URL+"/dev/oidc", filepath.Join(tmp, "key.pem"))
	if err != nil {
		return nil, err
	}
	cfg := &config.Config{}
	cfg.Server.PublicURL = g.URL
	cfg.Server.ShutdownTimeout = config.Duration(20 * time.Second)
	cfg.Database.URL = dbURL
	cfg.Database.MaxConns = conns
	cfg.Auth.Issuers = []config.Issuer{{URL: g.iss.URL(), Audiences: []string{devissuer.Audience}}}
	work := filepath.Join(tmp, "work")
	cfg.Sandbox.DefaultProfile = "local"
	cfg.Sandbox.MaxFileBytes = 2 << 30 // the 1 GiB upload row is written whole
	// One principal drives every load row: no per-principal quota.
	cfg.Sandbox.Quotas = config.Quotas{Sessions: -1, ConcurrentExecutions: -1, RequestsPerSecond: -1}
	cfg.Sandbox.Profiles = map[string]config.Profile{
		"local": {Type: local.TypeName, ProviderBlocks: config.ProviderBlocks{LocalSubprocess: &config.LocalSubprocess{Workdir: work}}},
	}
	if withDocker {
		// sandboxd over its socket (the default on a local engine), code in a stateful context.
		cfg.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Stateful: true, ProviderBlocks: config.ProviderBlocks{Docker: &config.Docker{Image: *image, Pull: config.DockerPullNever}}}
		// sandboxd through the engine's exec stream (as for a remote engine), code in a fresh
		// interpreter per call.
		cfg.Sandbox.Profiles["docker-exec"] = config.Profile{Type: docker.TypeName, ProviderBlocks: config.ProviderBlocks{Docker: &config.Docker{Image: *image, Pull: config.DockerPullNever, Sandboxd: &config.DockerSandboxd{Transport: config.DockerTransportExec}}}}
		cfg.Sandbox.Profiles["docker-warm"] = config.Profile{Type: docker.TypeName, ProviderBlocks: config.ProviderBlocks{Docker: &config.Docker{Image: *image, Pull: config.DockerPullNever, WarmPool: &config.DockerWarmPool{Size: 2}}}}
	}
	if queued {
		cfg.Sandbox.Broker.Flavor = config.FlavorQueue
		cfg.Sandbox.Broker.Queue = &config.Queue{Type: config.InMemory, Consumers: 4}
		cfg.Sandbox.Broker.ResponseStore = &config.ResponseStore{Type: config.InMemory}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("BENCH_VERBOSE") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	g.gw, err = gw.New(parent, cfg, gw.Options{Logger: log, DevIssuer: g.iss})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	g.st, g.svc = g.gw.Store(), g.gw.Service()
	ctx, cancel := context.WithCancel(parent)
	g.cancel = cancel
	g.served = make(chan error, 1)
	go func() { g.served <- g.gw.Serve(ctx, ln) }()
	g.client = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
	return g, nil
}

func (g *gateway) close() {
	g.cancel()
	<-g.served
	g.gw.Close()
}

func (g *gateway) token(sub string) string {
	t, err := g.iss.Mint(devissuer.Claims{Subject: sub, Email: sub + "@example.test"})
	if err != nil {
		panic(err)
	}
	return t
}

func (g *gateway) do(tok, method, path string, body any) (int, []byte) {
	code, b, err := g.try(tok, method, path, body)
	if err != nil {
		panic(err)
	}
	return code, b
}

// try sends one request; err is a transport error (including the client timeout).
func (g *gateway) try(tok, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.URL+path, rd)
	if err != nil {
		panic(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

var dumped atomic.Bool

// tryExec is exec for the load runs: a failure is counted, and the first one dumps this
// process's goroutines next to the report for diagnosis.
func (g *gateway) tryExec(tok, sid, cmd string) bool {
	code, b, err := g.try(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": cmd})
	if err == nil && code == 200 {
		return true
	}
	if dumped.CompareAndSwap(false, true) {
		fmt.Printf("  first failed exec: code=%d err=%v body=%.200s\n", code, err, b)
		if f, ferr := os.Create(filepath.Join(filepath.Dir(*outPath), "failure-goroutines.txt")); ferr == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}
	}
	return false
}

func (g *gateway) mustGet(tok, path string) []byte {
	code, b := g.do(tok, "GET", path, nil)
	if code != 200 {
		panic(fmt.Sprintf("GET %s: %d %s", path, code, b))
	}
	return b
}

func (g *gateway) newSession(tok, profile string) string {
	code, b := g.do(tok, "POST", "/v1/sessions", map[string]any{"profile": profile})
	if code != 201 {
		panic(fmt.Sprintf("create session on %s: %d %s", profile, code, b))
	}
	var m struct{ ID string }
	_ = json.Unmarshal(b, &m)
	return m.ID
}

func (g *gateway) exec(tok, sid, cmd string) []byte {
	code, b := g.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": cmd})
	if code != 200 {
		panic(fmt.Sprintf("exec %q: %d %s", cmd, code, b))
	}
	return b
}

func timeN(count int, f func()) []time.Duration {
	out := make([]time.Duration, 0, count)
	stop := time.Now().Add(capPerSeries)
	for i := 0; i < count && (i < 2 || time.Now().Before(stop)); i++ {
		t := time.Now()
		f()
		out = append(out, time.Since(t))
	}
	return out
}

// load runs f from c goroutines (goroutine i passes i) until d has passed or max calls were
// made, and returns every call's latency and the completed calls per second.
func load(c int, d int, max int, f func(i int) bool) ([]time.Duration, float64, int64) {
	var (
		mu    sync.Mutex
		all   []time.Duration
		calls atomic.Int64
		fails atomic.Int64
		wg    sync.WaitGroup
	)
	deadline := time.Now().Add(time.Duration(d))
	start := time.Now()
	for i := 0; i < c; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(deadline) && calls.Add(1) <= int64(max) {
				t := time.Now()
				if !f(i) {
					fails.Add(1)
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	return all, float64(len(all)) / time.Since(start).Seconds(), fails.Load()
}

// txPerExec counts committed Postgres transactions of the bench database per execution.
func txPerExec(ctx context.Context, g *gateway, tok, sid string) (float64, error) {
	conn, err := pgx.Connect(ctx, g.dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	read := func() (int64, error) {
		time.Sleep(1500 * time.Millisecond) // let backends flush their statistics
		var v int64
		_, _ = conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
		err := conn.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&v)
		return v, err
	}
	before, err := read()
	if err != nil {
		return 0, err
	}
	const k = 100
	for i := 0; i < k; i++ {
		g.exec(tok, sid, "true")
	}
	after, err := read()
	if err != nil {
		return 0, err
	}
	// The reads themselves and background maintenance add a little noise.
	return float64(after-before-1) / k, nil
}

func dockerScenarios(ctx context.Context, g *gateway, tok string) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		skip("docker rows: " + err.Error())
		return
	}
	defer cli.Close()
	rawCreate := func() string {
		resp, err := cli.ContainerCreate(ctx, &container.Config{Image: *image, Entrypoint: []string{"sleep", "infinity"}, Labels: map[string]string{"sandgate.bench": "1"}},
			&container.HostConfig{AutoRemove: false}, nil, nil, "")
		if err != nil {
			panic(err)
		}
		if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			panic(err)
		}
		return resp.ID
	}
	rawExec := func(id string) {
		r, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{AttachStdout: true, AttachStderr: true, Cmd: []string{"/bin/sh", "-c", "true"}})
		if err != nil {
			panic(err)
		}
		hr, err := cli.ContainerExecAttach(ctx, r.ID, container.ExecAttachOptions{})
		if err != nil {
			panic(err)
		}
		_, _ = io.Copy(io.Discard, hr.Reader)
		hr.Close()
		if _, err := cli.ContainerExecInspect(ctx, r.ID); err != nil {
			panic(err)
		}
	}
	rm := func(id string) {
		_ = cli.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
	}

	// 1. exec round trip, docker: sandboxd over its socket, against the same sandboxd reached
	// directly; sandboxd over the engine's exec stream; one raw exec per call for reference.
	sid := g.newSession(tok, "docker")
	g.exec(tok, sid, "true")
	viaExec := g.newSession(tok, "docker-exec")
	g.exec(tok, viaExec, "true")
	raw := rawCreate()
	rawExec(raw)
	k := n(50, 10)
	gw := Summarize(timeN(k, func() { g.exec(tok, sid, "true") }))
	gwExec := Summarize(timeN(k, func() { g.exec(tok, viaExec, "true") }))
	direct := Summarize(timeN(k, func() { rawExec(raw) }))
	code := func(sid string) {
		if st, body := g.do(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "n = globals().get('n', 0) + 1"}); st != 200 {
			panic(fmt.Sprintf("code: %d %s", st, body))
		}
	}
	code(sid)
	sdCode := Summarize(timeN(k, func() { code(sid) }))
	code(viaExec)
	freshCode := Summarize(timeN(k, func() { code(viaExec) }))
	add(Row{Scenario: "1 exec round trip", Variant: "docker: through gateway (sandboxd socket)", Summary: &gw})
	if rt, err := sandboxdClient(ctx, cli, g, tok, sid); err != nil {
		skip("raw sandboxd rows: " + err.Error())
	} else {
		rawSD := Summarize(timeN(k, func() {
			if _, err := rt.Exec(ctx, sandboxd.ExecRequest{Command: "true"}, sandboxd.Streams{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
				panic(err)
			}
		}))
		rawCtx := Summarize(timeN(k, func() {
			if _, err := rt.Exec(ctx, sandboxd.ExecRequest{Code: "n = globals().get('n', 0) + 1", Language: "python", Context: "default"}, sandboxd.Streams{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
				panic(err)
			}
		}))
		_ = rt.Close()
		add(Row{Scenario: "1 exec round trip", Variant: "docker: raw sandboxd socket (no gateway)", Summary: &rawSD})
		add(Row{Scenario: "1 exec round trip", Variant: "docker: gateway overhead over raw sandboxd", Value: fmt.Sprintf("+%.2f ms p50 (%.2fx)", gw.P50-rawSD.P50, gw.P50/rawSD.P50)})
		add(Row{Scenario: "1 exec round trip", Variant: "docker: raw python context (no gateway)", Summary: &rawCtx})
	}
	add(Row{Scenario: "1 exec round trip", Variant: "docker: through gateway (sandboxd via exec stream)", Summary: &gwExec})
	add(Row{Scenario: "1 exec round trip", Variant: "docker: exec stream vs socket", Value: fmt.Sprintf("+%.2f ms p50 (%.2fx)", gwExec.P50-gw.P50, gwExec.P50/gw.P50)})
	add(Row{Scenario: "1 exec round trip", Variant: "docker: raw exec API per call (create+attach+inspect)", Summary: &direct})
	add(Row{Scenario: "1 exec round trip", Variant: "docker: python code, stateful context", Summary: &sdCode})
	add(Row{Scenario: "1 exec round trip", Variant: "docker: python code, fresh interpreter", Summary: &freshCode})
	g.do(tok, "DELETE", "/v1/sessions/"+viaExec, nil)
	g.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
	rm(raw)

	// 2. session create -> first exec.
	samples := n(5, 2)
	first := func(profile string) time.Duration {
		t := time.Now()
		id := g.newSession(tok, profile)
		g.exec(tok, id, "true")
		d := time.Since(t)
		g.do(tok, "DELETE", "/v1/sessions/"+id, nil)
		return d
	}
	var cold, warm, rawd []time.Duration
	for i := 0; i < samples; i++ {
		cold = append(cold, first("docker"))
	}
	for i := 0; i < samples; i++ {
		waitPool(ctx, cli, "docker-warm", 2, 60*time.Second)
		warm = append(warm, first("docker-warm"))
	}
	for i := 0; i < samples; i++ {
		t := time.Now()
		id := rawCreate()
		rawExec(id)
		rawd = append(rawd, time.Since(t))
		rm(id)
	}
	cs, ws, rs := Summarize(cold), Summarize(warm), Summarize(rawd)
	add(Row{Scenario: "2 create -> first exec", Variant: "docker: cold (no pool)", Summary: &cs})
	add(Row{Scenario: "2 create -> first exec", Variant: "docker: warm pool (size 2)", Summary: &ws})
	add(Row{Scenario: "2 create -> first exec", Variant: "docker: raw create+start+exec", Summary: &rs})
}

// sandboxdClient connects to the sandboxd of session sid's container the way the provider
// does: the socket folder its label names, the secret from its environment.
func sandboxdClient(ctx context.Context, cli *client.Client, g *gateway, tok, sid string) (*remote.Client, error) {
	var sess struct {
		SandboxID string `json:"sandbox_id"`
	}
	_ = json.Unmarshal(g.mustGet(tok, "/v1/sessions/"+sid), &sess)
	ins, err := cli.ContainerInspect(ctx, sess.SandboxID)
	if err != nil {
		return nil, err
	}
	token := ins.Config.Labels[docker.LabelSandboxdToken]
	socks, _ := filepath.Glob(filepath.Join(docker.DefaultSocketDir(), "*", ins.Config.Labels[docker.LabelSandboxd], "sd.sock"))
	if len(socks) != 1 || token == "" {
		return nil, fmt.Errorf("no sandboxd socket for container %s", sess.SandboxID)
	}
	return remote.NewClient(socks[0], token), nil
}

// waitPool waits until profile's warm pool has want running containers.
func waitPool(ctx context.Context, cli *client.Client, profile string, want int, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		list, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", docker.LabelPool+"="+profile), filters.Arg("status", "running"))})
		ready := 0
		if err == nil {
			for _, c := range list {
				if len(c.Names) > 0 && strings.HasPrefix(strings.TrimPrefix(c.Names[0], "/"), "sandgate-pool-") {
					ready++
				}
			}
		}
		if ready >= want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bigOutput runs a program writing 100 MB to stdout and samples this process's RSS.
func bigOutput(g *gateway, tok, sid string) {
	var b []byte
	growthKB, d := peakRSSGrowth(func() { b = g.exec(tok, sid, "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 100000000") })
	var m struct {
		StdoutTruncated bool `json:"stdout_truncated"`
	}
	_ = json.Unmarshal(b, &m)
	growth := float64(growthKB) / 1024
	add(Row{Scenario: "6 100 MB stdout", Variant: "local: peak RSS growth", Value: fmt.Sprintf("%.1f MB (%.0f ms, reply %d bytes)", growth, float64(d.Milliseconds()), len(b)),
		Note: "whole bench process (gateway + client) RSS, sampled every 5 ms"})
}

// peakRSSGrowth runs f while sampling this process's RSS every 5 ms and returns the peak's
// growth over the RSS before f (kB) and f's duration.
func peakRSSGrowth(f func()) (growthKB int64, took time.Duration) {
	runtime.GC()
	before := rssKB()
	var peak atomic.Int64
	peak.Store(before)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := rssKB(); r > peak.Load() {
				peak.Store(r)
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
	took = time.Since(t)
	close(stop)
	<-sampled
	return peak.Load() - before, took
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

// bigUpload streams a 1 GiB file (chunked) into the workspace and samples this process's RSS:
// the gateway must stream it from the socket to the sandbox in constant memory (goal ≤ 32 MB).
func bigUpload(g *gateway, tok, sid string) {
	var status int
	var err error
	growthKB, d := peakRSSGrowth(func() { status, err = upload(g, tok, sid, 1<<30) })
	if err != nil || status != http.StatusOK {
		skip(fmt.Sprintf("1 GiB upload: status %d, %v", status, err))
		return
	}
	_, _, _ = g.try(tok, http.MethodDelete, "/v1/sessions/"+sid+"/files/upload.bin", nil)
	growth := float64(growthKB) / 1024
	add(Row{Scenario: "7 1 GiB upload", Variant: "local: peak RSS growth", Value: fmt.Sprintf("%.1f MB (%.0f ms; goal <= 32 MB)", growth, float64(d.Milliseconds())),
		Note: "whole bench process (gateway + client) RSS, sampled every 5 ms; chunked body"})
}

// scale inserts 10,000 sessions and 100,000 tasks for one principal and measures listing.
func scale(ctx context.Context, g *gateway) error {
	tok := g.token("bench-scale")
	g.mustGet(tok, "/v1/me") // records the principal
	pool := g.st.Pool()
	var me struct{ ID string }
	if err := pool.QueryRow(ctx, "SELECT id::text FROM principals WHERE subject = 'bench-scale'").Scan(&me.ID); err != nil {
		return fmt.Errorf("find the principal: %w", err)
	}
	t := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO sessions (id, owner_id, profile, provider, scope, name, created_at, last_used_at)
		SELECT md5('s' || i), $1, 'local', 'local_subprocess', 'per_session', 's' || i, now() - i * interval '1 second', now() - i * interval '1 second'
		FROM generate_series(1, 10000) i`, me.ID); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO tasks (id, session_id, owner_id, profile, operation, status, promoted, runner_id, submitted_at, started_at, finished_at, result)
		SELECT md5('t' || i), md5('s' || (i % 10000 + 1)), $1, 'local', 'command', 'succeeded', true, 'bench',
		       now() - i * interval '1 second', now() - i * interval '1 second', now() - i * interval '1 second', '{"exit_code":0,"stdout":"","stderr":""}'::jsonb
		FROM generate_series(1, 100000) i`, me.ID); err != nil {
		return err
	}
	_, _ = pool.Exec(ctx, "ANALYZE sessions; ANALYZE tasks")
	add(Row{Scenario: "5 scale", Variant: "seed 10k sessions + 100k tasks (SQL)", Value: time.Since(t).Round(time.Millisecond).String()})

	k := n(200, 30)
	for _, q := range []struct{ name, path string }{
		{"GET /v1/sessions?limit=50", "/v1/sessions?limit=50"},
		{"GET /v1/sessions?limit=500", "/v1/sessions?limit=500"},
		{"GET /v1/sessions/{id} (10k rows)", "/v1/sessions/" + md5hex("s5000")},
		{"GET /v1/tasks?limit=50", "/v1/tasks?limit=50"},
		{"GET /v1/tasks/{id} (100k rows)", "/v1/tasks/" + md5hex("t50000")},
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
	add(Row{Scenario: "5 scale", Variant: "process RSS after scale", Value: fmt.Sprintf("%.1f MB", float64(rssKB())/1024), Note: "gateway + client in one process"})
	return nil
}

func md5hex(s string) string { return fmt.Sprintf("%x", md5.Sum([]byte(s))) }

func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

func machine() map[string]string {
	m := map[string]string{
		"goos": runtime.GOOS, "goarch": runtime.GOARCH, "go": runtime.Version(),
		"cpus": strconv.Itoa(runtime.NumCPU()), "load_before": loadavg(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				m["cpu"] = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m["mem_total"] = strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"))
	}
	if h, err := os.Hostname(); err == nil {
		m["hostname"] = h
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m["kernel"] = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").Output(); err == nil {
		m["docker"] = strings.TrimSpace(string(out))
	}
	return m
}
