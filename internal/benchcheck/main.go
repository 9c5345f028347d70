// Command benchcheck measures a change to the hot path before it lands:
// it builds cmd/jetsaga-bench from the working tree and from a base
// commit, runs the saga, schedule, send and cancel benches of both in
// interleaved rounds (base, tree, tree, base, ...), each run on its own
// embedded server, and prints each figure's ratio to its raw nats.go
// baseline on both sides, beside its target and the change.
//
//	make bench-check                 # base: where this branch left main (HEAD~1 on main itself)
//	make bench-check BASE=v0.1.0 ROUNDS=7
//
// A ratio (jetsaga over the raw loop of the same NATS calls, measured in
// the same run) holds on a noisy machine where absolute rates do not;
// each side's figure is the median of its rounds' ratios. A change is
// flagged "worse" when the tree's median is worse than the base's by
// more than -tolerance, or when heap allocations per operation grew by
// more than it; then benchcheck exits with status 1. Run it on an
// otherwise idle machine: it is not part of make test.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// benches are the benches a hot-path change is measured with.
const benches = "saga,schedule,send,cancel"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "", "the commit to compare with (default: the merge base of HEAD and main; HEAD~1 when that is HEAD and the tree is clean)")
	rounds := fs.Int("rounds", 5, "rounds; each runs both sides once, in alternating order")
	tolerance := fs.Float64("tolerance", 0.05, "how much worse a median ratio or allocations per operation may get before it is flagged")
	scale := fs.String("n", "1", "the benches' scale factor (jetsaga-bench -n)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *rounds < 1 || *tolerance < 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "benchcheck: -rounds must be positive, -tolerance not negative, and no arguments")
		return 2
	}
	c := &check{stderr: stderr, scale: *scale}
	defer c.cleanup()
	if err := c.prepare(ctx, *base); err != nil {
		fmt.Fprintln(stderr, "benchcheck:", err)
		return 1
	}
	for r := range *rounds {
		order := []*side{&c.base, &c.tree}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			fmt.Fprintf(stderr, "round %d/%d: %s\n", r+1, *rounds, s.name)
			if err := c.measure(ctx, s); err != nil {
				fmt.Fprintln(stderr, "benchcheck:", err)
				return 1
			}
		}
	}
	if worse := report(stdout, &c.base, &c.tree, *tolerance); worse > 0 {
		fmt.Fprintf(stdout, "\n%d figure(s) worse than the base by more than %.0f%%\n", worse, 100**tolerance)
		return 1
	}
	return 0
}

// A side is one build of jetsaga-bench and what its runs measured.
type side struct {
	name string // "base <rev>" or "tree"
	dir  string // the source tree it was built from and runs in
	bin  string
	runs []map[string]result // by figure key, one map per run
}

// result is the part of jetsaga-bench's -json output benchcheck reads.
type result struct {
	Bench   string  `json:"bench"`
	Label   string  `json:"label"`
	Ratio   float64 `json:"ratio"`
	Target  string  `json:"target"`
	Pass    *bool   `json:"pass"`
	Jetsaga struct {
		Lat    *json.RawMessage `json:"latency"`
		Allocs float64          `json:"allocs_per_op"`
	} `json:"jetsaga"`
}

func (r result) key() string { return r.Bench + "\x00" + strings.TrimSpace(r.Label) }

// lowerIsBetter: the ratio of a latency (p99 over p99) is better lower.
func (r result) lowerIsBetter() bool { return r.Jetsaga.Lat != nil }

type check struct {
	stderr     io.Writer
	scale      string
	tmp        string
	root       string
	worktree   string // the base's, removed at the end
	base, tree side
}

func (c *check) prepare(ctx context.Context, base string) error {
	root, err := output(ctx, "", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	c.root = root
	if base == "" {
		if base, err = defaultBase(ctx, root); err != nil {
			return err
		}
	}
	rev, err := output(ctx, root, "git", "rev-parse", "--short", base+"^{commit}")
	if err != nil {
		return fmt.Errorf("base %q: %w", base, err)
	}
	if c.tmp, err = os.MkdirTemp("", "benchcheck-"); err != nil {
		return err
	}
	c.worktree = filepath.Join(c.tmp, "base")
	if _, err := output(ctx, root, "git", "worktree", "add", "--detach", c.worktree, rev); err != nil {
		return err
	}
	c.base = side{name: "base " + rev, dir: c.worktree, bin: filepath.Join(c.tmp, "bench-base")}
	c.tree = side{name: "tree", dir: root, bin: filepath.Join(c.tmp, "bench-tree")}
	for _, s := range []*side{&c.base, &c.tree} {
		fmt.Fprintf(c.stderr, "building jetsaga-bench: %s\n", s.name)
		if _, err := output(ctx, s.dir, "go", "build", "-o", s.bin, "./cmd/jetsaga-bench"); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// defaultBase is where HEAD left main, or HEAD~1 on main itself with a
// clean tree (the last commit is the change), or HEAD with changes.
func defaultBase(ctx context.Context, root string) (string, error) {
	head, err := output(ctx, root, "git", "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	mb, err := output(ctx, root, "git", "merge-base", "HEAD", "main")
	if err != nil || mb != head {
		return cmp.Or(mb, "HEAD"), nil
	}
	if dirty, err := output(ctx, root, "git", "status", "--porcelain", "--untracked-files=no"); err == nil && dirty != "" {
		return "HEAD", nil
	}
	return "HEAD~1", nil
}

func (c *check) cleanup() {
	if c.worktree != "" {
		_, _ = output(context.Background(), c.root, "git", "worktree", "remove", "--force", c.worktree)
	}
	if c.tmp != "" {
		os.RemoveAll(c.tmp)
	}
}

// measure runs s's benches once (one round of each).
func (c *check) measure(ctx context.Context, s *side) error {
	out := filepath.Join(c.tmp, "run.json")
	cmd := exec.CommandContext(ctx, s.bin, "-only", benches, "-rounds", "1", "-n", c.scale, "-json", out)
	cmd.Dir = s.dir // the sagatest figure runs go test in the tree
	cmd.Stdout, cmd.Stderr = io.Discard, c.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: jetsaga-bench: %w", s.name, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	var doc struct {
		Results []result `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: jetsaga-bench -json: %w", s.name, err)
	}
	run := map[string]result{}
	for _, r := range doc.Results {
		if r.Ratio > 0 || r.Pass != nil {
			run[r.key()] = r
		}
	}
	s.runs = append(s.runs, run)
	return nil
}

// report prints one line per figure and returns how many got worse.
func report(w io.Writer, base, tree *side, tolerance float64) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\t%s\t%s\tchange\ttarget\tallocs/op %s → tree\t\n", base.name, tree.name, strings.TrimPrefix(base.name, "base "))
	var keys []string
	for _, run := range tree.runs {
		for k := range run {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	worse := 0
	for _, k := range keys {
		b, t := figures(base, k), figures(tree, k)
		last := lastOf(tree, k)
		label := strings.ReplaceAll(k, "\x00", ": ")
		if len(t.ratios) == 0 {
			// A figure with a target and no ratio: its pass/fail.
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t%s %s\t\t\n", label, passes(b), passes(t), last.Target, passes(t))
			continue
		}
		change, flag := "", ""
		if len(b.ratios) > 0 {
			d := t.median()/b.median() - 1
			if last.lowerIsBetter() {
				d = -d // a smaller latency ratio is better
			}
			change = fmt.Sprintf("%+.1f%%", 100*d)
			if d < -tolerance {
				flag, worse = " worse", worse+1
			}
		}
		allocs := ""
		if b.allocs > 0 && t.allocs > 0 {
			allocs = fmt.Sprintf("%.0f → %.0f", b.allocs, t.allocs)
			if t.allocs > b.allocs*(1+tolerance) {
				allocs += " more"
				worse++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t%s %s\t%s\t\n", label, b, t, change, flag, last.Target, passes(t), allocs)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nEach cell: the median over the rounds of jetsaga's ratio to its raw nats.go baseline in the same run [lowest–highest];")
	fmt.Fprintln(w, "of rates higher is better, of latencies (cancel: p99 over p99) lower. change: tree against base, positive is better.")
	return worse
}

type figs struct {
	ratios []float64
	passed []bool
	allocs float64 // median
}

func figures(s *side, k string) figs {
	var f figs
	var allocs []float64
	for _, run := range s.runs {
		r, ok := run[k]
		if !ok {
			continue
		}
		if r.Ratio > 0 {
			f.ratios = append(f.ratios, r.Ratio)
		}
		if r.Pass != nil {
			f.passed = append(f.passed, *r.Pass)
		}
		if r.Jetsaga.Allocs > 0 {
			allocs = append(allocs, r.Jetsaga.Allocs)
		}
	}
	f.allocs = median(allocs)
	return f
}

func lastOf(s *side, k string) result {
	for _, run := range slices.Backward(s.runs) {
		if r, ok := run[k]; ok {
			return r
		}
	}
	return result{}
}

func (f figs) median() float64 { return median(f.ratios) }

func (f figs) String() string {
	if len(f.ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx [%.2f–%.2f]", f.median(), slices.Min(f.ratios), slices.Max(f.ratios))
}

// passes says how many of a side's runs met the figure's target.
func passes(f figs) string {
	if len(f.passed) == 0 {
		return ""
	}
	n := 0
	for _, p := range f.passed {
		if p {
			n++
		}
	}
	return fmt.Sprintf("(met %d/%d)", n, len(f.passed))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// output runs a command in dir and returns its standard output, trimmed.
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
