package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The index benchmarks' saga: each tick starts or feeds an instance and
// counts; with indexes, the instance is indexed by its key (unique) and
// its group (not unique: its key but the last digit, ten instances a
// value). Neither changes after the start.
type ixCounter struct {
	Count      int
	Key, Group string
}

func ixCounterSaga(indexed bool) *saga.Definition[ixCounter] {
	def := saga.Define[ixCounter]("ixcounter")
	if indexed {
		saga.Index(def, "key", func(c ixCounter) string { return c.Key }, saga.Unique())
		saga.Index(def, "group", func(c ixCounter) string { return c.Group })
	}
	saga.StartedBy(def, saga.By(func(m tick) string { return m.Instance }),
		func(_ context.Context, c *saga.Context[ixCounter], m tick) error {
			c.Data.Count++
			c.Data.Key, c.Data.Group = m.Instance, m.Instance[:len(m.Instance)-1]
			return nil
		})
	return def
}

// benchEnv is one embedded nats-server (the transport, and kvstore's
// buckets) and the test binary's PostgreSQL.
type benchEnv struct {
	broker *transport.Broker
	js     jetstream.JetStream
	pool   *pgxpool.Pool
	round  atomic.Int64
}

func newBenchEnv(b *testing.B) *benchEnv {
	srv := testutil.StartServer(b, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	e := &benchEnv{}
	if e.broker, err = transport.NewJetStream(nc); err != nil {
		b.Fatal(err)
	}
	if e.js, err = jetstream.New(nc); err != nil {
		b.Fatal(err)
	}
	if e.pool, err = pgxpool.New(b.Context(), pg.NewDatabase(b)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.pool.Close)
	if err := pgstore.Migrate(b.Context(), e.pool); err != nil {
		b.Fatal(err)
	}
	return e
}

func (e *benchEnv) store(b *testing.B, kind string) saga.Store {
	if kind == "kvstore" {
		s, err := kvstore.New(b.Context(), e.js, kvstore.Config{Bucket: "ixbench_" + strconv.FormatInt(e.round.Add(1), 10)})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	return benchStore(b, e.pool)
}

// runTicks sends n ticks (tick i to instance key(i)) and times a
// dispatcher (concurrency 32) handling them: steps per second.
func (e *benchEnv) runTicks(b *testing.B, store saga.Store, def saga.Saga, n int, key func(i int) string) float64 {
	ctx := b.Context()
	queue := "ixbench" + strconv.FormatInt(e.round.Add(1), 10)
	var handled atomic.Int64
	done := make(chan struct{})
	d, err := saga.NewDispatcher(e.broker, store, queue, saga.WithSagas(def), saga.WithConcurrency(32),
		saga.WithLogger(testutil.Logger()),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, r saga.StepResult) {
			if r.Outcome != saga.Handled {
				b.Errorf("step %s/%s: %s: %v", info.Saga, info.ID, r.Outcome, r.Err)
			}
			if handled.Add(1) == int64(n) {
				close(done)
			}
		}}))
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if _, err := d.Send(ctx, tick{Instance: key(i), N: i}); err != nil {
			b.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error, 1)
	start := time.Now()
	go func() { finished <- d.Run(runCtx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	stop()
	if err := <-finished; err != nil {
		b.Fatal(err)
	}
	return float64(n) / elapsed.Seconds()
}

// BenchmarkIndexedSteps measures saga steps per second with two indexes
// (one unique) beside the same saga without indexes, on kvstore and
// pgstore, in the same run, alternating plain and indexed three times
// (the median of each is reported): steps that start an instance (each
// writes two index entries) and steps on 100 instances whose indexed
// values do not change (no entry written):
//
//	go test -run '^$' -bench IndexedSteps -benchtime 1x ./saga/pgstore
//
// JETSAGA_BENCH_STEPS sets the steps of each round (default 3000).
func BenchmarkIndexedSteps(b *testing.B) {
	e := newBenchEnv(b)
	n := envInt("JETSAGA_BENCH_STEPS", 3000)
	workloads := []struct {
		name string
		key  func(i int) string
	}{
		{"starts", func(i int) string { return fmt.Sprintf("inst-%07d", i) }},
		{"updates", func(i int) string { return fmt.Sprintf("inst-%03d", i%100) }},
	}
	for _, kind := range []string{"kvstore", "pgstore"} {
		for _, w := range workloads {
			b.Run(kind+"/"+w.name, func(b *testing.B) {
				for b.Loop() {
					var plain, indexed []float64
					for range 3 {
						plain = append(plain, e.runTicks(b, e.store(b, kind), ixCounterSaga(false), n, w.key))
						indexed = append(indexed, e.runTicks(b, e.store(b, kind), ixCounterSaga(true), n, w.key))
					}
					p, x := median(plain), median(indexed)
					b.ReportMetric(p, "plain-steps/s")
					b.ReportMetric(x, "indexed-steps/s")
					b.ReportMetric(p/x, "cost-x")
				}
			})
		}
	}
}

// BenchmarkIndexFind measures Find by an index value among
// JETSAGA_BENCH_INSTANCES instances (default 10000) on kvstore and
// pgstore: by the unique index (one instance) and by one that is not
// (ten instances a value), latency percentiles over 1000 queries each.
// The instances are made by saga steps, as an application would (not
// timed):
//
//	go test -run '^$' -bench IndexFind -benchtime 1x ./saga/pgstore
func BenchmarkIndexFind(b *testing.B) {
	e := newBenchEnv(b)
	n := envInt("JETSAGA_BENCH_INSTANCES", 10000)
	key := func(i int) string { return fmt.Sprintf("inst-%07d", i) }
	for _, kind := range []string{"kvstore", "pgstore"} {
		b.Run(kind, func(b *testing.B) {
			store := e.store(b, kind)
			def := ixCounterSaga(true)
			e.runTicks(b, store, def, n, key)
			var ixBytes, ixKeys float64 // kvstore's: reported with the loop's metrics (b.Loop resets earlier ones)
			if kind == "kvstore" {
				// What the index keeps on the server: the indexed bucket
				// against the same instances without indexes.
				bucket := "ixbench_" + strconv.FormatInt(e.round.Load()-1, 10)
				plain := e.store(b, kind)
				plainBucket := "ixbench_" + strconv.FormatInt(e.round.Load(), 10)
				e.runTicks(b, plain, ixCounterSaga(false), n, key)
				ix, px := e.streamState(b, bucket), e.streamState(b, plainBucket)
				ixBytes, ixKeys = float64(ix.Bytes-px.Bytes)/float64(n), float64(ix.NumSubjects-px.NumSubjects)/float64(n)
			}
			d, err := saga.NewDispatcher(e.broker, store, "ixfind"+strconv.FormatInt(e.round.Add(1), 10), saga.WithSagas(def))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if kind == "kvstore" {
					b.ReportMetric(ixBytes, "index-bytes/instance")
					b.ReportMetric(ixKeys, "index-keys/instance")
				}
				for _, q := range []struct {
					name  string
					where func(i int) saga.Query
					want  int
				}{
					{"unique", func(i int) saga.Query { return saga.Where("key", key(i)) }, 1},
					{"group", func(i int) saga.Query { k := key(i); return saga.Where("group", k[:len(k)-1]) }, 10},
				} {
					var lat []time.Duration
					for j := range 1000 {
						i := (j * 7919) % n
						start := time.Now()
						found := 0
						for _, err := range saga.Find(b.Context(), d, def, q.where(i)) {
							if err != nil {
								b.Fatal(err)
							}
							found++
						}
						lat = append(lat, time.Since(start))
						if found != q.want {
							b.Fatalf("%s %d: found %d, want %d", q.name, i, found, q.want)
						}
					}
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, q.name+"-p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, q.name+"-p99-ms")
				}
			}
		})
	}
}

// streamState is the state of a kvstore bucket's stream.
func (e *benchEnv) streamState(b *testing.B, bucket string) jetstream.StreamState {
	st, err := e.js.Stream(b.Context(), "KV_"+bucket)
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(b.Context()) // NumSubjects without the subjects: a million of them would time the request out
	if err != nil {
		b.Fatal(err)
	}
	return info.State
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
