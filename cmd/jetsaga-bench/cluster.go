package main

// -cluster N: the same figures on one node (R1) and on an N-node JetStream
// cluster with every stream replicated three times (R3, or N if fewer),
// in one run, side by side: schedule rate (sequential and -conc
// publishers), saga steps/s (the P2 saga: load, commit, schedule a
// timeout, clear, ack) and timeout lateness. The nodes are child
// processes of this binary (embedded.StartCluster), on loopback.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// clusterNodes is -cluster: 0 runs the usual benches.
var clusterNodes int

func init() {
	embedded.RunChildIfRequested() // a node of -cluster
}

// clusterFigures are one setup's results.
type clusterFigures struct {
	label                string
	schedSeq, schedPar   float64 // msg/s
	steps                float64 // saga steps/s
	p50, p99, worst      time.Duration
	fired, due, tooEarly int
}

// clusterSetup is where a bench's servers run: one in-process server
// (startOne) or a cluster of child processes (startNodes).
type clusterSetup struct {
	label    string
	nodes    int // 1: one in-process server
	replicas int // of every stream, bucket and queue the benches create on it
	connect  func(opts ...nats.Option) (*nats.Conn, error)
	// serverCPU is the CPU time the servers in child processes have used
	// (nil: they run in this process, and processCPU covers them).
	serverCPU func() time.Duration
	close     func()
}

// replicasFor is the replication factor of the streams on a cluster of
// nodes nodes: 3, or nodes if fewer.
func replicasFor(nodes int) int { return max(1, min(3, nodes)) }

// startOne starts one embedded server in this process (R1).
func startOne() (clusterSetup, error) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		return clusterSetup{}, err
	}
	return clusterSetup{label: "1 node, R1", nodes: 1, replicas: 1, connect: srv.Connect, close: srv.Shutdown}, nil
}

// startNodes starts a cluster of nodes nats-servers, each a child
// process of this one (embedded.StartCluster).
func startNodes(ctx context.Context, nodes int) (clusterSetup, error) {
	c, err := embedded.StartCluster(ctx, embedded.ClusterOptions{Nodes: nodes})
	if err != nil {
		return clusterSetup{}, err
	}
	replicas := replicasFor(nodes)
	return clusterSetup{label: fmt.Sprintf("%d nodes, R%d", nodes, replicas), nodes: nodes, replicas: replicas,
		connect: c.Connect, serverCPU: childrenCPU(), close: func() { c.Close() }}, nil
}

func runCluster(ctx context.Context, cfg config, nodes int) error {
	start := time.Now()
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	scaled := func(n int) int { return max(1, int(float64(n)*cfg.scale)) }
	var results []clusterFigures
	for _, mk := range []func() (clusterSetup, error){
		startOne,
		func() (clusterSetup, error) { return startNodes(ctx, nodes) },
	} {
		s, err := mk()
		if err != nil {
			return err
		}
		progress("%s: started", s.label)
		f, err := clusterBench(ctx, s, cfg, scaled, progress)
		s.close()
		if err != nil {
			return fmt.Errorf("%s: %w", s.label, err)
		}
		results = append(results, f)
	}
	fmt.Printf("jetsaga-bench -cluster %d  %d schedules sequential, %d with %d publishers; %d saga steps (concurrency %d); %d timeouts over %v\n\n",
		nodes, scaled(2000), scaled(baseCount), cfg.conc, scaled(sagaSteps/2), sagaConc, scaled(2000), cfg.spread)
	fmt.Printf("%-28s", "")
	for _, r := range results {
		fmt.Printf("%22s", r.label)
	}
	fmt.Println()
	row := func(name string, cell func(clusterFigures) string) {
		fmt.Printf("%-28s", name)
		for _, r := range results {
			fmt.Printf("%22s", cell(r))
		}
		fmt.Println()
	}
	row("schedule, sequential", func(r clusterFigures) string { return fmtRate(r.schedSeq) })
	row(fmt.Sprintf("schedule, %d publishers", cfg.conc), func(r clusterFigures) string { return fmtRate(r.schedPar) })
	row("saga steps", func(r clusterFigures) string { return groupThousands(int64(r.steps+0.5)) + " steps/s" })
	row("lateness p50", func(r clusterFigures) string { return fmtDur(r.p50) })
	row("lateness p99", func(r clusterFigures) string { return fmtDur(r.p99) })
	row("lateness max", func(r clusterFigures) string { return fmtDur(r.worst) })
	row("timeouts fired / due", func(r clusterFigures) string { return fmt.Sprintf("%d / %d", r.fired, r.due) })
	row("fired early", func(r clusterFigures) string { return fmt.Sprint(r.tooEarly) })
	for _, r := range results {
		if r.fired != r.due || r.tooEarly > 0 {
			return fmt.Errorf("%s: %d of %d timeouts fired, %d early", r.label, r.fired, r.due, r.tooEarly)
		}
	}
	return nil
}

func clusterBench(ctx context.Context, s clusterSetup, cfg config, scaled func(int) int, progress func(string, ...any)) (clusterFigures, error) {
	f := clusterFigures{label: s.label}
	nc, err := s.connect()
	if err != nil {
		return f, err
	}
	defer nc.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := transport.NewJetStream(nc, transport.WithPrefix(benchPrefix), transport.WithLogger(logger))
	if err != nil {
		return f, err
	}
	defer b.Close()
	open := func(name string) (*transport.Queue, error) {
		if err := b.DeleteQueue(ctx, name); err != nil {
			return nil, err
		}
		return b.OpenQueue(ctx, transport.QueueConfig{Name: name, Replicas: s.replicas})
	}

	// Schedule rate: sequential, then cfg.conc publishers.
	q, err := open("cluster-sched")
	if err != nil {
		return f, err
	}
	far := time.Now().Add(time.Hour)
	n := scaled(2000)
	began := time.Now()
	for i := range n {
		if _, err := q.Schedule(ctx, jetMessage(fmt.Sprintf("s-%d", i)), far); err != nil {
			return f, err
		}
	}
	f.schedSeq = float64(n) / time.Since(began).Seconds()
	n = scaled(baseCount)
	began = time.Now()
	if err := parallel(cfg.conc, n, func(i int) error {
		_, err := q.Schedule(ctx, jetMessage(fmt.Sprintf("p-%d", i)), far)
		return err
	}); err != nil {
		return f, err
	}
	f.schedPar = float64(n) / time.Since(began).Seconds()
	b.DeleteQueue(ctx, "cluster-sched")
	progress("%s: schedule %s sequential, %s with %d publishers", s.label, fmtRate(f.schedSeq), fmtRate(f.schedPar), cfg.conc)

	// Saga steps/s.
	if f.steps, err = clusterSagaSteps(ctx, s, b, nc, scaled(sagaSteps/2)); err != nil {
		return f, fmt.Errorf("saga: %w", err)
	}
	progress("%s: %.0f saga steps/s", s.label, f.steps)

	// Lateness: timeouts spread over cfg.spread, received as they fire.
	q, err = open("cluster-late")
	if err != nil {
		return f, err
	}
	defer b.DeleteQueue(context.WithoutCancel(ctx), "cluster-late")
	n = scaled(2000)
	due := make(map[string]time.Time, n)
	first := time.Now().Add(time.Second)
	for i := range n {
		id := fmt.Sprintf("t-%d", i)
		due[id] = first.Add(cfg.spread * time.Duration(i) / time.Duration(n))
		if _, err := q.Schedule(ctx, jetMessage(id), due[id]); err != nil {
			return f, err
		}
	}
	f.due = n
	rctx, cancel := context.WithDeadline(ctx, first.Add(cfg.spread+30*time.Second))
	defer cancel()
	var late []time.Duration
	for f.fired < n {
		ds, err := q.Receive(rctx, 100)
		now := time.Now()
		if err != nil {
			break
		}
		for _, d := range ds {
			at, ok := due[d.MessageID]
			if !ok {
				continue
			}
			delete(due, d.MessageID)
			f.fired++
			if now.Before(at) || d.EnqueuedAt.Before(at) {
				f.tooEarly++
			}
			late = append(late, now.Sub(at))
			d.Complete(ctx)
		}
	}
	slices.Sort(late)
	if len(late) > 0 {
		f.p50, f.p99, f.worst = late[len(late)/2], late[len(late)*99/100], late[len(late)-1]
	}
	progress("%s: %d of %d timeouts fired, lateness p50 %v p99 %v max %v", s.label, f.fired, f.due, f.p50, f.p99, f.worst)
	return f, nil
}

// clusterSagaSteps pre-fills a queue with n ticks over sagaInstances
// instances and times a dispatcher (concurrency sagaConc) handling them.
func clusterSagaSteps(ctx context.Context, s clusterSetup, b *transport.Broker, nc *nats.Conn, n int) (float64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	bucket := "bench_cluster_sagas"
	js.DeleteKeyValue(ctx, bucket)
	defer js.DeleteKeyValue(context.WithoutCancel(ctx), bucket)
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: bucket, Replicas: s.replicas})
	if err != nil {
		return 0, err
	}
	qcfg := transport.QueueConfig{Name: "cluster-saga", Replicas: s.replicas}
	if err := b.DeleteQueue(ctx, qcfg.Name); err != nil {
		return 0, err
	}
	defer b.DeleteQueue(context.WithoutCancel(ctx), qcfg.Name)
	var done atomic.Int64
	finished := make(chan struct{})
	var once sync.Once
	d, err := saga.NewDispatcher(b, store, qcfg.Name, saga.WithSagas(counterSaga()), saga.WithQueueConfig(qcfg),
		saga.WithConcurrency(sagaConc), saga.WithLogger(slog.New(slog.DiscardHandler)),
		saga.WithHooks(saga.Hooks{StepDone: func(context.Context, saga.StepInfo, saga.StepResult) {
			if done.Add(1) == int64(n) {
				once.Do(func() { close(finished) })
			}
		}}))
	if err != nil {
		return 0, err
	}
	k := min(sagaInstances, n)
	if err := parallel(16, n, func(i int) error {
		_, err := d.Send(ctx, tickFor(i, k))
		return err
	}); err != nil {
		return 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	began := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- d.Run(rctx) }()
	select {
	case <-finished:
	case err := <-errc:
		return 0, fmt.Errorf("dispatcher stopped: %v", err)
	case <-time.After(sagaMaxDur):
		return 0, fmt.Errorf("%d of %d steps in %v", done.Load(), n, sagaMaxDur)
	}
	rate := float64(n) / time.Since(began).Seconds()
	cancel()
	<-errc
	return rate, nil
}
