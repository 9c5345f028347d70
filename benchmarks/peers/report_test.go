package main

import (
	"strings"
	"testing"
	"time"
)

// The report's tables: every peer a row in each, ratios to raw, failures
// and figures that do not apply said in the cell. Fast, and needs no
// server: the benchmark itself runs only by hand.
func TestPrintReport(t *testing.T) {
	lat := func(p50, p99 time.Duration) latency {
		return latency{Count: 10, P50: p50, P99: p99, Max: p99 + time.Millisecond, Min: time.Millisecond}
	}
	rs := []result{
		{
			Key: "raw", Name: "raw nats.go", Config: "baseline",
			Lateness: &latenessResult{N: 10, Rate: 20000, Lateness: lat(100*time.Millisecond, 250*time.Millisecond)},
			Cancel:   &cancelResult{Pending: 10, Cancel: lat(100*time.Microsecond, 200*time.Microsecond)},
			Saga:     &sagaResult{Instances: 5, StepsPerS: 10000, CPUPer: 100 * time.Microsecond},
			Pending:  &pendingResult{N: 1000, Idle: memory{RSS: 40 << 20, PSS: 30 << 20}, Full: memory{RSS: 50 << 20, PSS: 40 << 20}},
		},
		{
			Key: "dbos", Name: "DBOS", Config: "a | b",
			Lateness: &latenessResult{N: 10, Rate: 500, Lateness: latency{Count: 10, P50: -200 * time.Microsecond, P99: time.Millisecond, Min: -800 * time.Microsecond, Negative: 4}, Lost: 1},
			Saga:     &sagaResult{Instances: 5, StepsPerS: 1000, CPUPer: 500 * time.Microsecond},
			Errors:   map[string]string{"b": "cancel 3: boom | bang"},
		},
	}
	var b strings.Builder
	printReport(&b, []string{"head"}, rs)
	out := b.String()
	for _, want := range []string{
		"head  \n",
		"| raw nats.go | 20.0k | 1.00× | 100 ms / 250 ms / 251 ms | 1.00× | 0 | 0 |",
		"| DBOS | 500 | 0.03× | -200 µs / 1.0 ms / 0 µs | 0.00× | 4 (up to 800 µs) | 1 |",
		"| raw nats.go | 10 | 100 µs / 200 µs | 1.00× |",
		"| DBOS | failed: cancel 3: boom / bang | | |",
		"| DBOS | 1000 | 0.10× | 500 µs | 5.00× |",
		"| raw nats.go | 1000 | 30 MiB → 40 MiB | 0 MiB | 1.00× | 10486 B | 50 MiB | 0.0 s |",
		"| DBOS | n/a | | | | | | |",
		"- **DBOS**: a | b",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestParseFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-only", "nope"}); err == nil {
		t.Error("-only nope: no error")
	}
	if _, err := parseFlags([]string{"-workloads", "x"}); err == nil {
		t.Error("-workloads x: no error")
	}
	cfg, err := parseFlags([]string{"-only", "river,temporal", "-workloads", "ad"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.only) != 2 || !cfg.runs('a') || cfg.runs('b') {
		t.Errorf("parsed %+v", cfg)
	}
}
