//go:build linux

package procgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroups gives each started process a cgroup (v2) of its own under one parent folder, so
// that every descendant is found and killed with it — also one that left the session with
// setsid or a double fork, which no process-group or session signal reaches. The kernel puts
// the process into its cgroup as it is created (clone3 CLONE_INTO_CGROUP), so nothing runs
// outside it even for an instant. Safe for concurrent use.
type Cgroups struct {
	parent string
}

// cgroupSeq numbers the cgroups of this process (across every Cgroups sharing a parent).
var cgroupSeq atomic.Uint64

// OpenCgroups uses parent, an existing folder of a cgroup v2 hierarchy this process may create
// cgroups in, move processes into, and kill (cgroup.kill, Linux 5.14+).
//
// Errors: parent is not on a cgroup2 file system, or a cgroup cannot be made in it.
func OpenCgroups(parent string) (*Cgroups, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return nil, fmt.Errorf("procgroup: cgroup parent %s: %w", parent, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("procgroup: %s is not on a cgroup v2 file system", parent)
	}
	c := &Cgroups{parent: parent}
	// Probe the whole path once: make a cgroup, start a process in it (clone3 may be refused,
	// e.g. by a seccomp profile), find cgroup.kill, remove it.
	attr := &syscall.SysProcAttr{}
	dir, fd, err := c.prepare(attr)
	if err != nil {
		return nil, fmt.Errorf("procgroup: cannot make cgroups under %s: %w", parent, err)
	}
	defer syscall.Close(fd)
	defer cgroupRemove(dir)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("procgroup: the kernel has no cgroup.kill (Linux 5.14+ needed): %w", err)
	}
	probe := exec.Command("/bin/sh", "-c", "exit 0")
	probe.SysProcAttr = attr
	if err := probe.Run(); err != nil {
		return nil, fmt.Errorf("procgroup: cannot start processes in a cgroup (clone3 CLONE_INTO_CGROUP): %w", err)
	}
	return c, nil
}

// DetectCgroups finds this machine's cgroup v2 hierarchy (the cgroup2 mount of
// /proc/self/mountinfo: /sys/fs/cgroup on unified systems, /sys/fs/cgroup/unified on hybrid
// ones), makes the folder name at its top, and opens it; it also removes empty cgroups that
// earlier processes left in that folder. It returns an error where processes may not make
// cgroups there (not root, no delegation, no cgroup v2, a read-only mount in a container).
func DetectCgroups(name string) (*Cgroups, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(mount, name)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("procgroup: cannot make cgroup %s: %w", parent, err)
	}
	if entries, err := os.ReadDir(parent); err == nil {
		for _, e := range entries {
			if e.IsDir() && !ownerAlive(e.Name()) {
				_ = os.Remove(filepath.Join(parent, e.Name())) // fails while populated
			}
		}
	}
	return OpenCgroups(parent)
}

// ownerAlive reports whether the process that made cgroup name ("p<pid>-<n>") still runs: its
// empty cgroups may be about to receive a process.
func ownerAlive(name string) bool {
	pid, _, ok := strings.Cut(strings.TrimPrefix(name, "p"), "-")
	if !ok {
		return false
	}
	_, err := os.Stat("/proc/" + pid)
	return err == nil
}

// Parent returns the folder the cgroups are made in.
func (c *Cgroups) Parent() string { return c.parent }

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "id parent major:minor root mountpoint options [optional...] - fstype source superopts"
		line := sc.Text()
		i := strings.Index(line, " - ")
		if i < 0 {
			continue
		}
		fields, after := strings.Fields(line[:i]), strings.Fields(line[i+3:])
		if len(fields) >= 5 && len(after) >= 1 && after[0] == "cgroup2" && fields[3] == "/" {
			return fields[4], nil
		}
	}
	return "", errors.New("procgroup: no cgroup v2 hierarchy is mounted")
}

// prepare makes the cgroup of a process about to start and sets cmd to be created in it.
func (c *Cgroups) prepare(attr *syscall.SysProcAttr) (dir string, fd int, err error) {
	for {
		dir = filepath.Join(c.parent, "p"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(cgroupSeq.Add(1), 10))
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) { // left by an earlier process of this pid: take the next
			return "", -1, err
		}
	}
	fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return "", -1, err
	}
	attr.UseCgroupFD, attr.CgroupFD = true, fd
	return dir, fd, nil
}

// cgroupKill kills every process of cgroup dir at once.
func cgroupKill(dir string) {
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
}

// cgroupSignal sends sig to every process of cgroup dir.
func cgroupSignal(dir string, sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		cgroupKill(dir)
		return
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range bytes.Fields(data) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// cgroupSignalExcept sends sig to every live process of cgroup dir but except, and reports
// whether there was one.
func cgroupSignalExcept(dir string, sig syscall.Signal, except int) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	found := false
	for _, f := range bytes.Fields(data) {
		pid, err := strconv.Atoi(string(f))
		if err != nil || pid <= 0 || pid == except {
			continue
		}
		if _, alive := startOf(pid); alive {
			found = true
			_ = syscall.Kill(pid, sig)
		}
	}
	return found
}

// cgroupPopulated reports whether cgroup dir still has a live process; ok is false when it
// cannot be read.
func cgroupPopulated(dir string) (populated, ok bool) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, false
	}
	return bytes.Contains(data, []byte("populated 1")), true
}

// cgroupRemove kills what is left in cgroup dir and removes it, waiting at most a second for
// the kernel to empty it.
func cgroupRemove(dir string) {
	cgroupKill(dir)
	deadline := time.Now().Add(time.Second)
	for {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
