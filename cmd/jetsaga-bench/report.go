package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"
)

// Result is one line of the table: a jetsaga figure, its raw baseline
// from the same run, and the target it is held to.
type Result struct {
	Bench   string  `json:"bench"`
	Label   string  `json:"label"`
	Jetsaga Figure  `json:"jetsaga"`
	Raw     *Figure `json:"raw,omitempty"`
	// RawName names the raw baseline when there are several ("raw" if empty),
	// and RawDesc describes it.
	RawName string `json:"raw_name,omitempty"`
	RawDesc string `json:"raw_desc,omitempty"`
	// Ratio is jetsaga/raw of the headline figure: a rate (higher is
	// better; the median of the per-round ratios) or a p99 latency (lower
	// is better). Zero without a baseline.
	Ratio float64 `json:"ratio,omitempty"`
	// RoundRatios are the per-round ratios of a rate comparison.
	RoundRatios []float64 `json:"round_ratios,omitempty"`
	Target      string    `json:"target,omitempty"`
	// Pass is nil when the figure has no target.
	Pass *bool `json:"pass,omitempty"`
}

// Figure is either a rate (median over rounds) or a latency summary.
type Figure struct {
	Rate   float64   `json:"rate_per_s,omitempty"`
	Rounds []float64 `json:"round_rates_per_s,omitempty"`
	// AllocsPerOp and BytesPerOp are heap allocations of the whole
	// process, client and embedded server, per operation.
	AllocsPerOp float64  `json:"allocs_per_op,omitempty"`
	BytesPerOp  float64  `json:"bytes_per_op,omitempty"`
	Lat         *Latency `json:"latency,omitempty"`
	// Text overrides the cell, for figures that are neither.
	Text string `json:"text,omitempty"`
}

func rateFigure(r abResult) Figure {
	return Figure{Rate: median(r.rates), Rounds: r.rates, AllocsPerOp: r.allocs, BytesPerOp: r.bytes}
}

func (f Figure) cell() string {
	switch {
	case f.Text != "":
		return f.Text
	case f.Lat != nil:
		return fmtDur(f.Lat.P50) + " / " + fmtDur(f.Lat.P99) + " / " + fmtDur(f.Lat.Max)
	}
	return fmtRate(f.Rate)
}

// rateResult compares two sides' round rates; minRatio > 0 is the target.
func rateResult(bench, label string, ja, rb abResult, minRatio float64) Result {
	jet, raw := ja.rates, rb.rates
	r := Result{Bench: bench, Label: label, Jetsaga: rateFigure(ja)}
	rf := rateFigure(rb)
	r.Raw = &rf
	// Each round interleaved the sides, so the ratio within a round cancels
	// drift in the machine's load; take the median of those.
	for i := range min(len(jet), len(raw)) {
		r.RoundRatios = append(r.RoundRatios, jet[i]/raw[i])
	}
	r.Ratio = median(r.RoundRatios)
	if minRatio > 0 {
		r.Target = fmt.Sprintf(">= %gx", minRatio)
		r.Pass = verdict(r.Ratio >= minRatio)
	}
	return r
}

// latencyResult compares two latency summaries by p99; maxP99 > 0 is the
// target, and no figure may be early.
func latencyResult(bench, label string, jet, raw *Latency, maxP99 time.Duration, target string) Result {
	r := Result{Bench: bench, Label: label, Jetsaga: Figure{Lat: jet}, Target: target}
	if raw != nil {
		r.Raw = &Figure{Lat: raw}
		if raw.P99 > 0 {
			r.Ratio = float64(jet.P99) / float64(raw.P99)
		}
	}
	if maxP99 > 0 {
		r.Pass = verdict(jet.P99 <= maxP99 && jet.Early == 0 && jet.Missing == 0)
	}
	return r
}

func verdict(ok bool) *bool { return &ok }

// printTable prints the results; allocScope says whose heap allocations
// they count.
func printTable(w io.Writer, results []Result, allocScope string) {
	rows := [][]string{{"bench", "jetsaga", "raw nats.go", "ratio", "target", ""}}
	for _, r := range results {
		raw, ratio, pass := "-", "", ""
		if r.Raw != nil {
			raw = r.Raw.cell()
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
		}
		if r.Pass != nil {
			pass = map[bool]string{true: "PASS", false: "FAIL"}[*r.Pass]
		}
		rows = append(rows, []string{r.Label, r.Jetsaga.cell(), raw, ratio, r.Target, pass})
	}
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := width[i] - utf8.RuneCountInString(c)
			if i == 3 { // right-align the ratio
				b.WriteString(strings.Repeat(" ", pad) + c + "   ")
				continue
			}
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", pad+3))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Rates are the median over the rounds; latency cells are p50 / p99 / max.")
	fmt.Fprintln(w, "ratio = jetsaga/raw. Of rates (higher is better) it is the median of the per-round ratios,")
	fmt.Fprintln(w, "whose sides are interleaved in small steps; of latencies it is the p99 ratio (lower is better).")
	seen := map[string]bool{}
	for _, r := range results {
		if r.RawDesc != "" && !seen[r.RawName+r.RawDesc] {
			seen[r.RawName+r.RawDesc] = true
			fmt.Fprintf(w, "%s = %s.\n", cmp.Or(r.RawName, "raw"), r.RawDesc)
		}
	}
	fmt.Fprintf(w, "Heap allocations per operation, %s:\n", allocScope)
	for i := 0; i < len(results); i++ {
		r := results[i]
		if r.Raw == nil || r.Jetsaga.AllocsPerOp == 0 {
			continue
		}
		line := fmt.Sprintf("  %s: jetsaga %s", r.Label, fmtAllocs(r.Jetsaga))
		for ; i < len(results) && results[i].Bench == r.Bench; i++ {
			line += fmt.Sprintf(", %s %s", cmp.Or(results[i].RawName, "raw"), fmtAllocs(*results[i].Raw))
		}
		i--
		fmt.Fprintln(w, line)
	}
}

func writeJSON(path string, e *env, results []Result) error {
	doc := struct {
		GoVersion   string    `json:"go_version"`
		GOMAXPROCS  int       `json:"gomaxprocs"`
		NATSServer  string    `json:"nats_server"`
		Scale       float64   `json:"scale"`
		Rounds      int       `json:"rounds"`
		Concurrency int       `json:"concurrency"`
		Nodes       int       `json:"nodes"`
		Replicas    int       `json:"replicas"`
		Time        time.Time `json:"time"`
		Results     []Result  `json:"results"`
		// Million holds the million bench's child reports (jetsaga, raw)
		// with their drain timelines.
		Million []*millionReport `json:"million,omitempty"`
	}{runtime.Version(), runtime.GOMAXPROCS(0), e.ncRaw.ConnectedServerVersion(),
		e.cfg.scale, e.cfg.rounds, e.cfg.conc, max(1, e.servers.nodes), e.replicas(), e.start.UTC(), results, e.charts.burst}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	out = append(out, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(out)
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// fmtRate formats a rate as "21,345 msg/s".
func fmtRate(r float64) string { return groupThousands(int64(r+0.5)) + " msg/s" }

func groupThousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + groupThousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// fmtDur formats a duration with about three significant digits.
func fmtDur(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%s%dns", sign, d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%s%.0fµs", sign, float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%s%.2fms", sign, float64(d)/float64(time.Millisecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%s%.1fms", sign, float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%s%.0fms", sign, float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%s%.2fs", sign, d.Seconds())
}

func fmtAllocs(f Figure) string {
	return fmt.Sprintf("%.0f (%.1f KiB)", f.AllocsPerOp, f.BytesPerOp/1024)
}
