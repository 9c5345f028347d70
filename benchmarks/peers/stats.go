package main

import (
	"slices"
	"time"
)

// latency summarizes a set of durations: percentiles, extremes and how
// many were negative (a timer that reached its handler before its due
// time).
type latency struct {
	Count         int
	P50, P99, Max time.Duration
	Min           time.Duration
	Negative      int
}

func summarize(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	l := latency{Count: len(s), Min: s[0], Max: s[len(s)-1], P50: pct(s, 50), P99: pct(s, 99)}
	for _, d := range s {
		if d < 0 {
			l.Negative++
		}
	}
	return l
}

// pct is the nearest-rank percentile of sorted s.
func pct(s []time.Duration, p int) time.Duration {
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}
