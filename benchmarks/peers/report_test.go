package main

import (
	"slices"
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
	for _, bad := range []string{"", "4,x", "0", "4,-1", "101"} {
		if _, err := parseFlags([]string{"-tx-pools", bad}); err == nil {
			t.Errorf("-tx-pools %q: no error", bad)
		}
	}
	if cfg, err := parseFlags([]string{"-tx-pools", "4, 20"}); err != nil || !slices.Equal(cfg.txPools, []int{4, 20}) {
		t.Errorf("-tx-pools '4, 20': %v, %v", cfg.txPools, err)
	}
	cfg, err := parseFlags([]string{"-only", "river,temporal", "-workloads", "ad"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.only) != 2 || !cfg.runs('a') || cfg.runs('b') {
		t.Errorf("parsed %+v", cfg)
	}
}

// Workload (e)'s table: a row per system and pool size, ratios to kvstore
// and DBOS at the same pool size, the verdict against the 1.5× target
// with the round-by-round ratios, and a failed row saying why.
func TestPrintTx(t *testing.T) {
	round := func(s float64) sagaResult {
		return sagaResult{Instances: 100, StepsPerS: s, CPUPer: 300 * time.Microsecond, ServerCPUPer: 200 * time.Microsecond, Stmts: 6, Trips: 5}
	}
	slow := func(s float64) sagaResult { // DBOS at pool 4: twice the CPU per step
		r := round(s)
		r.CPUPer *= 2
		return r
	}
	rs := []txResult{
		{Key: "kvstore", Name: "kv", Config: "baseline", Pool: 4, Rounds: []sagaResult{{Instances: 100, StepsPerS: 6000, CPUPer: 300 * time.Microsecond},
			{Instances: 100, StepsPerS: 4000, CPUPer: 300 * time.Microsecond}, {Instances: 100, StepsPerS: 5000, CPUPer: 300 * time.Microsecond}}},
		{Key: "pgstore", Name: "pg", Config: "session", Pool: 4, Rounds: []sagaResult{round(2000), round(1000), round(3000)}},
		{Key: "dbos", Name: "DBOS", Config: "tx steps", Pool: 4, Rounds: []sagaResult{slow(1000), slow(1000), slow(1000)}},
		{Key: "pgstore", Name: "pg", Config: "session", Pool: 20, Rounds: []sagaResult{round(1120)}},
		{Key: "dbos", Name: "DBOS", Config: "tx steps", Pool: 20, Rounds: []sagaResult{round(800)}},
		{Key: "pgstore-locking", Name: "pg locking", Config: "locking", Pool: 20, Err: "business rows wrong | x"},
	}
	var b strings.Builder
	printTx(&b, rs)
	out := b.String()
	for _, want := range []string{
		"| kv | 4 | 5000 | 6000 / 4000 / 5000 | 1.00× | 5.00× | 300 µs |  | 0.50× |  | 300 |",
		"| pg | 4 | 2000 | 2000 / 1000 / 3000 | 0.40× | 2.00× | 300 µs | 200 µs | 0.50× | 6.0 (5.0) | 300 |",
		"| pg | 20 | 1120 | 1120 |  | 1.40× | 300 µs | 200 µs | 1.00× | 6.0 (5.0) | 100 |",
		"| pg locking | 20 | failed: business rows wrong / x | | | | | | | | |",
		"pg / DBOS, pool 4: 2.00× (meets the target of 1.5×); round by round 2.00× / 1.00× / 3.00×",
		"pg / DBOS, pool 20: 1.40× (below the target of 1.5×); round by round 1.40×",
		"- **pg**: session\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("(e) report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "- **pg**") != 1 {
		t.Errorf("a system's configuration listed more than once:\n%s", out)
	}
}
