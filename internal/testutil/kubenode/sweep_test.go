package kubenode

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStaleRecords: a record is stale only when the process that wrote it is gone (its pid
// unused, or used by a later process); files that are no record of this package's own
// clusters are never taken for one.
func TestStaleRecords(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	c := &Cluster{ID: "a1b2c3", Dir: "/tmp/sgk-a1b2c3-123", netns: "sgk-a1b2c3", hostVeth: "sgka1b2c3", cgroup: "/sgk-a1b2c3",
		sysctls: map[string]string{"vm/panic_on_oom": "0"}, absent: []string{"/var/lib/kubelet"}, tags: []string{"img:kubenode-a1b2c3"}}
	require.NoError(t, c.saveRecord(dir))

	stale, live := staleRecords(dir, log)
	assert.Empty(t, stale, "this process wrote the record and runs")
	assert.True(t, live)

	// The owner gone: a process that has exited, and this one's pid with another start.
	done := exec.Command("true")
	require.NoError(t, done.Run())
	var r record
	b, err := os.ReadFile(recordPath(dir, c.ID))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	for _, owner := range []struct {
		pid   int
		start uint64
	}{{done.Process.Pid, r.OwnerStart}, {os.Getpid(), r.OwnerStart + 1}} {
		r.OwnerPID, r.OwnerStart = owner.pid, owner.start
		writeJSON(t, recordPath(dir, c.ID), r)
		stale, live = staleRecords(dir, log)
		require.Len(t, stale, 1)
		assert.False(t, live)
		assert.Equal(t, r, stale[0], "the record reads back whole")
	}

	// Never swept: files that do not read, and records naming anything but a cluster's own
	// folder, netns, veth and cgroup — whoever wrote them.
	require.NoError(t, os.Remove(recordPath(dir, c.ID)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk.json"), []byte("{"), 0o600))
	bad := withID(r, "000001")
	bad.Dir = "/"
	writeJSON(t, recordPath(dir, "000001"), bad)
	bad = withID(r, "000002")
	bad.Dir, bad.Netns = "/tmp/sgk-000002-1", "default"
	writeJSON(t, recordPath(dir, "000002"), bad)
	bad = withID(r, "000003")
	bad.Dir, bad.Cgroup = "/tmp/sgk-000003-1", "/"
	writeJSON(t, recordPath(dir, "000003"), bad)
	bad = withID(r, "000004")
	bad.Dir = "/tmp/sgk-000004-1"
	writeJSON(t, recordPath(dir, "000005"), bad) // under another cluster's name
	stale, _ = staleRecords(dir, log)
	assert.Empty(t, stale)
}

func withID(r record, id string) record {
	r.ID, r.Dir, r.Netns, r.HostVeth, r.Cgroup = id, "/tmp/sgk-"+id+"-1", "sgk-"+id, "sgk"+id, "/sgk-"+id
	return r
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// TestKillUnder: the processes whose command line names a cluster's folder (as an argument,
// a flag's value or a unix:// URL) are killed; one naming a folder beside it is not.
func TestKillUnder(t *testing.T) {
	root := t.TempDir()
	dir, beside := filepath.Join(root, "sgk-abc-1"), filepath.Join(root, "sgk-abc-10")
	for _, d := range []string{dir, beside} {
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "f"), nil, 0o644))
	}
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(args[0], args[1:]...)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	ours := run("tail", "-f", filepath.Join(dir, "f"))
	other := run("tail", "-f", filepath.Join(beside, "f"))

	killed, err := killUnder(dir)
	require.NoError(t, err)
	assert.Equal(t, []int{ours.Process.Pid}, killed)
	err = ours.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "tail ended with %v", err)
	assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	assert.NoError(t, other.Process.Signal(syscall.Signal(0)), "the process naming the folder beside is left alone")

	assert.True(t, namesPath([]string{"etcd", "--data-dir=" + dir + "/etcd"}, dir))
	assert.True(t, namesPath([]string{"cri-dockerd", "--docker-endpoint", "unix://" + dir + "/docker.sock"}, dir))
	assert.False(t, namesPath([]string{"x", "--data-dir=" + beside}, dir))
	_, err = killUnder("/")
	assert.Error(t, err)
}
