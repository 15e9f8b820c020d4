package e2bdoor_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct {
	Name, Path, Type string
	Size             int
}

// TestFilesWithTheOfficialSDK drives envd's filesystem service and files API through the door
// with E2B's JavaScript SDK on docker sandboxes: files go both ways (text, bytes, several at
// once, gzip-encoded) and programs see them; listings go to the depth asked; stat, exists,
// folders made, renamed (parents made) and removed with what they hold; a watch sees the
// changes; paths outside E2B's home, which stands for the workspace, are refused.
func TestFilesWithTheOfficialSDK(t *testing.T) {
	t.Parallel()
	d := dockerDoor(t, nil)
	_, key := d.key("alice", nil, nil)
	var got struct {
		MadeDir, MadeAgain bool
		Written            struct{ Path, Name string }
		Read               string
		Bytes              []int
		Zipped             string
		Multi              []string
		ListDeep           []entry
		ListShallow        []entry
		Info, HomeInfo     entry
		Exists             bool
		ExistsMissing      bool
		Renamed            entry
		FromProgram        string
		MultiAfterRemove   bool
		BytesAfterRemove   bool
		Events             []struct{ Name, Type string }
		Missing, Folder    attempt[any]
		ListFile           attempt[any]
		OutsideRead        attempt[any]
		OutsideWrite       attempt[any]
		OutsideList        attempt[any]
		Escape             attempt[any]
		Metadata           attempt[any]
		RootUser           attempt[any]
		RootList           attempt[any]
	}
	d.sdk(key, "files", &got)

	assert.True(t, got.MadeDir)
	assert.False(t, got.MadeAgain, "making a folder that exists: false")
	assert.Equal(t, "/home/user/watched/hello.txt", got.Written.Path)
	assert.Equal(t, "hello.txt", got.Written.Name)
	assert.Equal(t, "written by the SDK\n", got.Read)
	assert.Equal(t, []int{0, 1, 2, 255}, got.Bytes)
	assert.Equal(t, "sent gzip-encoded", got.Zipped)
	assert.Equal(t, []string{"/home/user/multi/a.txt", "/home/user/multi/b/c.txt"}, got.Multi)
	assert.Equal(t, []entry{
		{"a.txt", "/home/user/multi/a.txt", "file", 1}, {"b", "/home/user/multi/b", "dir", got.ListDeep[1].Size},
		{"c.txt", "/home/user/multi/b/c.txt", "file", 1},
	}, got.ListDeep)
	assert.Len(t, got.ListShallow, 2, "depth 1 by default")
	assert.Equal(t, entry{"bytes.bin", "/home/user/dir/bytes.bin", "file", 4}, got.Info)
	assert.Equal(t, "dir", got.HomeInfo.Type)
	assert.Equal(t, "/home/user", got.HomeInfo.Path)
	assert.True(t, got.Exists)
	assert.False(t, got.ExistsMissing)
	assert.Equal(t, "/home/user/watched/sub/moved.txt", got.Renamed.Path, "renamed, its parent made")
	assert.Equal(t, "written by the SDK\n   0   1   2 255\n", got.FromProgram, "programs see the files the SDK wrote")
	assert.False(t, got.MultiAfterRemove, "a folder is removed with what it holds")
	assert.False(t, got.BytesAfterRemove)

	types := map[string][]string{}
	for _, e := range got.Events {
		types[e.Name] = append(types[e.Name], e.Type)
	}
	assert.Contains(t, types["hello.txt"], "create", "%v", got.Events)
	assert.Contains(t, types["hello.txt"], "remove", "a rename is seen as a removal and a creation: %v", got.Events)
	assert.Contains(t, types["sub"], "create", "%v", got.Events)
	assert.Contains(t, types["sub/moved.txt"], "create", "recursive: %v", got.Events)

	for name, c := range map[string]struct {
		a     attempt[any]
		class string
		words []string
	}{
		"missing":         {got.Missing, "FileNotFoundError", []string{"does not exist"}},
		"a folder read":   {got.Folder, "InvalidArgumentError", []string{"is a folder"}},
		"a file listed":   {got.ListFile, "InvalidArgumentError", []string{"not a directory"}},
		"outside, read":   {got.OutsideRead, "SandboxError", []string{"outside /home/user"}},
		"outside, write":  {got.OutsideWrite, "SandboxError", []string{"outside /home/user"}},
		"outside, listed": {got.OutsideList, "SandboxError", []string{"outside /home/user"}},
		"escaping":        {got.Escape, "SandboxError", []string{"leaves /home/user"}},
		"metadata":        {got.Metadata, "TemplateError", []string{"envd 0.6.2"}},
		"another user":    {got.RootUser, "InvalidArgumentError", []string{"user 'root' is not offered"}},
		"another lister":  {got.RootList, "InvalidArgumentError", []string{"user 'root' is not offered"}},
	} {
		require.NotNil(t, c.a.Thrown, name)
		assert.Equal(t, c.class, c.a.Thrown.Name, "%s: %+v", name, c.a.Thrown)
		assert.True(t, c.a.Thrown.has(c.words...), "%s: %+v", name, c.a.Thrown)
	}
}
