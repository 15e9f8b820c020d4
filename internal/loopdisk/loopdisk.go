// Package loopdisk makes size-bounded file systems for sandbox workspaces: a sparse image
// file formatted ext4 and attached to a loop device, so that writes past its size fail with
// ENOSPC in whatever mounts it. The docker provider mounts one per sandbox (as a volume of
// the local driver, device = the disk's link) where the engine's storage driver cannot bound
// a container's size itself.
//
// A disk is two paths the caller chooses: the image file, and a link (a symbolic link to the
// loop device currently serving the image). Mount the link, never /dev/loopN: loop numbers
// are handed out at attach time and do not survive a reboot, so Attach re-attaches an image
// and re-points its link, and whatever mounts the link gets the right device. Loop devices
// are driven with the kernel's ioctls (no losetup); formatting uses mkfs.ext4 (and, when
// present, debugfs, both of e2fsprogs), run without a shell.
//
// Everything here needs root (CAP_SYS_ADMIN for loop devices) on Linux; Available says
// whether this process can.
package loopdisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	loopControl = "/dev/loop-control"
	sysBlock    = "/sys/block"
)

// Available reports whether this process can make disks; the error says why not (not root,
// no loop devices, no mkfs.ext4).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("loop devices need root: the gateway does not run as root")
	}
	f, err := os.OpenFile(loopControl, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	_ = f.Close()
	if _, err := tool("mkfs.ext4"); err != nil {
		return errors.New("mkfs.ext4 (e2fsprogs) is not installed")
	}
	return nil
}

// tool finds an e2fsprogs program on PATH or in the system folders it lives in (which a
// service's PATH may lack).
func tool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// Owner is the user and group that own a new file system's root folder.
type Owner struct{ UID, GID int }

// Create makes a disk of sizeMB MiB at image (a new file: an existing one is an error) and
// link, and returns the loop device serving it. The file system is ext4 without reserved
// blocks (its metadata takes a few percent of the size), with root folder owned by owner and
// empty — no lost+found, when debugfs is there to remove it — so that a container engine
// mounting it as a volume copies the image's folder in as it does into a fresh volume. On an
// error nothing is left behind.
func Create(ctx context.Context, image, link string, sizeMB int, owner Owner) (dev string, err error) {
	if sizeMB <= 0 {
		return "", fmt.Errorf("loopdisk: size %d MiB is not positive", sizeMB)
	}
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("loopdisk: %w", err)
	}
	defer func() {
		if err != nil {
			_ = Remove(image, link)
		}
	}()
	err = f.Truncate(int64(sizeMB) << 20) // sparse: blocks are used as they are written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("loopdisk: sizing %s: %w", image, err)
	}
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "sandgate",
		"-E", fmt.Sprintf("root_owner=%d:%d", owner.UID, owner.GID), image); err != nil {
		return "", err
	}
	if _, lerr := tool("debugfs"); lerr == nil {
		if err := run(ctx, "debugfs", "-w", "-R", "rmdir lost+found", image); err != nil {
			return "", err
		}
	}
	return Attach(image, link)
}

// run runs an e2fsprogs program (no shell) and returns its failure with its output.
func run(ctx context.Context, name string, args ...string) error {
	path, err := tool(name)
	if err != nil {
		return fmt.Errorf("loopdisk: %s: %w", name, err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("loopdisk: %s: %w: %s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Attach makes sure a loop device serves image and link points at it, attaching image to a
// free loop device when none does (after a reboot, say), and returns the device.
func Attach(image, link string) (string, error) {
	devs, err := Devices(image)
	if err != nil {
		return "", err
	}
	var dev string
	if len(devs) > 0 {
		dev = devs[0]
	} else if dev, err = attach(image); err != nil {
		return "", err
	}
	if cur, err := os.Readlink(link); err == nil && cur == dev {
		return dev, nil
	}
	// Re-point atomically: whatever mounts the link never finds it missing.
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(dev, tmp); err != nil {
		return "", fmt.Errorf("loopdisk: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("loopdisk: %w", err)
	}
	return dev, nil
}

// attach binds image to a free loop device and returns the device. A device another process
// took between the kernel's offer and the bind is skipped.
func attach(image string) (string, error) {
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("loopdisk: %w", err)
	}
	defer ctl.Close()
	img, err := os.OpenFile(image, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("loopdisk: %w", err)
	}
	defer img.Close() // the loop device keeps its own reference
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("loopdisk: no free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		err = bind(dev, img, image)
		if errors.Is(err, unix.EBUSY) {
			continue
		}
		if err != nil {
			return "", err
		}
		return dev, nil
	}
	return "", errors.New("loopdisk: every free loop device was taken by another process before it could be used")
}

// bind attaches open image file img (named name) to loop device dev, without autoclear (the
// device stays attached while nothing mounts it, across a container's stop and start).
func bind(dev string, img *os.File, name string) error {
	d, err := os.OpenFile(dev, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopdisk: %w", err)
	}
	defer d.Close()
	info := unix.LoopInfo64{}
	copy(info.File_name[:len(info.File_name)-1], name)
	err = unix.IoctlLoopConfigure(int(d.Fd()), &unix.LoopConfig{Fd: uint32(img.Fd()), Info: info})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		// Kernels before 5.8 lack LOOP_CONFIGURE: the two-step way.
		if err = unix.IoctlSetInt(int(d.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err == nil {
			if err = unix.IoctlLoopSetStatus64(int(d.Fd()), &info); err != nil {
				_ = unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("loopdisk: attaching %s to %s: %w", name, dev, err)
	}
	return nil
}

// Devices lists the loop devices backed by image (by its path, as the kernel reports it,
// also after image was removed).
func Devices(image string) ([]string, error) {
	image = filepath.Clean(image)
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, fmt.Errorf("loopdisk: %w", err)
	}
	var devs []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "loop", "backing_file"))
		if err != nil {
			continue // not attached
		}
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			devs = append(devs, "/dev/"+e.Name())
		}
	}
	return devs, nil
}

// Detach detaches loop device dev. A device something still mounts is detached when it is
// unmounted (the kernel's lazy clear).
func Detach(dev string) error {
	d, err := os.OpenFile(dev, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopdisk: %w", err)
	}
	defer d.Close()
	if err := unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("loopdisk: detaching %s: %w", dev, err)
	}
	return nil
}

// Remove detaches every loop device backed by image and removes image and link; missing
// pieces are no error.
func Remove(image, link string) error {
	var errs []error
	devs, err := Devices(image)
	errs = append(errs, err)
	for _, d := range devs {
		errs = append(errs, Detach(d))
	}
	for _, p := range []string{image, link} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
