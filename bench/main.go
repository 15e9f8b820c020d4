// Command bench measures Sandgate end to end. It builds cmd/gateway and runs the gateway as a
// child process (`gateway dev --config FILE`: a YAML file naming the bench's database and
// profiles, so dev only adds its development OIDC issuer at /dev/oidc, whose key file the
// bench shares to mint tokens, as `gateway token` does), listening on 127.0.0.1, against a
// throwaway Postgres from internal/devdb (a fresh database per run), with the local and —
// when an engine is reachable — docker providers. It drives the child only over HTTP (and, for
// reference rows, the sandboxes directly), reads the child's CPU time and memory from /proc,
// and prints a table plus a JSON report (bench/results/latest.json). Further children: the
// queue flavor, the warm pools, a second replica for scale-out, and — as root, with the node's
// binaries (scripts/kube-setup.sh --node) — one on a real single-node Kubernetes cluster
// (internal/testutil/kubenode, brought up for its rows and torn down after them; see kube.go).
// Only the optional CPU profile
// uses a gateway in this process. It never writes SQL against Sandgate's tables: the fresh
// database is migrated by gateway.Migrate, the scale rows are seeded and the leftovers found
// through gatewaytest (internal/gateway's TestBenchKeepsOutOfTheStore holds it to that);
// pgx is for creating the database and measuring Postgres itself. Every scenario is bounded
// in count and time. See docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/devdb"
	gw "github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

var (
	outPath    = flag.String("out", "bench/results/latest.json", "JSON report path")
	profPath   = flag.String("cpuprofile", "bench/results/exec-cpu.pprof", "CPU profile of the local exec path (empty: none)")
	image      = flag.String("image", "sandgate/sandbox-python:latest", "docker sandbox image (never pulled)")
	quick      = flag.Bool("quick", false, "smaller counts (smoke run)")
	skipScale  = flag.Bool("skip-scale", false, "skip the 10k sessions / 100k tasks scenario")
	skipDocker = flag.Bool("skip-docker", false, "skip the docker rows")
	gatewayArg = flag.String("gateway", "", "gateway `binary` to run (default: build ./cmd/gateway into a temp folder)")
	keptOnly   = flag.Bool("kept-only", false, "run scenario 10 (kept output) only")
	skipKube   = flag.Bool("skip-kube", false, "skip the kubernetes rows (scenario 11, a real single-node cluster)")
	kubeOnly   = flag.Bool("kube-only", false, "run scenario 11 (kubernetes on a real single-node cluster) only")
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

var (
	gatewayBin string // the built cmd/gateway
	benchDB    string // the bench database's URL
	dockerUsed bool   // docker rows run
)

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
	// Children are stopped however the run ends (a panic in another goroutine kills them
	// through Pdeathsig); a panic here also removes the containers the run left.
	defer closeChildren()
	defer func() {
		if v := recover(); v != nil {
			keepLogs.Store(true)
			printChildLogs()
			closeChildren()
			if err := stopCluster(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the kubernetes cluster:", err)
			}
			if benchDB != "" && dockerUsed {
				removeLeftovers(context.Background())
			}
			panic(v)
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Println("\ninterrupted: stopping the gateways")
		closeChildren()
		if err := stopCluster(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the kubernetes cluster:", err)
		}
		os.Exit(1)
	}()

	binDir, err := os.MkdirTemp("", "sandgate-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	if *gatewayArg != "" {
		if gatewayBin, err = filepath.Abs(*gatewayArg); err != nil {
			return err
		}
		fmt.Println("gateway binary:", gatewayBin)
	} else {
		t := time.Now()
		if gatewayBin, err = buildGateway(binDir); err != nil {
			return err
		}
		fmt.Printf("built the gateway in %s\n", time.Since(t).Round(100*time.Millisecond))
	}

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
	if benchDB, err = freshDB(ctx, inst); err != nil {
		return err
	}
	if installation, err = gatewaytest.Installation(ctx, benchDB); err != nil {
		return err
	}
	pgDataDir = filepath.Join(inst.Dir, "data")

	if *keptOnly {
		keptOutput()
		return finishReport(start)
	}
	if *kubeOnly {
		kubeScenarios(ctx)
		return finishReport(start)
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

	// The main gateway: local, and docker without a warm pool (the pools run in a child of
	// their own while their rows run).
	g, err := startChild(gwOpts{name: "main", docker: dockerOK})
	if err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	tok := g.token("bench")
	rep.Machine["gateway"] = fmt.Sprintf("child process (gateway dev --config), %s", maxConnsLabel(g.conns))

	// 1 and 1b. exec round trip, local; broker flavors.
	sid := localExec(ctx, g, tok)

	// 1, 2 and 8 on docker.
	if dockerOK {
		dockerUsed = true
		dockerScenarios(ctx, g, tok)
	}

	// 4. metadata calls.
	metadata(g, tok, sid)

	// 7 and 6. 1 GiB upload, 100 MB stdout (the upload first: the heap the stdout row leaves
	// behind would hide the upload's growth).
	bigUpload(g, tok, sid)
	bigOutput(g, tok, sid)

	// 10. kept output (a child of its own, with the default quotas).
	keptOutput()

	// 5. scale.
	if *skipScale {
		skip("scale scenario: -skip-scale given")
	} else if err := scale(ctx, g); err != nil {
		skip("scale scenario: " + err.Error())
	}

	// 3. throughput on local, then 9, scale-out, unless the gateway failed requests.
	if localThroughput(g) {
		scaleOut(g)
	} else {
		skip("scale-out: the main gateway failed local throughput requests")
	}

	// 11. kubernetes on a real single-node cluster (last: its start and teardown load the
	// machine for minutes).
	kubeScenarios(ctx)

	// The CPU profile of the local exec path (an in-process gateway: the child has no
	// profiling endpoint).
	if *profPath != "" {
		if err := profileLocalExec(ctx, *profPath); err != nil {
			skip("CPU profile: " + err.Error())
		}
	}

	rep.Duration = time.Since(start).Round(time.Second).String()
	rep.Machine["load_after"] = loadavg()

	// A gateway that failed a load request: its goroutines, for diagnosis (it exits).
	if failedGW != nil && failedGW.inproc == nil {
		keepLogs.Store(true)
		path := filepath.Join(filepath.Dir(*outPath), "failure-goroutines.txt")
		if err := failedGW.dumpGoroutines(path); err == nil {
			fmt.Printf("goroutines of gateway %s (SIGQUIT) written to %s\n", failedGW.name, path)
		}
	}
	closeChildren()
	if keepLogs.Load() {
		childrenMu.Lock()
		for _, c := range children {
			if c.logPath != "" {
				fmt.Printf("gateway %s log kept: %s\n", c.name, c.logPath)
			}
		}
		childrenMu.Unlock()
	}
	if dockerUsed {
		if k := leaked.Load(); k > 0 {
			add(Row{Scenario: "8 docker throughput", Variant: "containers left after their session's DELETE", Value: strconv.FormatInt(k, 10),
				Note: "DELETE /v1/sessions/{id} answered 2xx but the container still existed; removed at the end of the run"})
		}
		if k := removeLeftovers(ctx); k > 0 {
			fmt.Printf("removed %d leftover containers (named by the bench database's sessions, outliving their DELETE, or labelled sandgate.bench)\n", k)
		}
		// What is still there now was named by no session the bench saw.
		if left := newContainers(ctx); len(left) > 0 {
			add(Row{Scenario: "8 docker throughput", Variant: "containers named by no session, left after the run", Value: fmt.Sprintf("%d: %v", len(left), left),
				Note: "bench-profile containers created during the run and still there after every child stopped; not removed (another user of the engine may own them)"})
		}
	}
	return writeReport()
}

// finishReport closes the children and writes the report of a run that started at start
// (-kept-only).
func finishReport(start time.Time) error {
	rep.Duration = time.Since(start).Round(time.Second).String()
	rep.Machine["load_after"] = loadavg()
	closeChildren()
	return writeReport()
}

// writeReport writes the JSON report.
func writeReport() error {
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(*outPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s in %s (load average before: %s, after: %s)\n", *outPath, rep.Duration, rep.Machine["load_before"], rep.Machine["load_after"])
	return nil
}

// freshDB (re)creates database sandgate_bench and migrates it (through internal/gateway, as
// `gateway migrate` does).
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
	if _, _, err := gw.Migrate(ctx, u); err != nil {
		return "", err
	}
	return u, nil
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

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

func numCPU() int { return runtime.NumCPU() }

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
