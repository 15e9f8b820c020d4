package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// dedicatedPostgres starts a Postgres server of the test's own (pgtest's shared server
// cannot be stopped), migrated; it is stopped when the test ends.
func dedicatedPostgres(t *testing.T) (dir, url string) {
	t.Helper()
	if _, err := devdb.FindBin(); err != nil {
		t.Skip(err)
	}
	dir = filepath.Join(t.TempDir(), "pg")
	inst, err := devdb.Start(t.Context(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = devdb.StopDir(dir) })
	url = inst.URL("sandgate")
	st, err := postgres.Open(t.Context(), url, 2)
	require.NoError(t, err)
	_, err = st.Migrate(t.Context())
	st.Close()
	require.NoError(t, err)
	return dir, url
}

// finishDuringOutage runs a command in a new session of gateway e that is released only once
// Postgres (data folder pgDir) is stopped, so that it finishes while the store does not
// answer, and returns the answer the waiting caller got and the task's id.
func finishDuringOutage(t *testing.T, e *gatewaytest.Env, pgDir string) (answer map[string]any, taskID string) {
	t.Helper()
	tok := e.Token("owner")
	code, _, body := e.Do("POST", "/v1/sessions", tok, strings.NewReader(`{"profile":"default"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusCreated, code, "%s", body)
	sid := between(string(body), `"id":"`, `"`)

	marks := t.TempDir()
	started, release := filepath.Join(marks, "started"), filepath.Join(marks, "release")
	cmd := fmt.Sprintf(`touch %s; while [ ! -e %s ]; do sleep 0.05; done; echo finished while the store was down; echo and its stderr >&2`, started, release)
	req, err := json.Marshal(map[string]any{"command": cmd, "wait_s": 300})
	require.NoError(t, err)
	type reply struct {
		code int
		body []byte
	}
	replied := make(chan reply, 1)
	go func() {
		code, _, body := e.Do("POST", "/v1/sessions/"+sid+"/commands", tok, strings.NewReader(string(req)), map[string]string{"Content-Type": "application/json"})
		replied <- reply{code, body}
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, time.Minute, 20*time.Millisecond, "the command runs")

	require.NoError(t, devdb.StopDir(pgDir))
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	var r reply
	select {
	case r = <-replied:
	case <-time.After(2 * time.Minute):
		t.Fatal("the caller got no answer")
	}
	require.Equal(t, http.StatusOK, r.code, "the caller that waited gets its result although the store is down: %s", r.body)
	require.NoError(t, json.Unmarshal(r.body, &answer))
	require.Equal(t, "finished while the store was down\n", answer["stdout"])
	taskID, _ = answer["task_id"].(string)
	require.NotEmpty(t, taskID)
	_, err = os.Stat(filepath.Join(e.SpoolDir, taskID+".rec"))
	require.NoError(t, err, "the completion waits in the spool")
	return answer, taskID
}

// awaitTask polls GET /v1/tasks/{id} as an administrator of e until the task finished, and
// returns it with every status it was seen in.
func awaitTask(t *testing.T, e *gatewaytest.Env, id string) (task map[string]any, seen []string) {
	t.Helper()
	admin := e.Token("operator", "admins")
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		code, _, body := e.Do("GET", "/v1/tasks/"+id, admin, nil, nil)
		require.Equal(t, http.StatusOK, code, "%s", body)
		task = map[string]any{}
		require.NoError(t, json.Unmarshal(body, &task))
		seen = append(seen, task["status"].(string))
		if task["finished_at"] != nil {
			return task, seen
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("task %s did not finish", id)
	return nil, nil
}

// requireAsAnswered checks that finished task task holds the result its caller got.
func requireAsAnswered(t *testing.T, task, answer map[string]any) {
	t.Helper()
	require.Equal(t, "succeeded", task["status"], "%v", task)
	require.Nil(t, task["error"])
	res, ok := task["result"].(map[string]any)
	require.True(t, ok, "the task keeps its result: %v", task)
	for _, k := range []string{"stdout", "stderr", "exit_code", "status", "duration_ms"} {
		require.Equal(t, answer[k], res[k], k)
	}
	require.Equal(t, "and its stderr\n", res["stderr"])
}

// A run that finishes while Postgres is down is answered 200 with its result, and its
// completion outlives its gateway: the gateway restarted on the same spool, once Postgres is
// back, records it — the task is `succeeded` with its output, never `lost` (issue 32: "A
// test stops Postgres, finishes an execution, restarts the gateway, starts Postgres").
func TestCompletionOutlivesRestartDuringStoreOutage(t *testing.T) {
	pgDir, url := dedicatedPostgres(t)
	e := gatewaytest.Start(t, gatewaytest.Options{DBURL: url})
	answer, id := finishDuringOutage(t, e, pgDir)

	e.Stop() // the store is still down: the completion cannot be recorded before the end
	_, err := devdb.Start(t.Context(), pgDir)
	require.NoError(t, err)

	again := gatewaytest.Start(t, gatewaytest.Options{DBURL: url, SpoolDir: e.SpoolDir})
	task, seen := awaitTask(t, again, id)
	require.NotContains(t, seen, "lost")
	requireAsAnswered(t, task, answer)
	out, _, body := again.Do("GET", "/v1/tasks/"+id+"/output", again.Token("operator", "admins"), nil, nil)
	require.Equal(t, http.StatusOK, out, "%s", body)
	require.Contains(t, string(body), "finished while the store was down")
	require.Eventually(t, func() bool {
		ents, err := os.ReadDir(e.SpoolDir)
		return err == nil && len(ents) == 0
	}, time.Minute, 50*time.Millisecond, "the spool is empty once the store has the completion")
}

// Another replica cannot know a completion waits in a spool it does not see: once the
// stopped gateway's heartbeat is older than lost_after, it reports the task lost. The
// gateway restarted on that spool corrects the verdict to what happened.
func TestSpooledCompletionCorrectsLostVerdict(t *testing.T) {
	pgDir, url := dedicatedPostgres(t)
	e := gatewaytest.Start(t, gatewaytest.Options{DBURL: url})
	answer, id := finishDuringOutage(t, e, pgDir)
	e.Stop()
	_, err := devdb.Start(t.Context(), pgDir)
	require.NoError(t, err)

	other := gatewaytest.Start(t, gatewaytest.Options{DBURL: url, Config: func(c *config.Config) {
		c.Sandbox.Broker.LostAfter = config.Duration(time.Second)
	}})
	task, _ := awaitTask(t, other, id)
	require.Equal(t, "lost", task["status"], "the other replica's sweeper could not know better: %v", task)

	again := gatewaytest.Start(t, gatewaytest.Options{DBURL: url, SpoolDir: e.SpoolDir})
	for deadline := time.Now().Add(time.Minute); task["status"] == "lost" && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		task, _ = awaitTask(t, again, id)
	}
	requireAsAnswered(t, task, answer)
}

// A spool folder the process cannot make is refused at start, naming the key that moves it —
// not found out at the first outage.
func TestUnwritableSpoolRefusedAtStart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cfg := &config.Config{}
	cfg.Database.URL = pgtest.URL(t)
	cfg.Auth.Issuers = []config.Issuer{{URL: "https://issuer.example", Audiences: []string{"sandgate"}}}
	cfg.Sandbox.Profiles = map[string]config.Profile{
		"default": {Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: t.TempDir()}}},
	}
	cfg.Sandbox.Broker.Spool.Dir = filepath.Join(file, "spool")
	cfg.ApplyDefaults()
	require.NoError(t, cfg.Validate())
	_, err := gateway.New(t.Context(), cfg, gateway.Options{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "sandbox.broker.spool.dir")
	require.Contains(t, err.Error(), "SANDGATE_SANDBOX__BROKER__SPOOL__DIR")
}
