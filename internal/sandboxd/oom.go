//go:build unix

package sandboxd

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"
)

// The files whose oom_kill counter says how many processes of the sandbox's cgroup the
// kernel's out-of-memory killer has killed: cgroup v2's memory.events, else (a cgroup v1 or
// hybrid host, where a container sees its memory controller's folder) memory.oom_control.
var memoryEvents = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomFile is the first of memoryEvents that can be read ("" for none), found once: it is
// read before and after every execution.
var oomFile = sync.OnceValue(func() string {
	for _, f := range memoryEvents {
		if _, err := os.ReadFile(f); err == nil {
			return f
		}
	}
	return ""
})

// oomKills returns the oom_kill counter of oomFile, 0 when it cannot be read.
func oomKills() int64 {
	f := oomFile()
	if f == "" {
		return 0
	}
	data, err := os.ReadFile(f)
	if err != nil {
		return 0
	}
	return oomKillCount(data)
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
