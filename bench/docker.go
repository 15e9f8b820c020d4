package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/devdb"

	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/sandboxd/remote"
)

// dockerScenarios: the docker rows of scenarios 1 and 2 on g (profiles docker and
// docker-exec), the warm-pool rows on a child of their own (its pools would otherwise fill
// and refill behind every other row), and scenario 8, docker throughput, on g.
func dockerScenarios(ctx context.Context, g *gateway, tok string) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		skip("docker rows: " + err.Error())
		return
	}
	defer cli.Close()
	containersBefore = profileContainers(ctx, cli)
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
		add(Row{Scenario: "1 exec round trip", Variant: "docker: gateway overhead over raw sandboxd", Value: fmt.Sprintf("+%.2f ms p50 (%.2fx), +%.2f ms p99", gw.P50-rawSD.P50, gw.P50/rawSD.P50, gw.P99-rawSD.P99)})
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
	first := func(g *gateway, tok, profile string) time.Duration {
		t := time.Now()
		id := g.newSession(tok, profile)
		g.exec(tok, id, "true")
		d := time.Since(t)
		g.do(tok, "DELETE", "/v1/sessions/"+id, nil)
		return d
	}
	var cold, rawd []time.Duration
	for i := 0; i < samples; i++ {
		cold = append(cold, first(g, tok, "docker"))
	}
	for i := 0; i < samples; i++ {
		t := time.Now()
		id := rawCreate()
		rawExec(id)
		rawd = append(rawd, time.Since(t))
		rm(id)
	}
	cs, rs := Summarize(cold), Summarize(rawd)
	add(Row{Scenario: "2 create -> first exec", Variant: "docker: cold (no pool)", Summary: &cs})
	warmRows(ctx, cli, first, samples)
	add(Row{Scenario: "2 create -> first exec", Variant: "docker: raw create+start+exec", Summary: &rs})

	// Postgres transactions per short execution, docker.
	sid = g.newSession(tok, "docker")
	g.exec(tok, sid, "true")
	xactRows(ctx, g, tok, sid, "docker")
	g.do(tok, "DELETE", "/v1/sessions/"+sid, nil)

	// 8. throughput, on the bench's Postgres (fsync off), then on one that runs as production
	// does.
	dockerThroughput(ctx, cli, g, tok, "")
	durableThroughput(ctx, cli)
}

// durableThroughput runs scenario 8 again through a gateway whose Postgres runs with
// fsync=on and synchronous_commit=on (devdb.Options.Durable, a server of its own under
// $TMPDIR/sandgate-bench-pg-durable): the bench's own Postgres runs with fsync off, which
// hides what a synchronous commit costs a production server. The rows say which disk the
// commits flush to.
func durableThroughput(ctx context.Context, cli *client.Client) {
	dir := filepath.Join(os.TempDir(), "sandgate-bench-pg-durable")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		skip("docker throughput, fsync=on: " + err.Error())
		return
	}
	inst, err := devdb.StartWith(ctx, dir, devdb.Options{Durable: true})
	if err != nil {
		skip("docker throughput, fsync=on: start postgres: " + err.Error())
		return
	}
	defer func() { _ = inst.Stop() }()
	url, err := freshDB(ctx, inst)
	if err != nil {
		skip("docker throughput, fsync=on: " + err.Error())
		return
	}
	if err := durableSettings(ctx, url); err != nil {
		skip("docker throughput, fsync=on: " + err.Error())
		return
	}
	g, err := startChild(gwOpts{name: "durable", docker: true, dbURL: url})
	if err != nil {
		skip("docker throughput, fsync=on: " + err.Error())
		return
	}
	defer g.close()
	tok := g.token("bench")
	sid := g.newSession(tok, "docker")
	g.exec(tok, sid, "true")
	xactRows(ctx, g, tok, sid, "docker, fsync=on")
	g.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
	dockerThroughput(ctx, cli, g, tok, "fsync=on: ")
}

// durableSettings checks that the Postgres at url flushes its commits (a server reused from
// an earlier start keeps the options it was started with).
func durableSettings(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, name := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return err
		}
		if v != "on" {
			return fmt.Errorf("the server at %s runs with %s=%s (stop it: pg_ctl -D <dir>/data stop)", url, name, v)
		}
	}
	return nil
}

// warmRows runs a child with profiles docker-warm (pool 2) and docker-burst (pool
// burstPool()): samples sequential creates on the first, then burstPool() concurrent
// creates → first exec on the second once its pool is full; then it stops the child and
// removes the pools.
func warmRows(ctx context.Context, cli *client.Client, first func(*gateway, string, string) time.Duration, samples int) {
	w, err := startChild(gwOpts{name: "warm", warm: true})
	if err != nil {
		skip("warm pool rows: " + err.Error())
		return
	}
	defer func() {
		w.close()
		drainPools(ctx, cli, "docker-warm", "docker-burst")
	}()
	tok := w.token("bench-warm")
	size := burstPool()
	// Both pools fill at the child's start: wait for both before timing either.
	waitPool(ctx, cli, "docker-burst", size, 120*time.Second)
	var warm []time.Duration
	for i := 0; i < samples; i++ {
		waitPool(ctx, cli, "docker-warm", 2, 60*time.Second)
		warm = append(warm, first(w, tok, "docker-warm"))
	}
	ws := Summarize(warm)
	add(Row{Scenario: "2 create -> first exec", Variant: "docker: warm pool (size 2)", Summary: &ws})

	// The burst: size clients at once, each creating a session and running `true` in it.
	ready := waitPool(ctx, cli, "docker-burst", size, 120*time.Second)
	lat := make([]time.Duration, size)
	ids := make([]string, size)
	var fails atomic.Int64
	var firstErr atomic.Value
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < size; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			t := time.Now()
			id, err := w.trySession(tok, "docker-burst")
			if err == nil {
				ids[i] = id
				if !w.tryExec(tok, id, "true") {
					err = fmt.Errorf("first exec failed")
				}
			}
			if err != nil {
				fails.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			lat[i] = time.Since(t)
		}(i)
	}
	t := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t)
	var ok []time.Duration
	for _, d := range lat {
		if d > 0 {
			ok = append(ok, d)
		}
	}
	bs := Summarize(ok)
	// Which sessions got a pool container (a claimed one is renamed sandgate-<slug>-w<id12>;
	// a fresh one, made when no claim succeeded, is not).
	pooled := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		if ins, err := cli.ContainerInspect(ctx, sandboxID(w, tok, id)); err == nil && len(ins.ID) >= 12 && strings.HasSuffix(ins.Name, "-w"+ins.ID[:12]) {
			pooled++
		}
	}
	r := Row{Scenario: "2 create -> first exec", Variant: fmt.Sprintf("docker: burst of %d concurrent, warm pool %d", size, size), Summary: &bs,
		Value: fmt.Sprintf("whole burst %d ms; pool held %d ready at the start; %d of %d sessions got a pool container", wall.Milliseconds(), ready, pooled, size)}
	if fails.Load() > 0 {
		r.Value += fmt.Sprintf("; %d FAILED (first: %.200v)", fails.Load(), firstErr.Load())
	}
	add(r)
	var created []string
	for _, id := range ids {
		if id != "" {
			created = append(created, id)
		}
	}
	destroyChecked(ctx, cli, w, tok, created)
}

// sandboxID is the container of session sid ("" before it has one).
func sandboxID(g *gateway, tok, sid string) string {
	var sess struct {
		SandboxID string `json:"sandbox_id"`
	}
	_ = json.Unmarshal(g.mustGet(tok, "/v1/sessions/"+sid), &sess)
	if sess.SandboxID != "" {
		seenBoxes.Store(sess.SandboxID, true)
	}
	return sess.SandboxID
}

// seenBoxes holds every container sandboxID saw (removeLeftovers removes what remains).
var seenBoxes sync.Map

// destroyChecked deletes docker sessions (8 at a time) and then checks that their
// containers are gone: one still there after its session's DELETE answered is reported
// (and removed at the end of the run).
func destroyChecked(ctx context.Context, cli *client.Client, g *gateway, tok string, ids []string) {
	containers := make([]string, len(ids))
	for i, id := range ids {
		containers[i] = sandboxID(g, tok, id)
	}
	failed := g.destroy(tok, ids, 8)
	var left []string
	for _, c := range containers {
		if c == "" {
			continue
		}
		if _, err := cli.ContainerInspect(ctx, c); err == nil {
			left = append(left, c[:min(12, len(c))])
		}
	}
	if len(left) > failed {
		fmt.Printf("  gateway %s: %d containers still exist after %d successful session DELETEs: %v\n", g.name, len(left), len(ids)-failed, left)
		leaked.Add(int64(len(left)))
	}
}

// leaked counts containers that outlived their sessions' DELETE.
var leaked atomic.Int64

// dockerThroughput: scenario 8, `true` from 1, 16 and 64 clients (quick: 1, 4, 8), each with
// its own docker session (sandboxd socket), through the gateway and then straight to the
// same sessions' sandboxd sockets (one remote.Client per session).
func dockerThroughput(ctx context.Context, cli *client.Client, g *gateway, tok, prefix string) {
	counts := []int{1, 16, 64}
	if *quick {
		counts = []int{1, 4, 8}
	}
	total := counts[len(counts)-1]
	sessions := make([]string, total)
	var failed atomic.Int64
	var firstErr atomic.Value
	t := time.Now()
	parallel(total, 8, func(i int) {
		id, err := g.trySession(tok, "docker")
		if err == nil {
			sessions[i] = id
			if !g.tryExec(tok, id, "true") { // starts the container
				err = fmt.Errorf("first exec in %s failed", id)
			}
		}
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
		}
	})
	setup := time.Since(t)
	var created []string
	for _, id := range sessions {
		if id != "" {
			created = append(created, id)
		}
	}
	defer destroyChecked(ctx, cli, g, tok, created)
	if failed.Load() > 0 {
		skip(fmt.Sprintf("docker throughput: %d of %d sessions could not be created and started (first: %v)", failed.Load(), total, firstErr.Load()))
		return
	}
	add(Row{Scenario: "8 docker throughput", Variant: prefix + fmt.Sprintf("setup: %d sessions created + started, 8 at a time", total), Value: setup.Round(time.Millisecond).String()})
	raws := make([]*remote.Client, total)
	for i, id := range sessions {
		rc, err := sandboxdClient(ctx, cli, g, tok, id)
		if err != nil {
			skip("docker throughput, raw sandboxd: " + err.Error())
			for _, r := range raws[:i] {
				_ = r.Close()
			}
			return
		}
		raws[i] = rc
	}
	defer func() {
		for _, r := range raws {
			_ = r.Close()
		}
	}()
	d, max := n(5, 1)*int(time.Second), n(20000, 2000)
	for _, c := range counts {
		self0, _ := g.cpu()
		lat, rate, fails := load(c, d, max, func(i int) bool { return g.tryExec(tok, sessions[i], "true") })
		self1, _ := g.cpu()
		rawLat, rawRate, rawFails := load(c, d, max, func(i int) bool {
			_, err := raws[i].Exec(ctx, sandboxd.ExecRequest{Command: "true"}, sandboxd.Streams{Stdout: io.Discard, Stderr: io.Discard})
			return err == nil
		})
		s, rs := Summarize(lat), Summarize(rawLat)
		row := func(variant string, s *Summary, rate float64, fails int64, extra string) {
			r := Row{Scenario: "8 docker throughput", Variant: variant, Summary: s, Rate: rate}
			if fails > 0 {
				r.Value = fmt.Sprintf("%d FAILED (30 s client timeout, error or non-200)", fails)
			}
			if extra != "" {
				r.Note = extra
			}
			add(r)
		}
		label := ""
		if c == total {
			label = " (" + maxConnsLabel(g.conns) + ")"
		}
		row(prefix+fmt.Sprintf("%d clients: through gateway%s", c, label), &s, rate, fails, "")
		row(prefix+fmt.Sprintf("%d clients: raw sandboxd socket", c), &rs, rawRate, rawFails, "")
		if rawRate > 0 {
			add(Row{Scenario: "8 docker throughput", Variant: prefix + fmt.Sprintf("%d clients: gateway vs raw", c),
				Value: fmt.Sprintf("gateway keeps %.2fx of raw sandboxd throughput (p50 %.2f vs %.2f ms)", rate/rawRate, s.P50, rs.P50)})
		}
		if c == counts[1] && len(lat) > 0 {
			add(Row{Scenario: "8 docker throughput", Variant: prefix + fmt.Sprintf("gateway CPU-ms per exec (%d clients)", c),
				Value: fmt.Sprintf("%.2f ms", perExec(self1-self0, len(lat))),
				Note:  "utime+stime of the child gateway (/proc/<pid>/stat) over the gateway run / completed execs"})
		}
		if fails > 0 && s.N == 0 {
			return // nothing completes: the gateway is wedged
		}
	}
}

// sandboxdClient connects to the sandboxd of session sid's container the way the provider
// does: the socket folder its label names, the secret from its environment.
func sandboxdClient(ctx context.Context, cli *client.Client, g *gateway, tok, sid string) (*remote.Client, error) {
	box := sandboxID(g, tok, sid)
	ins, err := cli.ContainerInspect(ctx, box)
	if err != nil {
		return nil, err
	}
	token := ins.Config.Labels[docker.LabelSandboxdToken]
	socks, _ := filepath.Glob(filepath.Join(socketFolders(ins.Config.Labels), "sd.sock"))
	if len(socks) != 1 || token == "" {
		return nil, fmt.Errorf("no sandboxd socket for container %s", box)
	}
	return remote.NewClient(socks[0], token), nil
}

// socketFolders is the pattern of the sandboxd socket folder a container's labels name, in the
// default socket folder: <installation>/<profile folder>/<name>.
func socketFolders(labels map[string]string) string {
	return filepath.Join(docker.DefaultSocketDir(), labels[docker.LabelInstallation], "*", labels[docker.LabelSandboxd])
}

// installation is the bench database's installation id (gatewaytest.Installation, recorded
// with the fresh database before the first gateway starts); "" before that.
var installation string

// ofBench are filters for the bench installation's objects with more labels: other users of
// the engine may have profiles of the same names.
func ofBench(labels ...string) filters.Args {
	args := filters.NewArgs()
	if installation != "" {
		args.Add("label", docker.LabelInstallation+"="+installation)
	}
	for _, l := range labels {
		args.Add("label", l)
	}
	return args
}

// poolContainers lists profile's ready (running) warm-pool containers.
func poolContainers(ctx context.Context, cli *client.Client, profile string, all bool) []container.Summary {
	args := ofBench(docker.LabelPool + "=" + profile)
	if !all {
		args.Add("status", "running")
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: all, Filters: args})
	if err != nil {
		return nil
	}
	out := list[:0]
	for _, c := range list {
		if len(c.Names) > 0 && strings.HasPrefix(strings.TrimPrefix(c.Names[0], "/"), "sandgate-pool-") {
			out = append(out, c)
		}
	}
	return out
}

// waitPool waits until profile's warm pool has want running containers and returns how many
// it has.
func waitPool(ctx context.Context, cli *client.Client, profile string, want int, max time.Duration) int {
	deadline := time.Now().Add(max)
	for {
		ready := len(poolContainers(ctx, cli, profile, false))
		if ready >= want || !time.Now().Before(deadline) {
			return ready
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// drainPools removes the profiles' ready warm-pool containers and their sandboxd socket
// folders, as docker.Provider.DrainPool does (the child that kept them has stopped).
func drainPools(ctx context.Context, cli *client.Client, profiles ...string) {
	for _, p := range profiles {
		for _, c := range poolContainers(ctx, cli, p, true) {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if l := c.Labels[docker.LabelSandboxd]; l != "" {
				dirs, _ := filepath.Glob(socketFolders(c.Labels))
				for _, d := range dirs {
					_ = os.RemoveAll(d)
				}
			}
		}
	}
}

// removeLeftovers removes what the run may have left on the engine: the containers of the
// bench database's sessions that still name one (a failed or panicked run leaves some), those
// that outlived their session's DELETE, the raw reference containers, and the warm pools. It returns how many containers it removed.
func removeLeftovers(ctx context.Context) int {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0
	}
	defer cli.Close()
	ids := map[string]bool{}
	if boxes, err := gatewaytest.Sandboxes(ctx, benchDB, docker.TypeName); err == nil {
		for _, id := range boxes {
			ids[id] = true
		}
	}
	seenBoxes.Range(func(k, _ any) bool { ids[k.(string)] = true; return true })
	if list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "sandgate.bench=1"))}); err == nil {
		for _, c := range list {
			ids[c.ID] = true
		}
	}
	removed := 0
	for id := range ids {
		ins, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			continue // gone already
		}
		if cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}) == nil {
			removed++
		}
		if l := ins.Config.Labels[docker.LabelSandboxd]; l != "" {
			dirs, _ := filepath.Glob(socketFolders(ins.Config.Labels))
			for _, d := range dirs {
				_ = os.RemoveAll(d)
			}
		}
	}
	drainPools(ctx, cli, "docker-warm", "docker-burst")
	return removed
}

// benchProfiles are the docker profiles whose containers the leak check counts.
var benchProfiles = []string{"docker", "docker-exec", "docker-warm", "docker-burst"}

// profileContainers returns the containers (any state) labelled with a bench profile, id →
// name, of the bench's installation.
func profileContainers(ctx context.Context, cli *client.Client) map[string]string {
	out := map[string]string{}
	for _, p := range benchProfiles {
		list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: ofBench(docker.LabelProfile + "=" + p)})
		if err != nil {
			continue
		}
		for _, c := range list {
			name := ""
			if len(c.Names) > 0 {
				name = strings.TrimPrefix(c.Names[0], "/")
			}
			out[c.ID] = name
		}
	}
	return out
}

var containersBefore map[string]string // profileContainers before the docker rows

// newContainers reports the bench-profile containers that exist now but did not before the
// docker rows: after every session was destroyed and every child stopped, they were left by
// this run (or by another user of the engine with the same profile names).
func newContainers(ctx context.Context) []string {
	if containersBefore == nil {
		return nil
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil
	}
	defer cli.Close()
	var out []string
	for id, name := range profileContainers(ctx, cli) {
		if _, ok := containersBefore[id]; !ok {
			out = append(out, name)
		}
	}
	return out
}
