package kubernetes

// Snapshots on the real API server and the played node (nodesim_test.go): the archive
// travels from the pod's sandboxd through the exec tunnel into a file of the snapshot
// folder, and from there into a new pod's sandboxd.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

func TestSnapshotRestoresTheWorkspaceIntoANewPod(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots") // made on first use
	p, ns := dataPathProvider(t, func(o *Options) { o.Config.SnapshotDir = dir })
	ctx := t.Context()
	caps := p.Capabilities()
	require.True(t, caps.Snapshots)
	require.False(t, caps.Pause, "the Kubernetes API has no freezer")
	sb, err := p.Create(ctx, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	run := func(sb providers.Sandbox, cmd string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		st, err := sb.Exec(ctx, providers.ExecSpec{Command: cmd, Timeout: time.Minute, Output: providers.Output{Stdout: &out, Stderr: &errOut}})
		require.NoError(t, err, cmd)
		require.Equal(t, 0, st.ExitCode, "%s: %s", cmd, errOut.String())
		return out.String()
	}

	binary := []byte{0, 1, 2, 0xff, 0xfe, '\r', '\n', 0, 0x80}
	_, err = sb.WriteFile(ctx, "data/deep/bin.dat", bytes.NewReader(binary), -1)
	require.NoError(t, err)
	run(sb, `ln -s data/deep/bin.dat link && ln -s /etc/passwd outside && printf '#!/bin/sh\necho tool\n' > tool &&
		chmod 755 tool && chmod 750 data/deep && touch -d '2024-05-06 07:08:09' tool && mkfifo pipe`)

	id := "0123456789abcdef0123456789abcdef"
	meta := providers.SnapshotMeta{ID: id, Owner: "alice", SessionID: "s-1", Profile: "test"}
	info, err := p.Snapshot(ctx, sb.ID(), meta)
	require.NoError(t, err)
	assert.Equal(t, SnapshotPrefix+id+SnapshotSuffix, info.Ref, "the ref is a file name in the folder")
	st, err := os.Stat(filepath.Join(dir, info.Ref))
	require.NoError(t, err)
	assert.Equal(t, st.Size(), info.SizeBytes)
	var md SnapshotMetadata
	raw, err := os.ReadFile(filepath.Join(dir, SnapshotPrefix+id+MetaSuffix))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &md))
	assert.Equal(t, SnapshotMetadata{ID: id, Installation: testInstallation, Owner: "alice", SessionID: "s-1", Profile: "test", SandboxID: sb.ID(), Pod: sb.ID(),
		Format: "tar+gzip", SizeBytes: info.SizeBytes, CreatedAt: md.CreatedAt}, md)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "the archive and its metadata, no temporary file")

	_, err = p.Snapshot(ctx, sb.ID(), meta)
	assert.True(t, fault.IsKind(err, fault.Conflict), "%v", err)
	_, err = p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: "../../x"})
	assert.True(t, fault.IsKind(err, fault.Validation), "%v", err)
	_, err = sb.WriteFile(ctx, "later.txt", strings.NewReader("after the snapshot"), -1)
	require.NoError(t, err)

	restored, err := p.Restore(ctx, info.Ref, agentPrincipal, allowPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), restored.ID()) })
	assert.NotEqual(t, sb.ID(), restored.ID())
	rc, err := restored.ReadFile(ctx, "data/deep/bin.dat")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	assert.Equal(t, binary, got)
	list, err := restored.ListFiles(ctx, "")
	require.NoError(t, err)
	names := map[string]providers.FileType{}
	for _, f := range list {
		names[f.Name] = f.Type
	}
	assert.Equal(t, map[string]providers.FileType{
		"data": providers.FileDir, "link": providers.FileSymlink, "outside": providers.FileSymlink, "tool": providers.FileRegular,
	}, names, "no later.txt (written after the capture), no FIFO (not content)")
	assert.Equal(t, "data/deep/bin.dat\n/etc/passwd\n750 755\ntool\n2024-05-06 07:08:09\n",
		run(restored, `readlink link; readlink outside; echo $(stat -c %a data/deep tool); ./tool; date -r tool '+%Y-%m-%d %H:%M:%S'`),
		"symlinks stay links (never followed), modes and times are kept")

	// A capture whose files do not fit the profile's disk_mb: the new pod is removed again.
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	_, err = sb.WriteFile(ctx, "big.bin", bytes.NewReader(big), -1)
	require.NoError(t, err)
	bigID := "fedcba9876543210fedcba9876543210"
	bigInfo, err := p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: bigID})
	require.NoError(t, err)
	assert.Greater(t, bigInfo.SizeBytes, int64(3<<20), "random bytes do not compress")
	small := allowPolicy
	small.DiskMB = 2
	before := podCount(t, p, ns)
	_, err = p.Restore(ctx, bigInfo.Ref, agentPrincipal, small)
	assert.True(t, fault.IsKind(err, fault.TooLarge), "%v", err)
	require.Eventually(t, func() bool { return podCount(t, p, ns) == before }, 30*time.Second, 100*time.Millisecond,
		"the pod made for a failed restore is removed")

	// Delete: idempotent; then the capture is not found. Refs never name other paths.
	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	require.NoError(t, p.DeleteSnapshot(ctx, bigInfo.Ref))
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	_, err = p.Restore(ctx, info.Ref, agentPrincipal, allowPolicy)
	assert.True(t, fault.IsKind(err, fault.NotFound), "%v", err)
	outside := filepath.Join(t.TempDir(), SnapshotPrefix+id+SnapshotSuffix)
	require.NoError(t, os.WriteFile(outside, []byte("not ours"), 0o600))
	for _, ref := range []string{outside, "../" + filepath.Base(filepath.Dir(outside)) + "/" + filepath.Base(outside), "x.tar.gz", ""} {
		_, err = p.Restore(ctx, ref, agentPrincipal, allowPolicy)
		assert.True(t, fault.IsKind(err, fault.NotFound), "%q: %v", ref, err)
		require.NoError(t, p.DeleteSnapshot(ctx, ref))
	}
	_, err = os.Stat(outside)
	require.NoError(t, err, "a ref that is not a snapshot file name is left alone")

	// Sandboxes that are not (or no longer) this provider's.
	_, err = p.Snapshot(ctx, "kube-system/sandgate-000000000000", meta)
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	require.NoError(t, p.Destroy(ctx, sb.ID()))
	_, err = p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: "00000000000000000000000000000001"})
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
}

func podCount(t *testing.T, p *Provider, ns string) int {
	t.Helper()
	pods, err := p.gateway.core.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	n := 0
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}
