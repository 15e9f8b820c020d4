package main

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/require"
)

// memLimitTest keeps the runtime's memory limit and the variables memlimit reads as they were
// after the test, and clears those variables for it (the limit is process-wide: no t.Parallel).
func memLimitTest(t *testing.T) *bytes.Buffer {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	for _, k := range []string{"GOMEMLIMIT", "AUTOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			require.NoError(t, os.Unsetenv(k))
			t.Cleanup(func() { _ = os.Setenv(k, v) })
		}
	}
	debug.SetMemoryLimit(math.MaxInt64)
	return &bytes.Buffer{}
}

// At start the gateway aims at 90% of its cgroup's memory limit, and says so.
func TestMemoryLimitFromTheCgroup(t *testing.T) {
	out := memLimitTest(t)
	setMemoryLimit(slog.New(slog.NewTextHandler(out, nil)), nil, memlimit.Limit(1000<<20))
	require.Equal(t, int64(900<<20), debug.SetMemoryLimit(-1))
	require.Contains(t, out.String(), "memory limit from the cgroup")
	require.Contains(t, out.String(), "limit_bytes=943718400")
}

// GOMEMLIMIT set by the operator wins: the cgroup is not read, the limit is left alone.
func TestMemoryLimitGOMEMLIMITWins(t *testing.T) {
	out := memLimitTest(t)
	debug.SetMemoryLimit(512 << 20) // what the runtime made of GOMEMLIMIT=512MiB at start
	setMemoryLimit(slog.New(slog.NewTextHandler(out, nil)), []string{"GOMEMLIMIT=512MiB"}, func() (uint64, error) {
		t.Fatal("the cgroup was read although GOMEMLIMIT is set")
		return 0, nil
	})
	require.Equal(t, int64(512<<20), debug.SetMemoryLimit(-1))
	require.Contains(t, out.String(), "gomemlimit=512MiB")
}

// No cgroup limit (or no cgroup): no limit, said as such; a limit that cannot be read is a
// warning and leaves the runtime as it was.
func TestMemoryLimitNoneOrUnreadable(t *testing.T) {
	for _, err := range []error{memlimit.ErrNoLimit, memlimit.ErrNoCgroup, memlimit.ErrCgroupsNotSupported} {
		out := memLimitTest(t)
		setMemoryLimit(slog.New(slog.NewTextHandler(out, nil)), nil, func() (uint64, error) { return 0, err })
		require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "%v", err)
		require.Contains(t, out.String(), "memory limit: none", "%v", err)
	}
	out := memLimitTest(t)
	debug.SetMemoryLimit(300 << 20)
	setMemoryLimit(slog.New(slog.NewTextHandler(out, nil)), nil, func() (uint64, error) {
		return 0, errors.New("failed to parse mountinfo")
	})
	require.Equal(t, int64(300<<20), debug.SetMemoryLimit(-1))
	require.Contains(t, out.String(), "level=WARN")
	require.Contains(t, out.String(), "failed to parse mountinfo")
}
