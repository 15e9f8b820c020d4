package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	if s.N != 100 || s.P50 != 50 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Fatalf("summary = %+v", s)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Fatalf("empty = %v", got)
	}
	one := []time.Duration{7 * time.Millisecond}
	for _, p := range []float64{0, 1, 50, 99, 100} {
		if got := Percentile(one, p); got != 7*time.Millisecond {
			t.Fatalf("p%v of one = %v", p, got)
		}
	}
	if got := Percentile([]time.Duration{1, 2, 3, 4}, 50); got != 2 {
		t.Fatalf("p50 of 1..4 = %v", got)
	}
}
