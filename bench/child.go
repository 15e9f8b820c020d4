package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	gw "github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// gwOpts says which gateway to configure.
type gwOpts struct {
	name   string // for the temp folder and messages
	queued bool   // broker flavor queue, in_memory transport and response store
	docker bool   // profiles docker (sandboxd socket) and docker-exec (sandboxd via exec stream)
	warm   bool   // profiles docker-warm (pool 2) and docker-burst (pool burstPool())
	conns  int32  // database.max_conns; 0: the default
	quotas bool   // the default per-principal quotas (else none: one principal drives every load row)
	dbURL  string // the database (empty: the bench database, benchDB)
	// kube: profiles kube (a pod per sandbox) and kube-warm (claims on kube.warmPool) on a
	// real cluster (scenario 11).
	kube *kubeTarget
}

// burstPool is the warm pool size of profile docker-burst (and the burst's create count).
func burstPool() int { return n(20, 4) }

// benchConfig is the configuration every bench gateway runs with (the child's YAML file, or
// the in-process profiling gateway): work is the local provider's folder. It sets no issuer:
// `gateway dev` adds its development issuer, the in-process gateway its own.
func benchConfig(o gwOpts, dbURL, addr, work string) *config.Config {
	cfg := &config.Config{}
	cfg.Server.Addr = addr
	cfg.Server.PublicURL = "http://" + addr
	cfg.Server.ShutdownTimeout = config.Duration(20 * time.Second)
	cfg.Database.URL = dbURL
	cfg.Database.MaxConns = o.conns
	cfg.Log.Level = "warn"
	cfg.Log.Format = "text"
	cfg.Sandbox.DefaultProfile = "local"
	cfg.Sandbox.MaxFileBytes = 2 << 30 // the 1 GiB upload row is written whole
	// One principal drives every load row: no per-principal quota.
	if !o.quotas {
		cfg.Sandbox.Quotas = config.Quotas{Sessions: -1, ConcurrentExecutions: -1, RequestsPerSecond: -1, RetainedOutputBytes: -1, OpenRequests: -1}
	}
	cfg.Sandbox.Profiles = map[string]config.Profile{
		"local": {Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: work}}},
	}
	img := func() *docker.Block { return &docker.Block{Image: *image, Pull: docker.PullNever} }
	dockerProfile := func(stateful bool, b *docker.Block) config.Profile {
		return config.Profile{Type: docker.TypeName, Stateful: stateful, Blocks: config.Blocks{docker.TypeName: b}}
	}
	if o.docker {
		// sandboxd over its socket (the default on a local engine), code in a stateful context.
		cfg.Sandbox.Profiles["docker"] = dockerProfile(true, img())
		// sandboxd through the engine's exec stream (as for a remote engine), code in a fresh
		// interpreter per call.
		d := img()
		d.Sandboxd = &docker.SandboxdBlock{Transport: string(docker.TransportExec)}
		cfg.Sandbox.Profiles["docker-exec"] = dockerProfile(false, d)
	}
	if o.warm {
		d := img()
		d.WarmPool = &docker.WarmPoolBlock{Size: 2}
		cfg.Sandbox.Profiles["docker-warm"] = dockerProfile(false, d)
		b := img()
		b.WarmPool = &docker.WarmPoolBlock{Size: burstPool()}
		cfg.Sandbox.Profiles["docker-burst"] = dockerProfile(false, b)
	}
	if k := o.kube; k != nil {
		block := func() *kubernetes.Block {
			return &kubernetes.Block{Kubeconfig: k.kubeconfig, Namespace: k.namespace, Image: k.image, CreateTimeout: 120}
		}
		kubeProfile := func(b *kubernetes.Block) config.Profile {
			return config.Profile{Type: kubernetes.TypeName, Stateful: true, Blocks: config.Blocks{kubernetes.TypeName: b}}
		}
		cfg.Sandbox.Profiles["kube"] = kubeProfile(block())
		// The template's sandboxd keeps its files in the "data" volume (deploy/kubernetes).
		w := block()
		w.Workspace = "/mnt/data"
		w.AgentSandbox = &kubernetes.AgentSandboxBlock{WarmPool: k.warmPool, Template: k.warmPool}
		cfg.Sandbox.Profiles["kube-warm"] = kubeProfile(w)
	}
	if o.queued {
		cfg.Sandbox.Broker.Flavor = config.FlavorQueue
		cfg.Sandbox.Broker.Queue = &config.Queue{Type: config.InMemory, Consumers: 4}
		cfg.Sandbox.Broker.ResponseStore = &config.ResponseStore{Type: config.InMemory}
	}
	return cfg
}

// gateway is a gateway the bench drives over HTTP: a child process (startChild) or, for the
// CPU profile only, one in this process (startInProcess).
type gateway struct {
	name   string
	URL    string
	iss    *devissuer.Issuer
	client *http.Client
	dbURL  string
	conns  int32 // database.max_conns as configured (0: the default)

	// A child process.
	cmd     *exec.Cmd
	pid     int
	dir     string
	logPath string
	done    chan struct{}

	// In this process.
	inproc *gw.Gateway
	cancel context.CancelFunc
	served chan error
}

var (
	childrenMu sync.Mutex
	children   []*gateway
)

// buildGateway builds cmd/gateway into dir.
func buildGateway(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gateway")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gateway: %v\n%s", err, out)
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the sandgate module (run the bench from the repository)")
	}
	return filepath.Dir(mod), nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startChild runs `gateway dev --config FILE` (database.url and the profiles set, so dev
// starts no Postgres and keeps the profiles; it only mounts the development issuer at
// /dev/oidc) on a free 127.0.0.1 port and waits until /readyz answers 200. The bench mints
// tokens with the same issuer key file, as `gateway token` does.
func startChild(o gwOpts) (*gateway, error) {
	dir, err := os.MkdirTemp("", "sandgate-bench-"+o.name+"-")
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o755)
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dbURL := o.dbURL
	if dbURL == "" {
		dbURL = benchDB
	}
	cfg := benchConfig(o, dbURL, addr, work)
	y, err := cfg.YAML()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "sandgate.yaml")
	if err := os.WriteFile(cfgPath, y, 0o600); err != nil {
		return nil, err
	}
	g := &gateway{name: o.name, URL: cfg.Server.PublicURL, dbURL: dbURL, conns: o.conns, dir: dir, done: make(chan struct{}),
		logPath: filepath.Join(dir, "gateway.log"), client: newHTTPClient()}
	if g.iss, err = devissuer.Open(g.URL+"/dev/oidc", filepath.Join(dir, "issuer-key.pem")); err != nil {
		return nil, err
	}
	logf, err := os.Create(g.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	g.cmd = exec.Command(gatewayBin, "dev", "--config", cfgPath, "--data-dir", dir)
	g.cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) && !strings.HasPrefix(kv, "GOTRACEBACK=") {
			g.cmd.Env = append(g.cmd.Env, kv)
		}
	}
	g.cmd.Env = append(g.cmd.Env, "GOTRACEBACK=all") // dumpGoroutines: every goroutine
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	// Should the bench die without closing it (a panic), the child goes too.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	g.pid = g.cmd.Process.Pid
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	childrenMu.Lock()
	children = append(children, g)
	childrenMu.Unlock()

	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-g.done:
			return nil, fmt.Errorf("gateway %s exited before serving: %s (log %s)\n%s", o.name, g.cmd.ProcessState, g.logPath, g.logTail(3000))
		default:
		}
		if resp, err := g.client.Get(g.URL + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			tail := g.logTail(3000)
			g.close()
			return nil, fmt.Errorf("gateway %s not ready within 90 s\n%s", o.name, tail)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, b, err := g.try(g.token("bench-probe"), "GET", "/v1/me", nil); err != nil || code != 200 {
		tail := g.logTail(2000)
		g.close()
		return nil, fmt.Errorf("gateway %s refuses the bench's token: %d %v %.200s\n%s", o.name, code, err, b, tail)
	}
	if os.Getenv("BENCH_VERBOSE") != "" {
		fmt.Printf("  gateway %s: pid %d at %s, log %s\n", o.name, g.pid, g.URL, g.logPath)
	}
	return g, nil
}

func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
}

func (g *gateway) logTail(max int) string {
	b, _ := os.ReadFile(g.logPath)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// close stops the gateway: SIGTERM (it drains within server.shutdown_timeout), SIGKILL
// after 30 s.
func (g *gateway) close() {
	if g.inproc != nil {
		g.cancel()
		<-g.served
		g.inproc.Close()
		_ = os.RemoveAll(g.dir)
		return
	}
	select {
	case <-g.done:
		return // exited on its own, or dumped: its folder (and log) stays
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		fmt.Printf("gateway %s did not stop within 30 s of SIGTERM; killing it (log: %s)\n", g.name, g.logPath)
		_ = g.cmd.Process.Kill()
		<-g.done
		return
	}
	if os.Getenv("BENCH_VERBOSE") == "" && !keepLogs.Load() {
		_ = os.RemoveAll(g.dir)
	}
}

// dumpGoroutines makes the child print its goroutines and exit (SIGQUIT) and copies its log,
// which ends with the dump, to path.
func (g *gateway) dumpGoroutines(path string) error {
	if g.inproc != nil {
		return errors.New("in-process gateway")
	}
	select {
	case <-g.done: // already stopped: its log is all there is
	default:
		_ = g.cmd.Process.Signal(syscall.SIGQUIT)
	}
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// keepLogs keeps the children's folders (config, log) after they stop: set when the run
// fails.
var keepLogs atomic.Bool

// printChildLogs prints the tail of every child's log (after a failure).
func printChildLogs() {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	for _, c := range children {
		if c.logPath == "" {
			continue
		}
		fmt.Fprintf(os.Stderr, "--- gateway %s (pid %d), tail of %s ---\n%s\n", c.name, c.pid, c.logPath, c.logTail(2000))
	}
}

// closeChildren stops every child still running.
func closeChildren() {
	childrenMu.Lock()
	cs := append([]*gateway(nil), children...)
	childrenMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	wg.Wait()
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

var (
	failedMu sync.Mutex
	failedGW *gateway // the gateway of the first failed load request
)

// tryExec is exec for the load runs: a failure is counted, and the first one is printed and
// remembered (its gateway's goroutines are dumped at the end of the run).
func (g *gateway) tryExec(tok, sid, cmd string) bool {
	code, b, err := g.try(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": cmd})
	if err == nil && code == 200 {
		return true
	}
	failedMu.Lock()
	defer failedMu.Unlock()
	if failedGW == nil {
		failedGW = g
		keepLogs.Store(true)
		fmt.Printf("  first failed exec (gateway %s): code=%d err=%v body=%.200s\n", g.name, code, err, b)
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

// trySession creates a session on profile.
func (g *gateway) trySession(tok, profile string) (string, error) {
	code, b, err := g.try(tok, "POST", "/v1/sessions", map[string]any{"profile": profile})
	if err != nil {
		return "", err
	}
	if code != 201 {
		return "", fmt.Errorf("create session on %s: %d %.300s", profile, code, b)
	}
	var m struct{ ID string }
	_ = json.Unmarshal(b, &m)
	return m.ID, nil
}

func (g *gateway) newSession(tok, profile string) string {
	id, err := g.trySession(tok, profile)
	if err != nil {
		panic(err)
	}
	return id
}

func (g *gateway) exec(tok, sid, cmd string) []byte {
	code, b := g.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": cmd})
	if code != 200 {
		panic(fmt.Sprintf("exec %q: %d %s", cmd, code, b))
	}
	return b
}

// destroy deletes sessions, par at a time, and prints the DELETEs that failed.
func (g *gateway) destroy(tok string, ids []string, par int) (failed int) {
	var mu sync.Mutex
	var first string
	parallel(len(ids), par, func(i int) {
		code, b, err := g.try(tok, "DELETE", "/v1/sessions/"+ids[i], nil)
		if err == nil && code/100 == 2 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if failed++; first == "" {
			first = fmt.Sprintf("code=%d err=%v body=%.200s", code, err, b)
		}
	})
	if failed > 0 {
		fmt.Printf("  gateway %s: %d of %d session DELETEs failed (first: %s)\n", g.name, failed, len(ids), first)
	}
	return failed
}

// parallel runs f(0..count-1), par at a time.
func parallel(count, par int, f func(i int)) {
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := 0; i < count; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}(i)
	}
	wg.Wait()
}

// --- the child's CPU and memory, from /proc ---

var clkTck = func() float64 {
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			return v
		}
	}
	return 100
}()

// cpuTicks returns the process's own CPU time (utime+stime, every thread) and that of its
// waited-for children (cutime+cstime), in clock ticks.
func cpuTicks(pid int) (self, kids int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0
	}
	v := func(field int) int64 { x, _ := strconv.ParseInt(f[field-3], 10, 64); return x }
	return v(14) + v(15), v(16) + v(17)
}

// cpu is the gateway's CPU time so far (its own, its waited-for children's).
func (g *gateway) cpu() (self, kids time.Duration) {
	s, k := cpuTicks(g.pid)
	tick := func(t int64) time.Duration { return time.Duration(float64(t) / clkTck * float64(time.Second)) }
	return tick(s), tick(k)
}

// pgDataDir is the bench Postgres's data folder (its postmaster.pid names the server).
var pgDataDir string

// pgCPU is the CPU time of the bench Postgres so far: the postmaster's own and its waited-for
// children's (backends that ended), plus every live child's (backends, background workers).
func pgCPU() time.Duration {
	b, err := os.ReadFile(filepath.Join(pgDataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0
	}
	self, kids := cpuTicks(pid)
	total := self + kids
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid || parentOf(child) != pid {
			continue
		}
		s, _ := cpuTicks(child)
		total += s
	}
	return time.Duration(float64(total) / clkTck * float64(time.Second))
}

// parentOf returns the parent pid of process pid (0 when unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] state, f[1] ppid
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// statusKB reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status.
func statusKB(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key+":") {
			if f := strings.Fields(l); len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

// resetHWM resets the process's VmHWM to its current RSS (Linux ≥ 4.0; needs the right to
// write /proc/<pid>/clear_refs).
func resetHWM(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

func mb(kb int64) float64 { return float64(kb) / 1024 }
