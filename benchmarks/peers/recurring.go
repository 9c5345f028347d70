package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// Workload (f): recurring schedules. N schedules, each firing every
// minute (cron "* * * * *" in UTC), for M whole minutes after the last
// one was created. Each system runs in a child process of its own (this
// binary with -child recurring), as in (d), so that the parent can read
// the resident memory of the system — the child, and the system's
// servers — while the occurrences fire; the child reports when each
// occurrence reached its handler.
//
//   - jetsaga: timeout/schedule on an embedded nats-server (in the child):
//     a Scheduler with its Run, the occurrences sent to a queue, received
//     100 at a time on 8 goroutines and completed up to 100 at once (River
//     runs 100 workers); the nominal time is the occurrence's
//     PropertyNominal. The child also logs how late its Run counted them
//     as sent (Hooks.Sent): planned ahead, an occurrence is sent by the
//     server at its time and counted at the Run's next tick, about half a
//     horizon later, so this is not a lateness.
//   - River: one periodic job per schedule (river.NewPeriodicJob with a
//     schedule returning the next whole minute, an ID each), the client's
//     workers as the handlers; the nominal time is the job's ScheduledAt,
//     which River's periodic enqueuer sets to the run time it computed.
//     "river-tuned" polls for jobs every 5 ms as in (a).
//
// Lateness is handler start − nominal time, over the occurrences whose
// nominal time is in the M measured minutes; "missing" are those never
// seen by the end (M minutes + -grace), "twice" those seen more than once.

// recurringKeys are the peers (f) runs, in order.
var recurringKeys = []string{"jetsaga", "river", "river-tuned"}

// recurringResult is one system's row of (f).
type recurringResult struct {
	Key, Name string
	Err       string `json:",omitempty"`

	Schedules, Minutes int
	Setup              float64 // seconds to create the schedules
	Want, Missing      int     // occurrences in the measured minutes; never seen
	Twice              int     // occurrences seen more than once
	OffMinute          int     // nominal times not on a whole minute (none expected)
	Lateness           latency
	Memory, Server     memory // peak while firing: the child and the servers; the servers' part
}

// runRecurring runs (f) on every selected system.
func runRecurring(ctx context.Context, cfg config, e *env) []recurringResult {
	var rs []recurringResult
	for _, key := range recurringKeys {
		if len(cfg.only) > 0 && !slices.Contains(cfg.only, key) {
			continue
		}
		logf("%s: (f) %d schedules every minute, %d minutes, in a child process", key, cfg.schedules, cfg.scheduleMinutes)
		r, err := runRecurringChild(ctx, cfg, e, key)
		r.Key, r.Name = key, recurringName(key)
		if err != nil {
			r.Err = err.Error()
			logf("%s: (f) %v", key, err)
		}
		rs = append(rs, r)
		if ctx.Err() != nil {
			break
		}
	}
	return rs
}

func recurringName(key string) string {
	switch key {
	case "river":
		return "River periodic jobs"
	case "river-tuned":
		return "River periodic jobs, tuned"
	}
	return "jetsaga schedules"
}

// runRecurringChild starts the child for key, samples the memory of the
// child and the servers every second until it reports, and returns its
// result with the peak memory.
func runRecurringChild(ctx context.Context, cfg config, e *env, key string) (recurringResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return recurringResult{}, err
	}
	args := []string{"-child", "recurring", "-peer", key,
		"-schedules", strconv.Itoa(cfg.schedules), "-schedule-minutes", strconv.Itoa(cfg.scheduleMinutes),
		"-grace", cfg.grace.String(), "-conc", strconv.Itoa(cfg.conc)}
	var servers func() []int
	if key != "jetsaga" {
		pg, err := e.ensurePostgres(ctx)
		if err != nil {
			return recurringResult{}, err
		}
		args = append(args, "-pg-url", pg.adminURL)
		servers = pg.processes
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return recurringResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return recurringResult{}, err
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var peak, peakServer memory
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var res recurringResult
	firing := false
	for res.Schedules == 0 {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return res, ctx.Err()
		case l, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				return res, fmt.Errorf("child ended without a result: %v", err)
			}
			if l == "firing" {
				firing = true
			} else if js, ok := strings.CutPrefix(l, "result "); ok {
				if err := json.Unmarshal([]byte(js), &res); err != nil {
					return res, fmt.Errorf("child's result: %w", err)
				}
			}
		case <-tick.C:
			if !firing {
				continue
			}
			pids := []int{cmd.Process.Pid}
			var srv memory
			if servers != nil {
				srv = memOf(servers())
				pids = append(pids, servers()...)
			}
			if m := memOf(pids); m.RSS > peak.RSS {
				peak, peakServer = m, srv
			}
		}
	}
	_ = cmd.Wait()
	res.Memory, res.Server = peak, peakServer
	return res, nil
}

// occurrenceLog records when each occurrence reached its handler.
type occurrenceLog struct {
	mu   sync.Mutex
	seen map[string]time.Time // schedule id @ nominal: first seen
	n    map[string]int
	off  int
	from time.Time // the measured minutes: [from, to)
	to   time.Time
	lat  []time.Duration
}

func (l *occurrenceLog) note(id int, nominal, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !nominal.Equal(nominal.Truncate(time.Minute)) {
		l.off++
	}
	if l.from.IsZero() || nominal.Before(l.from) || !nominal.Before(l.to) {
		return
	}
	k := strconv.Itoa(id) + "@" + nominal.UTC().Format(time.RFC3339)
	l.n[k]++
	if l.n[k] == 1 {
		l.seen[k] = at
		l.lat = append(l.lat, at.Sub(nominal))
	}
}

func (l *occurrenceLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// runRecurringSide is the child's work: it sets up the system's
// schedules, prints "firing", waits for the measured minutes (and the
// grace), then prints "result " and its result as JSON.
func runRecurringSide(ctx context.Context, cfg config, e *env) error {
	log := &occurrenceLog{seen: map[string]time.Time{}, n: map[string]int{}}
	start := time.Now()
	var stop func()
	var err error
	if cfg.childPeer == "jetsaga" {
		stop, err = recurringJetsaga(ctx, cfg, e, log.note)
	} else {
		stop, err = recurringRiver(ctx, cfg, e, cfg.childPeer == "river-tuned", log.note)
	}
	if err != nil {
		return err
	}
	defer stop()
	res := recurringResult{Schedules: cfg.schedules, Minutes: cfg.scheduleMinutes, Setup: time.Since(start).Seconds()}
	// Measure from the first whole minute at least 5 s after set-up.
	from := time.Now().Add(5 * time.Second).Truncate(time.Minute).Add(time.Minute)
	to := from.Add(time.Duration(cfg.scheduleMinutes) * time.Minute)
	log.mu.Lock()
	log.from, log.to = from, to
	log.mu.Unlock()
	res.Want = cfg.schedules * cfg.scheduleMinutes
	fmt.Println("firing")
	deadline := time.NewTimer(time.Until(to.Add(cfg.grace)))
	defer deadline.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
wait:
	for log.count() < res.Want {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			break wait
		case <-poll.C:
		}
	}
	// A moment more, for occurrences handled twice.
	waitCtx(ctx, 2*time.Second)
	log.mu.Lock()
	res.Missing = res.Want - len(log.seen)
	for _, n := range log.n {
		if n > 1 {
			res.Twice++
		}
	}
	res.OffMinute = log.off
	res.Lateness = summarize(log.lat)
	log.mu.Unlock()
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", b)
	return nil
}

// recurringJetsaga creates the schedules on a Scheduler of its own and
// handles the occurrences.
func recurringJetsaga(ctx context.Context, cfg config, e *env, note func(id int, nominal, at time.Time)) (func(), error) {
	nc, err := e.natsConnect()
	if err != nil {
		return nil, err
	}
	b, err := transport.NewJetStream(nc, transport.WithLogger(quietLogger()))
	if err != nil {
		nc.Close()
		return nil, err
	}
	var sentMu sync.Mutex
	var sent []time.Duration
	s, err := schedule.New(b, schedule.WithLogger(quietLogger()), schedule.WithHooks(schedule.Hooks{
		Sent: func(_ context.Context, p schedule.OccurrenceParams) {
			sentMu.Lock()
			sent = append(sent, time.Since(p.Nominal))
			sentMu.Unlock()
		},
	}))
	if err != nil {
		return nil, err
	}
	q, err := b.Queue(ctx, "f-occurrences")
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(rctx) })
	// Handlers as River's: up to 100 at once (8 receivers, each completing
	// its batch of up to 100 concurrently, the next receive waiting for
	// none of them but for the slots).
	slots := make(chan struct{}, riverWorkers)
	var enqMu sync.Mutex
	var enq []time.Duration // EnqueuedAt − nominal: the server's activation, apart from delivery
	for range 8 {
		wg.Go(func() {
			for rctx.Err() == nil {
				ds, err := q.Receive(rctx, 100)
				if err != nil {
					continue
				}
				for _, d := range ds {
					at := time.Now()
					id, _ := strconv.Atoi(string(d.Body))
					nominal, err := time.Parse(time.RFC3339Nano, d.Properties[schedule.PropertyNominal])
					if err == nil {
						note(id, nominal, at)
						enqMu.Lock()
						enq = append(enq, d.EnqueuedAt.Sub(nominal))
						enqMu.Unlock()
					}
					slots <- struct{}{}
					wg.Go(func() {
						defer func() { <-slots }()
						_ = d.Complete(rctx)
					})
				}
			}
		})
	}
	stop := func() {
		sentMu.Lock()
		l := summarize(sent)
		sentMu.Unlock()
		enqMu.Lock()
		a := summarize(enq)
		enqMu.Unlock()
		logf("jetsaga: %d occurrences activated (EnqueuedAt − nominal), p50 %v p99 %v max %v", a.Count, a.P50, a.P99, a.Max)
		logf("jetsaga: %d occurrences counted as sent by a Run (Hooks.Sent: a planned one at the Run's first tick after its time, the server having sent it then), p50 %v p99 %v max %v after their nominal time", l.Count, l.P50, l.P99, l.Max)
		cancel()
		wg.Wait()
		_ = b.Close()
		nc.Close()
	}
	err = parallel(ctx, cfg.conc, cfg.schedules, func(i int) error {
		return s.Create(ctx, schedule.Schedule{
			Name:   fmt.Sprintf("f%06d", i),
			Spec:   schedule.Spec{Cron: "* * * * *", Zone: "UTC"},
			Action: schedule.Action{Queue: "f-occurrences", Message: &transport.Message{Subject: "tick", Body: []byte(strconv.Itoa(i))}},
		})
	})
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// everyMinute is River's periodic schedule of a whole minute.
type everyMinute struct{}

func (everyMinute) Next(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }

type occurrenceArgs struct {
	ID int `json:"id"`
}

func (occurrenceArgs) Kind() string { return "occurrence" }

// recurringRiver starts a River client with one periodic job per
// schedule on a fresh database.
func recurringRiver(ctx context.Context, cfg config, e *env, tuned bool, note func(id int, nominal, at time.Time)) (func(), error) {
	pg, err := e.ensurePostgres(ctx)
	if err != nil {
		return nil, err
	}
	pool, driver, err := riverDatabase(ctx, pg, "riverperiodic")
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[occurrenceArgs]) error {
		note(job.Args.ID, job.ScheduledAt, time.Now())
		return nil
	}))
	periodic := make([]*river.PeriodicJob, cfg.schedules)
	for i := range periodic {
		periodic[i] = river.NewPeriodicJob(everyMinute{}, func() (river.JobArgs, *river.InsertOpts) {
			return occurrenceArgs{ID: i}, nil
		}, &river.PeriodicJobOpts{ID: fmt.Sprintf("f%06d", i)})
	}
	poll, cooldown := river.FetchPollIntervalDefault, river.FetchCooldownDefault
	if tuned {
		poll, cooldown = 5*time.Millisecond, time.Millisecond
	}
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverWorkers}},
		Workers:           workers,
		PeriodicJobs:      periodic,
		FetchPollInterval: poll,
		FetchCooldown:     cooldown,
		Logger:            quietLogger(),
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
		pool.Close()
	}, nil
}

// printRecurring prints (f)'s table.
func printRecurring(w io.Writer, rs []recurringResult) {
	var base time.Duration
	for _, r := range rs {
		if r.Key == "jetsaga" {
			base = r.Lateness.P99
		}
	}
	tableHead(w, "(f) recurring schedules: N schedules every minute, lateness of the occurrences (handler start − nominal time) over the measured minutes, peak resident memory while firing",
		"system", "schedules × minutes", "set-up", "lateness p50", "p99", "max", "p99 × jetsaga", "early", "missing", "twice", "RSS (system)", "of which servers")
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(w, "| %s | failed: %s |%s\n", r.Name, r.Err, strings.Repeat(" |", 10))
			continue
		}
		l := r.Lateness
		fmt.Fprintf(w, "| %s | %d × %d | %.1f s | %s | %s | %s | %s | %d | %d | %d | %s | %s |\n", r.Name, r.Schedules, r.Minutes, r.Setup,
			dur(l.P50), dur(l.P99), dur(l.Max), ratio(float64(l.P99), float64(base)), l.Negative, r.Missing, r.Twice, mib(r.Memory.RSS), mib(r.Server.RSS))
		if r.OffMinute > 0 {
			fmt.Fprintf(w, "\n%s: %d occurrences had a nominal time not on a whole minute.\n", r.Name, r.OffMinute)
		}
	}
	fmt.Fprintln(w)
}
