package main

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
)

// result is one peer's figures; a nil figure did not run or failed
// (Errors says why, by workload letter).
type result struct {
	Key, Name, Config string
	Lateness          *latenessResult
	Cancel            *cancelResult
	Saga              *sagaResult
	Pending           *pendingResult
	Errors            map[string]string
}

// header describes the run: machine, versions, sizes.
func header(cfg config, e *env) []string {
	h := []string{
		fmt.Sprintf("%s, %s/%s, %d CPUs; load average %s", time.Now().UTC().Format("2006-01-02"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), loadAvg()),
		"versions: " + versions(),
	}
	if strings.ContainsAny(cfg.workloads, "abcd") {
		h = append(h, fmt.Sprintf("(a) %d timers due over %v, %d goroutines scheduling; (b) %d pending an hour away, %d cancelled one at a time; (c) %d instances in flight for %v, a %v timer between the two steps; (d) %d timers pending, each system in a child process",
			cfg.timers, cfg.window, cfg.conc, cfg.cancelPending, cfg.cancels, cfg.sagaWindow, cfg.sagaTime, cfg.sagaDelay, cfg.pending))
	}
	if cfg.runs('e') {
		conc := "the dispatcher's default (8), or the pool size if larger"
		if cfg.txConcurrency > 0 {
			conc = strconv.Itoa(cfg.txConcurrency)
		}
		h = append(h, fmt.Sprintf("(e) %d rounds, each system in turn (the order rotated) with %d instances in flight for %v; pools of %v connections; jetsaga's dispatcher concurrency: %s",
			cfg.txRounds, cfg.txWindow, cfg.txTime, cfg.txPools, conc))
	}
	if e.pg != nil {
		h = append(h, "PostgreSQL: "+e.pg.describe())
	}
	return h
}

func loadAvg() string {
	b, err := readFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(b)
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// versions lists Go, the peers' modules as built, the Temporal CLI and
// PostgreSQL.
func versions() string {
	out := []string{runtime.Version(), "nats.go " + nats.Version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			for _, want := range []string{"github.com/nats-io/nats-server/v2", "github.com/riverqueue/river", "github.com/dbos-inc/dbos-transact-golang", "go.temporal.io/sdk", "github.com/jackc/pgx/v5", "modernc.org/sqlite"} {
				if d.Path == want {
					out = append(out, strings.TrimPrefix(strings.TrimPrefix(d.Path, "github.com/"), "go.")+" "+d.Version)
				}
			}
		}
	}
	out = append(out, "temporal CLI "+temporaltest.CLIVersion+" (dev server, SQLite in memory)")
	if pg, err := exec.LookPath("postgres"); err == nil {
		if v, err := exec.Command(pg, "--version").Output(); err == nil {
			out = append(out, strings.TrimSpace(string(v)))
		}
	} else if bin, err := postgresBin(); err == nil {
		if v, err := exec.Command(bin+"/postgres", "--version").Output(); err == nil {
			out = append(out, strings.TrimSpace(string(v)))
		}
	}
	return strings.Join(out, ", ")
}

// printReport writes the results as markdown tables, one per workload,
// each figure beside its ratio to raw nats.go's in the same run.
func printReport(w io.Writer, head []string, rs []result) {
	for _, h := range head {
		fmt.Fprintf(w, "%s  \n", h)
	}
	if len(rs) == 0 {
		return // only workload (e) ran: printTx
	}
	var raw result
	for _, r := range rs {
		if r.Key == "raw" {
			raw = r
		}
	}
	tableHead(w, "(a) one-shot timers: schedule rate, handler lateness (handler start − due)", "system", "scheduled/s", "× raw", "lateness p50 / p99 / max", "p99 × raw", "early", "not handled by last due + grace")
	for _, r := range rs {
		l := r.Lateness
		if l == nil {
			missingRow(w, r, "a", 7)
			continue
		}
		var rateX, p99X string
		if raw.Lateness != nil {
			rateX = ratio(l.Rate, raw.Lateness.Rate)
			p99X = ratio(float64(l.Lateness.P99), float64(raw.Lateness.Lateness.P99))
		}
		early := fmt.Sprint(l.Lateness.Negative)
		if l.Lateness.Negative > 0 {
			early += fmt.Sprintf(" (up to %s)", dur(-l.Lateness.Min))
		}
		lost := fmt.Sprint(l.Lost)
		if l.Dups > 0 {
			lost += fmt.Sprintf(", %d twice", l.Dups)
		}
		if l.SchedLate > 0 {
			lost += fmt.Sprintf(" (%d scheduled after due)", l.SchedLate)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s / %s / %s | %s | %s | %s |\n", r.Name, num(l.Rate), rateX,
			dur(l.Lateness.P50), dur(l.Lateness.P99), dur(l.Lateness.Max), p99X, early, lost)
	}
	tableHead(w, "(b) cancel, one at a time, with timers pending", "system", "pending", "cancel p50 / p99", "p99 × raw")
	for _, r := range rs {
		c := r.Cancel
		if c == nil {
			missingRow(w, r, "b", 4)
			continue
		}
		var x string
		if raw.Cancel != nil {
			x = ratio(float64(c.Cancel.P99), float64(raw.Cancel.Cancel.P99))
		}
		fmt.Fprintf(w, "| %s | %d | %s / %s | %s |\n", r.Name, c.Pending, dur(c.Cancel.P50), dur(c.Cancel.P99), x)
	}
	tableHead(w, "(c) two-step saga/workflow with one timer", "system", "steps/s", "× raw", "CPU per step", "× raw")
	for _, r := range rs {
		s := r.Saga
		if s == nil {
			missingRow(w, r, "c", 5)
			continue
		}
		var x, cx string
		if raw.Saga != nil {
			x = ratio(s.StepsPerS, raw.Saga.StepsPerS)
			cx = ratio(float64(s.CPUPer), float64(raw.Saga.CPUPer))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.Name, num(s.StepsPerS), x, dur(s.CPUPer), cx)
	}
	tableHead(w, "(d) memory with timers pending: PSS of the client process and the servers (shared pages counted once: postgres's processes share its buffers), and their RSS summed", "system", "pending", "PSS idle → pending", "of which servers", "PSS × raw", "growth per timer", "RSS summed", "scheduled in")
	for _, r := range rs {
		m := r.Pending
		if m == nil {
			missingRow(w, r, "d", 8)
			continue
		}
		var x string
		if raw.Pending != nil {
			x = ratio(float64(m.Full.PSS), float64(raw.Pending.Full.PSS))
		}
		growth := float64(m.Full.PSS-m.Idle.PSS) / float64(m.N)
		fmt.Fprintf(w, "| %s | %d | %s → %s | %s | %s | %s | %s | %.1f s |\n", r.Name, m.N, mib(m.Idle.PSS), mib(m.Full.PSS),
			mib(m.Server.PSS), x, fmt.Sprintf("%.0f B", growth), mib(m.Full.RSS), m.Seconds)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configurations:")
	fmt.Fprintln(w)
	for _, r := range rs {
		fmt.Fprintf(w, "- **%s**: %s\n", r.Name, r.Config)
	}
}

// printTx writes workload (e)'s table: each system's median steps/s and
// CPU per step over its rounds at each pool size, the rounds' steps/s,
// the ratios to kvstore (the baseline) and to DBOS at the same pool size,
// and each pgstore/DBOS ratio against issue 33's target.
func printTx(w io.Writer, rs []txResult) {
	base, dbos := map[int]float64{}, map[int]float64{}
	dbosCPU := map[int]time.Duration{}
	dbosRounds := map[int][]sagaResult{}
	for _, r := range rs {
		s, cpu := r.median()
		switch r.Key {
		case "kvstore":
			base[r.Pool] = s
		case "dbos":
			dbos[r.Pool], dbosCPU[r.Pool], dbosRounds[r.Pool] = s, cpu, r.Rounds
		}
	}
	tableHead(w, "(e) two-step saga/workflow, each step writing business rows in the framework's PostgreSQL transaction (medians of the rounds)",
		"system", "pool", "steps/s", "rounds' steps/s", "× kvstore", "× DBOS", "CPU per step", "of which PostgreSQL", "CPU × DBOS", "SQL statements (round trips) per step", "instances")
	for _, r := range rs {
		if len(r.Rounds) == 0 {
			fmt.Fprintf(w, "| %s | %d | %s |%s\n", r.Name, r.Pool, missing(result{Errors: map[string]string{"e": r.Err}}, "e"), strings.Repeat(" |", 8))
			continue
		}
		s, cpu := r.median()
		var each []string
		n := 0
		for _, x := range r.Rounds {
			each = append(each, num(x.StepsPerS))
			n += x.Instances
		}
		sql := ""
		if stmts, trips := r.sql(); stmts > 0 {
			sql = fmt.Sprintf("%.1f (%.1f)", stmts, trips)
		}
		server := ""
		if c := r.serverCPU(); c > 0 {
			server = dur(c)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", r.Name, r.Pool, num(s), strings.Join(each, " / "),
			ratio(s, base[r.Pool]), ratio(s, dbos[r.Pool]), dur(cpu), server, ratio(float64(cpu), float64(dbosCPU[r.Pool])), sql, n)
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if s, _ := r.median(); strings.HasPrefix(r.Key, "pgstore") && s > 0 && dbos[r.Pool] > 0 {
			verdict := "below"
			if s >= 1.5*dbos[r.Pool] {
				verdict = "meets"
			}
			// Round by round: the two ran minutes apart at most.
			var each []string
			if d := dbosRounds[r.Pool]; len(d) == len(r.Rounds) {
				for i, x := range r.Rounds {
					each = append(each, ratio(x.StepsPerS, d[i].StepsPerS))
				}
			}
			fmt.Fprintf(w, "%s / DBOS, pool %d: %.2f× (%s the target of 1.5×); round by round %s  \n", r.Name, r.Pool, s/dbos[r.Pool], verdict, strings.Join(each, " / "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configurations (e):")
	fmt.Fprintln(w)
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.Key] {
			seen[r.Key] = true
			fmt.Fprintf(w, "- **%s**: %s\n", r.Name, r.Config)
		}
	}
}

// missing is the cell of a figure that did not run.
// tableHead starts a results table: a blank line, its title, and its
// header row, the system's column left-aligned and the figures right.
func tableHead(w io.Writer, title string, cols ...string) {
	fmt.Fprintf(w, "\n%s\n\n| %s |\n|---%s|\n", title, strings.Join(cols, " | "), strings.Repeat("|---:", len(cols)-1))
}

// missingRow is the row of a system that has no figures for part in a
// table of n columns: why (see missing), and empty cells.
func missingRow(w io.Writer, r result, part string, n int) {
	fmt.Fprintf(w, "| %s | %s |%s\n", r.Name, missing(r, part), strings.Repeat(" |", n-2))
}

func missing(r result, w string) string {
	if e, ok := r.Errors[w]; ok {
		if len(e) > 60 {
			e = e[:60] + "…"
		}
		return "failed: " + strings.ReplaceAll(e, "|", "/")
	}
	return "n/a"
}

func ratio(a, b float64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func num(f float64) string {
	switch {
	case f >= 10000:
		return fmt.Sprintf("%.1fk", f/1000)
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.1f", f)
}

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
