// Command peers measures jetsaga beside the durable-timer systems a Go team
// would pick instead — River on PostgreSQL, DBOS Transact Go on PostgreSQL
// and SQLite, Temporal (the dev server) — and beside raw nats.go, the
// baseline measured in the same run, on six workloads:
//
//	(a) schedule N one-shot timers due over a window: schedule rate, handler
//	    lateness (handler start − due) p50/p99/max, early and lost counts;
//	(b) cancel with N pending: cancel latency p50/p99;
//	(c) a two-step saga/workflow with one timer: steps/s and CPU per step
//	    (this process and the system's servers);
//	(d) N timers pending: resident memory of each system's processes, the
//	    server's included (each system in a child process of its own);
//	(e) a two-step saga/workflow whose steps write business rows in the
//	    framework's own PostgreSQL transaction: jetsaga on pgstore (both
//	    modes) beside DBOS's transactional steps on the same server, and
//	    jetsaga on kvstore as the baseline, in interleaved rounds: steps/s
//	    and CPU per step;
//	(f) N recurring schedules firing every minute (not in the default
//	    run): occurrence lateness p50/p99, missing and doubled occurrences,
//	    peak resident memory of each system (in a child process) and its
//	    servers; jetsaga's timeout/schedule beside River's periodic jobs.
//
// It starts everything it needs on this machine: an embedded nats-server,
// PostgreSQL from the distribution's packages in a temporary directory
// (installed with apt-get when missing and run as root), the Temporal dev
// server that jetsaga's tests use (temporaltest). From the repository root:
//
//	go run ./benchmarks/peers                       # a few minutes on 2 cores
//	go run ./benchmarks/peers -pending 100000       # (d) at 100k pending
//	go run ./benchmarks/peers -only river,jetsaga -timers 10000
//	go run ./benchmarks/peers -workloads e          # (e) alone, about 2 minutes
//	go run ./benchmarks/peers -workloads f          # (f) alone, about 12 minutes
//
// It prints markdown tables; ratios to raw nats.go are what to read on a
// shared machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

type config struct {
	timers          int           // (a) timers
	window          time.Duration // (a) window the due times spread over
	grace           time.Duration // how long to wait past the last due time / start
	cancelPending   int           // (b) pending
	cancels         int           // (b) cancels measured
	sagaTime        time.Duration // (c) how long to start instances
	sagaWindow      int           // (c) instances in flight
	sagaDelay       time.Duration // (c) the timer between the steps
	pending         int           // (d)
	txTime          time.Duration // (e) how long each round starts instances
	txWindow        int           // (e) instances in flight
	txRounds        int           // (e) rounds, each system once a round
	txSecond        string        // (e) how jetsaga's step one leads to step two: message or timeout
	txPools         []int         // (e) PostgreSQL connections, and the dispatcher's concurrency: a row each
	txConcurrency   int           // (e) the dispatcher's concurrency; 0: the dispatcher's default (8), or the pool size if larger
	conc            int           // goroutines scheduling / starting
	only            []string
	workloads       string
	pgSync          bool
	lead            time.Duration // jetsaga saga's early activation
	schedules       int           // (f) recurring schedules
	scheduleMinutes int           // (f) minutes measured
	cpuProfile      string        // a CPU profile of the run, written to this file
	blockProfile    string        // a profile of where goroutines blocked (and on which mutexes), written to this file

	child       string // internal: the child's work
	childPeer   string
	pgURL       string
	temporalURL string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.child != "" {
		err = runChild(ctx, cfg)
	} else {
		err = run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		if errors.Is(err, errMissing) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.IntVar(&cfg.timers, "timers", 2000, "(a) timers due over -window")
	fs.DurationVar(&cfg.window, "window", 10*time.Second, "(a) the window the due times spread over")
	fs.DurationVar(&cfg.grace, "grace", 30*time.Second, "how long to wait for timers after the last due time, and for sagas after the last start")
	fs.IntVar(&cfg.cancelPending, "cancel-pending", 2000, "(b) timers pending, an hour away")
	fs.IntVar(&cfg.cancels, "cancels", 500, "(b) of them cancelled one at a time")
	fs.DurationVar(&cfg.sagaTime, "saga-time", 5*time.Second, "(c) how long to start instances")
	fs.IntVar(&cfg.sagaWindow, "saga-window", 2000, "(c) instances in flight")
	fs.DurationVar(&cfg.sagaDelay, "saga-delay", 100*time.Millisecond, "(c) the timer between the two steps")
	fs.IntVar(&cfg.pending, "pending", 10000, "(d) timers pending while memory is measured")
	fs.DurationVar(&cfg.txTime, "tx-time", 3*time.Second, "(e) how long each system starts instances in a round")
	fs.IntVar(&cfg.txWindow, "tx-window", 200, "(e) instances in flight")
	fs.IntVar(&cfg.txRounds, "tx-rounds", 3, "(e) rounds: every system once a round, the order rotated")
	fs.StringVar(&cfg.txSecond, "tx-second", "message", "(e) what starts jetsaga's second step: message (c.Send) or timeout (c.RequestTimeout(0, ...))")
	pools := fs.String("tx-pools", "4,20", "(e) comma-separated pool sizes, a row of each system at each: the connections of its pgxpool (pgxpool's default here is max(4, CPUs), DBOS's own 20)")
	fs.IntVar(&cfg.txConcurrency, "tx-concurrency", 0, "(e) the jetsaga dispatcher's concurrency (saga.WithConcurrency); 0: its default (8), or the pool size if that is larger")
	fs.IntVar(&cfg.conc, "conc", 16, "goroutines scheduling timers and starting sagas")
	only := fs.String("only", "", "comma-separated peers to run: "+strings.Join(peerKeys, ",")+" (raw always runs: it is the baseline)")
	fs.IntVar(&cfg.schedules, "schedules", 10000, "(f) recurring schedules, each every minute")
	fs.IntVar(&cfg.scheduleMinutes, "schedule-minutes", 2, "(f) minutes of occurrences measured, after set-up")
	fs.StringVar(&cfg.workloads, "workloads", "abcde", "workloads to run, of a (lateness), b (cancel), c (saga), d (pending memory), e (saga with transactional steps on PostgreSQL), f (recurring schedules, about 4 minutes a system; not in the default)")
	fs.BoolVar(&cfg.pgSync, "pg-sync", false, "run PostgreSQL with synchronous_commit=on (default off: a commit is acknowledged before its WAL is flushed, as JetStream acknowledges before it syncs)")
	fs.DurationVar(&cfg.lead, "lead", 300*time.Millisecond, "the early activation of the 'jetsaga saga, early activation' row")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the embedded nats-server and the systems in it) to this file")
	fs.StringVar(&cfg.blockProfile, "blockprofile", "", "write profiles of where goroutines blocked (file) and waited on mutexes (file.mutex) to this file")
	fs.StringVar(&cfg.child, "child", "", "internal: the work of a child process")
	fs.StringVar(&cfg.childPeer, "peer", "", "internal: the child's peer")
	fs.StringVar(&cfg.pgURL, "pg-url", "", "internal: the child's PostgreSQL server")
	fs.StringVar(&cfg.temporalURL, "temporal", "", "internal: the child's Temporal server")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.timers < 1 || cfg.cancelPending < 1 || cfg.cancels < 1 || cfg.sagaWindow < 1 || cfg.pending < 1 || cfg.conc < 1 || cfg.window <= 0 || cfg.sagaTime <= 0 ||
		cfg.txTime <= 0 || cfg.txWindow < 1 || cfg.txConcurrency < 0 || cfg.txRounds < 1 || cfg.schedules < 1 || cfg.scheduleMinutes < 1 {
		return cfg, fmt.Errorf("counts and durations must be positive")
	}
	for _, w := range cfg.workloads {
		if !strings.ContainsRune("abcdef", w) {
			return cfg, fmt.Errorf("-workloads %q: only a, b, c, d, e, f", cfg.workloads)
		}
	}
	if cfg.txSecond != "message" && cfg.txSecond != "timeout" {
		return cfg, fmt.Errorf("-tx-second %q: message or timeout", cfg.txSecond)
	}
	for f := range strings.SplitSeq(*pools, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 100 {
			return cfg, fmt.Errorf("-tx-pools %q: pool sizes are 1 to 100", *pools)
		}
		cfg.txPools = append(cfg.txPools, n)
	}
	for name := range strings.SplitSeq(*only, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(peerKeys, name) {
			return cfg, fmt.Errorf("-only: unknown peer %q (have %s)", name, strings.Join(peerKeys, ","))
		}
		cfg.only = append(cfg.only, name)
	}
	return cfg, nil
}

func (c config) runs(w byte) bool { return strings.IndexByte(c.workloads, w) >= 0 }

func run(ctx context.Context, cfg config) error {
	stopProfiles, err := startProfiles(cfg)
	if err != nil {
		return err
	}
	defer stopProfiles()
	e := newEnv(cfg)
	defer e.close()
	var results []result
	for _, key := range peerKeys {
		if !cfg.runs('a') && !cfg.runs('b') && !cfg.runs('c') && !cfg.runs('d') {
			break
		}
		if key != "raw" && len(cfg.only) > 0 && !slices.Contains(cfg.only, key) {
			continue
		}
		p, err := peerFor(ctx, e, key)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		results = append(results, measure(ctx, cfg, e, key, p))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	var tx []txResult
	if cfg.runs('e') {
		var err error
		if tx, err = runTx(ctx, cfg, e); err != nil && ctx.Err() != nil {
			return err
		} else if err != nil {
			return fmt.Errorf("(e): %w", err)
		}
	}
	var recurring []recurringResult
	if cfg.runs('f') {
		recurring = runRecurring(ctx, cfg, e)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printReport(os.Stdout, header(cfg, e), results)
	if tx != nil {
		printTx(os.Stdout, tx)
	}
	if recurring != nil {
		printRecurring(os.Stdout, recurring)
	}
	return nil
}

// measure runs every workload on p, recording errors in the result.
func measure(ctx context.Context, cfg config, e *env, key string, p peer) result {
	r := result{Key: key, Name: p.name, Config: p.config, Errors: map[string]string{}}
	rate := 0.0
	if p.open != nil && !p.noCancel && cfg.runs('b') {
		logf("%s: (b) %d pending, %d cancels", p.name, cfg.cancelPending, cfg.cancels)
		if c, err := runCancel(ctx, cfg, p); err != nil {
			r.Errors["b"] = err.Error()
		} else {
			r.Cancel, rate = &c, c.Rate
		}
	}
	if p.open != nil && cfg.runs('a') {
		if rate == 0 {
			rate = 200
		}
		logf("%s: (a) %d timers over %v", p.name, cfg.timers, cfg.window)
		if l, err := runLateness(ctx, cfg, p, rate); err != nil {
			r.Errors["a"] = err.Error()
		} else {
			r.Lateness = &l
		}
	}
	if p.saga != nil && cfg.runs('c') {
		logf("%s: (c) two-step saga, %d in flight for %v, timer %v", p.name, cfg.sagaWindow, cfg.sagaTime, cfg.sagaDelay)
		if s, err := runSaga(ctx, cfg, p); err != nil {
			r.Errors["c"] = err.Error()
		} else {
			r.Saga = &s
		}
	}
	if len(p.pending) > 0 && cfg.runs('d') {
		logf("%s: (d) %d pending, in a child process", p.name, cfg.pending)
		if m, err := runPending(ctx, cfg, e, p); err != nil {
			r.Errors["d"] = err.Error()
		} else {
			r.Pending = &m
		}
	}
	for w, err := range r.Errors {
		logf("%s: (%s) %s", p.name, w, err)
	}
	return r
}

// startProfiles starts the profiles cfg asks for; stop writes them.
func startProfiles(cfg config) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if cfg.blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		runtime.SetMutexProfileFraction(10)
		write := func(name, file string) {
			f, err := os.Create(file)
			if err != nil {
				logf("profile: %v", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
				logf("profile: %v", err)
			}
		}
		stops = append(stops, func() {
			write("block", cfg.blockProfile)
			write("mutex", cfg.blockProfile+".mutex")
		})
	}
	return stop, nil
}
