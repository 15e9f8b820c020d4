package providertest

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// files holds the file tests (field-notes "Files").
func (s *suite) files(t *testing.T) {
	s.leaf(t, "roundtrip_all_byte_values", needFiles, func(e *env) {
		sb := e.create()
		data := make([]byte, 0, 512)
		for i := range 256 {
			data = append(data, byte(i))
		}
		for i := 255; i >= 0; i-- {
			data = append(data, byte(i))
		}
		e.write(sb, "bytes.bin", data)
		assert.Equal(e.t, data, e.read(sb, "bytes.bin"))
		if e.caps.Shell {
			// Programs see the very same bytes.
			assert.Equal(e.t, "512\n", e.sh(sb, "wc -c < bytes.bin | tr -d ' '"))
		}
	})

	s.leaf(t, "roundtrip_large_random_file", needFiles, func(e *env) {
		sb := e.create()
		data := randomBytes(e.t, 8<<20+7)
		n, err := sb.WriteFile(e.ctx, "dir/large.bin", bytes.NewReader(data), 64<<20)
		require.NoError(e.t, err)
		require.Equal(e.t, int64(len(data)), n)
		got := e.read(sb, "dir/large.bin")
		require.Equal(e.t, len(data), len(got))
		assert.Equal(e.t, sha(data), sha(got), "SHA-256 of the round trip")
		if e.caps.SupportsLanguage("python") {
			out := e.python(sb, "import hashlib\nprint(hashlib.sha256(open('dir/large.bin','rb').read()).hexdigest())")
			assert.Equal(e.t, sha(data)+"\n", out, "SHA-256 seen by a program")
		}
	})

	s.leaf(t, "unusual_names", needFiles, func(e *env) {
		sb := e.create()
		unusual := []string{
			"with space.txt",
			"ünïcödé-名前.txt",
			"emoji-🦀🚀.txt",
			"new\nline.txt",
			"-leading-dash.txt",
			"--help",
			"tab\tand 'quotes' \"double\".txt",
			"$(touch pwned).txt",
			"percent%2e%2e.txt",
			".hidden",
		}
		for i, name := range unusual {
			e.write(sb, "odd/"+name, []byte(fmt.Sprintf("content %d", i)))
		}
		infos := e.list(sb, "odd")
		got := names(infos)
		assert.ElementsMatch(e.t, unusual, got)
		assert.IsNonDecreasing(e.t, got, "sorted by name")
		for i, name := range unusual {
			assert.Equal(e.t, fmt.Sprintf("content %d", i), string(e.read(sb, "odd/"+name)), "read %q", name)
		}
		for _, fi := range infos {
			assert.Equal(e.t, "odd/"+fi.Name, fi.Path)
			assert.Equal(e.t, providers.FileRegular, fi.Type, fi.Name)
		}
		if e.caps.Shell {
			assert.Equal(e.t, "clean\n", e.sh(sb, "test -e pwned || test -e odd/pwned || echo clean"))
		}
		for _, name := range unusual {
			require.NoError(e.t, sb.RemoveFile(e.ctx, "odd/"+name), "remove %q", name)
		}
		assert.Empty(e.t, e.list(sb, "odd"))
	})

	s.leaf(t, "path_escapes_are_policy_errors", needFiles, func(e *env) {
		sb := e.create()
		e.write(sb, "a/inside.txt", []byte("x"))
		for _, p := range []string{"..", "../x", "../../etc/passwd", "/etc/passwd", "/", "a/../../x", "a/../../../etc/passwd", "./../x", "x\x00y"} {
			_, err := sb.WriteFile(e.ctx, p, strings.NewReader("evil"), 1<<20)
			requireKind(e.t, err, fault.Policy, "WriteFile %q", p)
			_, err = sb.ReadFile(e.ctx, p)
			requireKind(e.t, err, fault.Policy, "ReadFile %q", p)
			_, err = sb.ListFiles(e.ctx, p)
			requireKind(e.t, err, fault.Policy, "ListFiles %q", p)
			requireKind(e.t, sb.RemoveFile(e.ctx, p), fault.Policy, "RemoveFile %q", p)
		}
		// A path that only passes through ".." but stays inside is fine.
		assert.Equal(e.t, "x", string(e.read(sb, "a/../a/inside.txt")))
	})

	s.leaf(t, "symlink_escapes_are_policy_errors", needFiles|needShell, func(e *env) {
		sb := e.create()
		e.sh(sb, "mkdir -p d && ln -s / rootlink && ln -s .. uplink && ln -s /etc/passwd pwlink && ln -s ../.. d/up2 && ln -s /tmp d/tmplink")
		for _, p := range []string{"pwlink", "rootlink/etc/passwd", "uplink/x", "d/up2/x", "d/tmplink/x"} {
			_, err := sb.ReadFile(e.ctx, p)
			requireKind(e.t, err, fault.Policy, "ReadFile %q", p)
		}
		for _, p := range []string{"rootlink", "rootlink/etc", "uplink", "d/up2", "d/tmplink"} {
			_, err := sb.ListFiles(e.ctx, p)
			requireKind(e.t, err, fault.Policy, "ListFiles %q", p)
		}
		for _, p := range []string{"uplink/sandgate-evil.txt", "d/up2/sandgate-evil.txt", "d/tmplink/sandgate-evil.txt", "rootlink/tmp/sandgate-evil.txt", "uplink/new/dir/sandgate-evil.txt"} {
			_, err := sb.WriteFile(e.ctx, p, strings.NewReader("evil"), 1<<20)
			requireKind(e.t, err, fault.Policy, "WriteFile %q", p)
		}
		for _, p := range []string{"uplink/sandgate-nothing", "d/tmplink/sandgate-nothing"} {
			requireKind(e.t, sb.RemoveFile(e.ctx, p), fault.Policy, "RemoveFile %q", p)
		}
		// The links themselves are workspace entries: listed, not followed, removable.
		infos := e.list(sb, "")
		byName := map[string]providers.FileInfo{}
		for _, fi := range infos {
			byName[fi.Name] = fi
		}
		for _, name := range []string{"rootlink", "uplink", "pwlink"} {
			assert.Equal(e.t, providers.FileSymlink, byName[name].Type, name)
		}
		require.NoError(e.t, sb.RemoveFile(e.ctx, "rootlink"))
		assert.Equal(e.t, "gone\n", e.sh(sb, "test -e / && test ! -L rootlink && echo gone"), "only the link is removed")
	})

	s.leaf(t, "size_limit_leaves_nothing", needFiles, func(e *env) {
		sb := e.create()
		const limit = 1024
		n, err := sb.WriteFile(e.ctx, "exact.bin", bytes.NewReader(make([]byte, limit)), limit)
		require.NoError(e.t, err, "exactly the limit is allowed")
		assert.Equal(e.t, int64(limit), n)

		_, err = sb.WriteFile(e.ctx, "sub/big.bin", bytes.NewReader(make([]byte, limit+1)), limit)
		requireKind(e.t, err, fault.TooLarge)
		_, err = sb.ReadFile(e.ctx, "sub/big.bin")
		requireKind(e.t, err, fault.NotFound)

		// An oversized upload does not destroy the file it would have replaced.
		_, err = sb.WriteFile(e.ctx, "exact.bin", bytes.NewReader(make([]byte, 10*limit)), limit)
		requireKind(e.t, err, fault.TooLarge)
		assert.Len(e.t, e.read(sb, "exact.bin"), limit)

		// No partial or temporary file is left; the parent folder may have been made.
		root := names(e.list(sb, ""))
		if len(root) == 2 && root[1] == "sub" {
			assert.Empty(e.t, e.list(sb, "sub"), "no partial or temporary file is left")
			root = root[:1]
		}
		assert.Equal(e.t, []string{"exact.bin"}, root, "no partial or temporary file is left")
	})

	s.leaf(t, "failed_upload_leaves_nothing", needFiles, func(e *env) {
		sb := e.create()
		_, err := sb.WriteFile(e.ctx, "broken.bin", &failingReader{n: 100 << 10}, 1<<30)
		require.ErrorIs(e.t, err, errBrokenUpload)
		_, err = sb.ReadFile(e.ctx, "broken.bin")
		requireKind(e.t, err, fault.NotFound)
		assert.Empty(e.t, e.list(sb, ""), "no partial or temporary file is left")
	})

	s.leaf(t, "write_creates_parents_and_replaces", needFiles, func(e *env) {
		sb := e.create()
		e.write(sb, "a/b/c/d.txt", []byte("first version, longer"))
		e.write(sb, "a/b/c/d.txt", []byte("second"))
		assert.Equal(e.t, "second", string(e.read(sb, "a/b/c/d.txt")))
		e.write(sb, "empty.txt", nil)
		assert.Empty(e.t, e.read(sb, "empty.txt"))

		_, err := sb.WriteFile(e.ctx, "a/b", strings.NewReader("x"), 1<<20)
		requireKind(e.t, err, fault.Conflict, "writing over a folder")
		_, err = sb.WriteFile(e.ctx, "a/b/c/d.txt/e.txt", strings.NewReader("x"), 1<<20)
		requireKind(e.t, err, fault.Conflict, "a parent is a file")
		_, err = sb.WriteFile(e.ctx, "", strings.NewReader("x"), 1<<20)
		requireKind(e.t, err, fault.Validation, "writing the workspace itself")
	})

	s.leaf(t, "read_missing_or_folder", needFiles, func(e *env) {
		sb := e.create()
		e.write(sb, "dir/file.txt", []byte("x"))
		for _, p := range []string{"missing.txt", "dir/missing.txt", "missing/dir/file.txt", "dir/file.txt/below"} {
			_, err := sb.ReadFile(e.ctx, p)
			requireKind(e.t, err, fault.NotFound, "ReadFile %q", p)
		}
		for _, p := range []string{"dir", "", "."} {
			_, err := sb.ReadFile(e.ctx, p)
			requireKind(e.t, err, fault.Conflict, "ReadFile %q", p)
		}
	})

	s.leaf(t, "list_structure", needFiles, func(e *env) {
		sb := e.create()
		e.write(sb, "a/b.txt", []byte("hello"))
		e.write(sb, "a/Z.txt", []byte("Z"))
		e.write(sb, "a/sub/c.txt", []byte("c"))

		infos := e.list(sb, "a")
		require.Equal(e.t, []string{"Z.txt", "b.txt", "sub"}, names(infos))
		b := infos[1]
		assert.Equal(e.t, "a/b.txt", b.Path)
		assert.Equal(e.t, providers.FileRegular, b.Type)
		assert.Equal(e.t, int64(5), b.Size)
		assert.NotZero(e.t, b.Mode&0o400, "the owner may read: %v", b.Mode)
		assert.False(e.t, b.ModTime.IsZero())
		assert.Equal(e.t, providers.FileDir, infos[2].Type)
		assert.Equal(e.t, "a/sub", infos[2].Path)

		assert.Equal(e.t, []string{"c.txt"}, names(e.list(sb, "a/sub")))
		assert.Equal(e.t, []string{"c.txt"}, names(e.list(sb, "a/./sub/")))
		root := e.list(sb, "")
		require.Equal(e.t, []string{"a"}, names(root))
		assert.Equal(e.t, "a", root[0].Path)
		assert.Equal(e.t, root, e.list(sb, "."))

		_, err := sb.ListFiles(e.ctx, "missing")
		requireKind(e.t, err, fault.NotFound)
		_, err = sb.ListFiles(e.ctx, "a/b.txt")
		requireKind(e.t, err, fault.Conflict)
	})

	s.leaf(t, "list_reports_symlinks_without_following", needFiles|needShell, func(e *env) {
		sb := e.create()
		e.sh(sb, "mkdir real && echo data > real/f && ln -s real dirlink && ln -s real/f filelink && ln -s missing dangling")
		infos := e.list(sb, "")
		require.Equal(e.t, []string{"dangling", "dirlink", "filelink", "real"}, names(infos))
		for _, fi := range infos[:3] {
			assert.Equal(e.t, providers.FileSymlink, fi.Type, fi.Name)
		}
		assert.Equal(e.t, providers.FileDir, infos[3].Type)
		// A link inside the workspace may be read through.
		assert.Equal(e.t, "data\n", string(e.read(sb, "filelink")))
	})

	s.leaf(t, "remove", needFiles, func(e *env) {
		sb := e.create()
		require.NoError(e.t, sb.RemoveFile(e.ctx, "missing.txt"), "removing a missing file is not an error")
		require.NoError(e.t, sb.RemoveFile(e.ctx, "missing/dir/file.txt"))
		e.write(sb, "a/b.txt", []byte("x"))
		requireKind(e.t, sb.RemoveFile(e.ctx, "a"), fault.Conflict, "a folder that is not empty")
		require.NoError(e.t, sb.RemoveFile(e.ctx, "a/b.txt"))
		_, err := sb.ReadFile(e.ctx, "a/b.txt")
		requireKind(e.t, err, fault.NotFound)
		require.NoError(e.t, sb.RemoveFile(e.ctx, "a"), "an empty folder")
		assert.Empty(e.t, e.list(sb, ""))
		requireKind(e.t, sb.RemoveFile(e.ctx, ""), fault.Validation, "the workspace itself")
	})

	s.leaf(t, "files_are_shared_with_programs", needFiles|needShell, func(e *env) {
		sb := e.create()
		e.write(sb, "in/data.txt", []byte("from the API\n"))
		assert.Equal(e.t, "from the API\n", e.sh(sb, "cat in/data.txt"))
		e.sh(sb, "mkdir -p out && printf 'from a program' > out/result.txt")
		assert.Equal(e.t, "from a program", string(e.read(sb, "out/result.txt")))
		rc, err := sb.ReadFile(e.ctx, "out/result.txt")
		require.NoError(e.t, err)
		_, err = io.Copy(io.Discard, rc)
		require.NoError(e.t, err)
		require.NoError(e.t, rc.Close())
	})
}
