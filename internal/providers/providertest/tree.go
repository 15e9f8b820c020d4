package providertest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// treeOf returns sb's folder operations; the test skips when the provider has none.
func (e *env) treeOf(sb providers.Sandbox) providers.FileTree {
	e.t.Helper()
	t, ok := sb.(providers.FileTree)
	if !ok {
		e.t.Skip("the provider's sandboxes do not implement providers.FileTree")
	}
	return t
}

// notThere requires that workspace path p does not exist.
func (e *env) notThere(sb providers.Sandbox, p string) {
	e.t.Helper()
	_, err := sb.ListFiles(e.ctx, p)
	requireKind(e.t, err, fault.NotFound, "'%s' is gone", p)
}

// tree holds the folder operation tests (providers.FileTree), for providers whose sandboxes
// implement it.
func (s *suite) tree(t *testing.T) {
	s.leaf(t, "make_dir_with_parents", needFiles, func(e *env) {
		sb := e.create()
		ft := e.treeOf(sb)
		require.NoError(e.t, ft.MakeDir(e.ctx, "a/b/c"))
		assert.Equal(e.t, []string{"b"}, names(e.list(sb, "a")))
		infos := e.list(sb, "a/b")
		require.Equal(e.t, []string{"c"}, names(infos))
		assert.Equal(e.t, providers.FileDir, infos[0].Type)
		assert.Empty(e.t, e.list(sb, "a/b/c"))
		require.NoError(e.t, ft.MakeDir(e.ctx, "a/b/c"), "a folder already there is no error")
		require.NoError(e.t, ft.MakeDir(e.ctx, "a/./b/"), "nor is one named otherwise")

		e.write(sb, "a/file.txt", []byte("x"))
		requireKind(e.t, ft.MakeDir(e.ctx, "a/file.txt"), fault.Conflict, "a file is there")
		requireKind(e.t, ft.MakeDir(e.ctx, "a/file.txt/sub"), fault.Conflict, "a parent is a file")
		assert.Equal(e.t, "x", string(e.read(sb, "a/file.txt")), "the file is untouched")
	})

	s.leaf(t, "move_file", needFiles, func(e *env) {
		sb := e.create()
		ft := e.treeOf(sb)
		e.write(sb, "f.txt", []byte("first"))
		require.NoError(e.t, ft.Move(e.ctx, "f.txt", "x/y/g.txt"), "the destination's parents are made")
		assert.Equal(e.t, "first", string(e.read(sb, "x/y/g.txt")))
		e.notThere(sb, "f.txt")

		e.write(sb, "other.txt", []byte("second"))
		require.NoError(e.t, ft.Move(e.ctx, "other.txt", "x/y/g.txt"), "a file at the destination is replaced")
		assert.Equal(e.t, "second", string(e.read(sb, "x/y/g.txt")))
		assert.Equal(e.t, []string{"x"}, names(e.list(sb, "")))
		require.NoError(e.t, ft.Move(e.ctx, "x/y/g.txt", "x/y/g.txt"), "onto itself: nothing happens")
		assert.Equal(e.t, "second", string(e.read(sb, "x/y/g.txt")))

		requireKind(e.t, ft.Move(e.ctx, "missing.txt", "m.txt"), fault.NotFound, "a missing source")
		requireKind(e.t, ft.Move(e.ctx, "missing/dir/f.txt", "m.txt"), fault.NotFound, "below a missing folder")
		requireKind(e.t, ft.Move(e.ctx, "x/y/g.txt/below", "m.txt"), fault.NotFound, "below a file")
		require.NoError(e.t, ft.MakeDir(e.ctx, "empty"))
		requireKind(e.t, ft.Move(e.ctx, "x/y/g.txt", "empty"), fault.Conflict, "a file onto a folder")
		requireKind(e.t, ft.Move(e.ctx, "x/y/g.txt", "x/y/g.txt/below"), fault.Conflict, "a parent of the destination is a file")
		assert.Equal(e.t, "second", string(e.read(sb, "x/y/g.txt")), "refused moves leave the source")
	})

	s.leaf(t, "move_folder", needFiles, func(e *env) {
		sb := e.create()
		ft := e.treeOf(sb)
		e.write(sb, "a/one.txt", []byte("1"))
		e.write(sb, "a/sub/two.txt", []byte("2"))
		require.NoError(e.t, ft.Move(e.ctx, "a", "b/a2"))
		e.notThere(sb, "a")
		assert.Equal(e.t, []string{"one.txt", "sub"}, names(e.list(sb, "b/a2")))
		assert.Equal(e.t, "2", string(e.read(sb, "b/a2/sub/two.txt")))

		require.NoError(e.t, ft.MakeDir(e.ctx, "empty"))
		requireKind(e.t, ft.Move(e.ctx, "b/a2", "empty"), fault.Conflict, "a folder at the destination, even an empty one")
		e.write(sb, "full/keep.txt", []byte("k"))
		requireKind(e.t, ft.Move(e.ctx, "b/a2", "full"), fault.Conflict, "a folder that is not empty")
		e.write(sb, "file.txt", []byte("f"))
		requireKind(e.t, ft.Move(e.ctx, "b/a2", "file.txt"), fault.Conflict, "a folder onto a file")
		requireKind(e.t, ft.Move(e.ctx, "b/a2", "b/a2/sub/inner"), fault.Validation, "a folder into itself")
		assert.Equal(e.t, []string{"one.txt", "sub"}, names(e.list(sb, "b/a2")), "refused moves leave the folder")
		assert.Empty(e.t, e.list(sb, "empty"))
		assert.Equal(e.t, "k", string(e.read(sb, "full/keep.txt")))
		assert.Equal(e.t, "f", string(e.read(sb, "file.txt")))
	})

	s.leaf(t, "remove_tree", needFiles, func(e *env) {
		sb := e.create()
		ft := e.treeOf(sb)
		e.write(sb, "t/a.txt", []byte("a"))
		e.write(sb, "t/sub/deeper/b.txt", []byte("b"))
		require.NoError(e.t, ft.MakeDir(e.ctx, "t/sub/empty"))
		e.write(sb, "keep.txt", []byte("k"))
		require.NoError(e.t, ft.RemoveAll(e.ctx, "t"))
		e.notThere(sb, "t")
		assert.Equal(e.t, []string{"keep.txt"}, names(e.list(sb, "")))
		require.NoError(e.t, ft.RemoveAll(e.ctx, "keep.txt"), "a file")
		assert.Empty(e.t, e.list(sb, ""))
		for _, p := range []string{"t", "missing/dir", "keep.txt/below"} {
			require.NoError(e.t, ft.RemoveAll(e.ctx, p), "nothing at '%s' is no error", p)
		}
		e.write(sb, "f.txt", []byte("x"))
		require.NoError(e.t, ft.RemoveAll(e.ctx, "f.txt/below"), "below a file is nothing")
		assert.Equal(e.t, "x", string(e.read(sb, "f.txt")))
	})

	s.leaf(t, "tree_refusals", needFiles, func(e *env) {
		sb := e.create()
		ft := e.treeOf(sb)
		e.write(sb, "a/inside.txt", []byte("x"))
		for _, p := range []string{"..", "../x", "../../etc/passwd", "/etc/passwd", "/", "a/../../x", "./../x", "x\x00y"} {
			requireKind(e.t, ft.MakeDir(e.ctx, p), fault.Policy, "MakeDir %q", p)
			requireKind(e.t, ft.RemoveAll(e.ctx, p), fault.Policy, "RemoveAll %q", p)
			requireKind(e.t, ft.Move(e.ctx, p, "moved"), fault.Policy, "Move from %q", p)
			requireKind(e.t, ft.Move(e.ctx, "a/inside.txt", p), fault.Policy, "Move to %q", p)
		}
		for _, p := range []string{"", ".", "a/..", "./"} {
			requireKind(e.t, ft.MakeDir(e.ctx, p), fault.Validation, "MakeDir %q: the workspace itself", p)
			requireKind(e.t, ft.RemoveAll(e.ctx, p), fault.Validation, "RemoveAll %q: the workspace itself", p)
			requireKind(e.t, ft.Move(e.ctx, p, "moved"), fault.Validation, "Move from %q: the workspace itself", p)
			requireKind(e.t, ft.Move(e.ctx, "a", p), fault.Validation, "Move to %q: the workspace itself", p)
		}
		assert.Equal(e.t, []string{"a"}, names(e.list(sb, "")), "nothing was changed")
		assert.Equal(e.t, "x", string(e.read(sb, "a/inside.txt")))
	})

	s.leaf(t, "tree_symlink_escapes_are_policy_errors", needFiles|needShell, func(e *env) {
		sb := e.create()
		ft := e.treeOf(sb)
		e.sh(sb, "mkdir -p d && echo data > f.txt && ln -s / rootlink && ln -s .. uplink && ln -s /tmp d/tmplink")
		for _, p := range []string{"uplink/sandgate-evil", "d/tmplink/sandgate-evil", "rootlink/tmp/sandgate-evil/x"} {
			requireKind(e.t, ft.MakeDir(e.ctx, p), fault.Policy, "MakeDir %q", p)
			requireKind(e.t, ft.Move(e.ctx, "f.txt", p), fault.Policy, "Move to %q", p)
			requireKind(e.t, ft.RemoveAll(e.ctx, p), fault.Policy, "RemoveAll %q", p)
		}
		for _, p := range []string{"rootlink/etc/passwd", "d/tmplink/x"} {
			requireKind(e.t, ft.Move(e.ctx, p, "stolen"), fault.Policy, "Move from %q", p)
		}
		assert.Equal(e.t, "data\n", string(e.read(sb, "f.txt")))
		// The links themselves are workspace entries: moved and removed, never followed.
		require.NoError(e.t, ft.Move(e.ctx, "rootlink", "d/moved"))
		require.NoError(e.t, ft.RemoveAll(e.ctx, "d"))
		assert.Equal(e.t, "kept\n", e.sh(sb, "test -d /tmp && test -e /etc/passwd && test ! -e d && echo kept"), "only the links are removed")
		assert.Equal(e.t, []string{"f.txt", "uplink"}, names(e.list(sb, "")))
	})
}
