package main

import (
	"math"
	"sort"
	"time"
)

// Summary is the distribution of a set of latencies, in milliseconds.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Max  float64 `json:"max_ms"`
}

// Percentile returns the p-th percentile (0..100) of sorted by the nearest-rank method; 0 for
// an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[len(sorted)-1]
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Summarize sorts ds (in place) and summarises it.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Summary{
		N:    len(ds),
		P50:  ms(Percentile(ds, 50)),
		P99:  ms(Percentile(ds, 99)),
		Mean: ms(sum / time.Duration(len(ds))),
		Max:  ms(ds[len(ds)-1]),
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000 }
