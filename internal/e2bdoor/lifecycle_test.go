package e2bdoor_test

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/e2bdoor"
)

// TestLifecycleWithTheOfficialSDK: a second client connects to a sandbox and finds its files,
// variables and processes; setTimeout moves its end; pause keeps all of it (pausing twice:
// false; nothing is reachable while paused) and connect resumes it; a timeout with
// onTimeout 'pause' pauses the sandbox (connect wakes it with E2B's default timeout), one
// without kills it. The sweeper runs every second here (lost_after 2 s).
func TestLifecycleWithTheOfficialSDK(t *testing.T) {
	t.Parallel()
	d := dockerDoor(t, func(c *config.Config) { c.Sandbox.Broker.LostAfter = config.Duration(2 * time.Second) })
	_, key := d.key("alice", nil, nil)
	var got struct {
		SecondClient struct {
			Read, Z string
			Listed  bool
		}
		SetTimeout         bracketed
		Paused             bool
		PausedAgain        bool
		StateWhilePaused   string
		ListedPaused       []string
		RunningWhilePaused bool
		CommandWhilePaused attempt[any]
		AfterResume        struct {
			State, Read, Z string
			Listed         bool
		}
		AutoPaused     string
		AfterAutoPause struct {
			State, Read string
			End         bracketed
		}
		Expired string
	}
	d.sdk(key, "lifecycle", &got)

	assert.Equal(t, "kept across clients and pauses", got.SecondClient.Read)
	assert.Equal(t, "99\n", got.SecondClient.Z, "the second client runs in the same context")
	assert.True(t, got.SecondClient.Listed, "and sees the first one's processes")
	assert.True(t, got.SetTimeout.Within, "setTimeout: 900 s from then: %+v", got.SetTimeout)

	assert.True(t, got.Paused)
	assert.False(t, got.PausedAgain, "pausing a paused sandbox: false (409)")
	assert.Equal(t, "paused", got.StateWhilePaused)
	assert.Len(t, got.ListedPaused, 1)
	assert.False(t, got.RunningWhilePaused)
	require.NotNil(t, got.CommandWhilePaused.Thrown, "a paused sandbox is not reached")
	assert.Equal(t, "running", got.AfterResume.State)
	assert.Equal(t, "kept across clients and pauses", got.AfterResume.Read)
	assert.Equal(t, "99\n", got.AfterResume.Z, "variables kept across the pause")
	assert.True(t, got.AfterResume.Listed, "processes kept across the pause")

	assert.Equal(t, "paused", got.AutoPaused, "onTimeout 'pause'")
	assert.Equal(t, "running", got.AfterAutoPause.State)
	assert.Equal(t, "written before the nap", got.AfterAutoPause.Read)
	assert.True(t, got.AfterAutoPause.End.Within, "woken with E2B's default timeout (%s): %+v", e2bdoor.DefaultTimeout, got.AfterAutoPause.End)
	assert.Equal(t, "SandboxNotFoundError", got.Expired, "killed at its timeout")
}

// TestSandboxPlaneIsTheOwners: with her own key, Bob reaches none of Alice's sandbox through
// the sandbox plane — envd's health, processes, files and the code interpreter answer as
// for a sandbox that does not exist (E2B's 502) — and a pid of hers means nothing in his.
func TestSandboxPlaneIsTheOwners(t *testing.T) {
	t.Parallel()
	d := localDoor(t, nil)
	_, alice := d.key("alice", nil, nil)
	_, bob := d.key("bob", nil, nil)
	create := func(key string) string {
		status, _, body := d.Do("POST", e2bdoor.Path+"/v2/sandboxes", "", strings.NewReader(`{"templateID":"base","timeout":300}`), map[string]string{"X-API-KEY": key})
		require.Equal(t, http.StatusCreated, status, "%s", body)
		var s struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		}
		require.NoError(t, jsonUnmarshal(body, &s))
		assert.Equal(t, key, s.EnvdAccessToken, "the caller's own key is its access token")
		return s.SandboxID
	}
	hers, his := create(alice), create(bob)
	envd := func(key, id string) map[string]string {
		return map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": key, "Content-Type": "application/json"}
	}
	// Her process, started by her: its stream is left once it started (the process runs on).
	start, err := http.NewRequest("POST", d.URL+e2bdoor.Path+"/process.Process/Start", strings.NewReader(connectFrame(`{"process":{"cmd":"sleep","args":["60"]},"stdin":false}`)))
	require.NoError(t, err)
	for k, v := range map[string]string{"E2b-Sandbox-Id": hers, "E2b-Sandbox-Port": "49983", "X-Access-Token": alice, "Content-Type": "application/connect+json", "Connect-Timeout-Ms": "60000"} {
		start.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(start)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	first := make([]byte, 5)
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err, "the start event")
	resp.Body.Close()

	for _, c := range []struct{ method, path, body string }{
		{"GET", "/health", ""},
		{"GET", "/files?path=kept.txt", ""},
		{"POST", "/process.Process/List", "{}"},
		{"POST", "/filesystem.Filesystem/ListDir", `{"path":"/home/user"}`},
	} {
		var rd *strings.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		var status int
		var body []byte
		if rd != nil {
			status, _, body = d.Do(c.method, e2bdoor.Path+c.path, "", rd, envd(bob, hers))
		} else {
			status, _, body = d.Do(c.method, e2bdoor.Path+c.path, "", nil, envd(bob, hers))
		}
		assert.Equal(t, http.StatusBadGateway, status, "%s %s: %s", c.method, c.path, body)
		assert.Contains(t, string(body), "was not found", "%s %s", c.method, c.path)
	}
	status, _, body := d.Do("GET", e2bdoor.Path+"/contexts", "", nil,
		map[string]string{"E2b-Sandbox-Id": hers, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": bob})
	assert.Equal(t, http.StatusBadGateway, status, "%s", body)

	// In his own sandbox, her process's pid finds nothing.
	status, _, body = d.Do("POST", e2bdoor.Path+"/process.Process/List", "", strings.NewReader("{}"), envd(alice, hers))
	require.Equal(t, http.StatusOK, status, "%s", body)
	var list struct {
		Processes []struct {
			Pid uint32 `json:"pid"`
		} `json:"processes"`
	}
	require.NoError(t, jsonUnmarshal(body, &list))
	require.Len(t, list.Processes, 1)
	pid := list.Processes[0].Pid
	status, _, body = d.Do("POST", e2bdoor.Path+"/process.Process/SendSignal", "",
		strings.NewReader(`{"process":{"pid":`+itoa(pid)+`},"signal":"SIGNAL_SIGKILL"}`), envd(bob, his))
	assert.Equal(t, http.StatusNotFound, status, "%s", body)
	assert.Contains(t, string(body), `"code":"not_found"`)
}

// connectFrame is msg as one Connect streaming request envelope (no flags, its length, msg).
func connectFrame(msg string) string {
	var head [5]byte
	binary.BigEndian.PutUint32(head[1:], uint32(len(msg)))
	return string(head[:]) + msg
}
