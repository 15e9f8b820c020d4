//go:build unix

package sandboxd

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// memoryEvents is the cgroup v2 file whose oom_kill counter says how many processes of the
// sandbox's cgroup the kernel's out-of-memory killer has killed.
const memoryEvents = "/sys/fs/cgroup/memory.events"

// oomKills returns the oom_kill counter of memoryEvents, 0 when it cannot be read.
func oomKills() int64 {
	data, err := os.ReadFile(memoryEvents)
	if err != nil {
		return 0
	}
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
