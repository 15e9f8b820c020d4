package kubernetes

// Snapshots on the real node: the workspace of a running pod streams from its sandboxd
// through the kubelet's exec into the snapshot folder, and into the emptyDir of a new pod.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/sandgate/sandgate/internal/providers"
)

func TestNodeSnapshot(t *testing.T) {
	c := requireNode(t)
	ns := nodeNamespace(t, c)
	dir := t.TempDir()
	p := nodeProvider(t, c, ns, func(k *Config) { k.SnapshotDir = dir })
	require.True(t, p.Capabilities().Snapshots)
	ctx := context.Background()
	run := func(sb providers.Sandbox, cmd string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		st, err := sb.Exec(ctx, providers.ExecSpec{Command: cmd, Timeout: time.Minute, Output: providers.Output{Stdout: &out, Stderr: &errOut}})
		require.NoError(t, err, cmd)
		require.Equal(t, 0, st.ExitCode, "%s: %s", cmd, errOut.String())
		return out.String()
	}

	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	run(sb, `mkdir -p data/deep && printf 'kept\n' > data/deep/a.txt && ln -s data/deep/a.txt link &&
		head -c 1048576 /dev/urandom > data/blob && sha256sum data/blob > blob.sum && touch -d '2024-05-06 07:08:09' data/deep/a.txt`)

	id := "00112233445566778899aabbccddeeff"
	info, err := p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: id, Owner: "alice", SessionID: "s-node", Profile: "node"})
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, info.Ref))
	require.NoError(t, err)
	assert.Equal(t, st.Size(), info.SizeBytes)
	assert.Greater(t, info.SizeBytes, int64(1<<20), "the random megabyte is in it")

	restored, err := p.Restore(ctx, info.Ref, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), restored.ID()) })
	_, oldPod := sb.(*Sandbox).Pod()
	_, newPod := restored.(*Sandbox).Pod()
	require.NotEqual(t, oldPod, newPod)
	cs, err := k8s.NewForConfig(c.Config)
	require.NoError(t, err)
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, newPod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, c.NodeName, pod.Spec.NodeName, "a real pod on the node")

	assert.Equal(t, "kept\ndata/deep/a.txt\ndata/blob: OK\n2024-05-06 07:08:09\n",
		run(restored, `cat link; readlink link; sha256sum -c blob.sum; date -r data/deep/a.txt '+%Y-%m-%d %H:%M:%S'`))

	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}
