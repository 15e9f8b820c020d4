//go:build unix

package sandboxd

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// The files whose oom_kill counter says how many processes of the sandbox's cgroup the
// kernel's out-of-memory killer has killed: cgroup v2's memory.events, else (a cgroup v1 or
// hybrid host, where a container sees its memory controller's folder) memory.oom_control.
var memoryEvents = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomKills returns the oom_kill counter of the first of memoryEvents that can be read, 0 when
// none can.
func oomKills() int64 {
	for _, f := range memoryEvents {
		if data, err := os.ReadFile(f); err == nil {
			return oomKillCount(data)
		}
	}
	return 0
}

// oomKillCount returns the value of the "oom_kill N" line of data, 0 without one.
func oomKillCount(data []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if ok && string(name) == "oom_kill" {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			return n
		}
	}
	return 0
}
