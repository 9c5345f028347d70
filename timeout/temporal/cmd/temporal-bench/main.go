// Command temporal-bench measures the Temporal timeout engine beside the
// JetStream transport engine, in one run (P6): how many timeouts each
// schedules per second, and how late they fire (p50/p99/max; never
// early), on one embedded nats-server and one Temporal server.
//
//	go run ./cmd/temporal-bench                     # from timeout/temporal: a dev server, ~1 minute
//	go run ./cmd/temporal-bench -n 2000 -conc 32
//	go run ./cmd/temporal-bench -temporal 127.0.0.1:7233 -nats nats://127.0.0.1:4222
//
// Engines, in order (-engines):
//
//   - jetstream: timeout.Queue, JetStream message schedules;
//   - temporal: the engine of package temporal, one workflow per timeout
//     waiting on a durable timer (workflow.NewTimer), then the delivery
//     activity;
//   - temporal-startdelay: for comparison only, one workflow per
//     timeout started with a server-side StartDelay, which then sends the
//     message from an activity: the other way to wait that the engine
//     could have taken (see the package documentation for why it did not).
//
// Each engine schedules -n timeouts from -conc goroutines, due evenly
// over -spread starting -lead after the run begins (so that every
// schedule returns before its timeout is due), and a consumer receives
// them: lateness is the message's EnqueuedAt (the broker's clock, when
// it entered the queue) minus its due time. A timeout missing after
// -spread+-lead+30s is lost; one received before its due time is early.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"

	"github.com/nats-io/nats.go"
)

type config struct {
	n, conc, pollers      int
	spread, lead          time.Duration
	engines               []string
	temporalAddr, natsURL string
}

func main() {
	var c config
	var engines string
	flag.IntVar(&c.n, "n", 1000, "timeouts per engine")
	flag.IntVar(&c.conc, "conc", 16, "concurrent schedulers")
	flag.IntVar(&c.pollers, "pollers", 8, "Temporal worker pollers (workflow and activity tasks each)")
	flag.DurationVar(&c.spread, "spread", 10*time.Second, "due times spread over this long")
	flag.DurationVar(&c.lead, "lead", 0, "first due time after the start (default: enough for scheduling at 200/s)")
	flag.StringVar(&engines, "engines", "jetstream,temporal,temporal-startdelay", "engines to measure, in order")
	flag.StringVar(&c.temporalAddr, "temporal", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend host:port; empty starts a dev server")
	flag.StringVar(&c.natsURL, "nats", os.Getenv("NATS_URL"), "NATS URL; empty starts an embedded nats-server")
	flag.Parse()
	c.engines = strings.Split(engines, ",")
	if c.lead == 0 {
		c.lead = 2*time.Second + time.Duration(c.n)*time.Second/200
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-bench:", err)
		os.Exit(1)
	}
}

// result is one engine's figures.
type result struct {
	engine             string
	scheduled          int
	scheduleRate       float64 // per second
	p50, p99, max      time.Duration
	early, lost, dupes int
	scheduledLate      int // schedules that returned after their due time
}

func run(ctx context.Context, c config) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	fmt.Printf("temporal-bench: %d timeouts per engine from %d goroutines, due over %v starting +%v; %s, GOMAXPROCS %d\n",
		c.n, c.conc, c.spread, c.lead, runtime.Version(), runtime.GOMAXPROCS(0))

	natsURL := c.natsURL
	if natsURL == "" {
		srv, err := embedded.Start(embedded.Options{})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		natsURL = srv.ClientURL()
		fmt.Printf("embedded nats-server at %s\n", natsURL)
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	b, err := transport.NewJetStream(nc, transport.WithPrefix("TEMPORAL_BENCH"), transport.WithLogger(logger))
	if err != nil {
		return err
	}
	defer b.Close()

	addr := c.temporalAddr
	if addr == "" {
		srv, err := temporaltest.Start(ctx, temporaltest.Options{}, func(f string, a ...any) { fmt.Printf(f+"\n", a...) })
		if err != nil {
			return err
		}
		defer srv.Stop()
		addr = srv.HostPort()
		fmt.Printf("Temporal dev server (temporal CLI %s, SQLite in memory) at %s\n", temporaltest.CLIVersion, addr)
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: addr, Logger: tlog.NewStructuredLogger(logger)})
	if err != nil {
		return err
	}
	defer tc.Close()
	wopts := worker.Options{MaxConcurrentWorkflowTaskPollers: c.pollers, MaxConcurrentActivityTaskPollers: c.pollers}
	runID := time.Now().UnixNano() % 1e9

	var results []result
	for _, name := range c.engines {
		q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: fmt.Sprintf("bench-%s-%d", name, runID)})
		if err != nil {
			return err
		}
		tq := fmt.Sprintf("bench-%s-%d", name, runID)
		var s scheduler
		var w worker.Worker
		switch name {
		case "jetstream":
			tr := timeout.NewQueue(b)
			s = tr.Schedule
		case "temporal":
			e, err := temporal.New(tc, temporal.WithTaskQueue(tq), temporal.WithLogger(logger))
			if err != nil {
				return err
			}
			w = worker.New(tc, tq, wopts)
			if err := temporal.Register(w, b, temporal.WithTaskQueue(tq), temporal.WithLogger(logger)); err != nil {
				return err
			}
			s = e.Schedule
		case "temporal-startdelay":
			w = worker.New(tc, tq, wopts)
			w.RegisterWorkflowWithOptions(delayedWorkflow, workflow.RegisterOptions{Name: "bench.Delayed"})
			w.RegisterActivityWithOptions((&sender{b: b}).send, activity.RegisterOptions{Name: "bench.Send"})
			s = startDelayScheduler(tc, tq)
		default:
			return fmt.Errorf("unknown engine %q", name)
		}
		if w != nil {
			if err := w.Start(); err != nil {
				return err
			}
		}
		fmt.Printf("%s: scheduling...\n", name)
		r, err := measure(ctx, c, name, s, q)
		if w != nil {
			w.Stop()
		}
		b.DeleteQueue(context.WithoutCancel(ctx), q.Name())
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
	}

	fmt.Printf("\n%-20s %12s %10s %10s %10s %6s %6s %6s\n", "engine", "scheduled/s", "late p50", "late p99", "late max", "early", "lost", "dupes")
	for _, r := range results {
		fmt.Printf("%-20s %12.0f %10v %10v %10v %6d %6d %6d\n", r.engine, r.scheduleRate,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond), r.early, r.lost, r.dupes)
		if r.scheduledLate > 0 {
			fmt.Printf("  (%s: %d schedules returned after their due time; raise -lead)\n", r.engine, r.scheduledLate)
		}
	}
	for _, r := range results {
		if r.early > 0 || r.lost > 0 || r.dupes > 0 {
			return fmt.Errorf("%s: %d early, %d lost, %d duplicates", r.engine, r.early, r.lost, r.dupes)
		}
	}
	return nil
}

type scheduler func(ctx context.Context, t timeout.Timeout) (timeout.Ref, error)

// measure schedules c.n timeouts on s, due over c.spread from c.lead on,
// and receives them from q.
func measure(ctx context.Context, c config, name string, s scheduler, q *transport.Queue) (result, error) {
	r := result{engine: name}
	t0 := time.Now()
	first := t0.Add(c.lead)
	due := func(i int) time.Time { return first.Add(time.Duration(i) * c.spread / time.Duration(c.n)) }

	// Receive from the start, so that nothing waits in the queue.
	type arrival struct {
		i    int
		late time.Duration
	}
	arrivals := make(chan arrival, c.n)
	rctx, stopReceiving := context.WithCancel(ctx)
	defer stopReceiving()
	go func() {
		for {
			ds, err := q.Receive(rctx, 256)
			if err != nil {
				return
			}
			for _, d := range ds {
				i := int(binary.BigEndian.Uint64(d.Body))
				arrivals <- arrival{i, d.EnqueuedAt.Sub(due(i))}
				d.Complete(context.WithoutCancel(rctx))
			}
		}
	}()

	var next atomic.Int64
	var errOnce sync.Once
	var firstErr error
	var late atomic.Int64
	var wg sync.WaitGroup
	for range c.conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= c.n || ctx.Err() != nil {
					return
				}
				body := binary.BigEndian.AppendUint64(nil, uint64(i))
				_, err := s(ctx, timeout.Timeout{
					ID: fmt.Sprintf("b%d", i), Queue: q.Name(), At: due(i), Saga: "bench", Instance: fmt.Sprint(i % 100),
					Message: &transport.Message{Body: body},
				})
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				if time.Now().After(due(i)) {
					late.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if firstErr != nil {
		return r, firstErr
	}
	r.scheduled = c.n
	r.scheduleRate = float64(c.n) / elapsed.Seconds()
	r.scheduledLate = int(late.Load())
	fmt.Printf("%s: %d scheduled in %v (%.0f/s); waiting for them to fire until +%v\n", name, c.n, elapsed.Round(time.Millisecond), r.scheduleRate, (c.lead + c.spread).Round(time.Second))

	seen := make([]int, c.n)
	var lates []time.Duration
	deadline := time.NewTimer(time.Until(due(c.n-1)) + 30*time.Second)
	defer deadline.Stop()
	for got := 0; got < c.n; {
		select {
		case a := <-arrivals:
			seen[a.i]++
			if seen[a.i] > 1 {
				r.dupes++
				continue
			}
			got++
			if a.late < 0 {
				r.early++
			}
			lates = append(lates, a.late)
		case <-deadline.C:
			got = c.n
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	// Duplicates arriving a little later.
	settle := time.After(time.Second)
	for done := false; !done; {
		select {
		case a := <-arrivals:
			if seen[a.i]++; seen[a.i] > 1 {
				r.dupes++
			}
		case <-settle:
			done = true
		}
	}
	for _, n := range seen {
		if n == 0 {
			r.lost++
		}
	}
	slices.Sort(lates)
	if len(lates) > 0 {
		pct := func(p float64) time.Duration { return lates[min(len(lates)-1, int(p*float64(len(lates))))] }
		r.p50, r.p99, r.max = pct(0.50), pct(0.99), lates[len(lates)-1]
	}
	return r, nil
}

// startDelayScheduler starts one bench.Delayed workflow per timeout with
// a server-side StartDelay until its due time.
func startDelayScheduler(c client.Client, tq string) scheduler {
	return func(ctx context.Context, t timeout.Timeout) (timeout.Ref, error) {
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: "bench-delayed/" + t.Queue + "/" + t.ID, TaskQueue: tq,
			StartDelay:               max(time.Until(t.At), 0),
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		}, "bench.Delayed", sendInput{Queue: t.Queue, At: t.At, Body: t.Message.Body, ID: t.ID})
		return timeout.Ref("startdelay:" + t.ID), err
	}
}

type sendInput struct {
	Queue, ID string
	At        time.Time
	Body      []byte
}

// delayedWorkflow runs when its StartDelay is over and sends at once.
func delayedWorkflow(ctx workflow.Context, in sendInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	return workflow.ExecuteActivity(ctx, "bench.Send", in).Get(ctx, nil)
}

type sender struct{ b *transport.Broker }

func (s *sender) send(ctx context.Context, in sendInput) error {
	if wait := time.Until(in.At); wait > 0 { // as the engine's activity: never early by this clock
		time.Sleep(wait)
	}
	q, err := s.b.Queue(ctx, in.Queue)
	if err != nil {
		return err
	}
	_, err = q.Send(ctx, &transport.Message{Body: in.Body, MessageID: in.ID})
	return err
}
