package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sandgate/sandgate/internal/awsfake"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// queueDeployment is one gateway and its workers sharing a database and a queue transport.
type queueDeployment struct {
	t       *testing.T
	dir     string
	cfgPath string
	env     []string // the gateway's and the workers' extra environment
	gw      *devGateway
	c       *client
	mu      sync.Mutex
	workers map[string]*exec.Cmd // runner id → process
}

func startNATS(t *testing.T) string {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// startKafka runs an in-process Kafka (kfake speaks the real protocol, consumer groups
// included) that the gateway and worker processes reach over loopback.
func startKafka(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// startSQS runs the AWS fake with a FIFO input queue whose redrive policy moves a message
// received twice to a FIFO dead-letter queue; it returns the sqs block and the environment
// (static credentials the fake knows, its region) for the processes.
//
// The visibility timeout (seconds) must exceed the profile's timeout (the seed's rule); it is
// also how long a dead worker's message stays hidden.
func startSQS(t *testing.T, visibility int) (block string, env []string) {
	t.Helper()
	fake := awsfake.New(t)
	dead, err := fake.CreateSQSQueue("sandgate-dead.fifo", map[string]string{"FifoQueue": "true"})
	require.NoError(t, err)
	in, err := fake.CreateSQSQueue("sandgate.fifo", map[string]string{"FifoQueue": "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:%s:%s:sandgate-dead.fifo","maxReceiveCount":2}`, fake.Region, fake.Account)})
	require.NoError(t, err)
	block = fmt.Sprintf("{input_url: %q, dead_letter_url: %q, endpoint_url: %q, region: %s, visibility_timeout: %d, wait_time: 1s}", in, dead, fake.URL, fake.Region, visibility)
	return block, []string{"AWS_ACCESS_KEY_ID=" + awsfake.GatewayAccessKeyID, "AWS_SECRET_ACCESS_KEY=" + fake.GatewaySecret(),
		"AWS_REGION=" + fake.Region, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true"}
}

// newQueueDeployment writes a queue-flavor config for transport, whose profile has policy
// timeout timeout (seconds), and starts `gateway dev` on it.
func newQueueDeployment(t *testing.T, transport string, timeout int) *queueDeployment {
	t.Helper()
	return newQueueDeploymentOf(t, transport, timeout, "")
}

// newQueueDeploymentOf is newQueueDeployment with more profiles (YAML lines under
// sandbox.profiles, each starting with a newline and four spaces) beside the default one.
func newQueueDeploymentOf(t *testing.T, transport string, timeout int, profiles string) *queueDeployment {
	t.Helper()
	requirePostgres(t)
	dir := dataDir(t)
	work := filepath.Join(dir, "sandboxes")
	require.NoError(t, os.MkdirAll(work, 0o755))
	natsURL, kafkaBroker, sqsBlock := "nats://127.0.0.1:1", "127.0.0.1:1", "{}"
	var env []string
	switch transport {
	case "nats":
		natsURL = startNATS(t)
	case "kafka":
		kafkaBroker = startKafka(t)
	case "sqs":
		sqsBlock, env = startSQS(t, timeout+2)
	}
	cfg := fmt.Sprintf(`
database: {url: %q}
sandbox:
  profiles:
    default: {type: local_subprocess, local_subprocess: {workdir: %q}, policy: {timeout: %d}}%s
  broker:
    flavor: queue
    lost_after: 2s
    spool: {dir: %q}
    queue:
      type: %s
      consumers: 3
      max_receive_count: 2
      rescue_after: 3s
      nats: {url: %q, ack_wait: 3s}
      kafka: {brokers: [%q], partitions: 4, session_timeout: 3s}
      sqs: %s
    response_store: {type: postgres}
`, pgtest.URL(t), work, timeout, profiles, filepath.Join(dir, "spool"), transport, natsURL, kafkaBroker, sqsBlock)
	cfgPath := filepath.Join(dir, "sandgate.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	d := &queueDeployment{t: t, dir: dir, cfgPath: cfgPath, env: env, workers: map[string]*exec.Cmd{}}
	d.gw = startDev(t, dir, freeAddr(t), append([]string{"SANDGATE_CONFIG=" + cfgPath}, env...)...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("--- %s (tail) ---\n%s", filepath.Base(l), b)
		}
	})
	d.c = &client{t: t, base: d.gw.base, token: d.gw.token}
	return d
}

var runnerRE = regexp.MustCompile(`"runner_id":"([^"]+)"`)

// startWorker runs `gateway worker` and returns its runner id once it consumes.
func (d *queueDeployment) startWorker() string {
	t := d.t
	t.Helper()
	cmd := exec.Command(gatewayBin, "worker", "--config", d.cfgPath)
	cmd.Dir = d.dir
	cmd.Env = append(os.Environ(), d.env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	ids := make(chan string, 1)
	go func() {
		logf, _ := os.Create(filepath.Join(d.dir, fmt.Sprintf("worker-%d.log", time.Now().UnixNano())))
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if strings.Contains(sc.Text(), "worker consuming") {
				if m := runnerRE.FindStringSubmatch(sc.Text()); m != nil {
					ids <- m[1]
				}
			}
		}
	}()
	select {
	case id := <-ids:
		d.mu.Lock()
		d.workers[id] = cmd
		d.mu.Unlock()
		return id
	case <-done:
		t.Fatal("gateway worker exited before consuming")
	case <-time.After(time.Minute):
		t.Fatal("gateway worker did not start consuming")
	}
	return ""
}

// runnerOf waits until task id runs (on runner want, when not "") and returns its runner.
func (d *queueDeployment) runnerOf(taskID, want string) string {
	d.t.Helper()
	st := pgStore(d.t, d.cfgPath)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		tk, err := st.GetTask(d.t.Context(), taskID, "")
		require.NoError(d.t, err)
		if tk.Status == "running" && tk.RunnerID != "" && (want == "" || tk.RunnerID == want) {
			return tk.RunnerID
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("task %s never started", taskID)
	return ""
}

func (d *queueDeployment) waitTask(id string, within time.Duration) map[string]any {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		m := d.c.json("GET", "/v1/tasks/"+id, "", 200)
		if m["finished_at"] != nil {
			return m
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("task %s did not finish within %s", id, within)
	return nil
}

// queueTransports are the transports the multi-process tests run on: all but in_memory.
var queueTransports = []string{"postgres", "nats", "kafka", "sqs"}

func TestQueueWorkers(t *testing.T) {
	for _, transport := range queueTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			// SQS redelivers a dead worker's message once the visibility timeout lapses, and that
			// must exceed the profile's timeout: a short one keeps the test quick.
			timeout := 120
			if transport == "sqs" {
				timeout = 8
			}
			d := newQueueDeployment(t, transport, timeout)
			w1, w2 := d.startWorker(), d.startWorker()

			sid := d.c.json("POST", "/v1/sessions", `{"name":"q"}`, 201)["id"].(string)
			res := d.c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"python3 -c 'print(6*7)'"}`, 200)
			require.Equal(t, "42\n", res["stdout"])

			// Output far over the 128 KiB record limit: the same answers as the thread flavor
			// (results go to Postgres, not on the queue): 0.9 MB whole, 1.3 MB cut to 1 MiB.
			for _, n := range []int{150000, 200000} {
				requireThreadFlavorOutput(t, n, d.c.json("POST", "/v1/sessions/"+sid+"/commands", fmt.Sprintf(`{"command":"seq 1 %d; echo END"}`, n), 200))
			}
			profiles := d.c.json("GET", "/v1/profiles", "", 200)["profiles"].([]any)
			require.EqualValues(t, 1<<20, profiles[0].(map[string]any)["output_limit_bytes"])

			// FIFO per session across both workers.
			var wg sync.WaitGroup
			for i := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d.c.json("POST", "/v1/sessions/"+sid+"/commands", fmt.Sprintf(`{"command":"echo start-%d >> log; sleep 0.2; echo end-%d >> log"}`, i, i), 200)
				}()
			}
			wg.Wait()
			log := d.c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"cat log"}`, 200)["stdout"].(string)
			lines := strings.Fields(log)
			require.Len(t, lines, 12, log)
			for i := 0; i < len(lines); i += 2 {
				require.Equal(t, strings.Replace(lines[i], "start", "end", 1), lines[i+1], "interleaved:\n%s", log)
			}

			// kill -9 the worker running a task: the other worker completes it.
			task := d.c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"sleep 3; echo survived","wait_s":0}`, 202)["id"].(string)
			victim := d.runnerOf(task, "")
			require.Contains(t, []string{w1, w2}, victim)
			require.NoError(t, d.workers[victim].Process.Signal(syscall.SIGKILL))
			done := d.waitTask(task, 90*time.Second)
			require.Equal(t, "succeeded", done["status"], "task after its worker died: %v", done)
			require.Equal(t, "survived\n", done["result"].(map[string]any)["stdout"])
			other := w1
			if victim == w1 {
				other = w2
			}

			// SIGTERM drains: the running task finishes, the worker exits cleanly.
			task = d.c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"sleep 2; echo drained","wait_s":0}`, 202)["id"].(string)
			require.Equal(t, other, d.runnerOf(task, ""))
			cmd := d.workers[other]
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			done = d.waitTask(task, 30*time.Second)
			require.Equal(t, "succeeded", done["status"])
			require.Equal(t, "drained\n", done["result"].(map[string]any)["stdout"])
			exited := make(chan error, 1)
			go func() { _, err := cmd.Process.Wait(); exited <- err }()
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				t.Fatal("worker did not exit after draining")
			}

			// With no worker alive the task waits (never vanishes); a redelivery cap ends a task
			// whose workers keep dying.
			task = d.c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"sleep 30","wait_s":0}`, 202)["id"].(string)
			for range 2 {
				w := d.startWorker()
				d.runnerOf(task, w)
				require.NoError(t, d.workers[w].Process.Signal(syscall.SIGKILL))
				time.Sleep(2500 * time.Millisecond) // the runner's heartbeat goes stale
			}
			d.startWorker()
			done = d.waitTask(task, 90*time.Second)
			require.Equal(t, "failed", done["status"])
			require.Contains(t, done["error"], "after 2 deliveries")
			if transport == "sqs" {
				require.Contains(t, done["error"], "dead-letter queue", "SQS's redrive moved it; a worker recorded it")
			}
		})
	}
}

// requireThreadFlavorOutput checks the answer to `seq 1 n; echo END` is what the thread
// flavor answers with the default max_output_bytes (1 MiB): all of it when it fits, else its
// first and last 512 KiB; the total counted and a cut flagged either way.
func requireThreadFlavorOutput(t *testing.T, n int, res map[string]any) {
	t.Helper()
	var full strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&full, "%d\n", i)
	}
	full.WriteString("END\n")
	out := full.String()
	const limit = 1 << 20
	want := out
	if len(out) > limit {
		want = out[:limit/2] + out[len(out)-limit/2:]
	}
	got, _ := res["stdout"].(string)
	require.Equal(t, len(want), len(got), "kept bytes (notice: %v)", res["notice"])
	require.Equal(t, want, got)
	require.EqualValues(t, len(out), res["stdout_bytes"])
	require.Equal(t, len(out) > limit, res["stdout_truncated"])
	require.Equal(t, false, res["stderr_truncated"])
	require.Equal(t, "", res["stderr"])
	require.Nil(t, res["notice"])
}

func TestWorkerStartupChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ yaml, want string }{
		"thread flavor":      {"sandbox: {broker: {flavor: thread}}", "flavor 'queue'"},
		"no queue block":     {"sandbox: {broker: {flavor: queue, response_store: {type: postgres}}}", "sandbox.broker.queue"},
		"no response store":  {"sandbox: {broker: {flavor: queue, queue: {type: postgres}}}", "sandbox.broker.response_store"},
		"in_memory mismatch": {"sandbox: {broker: {flavor: queue, queue: {type: in_memory}, response_store: {type: postgres}}}", "only valid together"},
		"unknown transport":  {"sandbox: {broker: {flavor: queue, queue: {type: rabbitmq}, response_store: {type: postgres}}}", "sandbox.broker.queue.type"},
		"in_memory worker":   {"sandbox: {broker: {flavor: queue, queue: {type: in_memory}, response_store: {type: in_memory}}}", "in_memory queue"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(tc.yaml+"\n"), 0o644))
		out, err := exec.Command(gatewayBin, "worker", "--config", path).CombinedOutput()
		require.Error(t, err, name)
		require.Contains(t, string(out), tc.want, name)
	}
}

// `config validate`, `serve` and `worker` accept and refuse the same transport names, all from
// one registry: each name this binary serves validates, and another is refused by all three
// before anything connects, with the served names listed.
func TestCommandsAgreeOnTransportNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string) string {
		store := "postgres"
		if name == "in_memory" {
			store = "in_memory"
		}
		path := filepath.Join(dir, name+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`database: {url: "postgres://nobody@127.0.0.1:1/none"}
auth: {issuers: [{url: "https://issuer.example", audiences: [sandgate]}]}
sandbox:
  broker:
    flavor: queue
    queue: {type: %s, sqs: {input_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate.fifo"}}
    response_store: {type: %s}
`, name, store)), 0o600))
		return path
	}
	require.Contains(t, gateway.Transports(), "kafka")
	require.Contains(t, gateway.Transports(), "sqs")
	for _, name := range gateway.Transports() {
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), []string{"config", "validate", "--config", write(name)}, nil, &out, io.Discard), name)
		require.Contains(t, out.String(), "configuration is valid", name)
	}
	path := write("rabbitmq")
	for _, cmd := range [][]string{{"config", "validate"}, {"serve"}, {"worker"}} {
		start := time.Now()
		err := run(t.Context(), append(cmd, "--config", path), nil, io.Discard, io.Discard)
		require.Error(t, err, cmd)
		require.Less(t, time.Since(start), 5*time.Second, "%v connected to something", cmd)
		require.Contains(t, err.Error(), `"rabbitmq"`, cmd)
		for _, name := range gateway.Transports() {
			require.Contains(t, err.Error(), name, cmd)
		}
	}
}

// TestReadmeWalkthroughOnQueue runs the README walkthrough against a gateway with workers, for
// each transport.
func TestReadmeWalkthroughOnQueue(t *testing.T) {
	requireCurl(t)
	for _, transport := range queueTransports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			d := newQueueDeployment(t, transport, 120)
			d.startWorker()
			d.startWorker()
			// The workers' local_subprocess profile is not stateful: contexts would live in one
			// worker process while the next call may land on the other.
			runWalkthrough(t, d.dir, d.gw.base, d.gw.token, false)
		})
	}
}
