package loopdisk_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/loopdisk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requireLoop skips (fails under CI=true) when this process cannot make disks.
func requireLoop(t *testing.T) {
	t.Helper()
	if err := loopdisk.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skip(err)
	}
}

// A disk holds what its size allows and no more (ENOSPC), keeps its data across detach and
// attach, re-attaches through its link, and is gone with Remove.
func TestDisk(t *testing.T) {
	requireLoop(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	image, link := filepath.Join(dir, "d.img"), filepath.Join(dir, "d.dev")
	dev, err := loopdisk.Create(ctx, image, link, 16, loopdisk.Owner{UID: 65532, GID: 65532})
	require.NoError(t, err)
	t.Cleanup(func() { _ = loopdisk.Remove(image, link) })
	target, err := os.Readlink(link)
	require.NoError(t, err)
	require.Equal(t, dev, target, "the link names the device")
	devs, err := loopdisk.Devices(image)
	require.NoError(t, err)
	require.Equal(t, []string{dev}, devs)

	_, err = loopdisk.Create(ctx, image, link, 16, loopdisk.Owner{})
	require.Error(t, err, "an existing image is not made again")
	_, err = os.Stat(image)
	require.NoError(t, err, "… nor removed by the refusal")

	info, err := os.Stat(image)
	require.NoError(t, err)
	require.EqualValues(t, 16<<20, info.Size())
	require.Less(t, info.Sys().(*syscall.Stat_t).Blocks*512, int64(16<<20), "the image is sparse")

	mnt := filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	mount := func() {
		t.Helper()
		require.NoError(t, unix.Mount(link, mnt, "ext4", 0, ""), "mount through the link")
	}
	unmount := func() { require.NoError(t, unix.Unmount(mnt, 0)) }
	mount()
	root, err := os.Stat(mnt)
	require.NoError(t, err)
	require.EqualValues(t, 65532, root.Sys().(*syscall.Stat_t).Uid, "the root folder is the owner's")
	entries, err := os.ReadDir(mnt)
	require.NoError(t, err)
	require.Empty(t, entries, "no lost+found: an engine copies the image's folder into an empty volume")

	f, err := os.Create(filepath.Join(mnt, "fill"))
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	var written int
	for written = 0; written < 32; written++ {
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	_ = f.Close()
	require.ErrorIs(t, err, unix.ENOSPC, "writes past the size fail with ENOSPC")
	require.Less(t, written, 16)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "keep"), nil, 0o644), "an empty file still fits")
	unmount()

	// Detached (as after a reboot), the next Attach finds a device again and re-points the link.
	require.NoError(t, loopdisk.Detach(dev))
	devs, err = loopdisk.Devices(image)
	require.NoError(t, err)
	require.Empty(t, devs)
	dev2, err := loopdisk.Attach(image, link)
	require.NoError(t, err)
	target, err = os.Readlink(link)
	require.NoError(t, err)
	require.Equal(t, dev2, target)
	again, err := loopdisk.Attach(image, link)
	require.NoError(t, err)
	require.Equal(t, dev2, again, "an attached image keeps its device")
	mount()
	_, err = os.Stat(filepath.Join(mnt, "keep"))
	require.NoError(t, err, "the data outlives detach and attach")
	unmount()

	require.NoError(t, loopdisk.Remove(image, link))
	devs, err = loopdisk.Devices(image)
	require.NoError(t, err)
	require.Empty(t, devs, "no loop device is left")
	for _, p := range []string{image, link} {
		_, err := os.Lstat(p)
		require.True(t, errors.Is(err, os.ErrNotExist), "%s is removed", p)
	}
	require.NoError(t, loopdisk.Remove(image, link), "removing twice is fine")
}
