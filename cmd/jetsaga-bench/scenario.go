package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// P5: the 30-day invoice scenario of sagatest. sagatest runs on a
// testing/synctest bubble, which needs a *testing.T, so the scenario
// lives in a Go benchmark (BenchmarkThirtyDayScenario in
// sagatest/sagatest_test.go) and this bench runs it with the go command.
// Without a go command or outside the jetsaga module, the row says how to
// run it instead.

const (
	thirtyDayPkg   = "github.com/jetsaga/jetsaga/sagatest"
	thirtyDayBench = "BenchmarkThirtyDayScenario"
	thirtyDayCmd   = "go test -run x -bench ThirtyDay ./sagatest/"
	thirtyDayMax   = 10 * time.Millisecond
)

func benchThirtyDays(ctx context.Context, e *env) Result {
	r := Result{Bench: "sagatest", Label: "sagatest 30-day scenario (wall/run)", Target: "<= 10ms (P5)"}
	e.progress("  sagatest: %s", thirtyDayCmd)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute) // a cold build takes a while
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^"+thirtyDayBench+"$",
		"-benchmem", "-count", "1", thirtyDayPkg)
	out, err := cmd.CombinedOutput()
	perOp, allocs, ok := parseBenchLine(out, thirtyDayBench)
	if err != nil || !ok {
		e.progress("  sagatest: not measured (%v): %s", err, lastLine(out))
		r.Jetsaga.Text = "not run; see " + thirtyDayCmd
		return r
	}
	r.Jetsaga.Text = fmt.Sprintf("%s (%s allocs)", fmtDur(perOp), groupThousands(allocs))
	r.Pass = verdict(perOp <= thirtyDayMax)
	return r
}

// parseBenchLine finds name's result line in go test -bench output and
// returns its ns/op and allocs/op.
func parseBenchLine(out []byte, name string) (perOp time.Duration, allocs int64, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != name && !strings.HasPrefix(f[0], name+"-") {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				perOp, ok = time.Duration(v), true
			case "allocs/op":
				allocs = int64(v)
			}
		}
	}
	return perOp, allocs, ok
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
