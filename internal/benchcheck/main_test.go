package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// runsOf makes a side whose runs measured the given ratios of one rate
// figure, with allocs allocations per operation.
func runsOf(name string, allocs float64, ratios ...float64) *side {
	s := &side{name: name}
	for _, r := range ratios {
		res := result{Bench: "saga", Label: "saga step", Ratio: r, Target: ">= 0.9x"}
		res.Jetsaga.Allocs = allocs
		s.runs = append(s.runs, map[string]result{res.key(): res})
	}
	return s
}

func TestReportFlagsWhatGotWorse(t *testing.T) {
	cases := []struct {
		name       string
		base, tree *side
		worse      int
		want       string
	}{
		{"same", runsOf("base abc", 300, 1.0, 0.9, 1.1), runsOf("tree", 300, 1.02, 0.95, 1.0), 0, "+0.0%"},
		{"better", runsOf("base abc", 300, 0.8, 0.8, 0.8), runsOf("tree", 300, 1.0, 1.0, 1.0), 0, "+25.0%"},
		{"slower", runsOf("base abc", 300, 1.0, 1.0, 1.0), runsOf("tree", 300, 0.9, 0.9, 0.9), 1, "-10.0% worse"},
		{"within tolerance", runsOf("base abc", 300, 1.0, 1.0, 1.0), runsOf("tree", 300, 0.96, 0.96, 0.96), 0, "-4.0%"},
		{"more allocations", runsOf("base abc", 300, 1.0), runsOf("tree", 330, 1.0), 1, "300 → 330 more"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if got := report(&out, c.base, c.tree, 0.05); got != c.worse {
				t.Errorf("report flagged %d figures, want %d:\n%s", got, c.worse, out.String())
			}
			if !strings.Contains(out.String(), c.want) {
				t.Errorf("report lacks %q:\n%s", c.want, out.String())
			}
		})
	}
}

// A latency ratio is better lower: a p99 ratio that grew is worse.
func TestReportLatencyLowerIsBetter(t *testing.T) {
	lat := func(name string, ratio float64) *side {
		raw := json.RawMessage(`{"p99":1}`)
		res := result{Bench: "cancel", Label: "cancel", Ratio: ratio, Target: "p99 <= 1ms"}
		res.Jetsaga.Lat = &raw
		return &side{name: name, runs: []map[string]result{{res.key(): res}}}
	}
	var out strings.Builder
	if got := report(&out, lat("base abc", 1.0), lat("tree", 1.2), 0.05); got != 1 {
		t.Errorf("a p99 ratio from 1.0 to 1.2 flagged %d, want 1:\n%s", got, out.String())
	}
	out.Reset()
	if got := report(&out, lat("base abc", 1.2), lat("tree", 1.0), 0.05); got != 0 {
		t.Errorf("a p99 ratio from 1.2 to 1.0 flagged %d, want 0:\n%s", got, out.String())
	}
}
