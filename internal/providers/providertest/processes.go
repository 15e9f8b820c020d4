package providertest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
)

// processes checks that processes end with what started them (docs/semantics.md §9): what
// code in a context starts ends with its execution while the context lives on, and a stopped
// background process takes its whole tree along — also a descendant in a session of its own.
func (s *suite) processes(t *testing.T) {
	s.leaf(t, "cell_children_end_with_the_cell", needStateful, func(e *env) {
		sb := e.create()
		code := `import os, subprocess
kept = "state"
a = subprocess.Popen(["sleep", "300"])
b = subprocess.Popen(["sleep", "300"], start_new_session=True)
os.system("sleep 300 & echo $! > shell.pid")
print(os.getpid(), a.pid, b.pid, int(open("shell.pid").read()))
`
		out := e.ctxRun(sb, "py", "python", code)
		pids := strings.Fields(out)
		require.Len(e.t, pids, 4, "stdout %q", out)
		e.requireGone(sb, pids[1:], "processes a cell started")
		assert.Equal(e.t, "state "+pids[0]+" -9\n", e.ctxRun(sb, "py", "python", "print(kept, os.getpid(), a.wait())"),
			"the interpreter and its state live on; the cell's child was killed")
	})

	s.leaf(t, "stop_ends_the_whole_tree", needShell|needBackground, func(e *env) {
		sb := e.create()
		x := sb.(providers.Executions)
		id := e.id("tree")
		// A child in a session of its own that ignores SIGTERM, whose parent ends on it.
		_, err := x.Start(e.ctx, providers.ExecSpec{Background: true, ID: id,
			Command: `setsid sh -c 'trap "" TERM; echo $$ > tree.pid.tmp; mv tree.pid.tmp tree.pid; while :; do sleep 1; done' & wait`})
		require.NoError(e.t, err)
		var pid string
		require.Eventually(e.t, func() bool {
			r := e.run(e.ctx, sb, providers.ExecSpec{Command: "cat tree.pid 2>/dev/null || true", Timeout: time.Minute})
			pid = strings.TrimSpace(string(r.stdout))
			return r.err == nil && pid != ""
		}, time.Minute, 50*time.Millisecond, "the background process's child runs")
		require.NoError(e.t, x.Stop(e.ctx, id))
		ended := make(chan error, 1)
		go func() {
			_, err := x.Reattach(context.WithoutCancel(e.ctx), id, providers.Output{})
			ended <- err
		}()
		select {
		case <-ended:
		case <-time.After(time.Minute):
			e.t.Fatal("a stopped background process did not end")
		}
		e.requireGone(sb, []string{pid}, "a stopped background process's descendant in a session of its own")
	})
}

// requireGone requires that the processes pids (decimal) of the sandbox end, soon; a zombie
// has ended.
func (e *env) requireGone(sb providers.Sandbox, pids []string, what string) {
	e.t.Helper()
	for _, p := range pids {
		_, err := strconv.Atoi(p)
		require.NoError(e.t, err, "pid %q", p)
	}
	check := `import sys
alive = []
for pid in sys.argv[1:]:
    try:
        stat = open("/proc/%s/stat" % pid).read()
    except OSError:
        continue
    if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
        alive.append(pid)
print(" ".join(alive))
`
	var alive string
	ok := assert.Eventually(e.t, func() bool {
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "python3 -c '" + strings.ReplaceAll(check, "'", `'"'"'`) + "' " + strings.Join(pids, " "), Timeout: time.Minute})
		alive = strings.TrimSpace(string(r.stdout))
		return r.err == nil && r.status.ExitCode == 0 && alive == ""
	}, 30*time.Second, 100*time.Millisecond)
	if !ok {
		e.t.Fatalf("%s still run: %s", what, alive)
	}
}
