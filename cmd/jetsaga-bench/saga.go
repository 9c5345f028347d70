package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/timeout"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/transport"
)

// P2: saga steps through a saga.Dispatcher (kvstore on JetStream KV, the
// JetStream transport, the default timeout engine) against two
// hand-written nats.go loops: "raw" makes the calls of the first design
// (Fetch(1), KV Get, KV Create/Update, schedule, KV Update clearing the
// outbox, DoubleAck: the P2 target is 2× it), "raw-new" the calls the
// dispatcher makes now (Fetch(8), no Get while its cache holds the record
// at the revision it wrote, KV Create/Update, schedule, Ack without
// waiting; the outbox of the timeout stays until the next commit: the
// target is 0.9× it). saga-probe (sagaprobe.go) measures each of these
// changes one at a time.
//
// Each round pre-fills a fresh queue, untimed, with n messages spread
// round-robin over k instances (each instance's first message starts it),
// then times how long sagaConc concurrent workers take to handle them all.
// The handler increments a counter and requests one timeout an hour
// ahead. Nothing fires during the bench.
//
// The dispatcher runs as a whole (Run, timed from its start until the n-th
// StepDone hook), so it cannot be sliced into the few-millisecond steps of
// the other rate benches: the sides alternate by the round instead,
// rotating which goes first, and each round's ratio compares neighbours.
//
// The sides run under pprof labels side=jetsaga|raw|raw-new, inherited by their
// connection's and workers' goroutines, and phase=prefill on the untimed
// pre-fill: with -cpuprofile, `go tool pprof -tagfocus side=raw
// -tagignore phase=prefill` shows one side's client work. The embedded
// server's goroutines do not carry these labels (it labels its stream and
// consumer goroutines by name), so the server's share is what neither
// side's tag holds.

const (
	sagaSteps     = 10000 // messages per round and side, scaled by -n
	sagaInstances = 1000
	// sagaConc is every side's concurrency (saga.WithConcurrency). A step
	// of the first design waits on six server round trips in a row (pull,
	// get, put, publish, put, ack), the new one on two or three, so 2 cores
	// need a few dozen steps in flight to stay busy;
	// 32 keeps them busy and is still far below the instance count, so
	// steps on one instance (1000 messages apart in the queue) practically
	// never overlap.
	sagaConc   = 32
	sagaName   = "bench"
	sagaQueue  = "saga"
	jetBucket  = "bench_sagas"
	rawBucket  = "rawjs_sagas"
	sagaMaxDur = 2 * time.Minute // per round
)

// tick is the message that starts and then feeds an instance.
type tick struct {
	Instance string `json:"instance"`
	N        int    `json:"n"`
}

func (tick) MessageName() string { return "bench.Tick" }

// tickTimeout is the timeout payload; it never fires during the bench.
type tickTimeout struct{}

func (tickTimeout) MessageName() string { return "bench.TickTimeout" }

// counter is the saga's data.
type counter struct {
	Count int `json:"count"`
}

func counterSaga() *saga.Definition[counter] {
	def := saga.Define[counter](sagaName)
	saga.StartedBy(def, saga.By(func(m tick) string { return m.Instance }),
		func(ctx context.Context, c *saga.Context[counter], m tick) error {
			c.Data.Count++
			_, err := c.RequestTimeout(time.Hour, tickTimeout{})
			return err
		})
	saga.OnTimeout(def, func(context.Context, *saga.Context[counter], tickTimeout) error { return nil })
	return def
}

func tickFor(i, k int) tick { return tick{Instance: fmt.Sprintf("inst-%04d", i%k), N: i} }

// sagaRound is one timed round of one side: what it spent, and what it
// left behind to check that both sides did the same work.
type sagaRound struct {
	stats     laneStats
	cpu       time.Duration // process CPU time (client and embedded server) while timed
	conflicts int64
	recBytes  float64 // mean stored bytes per KV entry (value, key, overhead)
}

type sagaSide struct {
	label string
	round func(ctx context.Context, n, k int) (sagaRound, error)
}

func benchSaga(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(sagaSteps)
	k := min(sagaInstances, n)
	def := counterSaga()
	defer e.sagaCleanup(ctx)
	sides := []sagaSide{
		{"jetsaga", func(ctx context.Context, n, k int) (sagaRound, error) { return e.sagaJetRound(ctx, def, n, k) }},
		{"raw", e.sagaRawRound},
		{"raw-new", func(ctx context.Context, n, k int) (sagaRound, error) {
			return e.sagaProbeRound(ctx, newDesignCalls, n, k)
		}},
	}
	// On a cluster, also the dispatcher with its state in the queue
	// (queuestore): record and timeout in one atomic batch. Not on one
	// node, where nats-server stages each batch in a synced file store.
	if e.cfg.nodes > 1 {
		sides = append(sides, sagaSide{"jetsaga-queuestore", func(ctx context.Context, n, k int) (sagaRound, error) {
			return e.sagaJetRoundIn(ctx, def, n, k, 1, true)
		}})
	}
	run := func(s sagaSide, n int) (r sagaRound, err error) {
		pprof.Do(ctx, pprof.Labels("side", s.label), func(ctx context.Context) {
			r, err = s.round(ctx, n, k)
		})
		if err != nil {
			err = fmt.Errorf("%s: %w", s.label, err)
		}
		return r, err
	}
	e.progress("  %d steps on %d instances per round and side, concurrency %d", n, k, sagaConc)
	for _, s := range sides {
		if _, err := run(s, max(k, n/5)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	res := make([]abResult, len(sides))
	last := make([]sagaRound, len(sides))
	cpu := make([][]time.Duration, len(sides)) // per step, one per round
	util := make([][]float64, len(sides))      // of GOMAXPROCS CPUs
	conflicts := make([]int64, len(sides))
	for r := range e.cfg.rounds {
		msg := fmt.Sprintf("  saga round %d:", r+1)
		for j := range sides {
			i := (r + j) % len(sides)
			sr, err := run(sides[i], n)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", r+1, err)
			}
			res[i].add(sr.stats, n, e.cfg.rounds)
			last[i] = sr
			cpu[i] = append(cpu[i], sr.cpu/time.Duration(n))
			util[i] = append(util[i], sr.cpu.Seconds()/sr.stats.t.Seconds()/float64(runtime.GOMAXPROCS(0)))
			conflicts[i] += sr.conflicts
		}
		for i, s := range sides {
			msg += fmt.Sprintf(" %s %s", s.label, fmtRate(res[i].rates[r]))
		}
		e.progress("%s", msg)
	}
	e.progress("  mean KV entry: jetsaga %.0f B, raw %.0f B, raw-new %.0f B; conflicts retried: jetsaga %d, raw %d, raw-new %d",
		last[0].recBytes, last[1].recBytes, last[2].recBytes, conflicts[0], conflicts[1], conflicts[2])

	label := fmt.Sprintf("saga step (%d sagas, C=%d)", k, sagaConc)
	p2 := rateResult("saga", label+" vs first design's calls", res[0], res[1], 2)
	p2.Target += " (P2)"
	p2.RawName = "raw loop"
	p2.RawDesc = fmt.Sprintf("%d goroutines each looping Fetch(1), KV Get, KV Create/Update(rev), PublishMsg of the schedule, KV Update(rev), DoubleAck,"+
		" on streams and a bucket configured as jetsaga's, storing the same JSON record: the calls of the first design", sagaConc)
	p2new := rateResult("saga", label+" vs its own calls", res[0], res[2], 0.9)
	p2new.Target += " (P2)"
	p2new.RawName = "raw new loop"
	p2new.RawDesc = fmt.Sprintf("the raw loop making the dispatcher's present calls: Fetch(%d) and the steps one after the other, no KV Get while"+
		" a record cache of its own (shared by the goroutines) holds the record at the revision it wrote, KV Create/Update(rev), PublishMsg of the schedule"+
		" (no second KV Update: the outbox of a timeout stays until the next commit), Ack without waiting", newDesignCalls.batch)
	cpuCell := func(i int) *Figure {
		if cpu[i][0] == 0 {
			return &Figure{Text: "n/a"}
		}
		return &Figure{Text: fmt.Sprintf("%s (%.0f%% busy)", fmtDur(medianDur(cpu[i])), 100*median(util[i]))}
	}
	perStep := Result{
		Bench:   "saga-cpu",
		Label:   fmt.Sprintf("  CPU per step (busy %% of %d CPUs)", runtime.GOMAXPROCS(0)),
		Jetsaga: *cpuCell(0),
		Raw:     cpuCell(1),
		RawName: "CPU per step",
		RawDesc: "CPU time of " + e.cpuScope() + " over the steps done, and that time over the wall time of all CPUs",
	}
	const minRate = 10000
	abs := Result{
		Bench:   "saga-abs",
		Label:   "  saga steps/s, absolute",
		Jetsaga: Figure{Rate: p2.Jetsaga.Rate},
		Target:  ">= 10,000/s (P2)",
		Pass:    verdict(p2.Jetsaga.Rate >= minRate),
	}
	perStepNew := Result{
		Bench:   "saga-cpu",
		Label:   "  CPU per step vs the raw new loop",
		Jetsaga: *cpuCell(0),
		Raw:     cpuCell(2),
	}
	out := []Result{p2, p2new, perStep, perStepNew, abs}
	if len(sides) > 3 {
		qs := rateResult("saga", label+" state in the queue (queuestore) vs kvstore", res[3], res[0], 1.3)
		qs.RawName = "jetsaga with kvstore"
		qs.RawDesc = "the same dispatcher and saga with its state in an R3 KV bucket: a step writes the record, then schedules its timeout"
		out = append(out, qs, Result{
			Bench:   "saga-cpu",
			Label:   "  CPU per step, queuestore vs kvstore",
			Jetsaga: *cpuCell(3),
			Raw:     cpuCell(0),
		})
	}
	return append(out, benchThirtyDays(ctx, e)), nil
}

func medianDur(ds []time.Duration) time.Duration {
	fs := make([]float64, len(ds))
	for i, d := range ds {
		fs[i] = float64(d)
	}
	return time.Duration(median(fs))
}

// sagaLogger logs warnings and errors only, as the transport benches do.
func sagaLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// heapAllocs reads the process's cumulative heap allocations.
func heapAllocs() (objects, bytes uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// timed runs start, which begins the work, and waits for done or failed;
// it returns the time, heap allocations and CPU time (e.cpu: client and
// servers) in between.
func (e *env) timed(ctx context.Context, start func(), done, failed <-chan struct{}) (laneStats, time.Duration, error) {
	runtime.GC() // start from the same heap state
	o0, b0 := heapAllocs()
	c0 := e.cpu()
	t0 := time.Now()
	start()
	var err error
	select {
	case <-done:
	case <-failed:
		err = errors.New("failed")
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-time.After(sagaMaxDur):
		err = fmt.Errorf("not done after %v", sagaMaxDur)
	}
	t := time.Since(t0)
	cpu := e.cpu() - c0
	o1, b1 := heapAllocs()
	return laneStats{t: t, allocs: o1 - o0, bytes: b1 - b0}, cpu, err
}

// timedWorkers runs sagaConc workers and times them as timed does, until
// done; it waits for them to return and reports the first failure.
func (e *env) timedWorkers(ctx context.Context, worker func() error, done <-chan struct{}, fail *firstErr) (laneStats, time.Duration, error) {
	var wg sync.WaitGroup
	start := func() {
		for range sagaConc {
			wg.Go(func() {
				if err := worker(); err != nil {
					fail.set(err)
				}
			})
		}
	}
	st, cpu, err := e.timed(ctx, start, done, fail.failed)
	wg.Wait()
	return st, cpu, errors.Join(err, fail.get())
}

// sagaJetRound runs one round through a Dispatcher on its own connection,
// broker, store and a fresh queue and bucket.
func (e *env) sagaJetRound(ctx context.Context, def saga.Saga, n, k int, opts ...saga.Option) (sagaRound, error) {
	return e.sagaJetRoundN(ctx, def, n, k, 1, opts...)
}

// sagaJetRoundN is sagaJetRound with m dispatchers, each on its own
// connection, broker and store (as m processes would be), sharing the
// concurrency.
func (e *env) sagaJetRoundN(ctx context.Context, def saga.Saga, n, k, m int, opts ...saga.Option) (sagaRound, error) {
	return e.sagaJetRoundIn(ctx, def, n, k, m, false, opts...)
}

// sagaJetRoundIn is sagaJetRoundN with the state in the queue's state
// (saga/queuestore: a step's record and timeout in one atomic batch)
// rather than in a KV bucket, if inQueue.
func (e *env) sagaJetRoundIn(ctx context.Context, def saga.Saga, n, k, m int, inQueue bool, opts ...saga.Option) (sagaRound, error) {
	nc, err := e.servers.connect(nats.Name("jetsaga-bench-saga"))
	if err != nil {
		return sagaRound{}, err
	}
	defer nc.Close()
	logger := sagaLogger()
	b, err := transport.NewJetStream(nc, transport.WithPrefix(benchPrefix), transport.WithLogger(logger))
	if err != nil {
		return sagaRound{}, err
	}
	defer b.Close()
	if err := b.DeleteQueue(ctx, sagaQueue); err != nil {
		return sagaRound{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return sagaRound{}, err
	}
	if err := js.DeleteKeyValue(ctx, jetBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return sagaRound{}, err
	}
	storeOn := func(b *transport.Broker, js jetstream.JetStream) (saga.Store, error) {
		if inQueue {
			return queuestore.New(b, sagaQueue), nil
		}
		return kvstore.New(ctx, js, kvstore.Config{Bucket: jetBucket, Replicas: e.replicas()})
	}
	store, err := storeOn(b, js)
	if err != nil {
		return sagaRound{}, err
	}

	var (
		count, conflicts atomic.Int64
		done             = make(chan struct{})
		fail             = newFirstErr()
	)
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, r saga.StepResult) {
		conflicts.Add(int64(r.Conflicts))
		if r.Outcome != saga.Handled {
			fail.set(fmt.Errorf("step seq %d (%s/%s): %s: %v", info.Seq, info.Saga, info.ID, r.Outcome, r.Err))
			return
		}
		if count.Add(1) == int64(n) {
			close(done)
		}
	}}
	dopts := append([]saga.Option{saga.WithSagas(def), saga.WithQueueConfig(e.queueConfig(sagaQueue)), saga.WithConcurrency(max(1, sagaConc/m)),
		saga.WithLogger(logger), saga.WithHooks(hooks)}, opts...)
	d, err := saga.NewDispatcher(b, store, sagaQueue, dopts...)
	if err != nil {
		return sagaRound{}, err
	}
	ds := []*saga.Dispatcher{d}
	for range m - 1 {
		nc, err := e.servers.connect(nats.Name("jetsaga-bench-saga"))
		if err != nil {
			return sagaRound{}, err
		}
		defer nc.Close()
		b, err := transport.NewJetStream(nc, transport.WithPrefix(benchPrefix), transport.WithLogger(logger))
		if err != nil {
			return sagaRound{}, err
		}
		defer b.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return sagaRound{}, err
		}
		store, err := storeOn(b, js)
		if err != nil {
			return sagaRound{}, err
		}
		d, err := saga.NewDispatcher(b, store, sagaQueue, dopts...)
		if err != nil {
			return sagaRound{}, err
		}
		ds = append(ds, d)
	}
	// Send opens the queue, so Run starts on an open one.
	pprof.Do(ctx, pprof.Labels("phase", "prefill"), func(ctx context.Context) {
		err = parallel(e.cfg.conc, n, func(i int) error {
			_, err := d.Send(ctx, tickFor(i, k))
			return err
		})
	})
	if err != nil {
		return sagaRound{}, fmt.Errorf("pre-fill: %w", err)
	}
	// Send returns once a message is in the schedule stream; the queue
	// stream sources it a moment later. Wait until all are there, as the
	// raw sides' pre-fill (straight into their queue stream) has them.
	if err := e.awaitQueued(ctx, benchPrefix+"_Q_"+sagaQueue+"_0", n); err != nil {
		return sagaRound{}, err
	}

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, len(ds))
	st, cpu, err := e.timed(ctx, func() {
		for _, d := range ds {
			go func() { ran <- d.Run(runCtx) }()
		}
	}, done, fail.failed)
	stop()
	for range ds {
		select {
		case rerr := <-ran:
			err = errors.Join(err, rerr)
		case <-time.After(10 * time.Second):
			err = errors.Join(err, errors.New("dispatcher Run did not return within 10s of its context's end"))
		}
	}
	if err != nil {
		return sagaRound{}, errors.Join(err, fail.get())
	}
	bucket := jetBucket
	if inQueue {
		bucket = ""
	}
	rec, err := e.checkSagaRound(ctx, n, k, benchPrefix+"_S_"+sagaQueue+"_0", benchPrefix+".S."+sagaQueue+".0.*.s", benchPrefix+"_Q_"+sagaQueue+"_0", bucket)
	if err != nil {
		return sagaRound{}, err
	}
	return sagaRound{stats: st, cpu: cpu, conflicts: conflicts.Load(), recBytes: rec}, nil
}

// awaitQueued waits until stream holds n messages.
func (e *env) awaitQueued(ctx context.Context, stream string, n int) error {
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs >= uint64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s holds %d messages after the pre-fill, want %d", stream, info.State.Msgs, n)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// firstErr keeps the first error set and closes failed then.
type firstErr struct {
	once   sync.Once
	mu     sync.Mutex
	err    error
	failed chan struct{}
}

func newFirstErr() *firstErr { return &firstErr{failed: make(chan struct{})} }

func (f *firstErr) set(err error) {
	f.once.Do(func() {
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
		close(f.failed)
	})
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// checkSagaRound checks on the env's own connection that a side did all
// its work: n schedules pending (on subjects schedSubj of schedStream,
// which may hold other messages), the queue empty, k records; it returns
// the mean stored size of a KV entry.
func (e *env) checkSagaRound(ctx context.Context, n, k int, schedStream, schedSubj, queueStream, bucket string) (float64, error) {
	ss, err := e.js.Stream(ctx, schedStream)
	if err != nil {
		return 0, err
	}
	info, err := ss.Info(ctx, jetstream.WithSubjectFilter(schedSubj))
	if err != nil {
		return 0, err
	}
	var pending uint64
	for _, c := range info.State.Subjects {
		pending += c
	}
	if pending != uint64(n) {
		return 0, fmt.Errorf("stream %s holds %d schedules, want %d", schedStream, pending, n)
	}
	qs, err := e.js.Stream(ctx, queueStream)
	if err != nil {
		return 0, err
	}
	if got := qs.CachedInfo().State.Msgs; got != 0 {
		return 0, fmt.Errorf("stream %s holds %d messages, want 0", queueStream, got)
	}
	if bucket == "" { // queuestore: the records are in the schedule stream
		info, err := ss.Info(ctx, jetstream.WithSubjectFilter(benchPrefix+".V."+sagaQueue+".0.>"))
		if err != nil {
			return 0, err
		}
		if got := len(info.State.Subjects); got != k {
			return 0, fmt.Errorf("stream %s holds %d state records, want %d", schedStream, got, k)
		}
		return 0, nil
	}
	kv, err := e.js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	if st.Values() != uint64(k) {
		return 0, fmt.Errorf("bucket %s holds %d records, want %d", bucket, st.Values(), k)
	}
	return float64(st.Bytes()) / float64(k), nil
}

func (e *env) sagaCleanup(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if err := e.broker.DeleteQueue(ctx, sagaQueue); err != nil {
		e.progress("deleting queue %s: %v", sagaQueue, err)
	}
	for _, kind := range []string{"S", "Q"} {
		stream, _ := rawNames(kind, sagaQueue)
		e.dropStream(ctx, stream)
	}
	for _, b := range []string{jetBucket, rawBucket} {
		if err := e.js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			e.progress("deleting bucket %s: %v", b, err)
		}
	}
}

// The raw side. It stores the record the saga runtime stores
// (internal/record), so that both sides write entries of the same size
// (checkSagaRound reports them).

// Transport properties as saga/step.go names them, and the header prefix
// transport's encodeHeader puts before them.
const (
	propType   = "jetsaga-type"
	propSaga   = "jetsaga-saga"
	propSagaID = "jetsaga-saga-id"
	propToken  = "jetsaga-token"
	hdrProp    = "Jetsaga-P-"
)

// rawTickMsg is the message Dispatcher.Send publishes for tickFor(i, k).
func rawTickMsg(subject string, i, k int) (*nats.Msg, error) {
	b, err := json.Marshal(tickFor(i, k))
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: subject, Data: b, Header: nats.Header{
		hdrContentType:     {contentType},
		hdrProp + propType: {tick{}.MessageName()},
	}}, nil
}

// rawTimeoutMsg is the schedule message Queue.Schedule publishes for the
// timeout in env, due at `at`, on schedule subjects under prefix.
func rawTimeoutMsg(prefix string, env *record.Envelope, at time.Time) *nats.Msg {
	due := at.UTC().Format(time.RFC3339Nano)
	h := nats.Header{
		hdrMessageID:           {env.ID},
		hdrContentType:         {env.ContentType},
		hdrScheduledAt:         {due},
		hdrProp + propType:     {env.Type},
		jetstream.MsgIDHeader:  {env.ID},
		"Nats-Schedule":        {"@at " + due},
		"Nats-Schedule-Target": {prefix + ".f.m"},
	}
	for k, v := range env.Properties {
		h[hdrProp+k] = []string{v}
	}
	return &nats.Msg{Subject: prefix + ".s." + nuid.Next(), Data: env.Body, Header: h}
}

// sagaRawRound runs one round of the hand-written loop on its own
// connection, on fresh streams and a fresh bucket.
// rawSaga is the raw side's set-up of a round: the two streams and the
// consumer of a queue laid out as the transport lays it out, a fresh state
// bucket, and the pre-filled ticks.
type rawSaga struct {
	js                       jetstream.JetStream
	cons                     jetstream.Consumer
	kv                       jetstream.KeyValue
	schedStream, queueStream string
	sPrefix, qPrefix         string
}

// setUpRawSaga prepares a raw round on nc: streams, consumer and bucket,
// then (untimed, labelled phase=prefill) n ticks over k instances.
func (e *env) setUpRawSaga(ctx context.Context, nc *nats.Conn, n, k int, opts ...jetstream.JetStreamOpt) (*rawSaga, error) {
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		return nil, err
	}
	r := &rawSaga{js: js}
	r.schedStream, r.sPrefix = rawNames("S", sagaQueue)
	r.queueStream, r.qPrefix = rawNames("Q", sagaQueue)
	if _, err := e.rawScheduleStream(ctx, r.schedStream, r.sPrefix); err != nil {
		return nil, err
	}
	if err := e.rawSourcingStream(ctx, r.queueStream, r.qPrefix, r.schedStream, r.sPrefix); err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, r.queueStream)
	if err != nil {
		return nil, err
	}
	if r.cons, err = s.CreateOrUpdateConsumer(ctx, recvConsumer(r.qPrefix+".m")); err != nil {
		return nil, err
	}
	if err := js.DeleteKeyValue(ctx, rawBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	if r.kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: rawBucket, Description: "raw saga state", History: 1, Storage: jetstream.FileStorage, Replicas: e.replicas(),
	}); err != nil {
		return nil, err
	}
	pprof.Do(ctx, pprof.Labels("phase", "prefill"), func(ctx context.Context) {
		err = parallel(e.cfg.conc, n, func(i int) error {
			msg, err := rawTickMsg(r.qPrefix+".m", i, k)
			if err == nil {
				_, err = js.PublishMsg(ctx, msg)
			}
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("pre-fill: %w", err)
	}
	return r, nil
}

func (e *env) sagaRawRound(ctx context.Context, n, k int) (sagaRound, error) {
	nc, err := e.servers.connect(nats.Name("jetsaga-bench-saga-raw"))
	if err != nil {
		return sagaRound{}, err
	}
	defer nc.Close()
	r, err := e.setUpRawSaga(ctx, nc, n, k)
	if err != nil {
		return sagaRound{}, err
	}
	js, cons, kv, sPrefix := r.js, r.cons, r.kv, r.sPrefix
	schedStream, queueStream := r.schedStream, r.queueStream

	var (
		claimed, count, conflicts atomic.Int64
		done                      = make(chan struct{})
		fail                      = newFirstErr()
	)
	worker := func() error {
		// Each worker claims a message before it pulls one, so that exactly
		// n pulls are made and none is left waiting at the end.
		for claimed.Add(1) <= int64(n) && fail.get() == nil {
			b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			got := 0
			for m := range b.Messages() {
				got++
				c, err := rawSagaStep(ctx, js, kv, sPrefix, m)
				conflicts.Add(int64(c))
				if err != nil {
					return err
				}
				if count.Add(1) == int64(n) {
					close(done)
				}
			}
			if err := b.Error(); err != nil {
				return err
			}
			if got == 0 {
				return errors.New("fetch returned no message")
			}
		}
		return nil
	}
	st, cpu, err := e.timedWorkers(ctx, worker, done, fail)
	if err != nil {
		return sagaRound{}, err
	}
	rec, err := e.checkSagaRound(ctx, n, k, schedStream, sPrefix+".s.*", queueStream, rawBucket)
	if err != nil {
		return sagaRound{}, err
	}
	return sagaRound{stats: st, cpu: cpu, conflicts: conflicts.Load(), recBytes: rec}, nil
}

// rawSagaStep is one saga step by hand: load the record, count, commit it
// with the timeout in its outbox, schedule the timeout, clear the outbox,
// ack. It returns the number of conflicts it retried.
func rawSagaStep(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, sPrefix string, m jetstream.Msg) (int, error) {
	md, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	var t tick
	if err := json.Unmarshal(m.Data(), &t); err != nil {
		return 0, err
	}
	key := sagaName + "." + base64.RawURLEncoding.EncodeToString([]byte(t.Instance))
	// The identity the dispatcher gives a message without a MessageID
	// (saga/dispatcher.go, anonymousIdentity).
	identity := "seq:" + sagaQueue + ":" + strconv.FormatUint(md.Sequence.Stream, 10) + ":" + strconv.FormatInt(md.Timestamp.UnixNano(), 10)
	for conflicts := 0; ; conflicts++ {
		var rec record.Record
		var rev uint64
		entry, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return conflicts, err
		default:
			if err := json.Unmarshal(entry.Value(), &rec); err != nil {
				return conflicts, err
			}
			rev = entry.Revision()
		}
		digest := record.InboxDigest(identity)
		if slices.Contains(rec.Inbox, digest) {
			return conflicts, m.DoubleAck(ctx)
		}
		now := time.Now()
		if rev == 0 {
			rec.Started, rec.Originator = now, &record.Address{}
		}
		var data counter
		if len(rec.JSONData) > 0 {
			if err := json.Unmarshal(rec.JSONData, &data); err != nil {
				return conflicts, err
			}
		}
		data.Count++
		if rec.JSONData, err = json.Marshal(&data); err != nil {
			return conflicts, err
		}
		rec.Updated = now
		// A unique 32-character token, as long as the dispatcher's.
		token := fmt.Sprintf("%s%010d", nuid.Next(), md.Sequence.Stream%1e10)
		at := now.Add(time.Hour)
		env := &record.Envelope{ID: token, Type: tickTimeout{}.MessageName(), Body: []byte("{}"), ContentType: contentType,
			Properties: map[string]string{propSaga: sagaName, propSagaID: t.Instance, propToken: token}}
		if rec.Timeouts == nil {
			rec.Timeouts = make(map[string]record.Timeout)
		}
		rec.Timeouts[token] = record.Timeout{Type: env.Type, At: at}
		if rec.Inbox = append(rec.Inbox, digest); len(rec.Inbox) > 128 {
			rec.Inbox = rec.Inbox[len(rec.Inbox)-128:]
		}
		rec.Outbox = []record.Effect{{Kind: "schedule", Queue: sagaQueue, Msg: env, At: at, Token: token}}
		b, err := json.Marshal(&rec)
		if err != nil {
			return conflicts, err
		}
		if rev == 0 {
			rev, err = kv.Create(ctx, key, b)
		} else {
			rev, err = kv.Update(ctx, key, b, rev)
		}
		if isKVConflict(err) {
			continue
		}
		if err != nil {
			return conflicts, err
		}
		ack, err := js.PublishMsg(ctx, rawTimeoutMsg(sPrefix, env, at))
		if err != nil {
			return conflicts, err
		}
		rec.Timeouts[token] = record.Timeout{Type: env.Type, At: at,
			Ref: timeout.Ref("queue:" + sagaQueue + ":" + strconv.FormatUint(ack.Sequence|transport.ScheduledBit, 10))}
		rec.Outbox = nil
		if b, err = json.Marshal(&rec); err != nil {
			return conflicts, err
		}
		// As the dispatcher's flush: a conflict here means someone else
		// already finished this record.
		if _, err := kv.Update(ctx, key, b, rev); err != nil && !isKVConflict(err) {
			return conflicts, err
		}
		return conflicts, m.DoubleAck(ctx)
	}
}

func isKVConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
