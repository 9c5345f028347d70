// Command jetsaga-bench measures the JetStream transport against raw
// nats.go doing the same work, in one run on one embedded nats-server, and
// prints each figure beside its baseline with the ratio and the target
// the project sets itself (P1–P8, printed beside each figure). Absolute figures vary from machine to
// machine and run to run; the ratios are what to read.
//
//	go run ./cmd/jetsaga-bench                      # everything, ~1 minute
//	go run ./cmd/jetsaga-bench -only schedule,cancel
//	go run ./cmd/jetsaga-bench -n 0.2               # a quick smoke run
//	go run ./cmd/jetsaga-bench -only million        # 1M pending (P4, P7), opt-in, minutes
//	go run ./cmd/jetsaga-bench -timeouts -svg .     # issue 11's figures: lateness, cancel, million; charts
//	go run ./cmd/jetsaga-bench -timeouts -quick     # the same at 1/10 scale, a few minutes
//	go run ./cmd/jetsaga-bench -only lateness -lead 400ms # also a round of saga timeouts activated 400 ms early
//	go run ./cmd/jetsaga-bench -only topic          # topic send with 1, 4, 16 subscriptions
//	go run ./cmd/jetsaga-bench -only counts         # Counts with 100k schedules pending, opt-in
//	go run ./cmd/jetsaga-bench -json out.json -cpuprofile cpu.out
//	go run ./cmd/jetsaga-bench -only million -n 0.25 -burstprofile burst.out  # CPU profiles of the burst, each side
//	go run ./cmd/jetsaga-bench -only shards -n 0.25 # schedule shards beside raw with 1 and K streams (BENCHMARKS.md)
//	go run ./cmd/jetsaga-bench -cluster 3            # one node beside a 3-node cluster (R3)
//	go run ./cmd/jetsaga-bench -nodes 3 -only saga   # the saga benches on a 3-node cluster, everything R3 (also noisy)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
)

// bench is one family of figures.
type bench struct {
	name string
	desc string
	run  func(ctx context.Context, e *env) ([]Result, error)
}

var benches = []bench{
	{"schedule", "Queue.Schedule vs PublishMsg of the same schedule message, sequential", benchScheduleSeq},
	{"schedule-par", "the same with -conc concurrent publishers", benchSchedulePar},
	{"send", "Queue.Send vs PublishMsg to a work-queue stream", benchSend},
	{"receive", "Queue.Receive(100)+Complete vs Fetch(100)+DoubleAck", benchReceive},
	{"lateness", "firing lateness of timeouts spread over -spread", benchLateness},
	{"cancel", "Queue.Cancel latency vs DeleteMsg and vs the same guarded purge", benchCancel},
	{"saga", "saga.Dispatcher steps vs a raw loop of the same NATS calls (P2); sagatest 30-day scenario (P5)", benchSaga},
	{"topic", "Topic.Send with 1, 4 and 16 subscriptions vs PublishMsg to a work-queue stream", benchTopic},
}

// optInBenches run only when -only names them: they take minutes.
var optInBenches = []bench{
	{"million", "1M × -n pending timeouts due within -spread, each side in its own process: schedule rate, RSS, cancel latency, burst drain (P4, P7)", benchMillion},
	{"counts", "Queue.Counts with 100k × -n schedules pending vs StreamInfo with a subject filter", benchCounts},
	{"noisy", "the noisy neighbour (issues 36, 47): tenant A's 100k × -n timeouts due at one instant, ten tenants' 1,000 one every 10 ms from then, on one queue, on the default and the fair layout: each group's lateness, the others' p99 by second; and the quiet hour (-noisy-quiet)", benchNoisy},
	{"shards", "the million bench's burst on schedule shards (-shards K: K schedule streams sourced into one queue stream) beside raw with 1 and K streams and jetsaga, each side in its own process, -shards-rounds rounds (issue 25)", benchShards},
}

func allBenches() []bench { return slices.Concat(benches, optInBenches) }

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "jetsaga-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "jetsaga-bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("jetsaga-bench", flag.ContinueOnError)
	fs.Float64Var(&cfg.scale, "n", 1, "scale factor for every message count (1: 5000 per round and side, 10000 timeouts, 2000 cancels)")
	fs.IntVar(&cfg.rounds, "rounds", 5, "measured rounds of the rate benches; the median is reported")
	fs.IntVar(&cfg.conc, "conc", 8, "concurrent publishers for schedule-par")
	fs.DurationVar(&cfg.spread, "spread", defaultSpread, "time over which the lateness bench spreads its due times")
	fs.DurationVar(&cfg.lead, "lead", 0, "lateness bench: also a saga round whose engine has this early activation (timeout.WithEarlyActivation); the default options' lead is timeout.DefaultEarlyActivation")
	only := fs.String("only", "", "comma-separated benches to run: "+benchNames()+" (million only when named)")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the results as JSON to this file (- for stdout)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the benches to this file (the million bench's child processes: to this file .raw and .jetsaga)")
	fs.StringVar(&cfg.memProfile, "memprofile", "", "million bench: write heap profiles of the child processes, with all pending and at the end, to this file .raw/.jetsaga .pending/.end")
	fs.StringVar(&cfg.burstProfile, "burstprofile", "", "million bench: write CPU profiles of the child processes during the burst alone (from the end of the cancels to the last receipt) to this file .raw and .jetsaga")
	fs.StringVar(&cfg.svgDir, "svg", "", "write SVG charts (lateness.svg: lateness distribution; burst.svg: the million bench's drain) to this directory")
	fs.IntVar(&cfg.noisyKeyLimit, "noisy-key-limit", 4, "noisy bench, saga level: the fair run's saga.WithKeyLimit (0: none)")
	fs.StringVar(&cfg.noisyLevels, "noisy-levels", "saga,transport", "noisy bench: the levels to run, comma-separated: saga (handler lateness through a dispatcher, the issue's target), transport (receipt lateness, no early activation)")
	fs.IntVar(&cfg.noisyConcurrency, "noisy-concurrency", 0, "noisy bench, saga level: the fair run's saga.WithConcurrency (0: the default, 8)")
	fs.BoolVar(&cfg.noisyQuiet, "noisy-quiet", true, "noisy bench: also the quiet hour (3,000 timeouts over 30 s, no burst) on the default and the fair layout: CPU and handler lateness")
	fs.IntVar(&cfg.noisyParts, "noisy-partitions", 11, "noisy bench: partitions of the fair run's queue, tenant A alone in one; 1: no fair run (see noisy.go)")
	fs.IntVar(&cfg.millionParts, "million-partitions", 1, "partitions of the million bench's jetsaga queue")
	fs.DurationVar(&cfg.millionLead, "million-lead", 0, "million bench: time from the estimated end of the scheduling to the first due time (default 20s × -n, at least 5s); schedules older than 10s when they fire meet nats-server's cache expiry (BENCHMARKS.md)")
	fs.DurationVar(&cfg.millionSettle, "million-settle", 0, "million bench: wait this long after the scheduling before cancelling (the first due time moves as much later); after 10s unused nats-server drops a message block's cache, so the first cancels then meet cold blocks (BENCHMARKS.md)")
	fs.BoolVar(&cfg.millionNoWait, "million-complete-nowait", false, "million bench: jetsaga's receivers complete with CompleteNoWait (an ack without reply, as raw's receiver and as the saga dispatcher mostly does) instead of Complete")
	shards := fs.String("shards", "2,4", "shards bench: the shard counts K to measure, comma-separated (1-"+strconv.Itoa(maxShards)+")")
	fs.IntVar(&cfg.shardRounds, "shards-rounds", 1, "shards bench: rounds, each running every side once, in the opposite order to the round before")
	shardOnly := fs.String("shards-sides", "", "shards bench: only these sides besides raw, comma-separated (streamsK, shardsK, jetsaga; default all)")
	quick := fs.Bool("quick", false, "a quick run: -n 0.1 and 2 rounds unless set")
	timeouts := fs.Bool("timeouts", false, "run the timeout benches of P3, P4 and P7: lateness, cancel, million")
	fs.StringVar(&cfg.child, "child", "", "internal: run as a child process of the million bench")
	fs.IntVar(&clusterNodes, "cluster", 0, "instead of the benches: schedule rate, saga steps/s and lateness on one node beside a cluster of this many nodes (R3)")
	fs.IntVar(&cfg.nodes, "nodes", 1, "run the saga benches ("+strings.Join(clusterBenches, ",")+") on a cluster of this many nodes (child processes), every stream, bucket and queue replicated 3 times (or this many if fewer)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["n"] {
			cfg.scale = 0.1
		}
		if !set["rounds"] {
			cfg.rounds = 2
		}
	}
	if *timeouts {
		*only += ",lateness,cancel,million"
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.scale <= 0 || cfg.rounds < 1 || cfg.conc < 1 || cfg.spread <= 0 || cfg.millionParts < 1 || cfg.lead < 0 {
		return cfg, fmt.Errorf("-n, -rounds, -conc, -spread and -million-partitions must be positive, -lead not negative")
	}
	var err error
	if cfg.shardCounts, err = parseShardCounts(*shards); err != nil {
		return cfg, err
	}
	if cfg.shardRounds < 1 {
		return cfg, fmt.Errorf("-shards-rounds %d: must be at least 1", cfg.shardRounds)
	}
	for side := range strings.SplitSeq(*shardOnly, ",") {
		if side = strings.TrimSpace(side); side != "" {
			if !slices.Contains(shardSides(cfg.shardCounts), side) {
				return cfg, fmt.Errorf("-shards-sides: unknown side %q (have %s)", side, strings.Join(shardSides(cfg.shardCounts), ","))
			}
			cfg.shardSides = append(cfg.shardSides, side)
		}
	}
	if cfg.millionSettle < 0 {
		return cfg, fmt.Errorf("-million-settle %v: must not be negative", cfg.millionSettle)
	}
	for _, name := range strings.Split(*only, ",") {
		if name = strings.TrimSpace(name); name == "" || slices.Contains(cfg.only, name) {
			continue
		}
		if !slices.ContainsFunc(allBenches(), func(b bench) bool { return b.name == name }) {
			return cfg, fmt.Errorf("-only: unknown bench %q (have %s)", name, benchNames())
		}
		cfg.only = append(cfg.only, name)
	}
	if err := checkNodes(cfg, set); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// clusterBenches are the benches that -nodes runs on a cluster: every
// stream, bucket and queue they create takes env.replicas.
var clusterBenches = []string{"saga", "saga-probe", "saga-cache", "noisy"}

// checkNodes refuses -nodes where it means nothing: the other benches
// create their streams unreplicated, the million bench starts servers of
// its own, and -cluster sets up its own one node and cluster.
func checkNodes(cfg config, set map[string]bool) error {
	switch {
	case cfg.nodes < 1:
		return fmt.Errorf("-nodes %d: must be at least 1", cfg.nodes)
	case cfg.nodes == 1:
		return nil
	case clusterNodes > 0:
		return errors.New("-nodes and -cluster exclude each other: -cluster runs one node beside its own cluster")
	case set["child"]:
		return errors.New("-nodes: not for a child process")
	case len(cfg.only) == 0:
		return fmt.Errorf("-nodes %d runs only the saga benches on a cluster: name them with -only (%s)", cfg.nodes, strings.Join(clusterBenches, ","))
	}
	for _, name := range cfg.only {
		if !slices.Contains(clusterBenches, name) {
			return fmt.Errorf("-nodes %d: bench %q does not run on a cluster (only %s do)", cfg.nodes, name, strings.Join(clusterBenches, ","))
		}
	}
	return nil
}

func benchNames() string {
	all := allBenches()
	names := make([]string, len(all))
	for i, b := range all {
		names[i] = b.name
	}
	return strings.Join(names, ",")
}

func run(ctx context.Context, cfg config) error {
	if cfg.child != "" {
		return runChild(ctx, cfg)
	}
	if clusterNodes > 0 {
		return runCluster(ctx, cfg, clusterNodes)
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.close()
	printHeader(os.Stdout, e)

	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}

	var results []Result
	for _, b := range allBenches() {
		if !slices.Contains(cfg.only, b.name) && (len(cfg.only) > 0 || slices.ContainsFunc(optInBenches, func(o bench) bool { return o.name == b.name })) {
			continue
		}
		e.progress("%s: %s", b.name, b.desc)
		rs, err := b.run(ctx, e)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		results = append(results, rs...)
	}
	printTable(os.Stdout, results, e.allocScope())
	if cfg.svgDir != "" {
		if err := e.charts.write(cfg.svgDir); err != nil {
			return err
		}
	}
	if cfg.jsonPath != "" {
		return writeJSON(cfg.jsonPath, e, results)
	}
	return nil
}
