package main

import (
	"math"
	"slices"
	"time"
)

// median returns the median of xs, or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, or 0 for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

// Latency summarizes a set of durations. Negative ones count as Early.
type Latency struct {
	Count   int           `json:"count"`
	Missing int           `json:"missing,omitempty"`
	Early   int           `json:"early"`
	Min     time.Duration `json:"min_ns"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
}

func summarize(ds []time.Duration) *Latency {
	s := slices.Clone(ds)
	slices.Sort(s)
	l := &Latency{Count: len(s)}
	if len(s) == 0 {
		return l
	}
	for _, d := range s {
		if d < 0 {
			l.Early++
		}
	}
	l.Min, l.Max = s[0], s[len(s)-1]
	l.P50, l.P99 = percentile(s, 50), percentile(s, 99)
	return l
}
