package providertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// snapshotTime is the modification time the snapshot tests give files and folders
// (2021-02-03 04:05:06 UTC), in Unix seconds.
const snapshotTime = 1612325106

// snapshotFixture builds the tree the snapshot tests capture, under folder "snap": files
// with their own modes and times, setuid and setgid files, a sticky folder, empty folders,
// symlinks inside, out of the workspace and dangling, a hard link and a sparse file. It
// prints the special bits that stuck on the setuid and setgid files.
const snapshotFixture = `import os
T = 1612325106
os.makedirs('snap/dir/empty')
os.makedirs('snap/deep/a/b/empty')
with open('snap/dir/f.txt', 'w') as f:
    f.write('data')
os.chmod('snap/dir/f.txt', 0o640)
with open('snap/tool', 'w') as f:
    f.write('#!/bin/sh\necho tool\n')
os.chmod('snap/tool', 0o4755)
with open('snap/group', 'w') as f:
    f.write('g')
os.chmod('snap/group', 0o2750)
os.mkdir('snap/shared')
os.chmod('snap/shared', 0o1777)
os.mkdir('snap/private')
with open('snap/private/secret', 'w') as f:
    f.write('s')
os.chmod('snap/private/secret', 0o600)
os.chmod('snap/private', 0o700)
os.symlink('dir/f.txt', 'snap/inside')
os.symlink('/etc/passwd', 'snap/outside')
os.symlink('../../../../..', 'snap/deep/up')
os.symlink('missing', 'snap/dangling')
os.link('snap/dir/f.txt', 'snap/hard')
with open('snap/sparse.img', 'wb') as f:
    f.truncate(64 << 20)
    f.seek((64 << 20) - 3)
    f.write(b'end')
for p in ['snap/dir/f.txt', 'snap/tool', 'snap/sparse.img', 'snap/private/secret', 'snap/dir/empty',
          'snap/dir', 'snap/deep/a/b/empty', 'snap/shared', 'snap/private']:
    os.utime(p, (T, T))
print(oct(os.stat('snap/tool').st_mode & 0o7777), oct(os.stat('snap/group').st_mode & 0o7777))
`

// snapshotTree prints, as JSON, every entry under folder "snap" (links not followed): its
// type, mode (permission and special bits), modification time, size, blocks, link target,
// link count and, for a small file, its content; for a larger one its last 3 bytes.
const snapshotTree = `import json, os, stat
out = {}
for root, dirs, files in os.walk('snap'):
    for name in dirs + files:
        p = os.path.join(root, name)
        st = os.lstat(p)
        e = {'mode': st.st_mode & 0o7777, 'mtime': int(st.st_mtime), 'blocks': st.st_blocks, 'nlink': st.st_nlink}
        if stat.S_ISLNK(st.st_mode):
            e['type'] = 'link'
            e['target'] = os.readlink(p)
        elif stat.S_ISDIR(st.st_mode):
            e['type'] = 'dir'
        else:
            e['type'] = 'file'
            e['size'] = st.st_size
            with open(p, 'rb') as f:
                if st.st_size <= 64:
                    e['content'] = f.read().decode()
                else:
                    f.seek(st.st_size - 3)
                    e['content'] = f.read().decode()
        out[p] = e
print(json.dumps(out))
`

// treeEntry is one entry of snapshotTree's output.
type treeEntry struct {
	Type    string `json:"type"`
	Mode    uint32 `json:"mode"`
	MTime   int64  `json:"mtime"`
	Size    int64  `json:"size"`
	Blocks  int64  `json:"blocks"`
	NLink   int    `json:"nlink"`
	Target  string `json:"target"`
	Content string `json:"content"`
}

func (e *env) tree(sb providers.Sandbox) map[string]treeEntry {
	e.t.Helper()
	var tree map[string]treeEntry
	require.NoError(e.t, json.Unmarshal([]byte(e.python(sb, snapshotTree)), &tree))
	return tree
}

// snapshotter returns the provider as a Snapshotter.
func (e *env) snapshotter() providers.Snapshotter {
	e.t.Helper()
	s, ok := e.p.(providers.Snapshotter)
	require.True(e.t, ok, "the provider declares snapshots but is no providers.Snapshotter")
	return s
}

// snapshotID is a fresh snapshot id (32 lower-case hex digits, as the domain makes them).
func snapshotID(t *testing.T) string {
	return fmt.Sprintf("%x", randomBytes(t, 16))
}

// capture snapshots sb; the capture is deleted when the test ends.
func (e *env) capture(sb providers.Sandbox) providers.SnapshotInfo {
	e.t.Helper()
	s := e.snapshotter()
	info, err := s.Snapshot(e.ctx, sb.ID(), providers.SnapshotMeta{ID: snapshotID(e.t), Owner: e.h.Principal.Subject, SessionID: "contract", Profile: "contract"})
	require.NoError(e.t, err, "Snapshot")
	require.NotEmpty(e.t, info.Ref)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(e.t, s.DeleteSnapshot(ctx, info.Ref), "DeleteSnapshot")
	})
	return info
}

// restore restores ref into a sandbox that is closed and destroyed when the test ends.
func (e *env) restore(ref string) providers.Sandbox {
	e.t.Helper()
	sb, err := e.snapshotter().Restore(e.ctx, ref, e.h.Principal, e.h.Policy)
	require.NoError(e.t, err, "Restore")
	id := sb.ID()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(e.t, sb.Close(), "Close")
		assert.NoError(e.t, e.p.Destroy(ctx, id), "Destroy")
	})
	return sb
}

// snapshots holds the snapshot tests: for providers declaring snapshots, a restore is the
// same on every provider (docs/semantics.md §8 "Snapshots").
func (s *suite) snapshots(t *testing.T) {
	s.leaf(t, "restore_is_faithful", needSnapshots, func(e *env) {
		sb := e.create()
		bits := strings.Fields(e.python(sb, snapshotFixture))
		require.Len(e.t, bits, 2)
		before := e.tree(sb)
		info := e.capture(sb)
		assert.Positive(e.t, info.SizeBytes, "SizeBytes is what the capture takes")
		assert.Less(e.t, info.SizeBytes, int64(16<<20), "a sparse file costs its data, not its length")
		e.python(sb, "open('snap/later.txt', 'w').write('after the capture')\nopen('snap/dir/f.txt', 'w').write('changed')")

		restored := e.restore(info.Ref)
		assert.NotEqual(e.t, sb.ID(), restored.ID(), "a restore is a new sandbox")
		after := e.tree(restored)
		assert.Equal(e.t, keys(before), keys(after), "the same entries: empty folders kept, nothing written after the capture")
		for name, want := range before {
			got, ok := after[name]
			if !ok {
				continue
			}
			assert.Equal(e.t, want.Type, got.Type, "%s: type (symlinks stay links)", name)
			assert.Equal(e.t, want.Mode&^0o6000, got.Mode, "%s: mode, without setuid and setgid", name)
			assert.Equal(e.t, want.Target, got.Target, "%s: link target", name)
			assert.Equal(e.t, want.Size, got.Size, "%s: size", name)
			assert.Equal(e.t, want.Content, got.Content, "%s: content", name)
			if want.Type != "link" {
				assert.Equal(e.t, want.MTime, got.MTime, "%s: modification time", name)
			}
		}
		// What the fixture set, as every provider must restore it.
		for name, mode := range map[string]uint32{"snap/tool": 0o755, "snap/group": 0o750, "snap/shared": 0o1777, "snap/private": 0o700, "snap/dir/f.txt": 0o640} {
			assert.Equal(e.t, fmt.Sprintf("%o", mode), fmt.Sprintf("%o", after[name].Mode), "%s: restored mode", name)
		}
		if bits[0] != "0o4755" || bits[1] != "0o2750" {
			e.t.Logf("the sandbox did not keep the special bits it was given (%v): setuid/setgid dropping is shown only by the modes above", bits)
		}
		for _, name := range []string{"snap/dir/f.txt", "snap/dir", "snap/dir/empty", "snap/deep/a/b/empty", "snap/shared"} {
			assert.Equal(e.t, int64(snapshotTime), after[name].MTime, "%s: the time it was given", name)
		}
		assert.Equal(e.t, "/etc/passwd", after["snap/outside"].Target, "a link out of the workspace is a link, not the file")
		assert.Equal(e.t, "data", after["snap/dir/f.txt"].Content, "the content at the capture")
		assert.Equal(e.t, 2, after["snap/hard"].NLink, "a hard link stays one")
		assert.Equal(e.t, int64(64<<20), after["snap/sparse.img"].Size)
		if src := before["snap/sparse.img"].Blocks; src < 1024 {
			assert.Less(e.t, after["snap/sparse.img"].Blocks, int64(1024), "a sparse file comes back sparse (%d blocks before)", src)
		}
		r := e.run(e.ctx, restored, providers.ExecSpec{Code: "print(open('snap/outside').read() == open('/etc/passwd').read())", Language: "python"})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, "True\n", string(r.stdout), "the link resolves as it did")
		assert.Equal(e.t, "changed", e.tree(sb)["snap/dir/f.txt"].Content, "the original keeps its own changes")
	})

	s.leaf(t, "restores_are_independent", needSnapshots, func(e *env) {
		sb := e.create()
		e.python(sb, "open('state.txt', 'w').write('v1')")
		info := e.capture(sb)
		a, b := e.restore(info.Ref), e.restore(info.Ref)
		e.python(a, "open('state.txt', 'a').write('-a')")
		assert.Equal(e.t, "v1\n", e.python(b, "print(open('state.txt').read())"))
		assert.Equal(e.t, "v1-a\n", e.python(a, "print(open('state.txt').read())"))
	})

	s.leaf(t, "unknown_deleted_and_gone", needSnapshots, func(e *env) {
		snap := e.snapshotter()
		_, err := snap.Restore(e.ctx, "sandgate-no-such-snapshot", e.h.Principal, e.h.Policy)
		requireKind(e.t, err, fault.NotFound, "Restore of a ref the provider never made")
		require.NoError(e.t, snap.DeleteSnapshot(e.ctx, "sandgate-no-such-snapshot"), "DeleteSnapshot of an unknown ref")

		sb := e.create()
		e.python(sb, "open('f', 'w').write('x')")
		info, err := snap.Snapshot(e.ctx, sb.ID(), providers.SnapshotMeta{ID: snapshotID(e.t), SessionID: "contract", Profile: "contract"})
		require.NoError(e.t, err)
		require.NoError(e.t, snap.DeleteSnapshot(e.ctx, info.Ref))
		require.NoError(e.t, snap.DeleteSnapshot(e.ctx, info.Ref), "DeleteSnapshot is idempotent")
		_, err = snap.Restore(e.ctx, info.Ref, e.h.Principal, e.h.Policy)
		requireKind(e.t, err, fault.NotFound, "Restore of a deleted snapshot")

		require.NoError(e.t, e.p.Destroy(e.ctx, sb.ID()))
		_, err = snap.Snapshot(e.ctx, sb.ID(), providers.SnapshotMeta{ID: snapshotID(e.t), SessionID: "contract", Profile: "contract"})
		requireKind(e.t, err, fault.Gone, "Snapshot of a destroyed sandbox")
		_, err = snap.Snapshot(e.ctx, sb.ID(), providers.SnapshotMeta{ID: "../../x"})
		require.Error(e.t, err, "a malformed id")
	})
}

func keys(m map[string]treeEntry) []string { return slices.Sorted(maps.Keys(m)) }
