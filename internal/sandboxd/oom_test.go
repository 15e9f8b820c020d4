package sandboxd

import "testing"

func TestOOMKillCount(t *testing.T) {
	for in, want := range map[string]int64{
		"low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n": 2, // cgroup v2 memory.events
		"oom_kill_disable 0\nunder_oom 0\noom_kill 7\n":               7, // cgroup v1 memory.oom_control
		"oom_kill_disable 0\n":                                        0,
		"":                                                            0,
	} {
		if got := oomKillCount([]byte(in)); got != want {
			t.Errorf("oomKillCount(%q) = %d, want %d", in, got, want)
		}
	}
}
