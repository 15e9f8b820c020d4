package kubenode

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StateDir is where each cluster keeps a record of what it changed on the host
// (<id>.json), from before its first change until Stop has undone all of it. It is under
// /run, so that a reboot (which undoes the changes too) forgets the records.
const StateDir = "/run/sandgate-kubenode"

// record is what a cluster changed on the host, for Stop in a later process when the one
// that started the cluster died without it (killed by `go test -timeout`, say).
type record struct {
	ID string `json:"id"`
	// OwnerPID and OwnerStart are the process that started the cluster and its start time
	// (/proc/<pid>/stat field 22, clock ticks after boot): together they name that process,
	// and no later one given the same pid.
	OwnerPID   int                      `json:"owner_pid"`
	OwnerStart uint64                   `json:"owner_start"`
	Dir        string                   `json:"dir"`
	Netns      string                   `json:"netns"`
	HostVeth   string                   `json:"host_veth"`
	Cgroup     string                   `json:"cgroup"`
	Sysctls    map[string]string        `json:"sysctls"`
	Absent     []string                 `json:"absent"`
	IPTables   map[string]iptablesState `json:"iptables"`
	Tags       []string                 `json:"tags"`
}

// recordPath is the record's file of cluster id in dir.
func recordPath(dir, id string) string { return filepath.Join(dir, id+".json") }

// saveRecord writes c's record (owner: this process) to dir, replacing any earlier one.
func (c *Cluster) saveRecord(dir string) error {
	start, err := processStart(os.Getpid())
	if err != nil {
		return err
	}
	r := record{ID: c.ID, OwnerPID: os.Getpid(), OwnerStart: start, Dir: c.Dir, Netns: c.netns,
		HostVeth: c.hostVeth, Cgroup: c.cgroup, Sysctls: c.sysctls, Absent: c.absent, IPTables: c.iptables, Tags: c.tags}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := recordPath(dir, c.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, recordPath(dir, c.ID))
}

// processStart is the start time of process pid (/proc/<pid>/stat field 22, clock ticks
// after boot); an error when there is no such process.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command (field 2) is in parentheses and may hold spaces and parentheses itself.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:])) // from field 3
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// ownerAlive reports whether the process that wrote r still runs.
func (r *record) ownerAlive() bool {
	start, err := processStart(r.OwnerPID)
	return err == nil && start == r.OwnerStart
}

// valid reports whether r names only what Start makes for its ID: so that a damaged or
// foreign file never has the sweep remove anything else.
func (r *record) valid(name string) bool {
	id := r.ID
	if id == "" || len(id) > 12 || strings.Trim(id, "0123456789abcdef") != "" || name != id+".json" {
		return false
	}
	base := filepath.Base(r.Dir)
	return filepath.IsAbs(r.Dir) && filepath.Clean(r.Dir) == r.Dir && strings.HasPrefix(base, "sgk-"+id+"-") &&
		r.Netns == "sgk-"+id && r.HostVeth == "sgk"+id && r.Cgroup == "/sgk-"+id && r.OwnerPID > 0
}

// staleRecords reads the records in dir whose owner process is gone, and whether the owner
// of another still runs; records that do not read or do not name a cluster of this package
// are left alone.
func staleRecords(dir string, log *slog.Logger) (out []record, live bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || !r.valid(e.Name()) {
			log.Warn("ignoring a file that is no cluster record", "file", filepath.Join(dir, e.Name()))
			continue
		}
		if r.ownerAlive() {
			live = true
		} else {
			out = append(out, r)
		}
	}
	return out, live
}

// killUnder kills (SIGKILL) every process but this one whose command line names dir or a
// path under it, and returns their pids. A cluster's processes all do (their flags name
// files in the cluster's folder, etcd's data and kube-apiserver's certificates included).
func killUnder(dir string) ([]int, error) {
	if dir == "" || dir == "/" {
		return nil, fmt.Errorf("refusing to kill processes under %q", dir)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var killed []int
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if !namesPath(strings.Split(string(b), "\x00"), dir) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing pid %d: %w", pid, err))
			continue
		}
		killed = append(killed, pid)
	}
	return killed, errors.Join(errs...)
}

// namesPath reports whether an argument is dir, a path under it, or a flag (--x=) with one.
func namesPath(args []string, dir string) bool {
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			a = v
		}
		if a == dir || strings.HasPrefix(a, dir+"/") || strings.Contains(a, "://"+dir+"/") {
			return true
		}
	}
	return false
}

// sweep tears down the clusters recorded in dir whose owner process died without Stop:
// their processes are killed, then Stop runs on what the record names (containers by label,
// image tags, mounts, cgroups, netns and veth, sysctls, iptables chains, host folders, the
// cluster's folder), and the record goes once that succeeded. While another recorded
// cluster's owner still runs, the host-wide state is left to that cluster's Stop.
func sweep(dir string, log *slog.Logger) error {
	var errs []error
	stale, live := staleRecords(dir, log)
	for _, r := range stale {
		if live {
			// The host-wide state (sysctls, the kubelet's iptables chains and folders) is in
			// use by a running cluster: it is that one's Stop that restores it.
			r.Sysctls, r.IPTables, r.Absent = nil, nil, nil
		}
		log.Warn("removing a cluster left by a run that ended without Stop", "cluster", r.ID, "owner_pid", r.OwnerPID, "dir", r.Dir)
		if _, err := killUnder(r.Dir); err != nil {
			errs = append(errs, err)
		}
		c := &Cluster{ID: r.ID, Dir: r.Dir, log: log, netns: r.Netns, hostVeth: r.HostVeth, cgroup: r.Cgroup,
			sysctls: r.Sysctls, absent: r.Absent, iptables: r.IPTables, tags: r.Tags, stateDir: dir}
		if err := c.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", r.ID, err))
		}
	}
	return errors.Join(errs...)
}
