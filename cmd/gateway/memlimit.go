package main

import (
	"errors"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryShare is the part of the container's memory limit the Go runtime aims to stay under
// (GOMEMLIMIT): the rest is headroom for what the runtime does not count (goroutine stacks
// outside the heap, cgo, the kernel's page cache charged to the cgroup).
const memoryShare = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit, in
// bytes) to memoryShare of the memory limit that limit reports — memlimit.FromCgroup in the
// gateway: the cgroup's memory.max (v2) or memory.limit_in_bytes (v1) — so that the
// collector runs sooner as the process nears the container's limit instead of letting the
// heap double (GOGC=100) past it and be OOM-killed (docs/benchmarks.md, 2026-12-06: a live
// heap of ~150 MB held 341 MB). GOMEMLIMIT in environ wins and is left as the runtime read it;
// AUTOMEMLIMIT (a ratio in (0,1], or "off") overrides memoryShare, as memlimit reads it. No
// limit found (no cgroup limit, not Linux) leaves the runtime's default: no limit. What was
// decided is logged at info; a limit that could not be read is logged as a warning and never
// stops the start.
func setMemoryLimit(log *slog.Logger, environ []string, limit memlimit.Provider) {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GOMEMLIMIT="); ok && v != "" {
			log.Info("memory limit from GOMEMLIMIT", "gomemlimit", v, "limit_bytes", debug.SetMemoryLimit(-1))
			return
		}
	}
	var unlimited bool
	provider := func() (uint64, error) {
		n, err := limit()
		unlimited = errors.Is(err, memlimit.ErrNoLimit) || errors.Is(err, memlimit.ErrNoCgroup) || errors.Is(err, memlimit.ErrCgroupsNotSupported)
		if unlimited {
			return 0, memlimit.ErrNoLimit
		}
		return n, err
	}
	got, err := memlimit.Set(memlimit.WithProvider(provider), memlimit.WithRatio(memoryShare))
	switch {
	case err != nil:
		log.Warn("memory limit not set: the container's limit could not be read; set GOMEMLIMIT", "err", err)
	case unlimited || got == math.MaxInt64:
		log.Info("memory limit: none (the process has no cgroup memory limit; GOMEMLIMIT sets one)")
	default:
		log.Info("memory limit from the cgroup", "limit_bytes", got, "share", memoryShare)
	}
}
