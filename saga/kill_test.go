package saga_test

// R1: worker processes killed with SIGKILL at random points of
// a many-saga workload, again and again. The nats-server runs in the test
// process and is never killed here (R2 covers that); the workers are this
// test binary run again as TestKillWorkerHelper.
//
// Must hold: every instance reaches its terminal state (a tombstone, which
// only a handled timeout writes, so no timeout was lost); every handler
// effect reaches r1-effects exactly once; nothing is dead-lettered.
//
// The random choices (timeout delays, worker lifetimes, which worker dies)
// come from a seed the test logs; JETSAGA_R1_SEED=<seed> repeats them (the
// timing of the machine does not repeat). -short runs 3 kill cycles
// instead of 16.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/transport"
)

const (
	r1WorkerEnv = "JETSAGA_R1_WORKER" // the NATS URL; set only in worker processes
	r1StoreEnv  = "JETSAGA_R1_STORE"  // "queue": the workers keep state with queuestore
	r1SeedEnv   = "JETSAGA_R1_SEED"   // reruns a failed run's random choices
	r1Queue     = "r1"
	r1Effects   = "r1-effects"
	r1Steps     = 8                      // chained steps per instance
	r1Again     = 300 * time.Millisecond // a timeout that beat the steps asks again after this times its number
)

// The saga: R1Start sends the first R1Step to the saga's own queue and
// requests an R1Due timeout 300-800 ms ahead; each R1Step counts and sends
// the next, up to r1Steps; R1Due completes the instance once every step is
// done, and otherwise requests itself again, a little later each time (a
// backlog must not feed itself). Every step sends one R1Effect, whose body
// is fixed by the instance, the kind of step and its number, to
// r1-effects, where the test counts them.

type R1Start struct {
	ID    string
	DueIn time.Duration
}

type R1Step struct {
	ID string
	N  int
}

type R1Due struct{}

// R1Effect is one handler effect. Count is the step counter as the step
// saw it: a step applied twice shows as a count ahead of its number.
type R1Effect struct {
	ID      string
	What    string // start, step, due (a timeout that came before the steps finished) or done
	N       int    `json:",omitempty"` // step number, or timeout number for due and done
	Count   int    `json:",omitempty"` // steps handled, on step and done
	Anomaly string `json:",omitempty"` // what the instance saw go wrong, on done
}

func (e R1Effect) String() string {
	s := e.What
	if e.N > 0 {
		s += " " + strconv.Itoa(e.N)
	}
	if e.Count > 0 {
		s += " count " + strconv.Itoa(e.Count)
	}
	if e.Anomaly != "" {
		s += fmt.Sprintf(" anomaly %q", e.Anomaly)
	}
	return s
}

type r1Data struct {
	Steps, Fired int
	Due          time.Time
	Anomaly      string
}

func r1Saga() *saga.Definition[r1Data] {
	d := saga.Define[r1Data]("r1", saga.WhenNotFound(saga.NotFoundPolicy{DeadLetter: true}))
	saga.StartedBy(d, saga.By(func(m R1Start) string { return m.ID }),
		func(_ context.Context, c *saga.Context[r1Data], m R1Start) error {
			if !c.IsNew() {
				c.Data.Anomaly += "started again; "
				return nil
			}
			c.Data.Due = c.Now().Add(m.DueIn)
			if _, err := c.RequestTimeoutAt(c.Data.Due, R1Due{}); err != nil {
				return err
			}
			if err := c.Send(r1Queue, R1Step{ID: m.ID, N: 1}); err != nil {
				return err
			}
			return c.Send(r1Effects, R1Effect{ID: m.ID, What: "start"})
		})
	saga.Handles(d, saga.By(func(m R1Step) string { return m.ID }),
		func(_ context.Context, c *saga.Context[r1Data], m R1Step) error {
			c.Data.Steps++
			if c.Data.Steps != m.N {
				c.Data.Anomaly += fmt.Sprintf("step %d saw count %d; ", m.N, c.Data.Steps)
			}
			if m.N < r1Steps {
				if err := c.Send(r1Queue, R1Step{ID: m.ID, N: m.N + 1}); err != nil {
					return err
				}
			}
			return c.Send(r1Effects, R1Effect{ID: m.ID, What: "step", N: m.N, Count: c.Data.Steps})
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[r1Data], _ R1Due) error {
		c.Data.Fired++
		if early := timeoutTooEarly(c, c.Data.Due); early != "" {
			c.Data.Anomaly += fmt.Sprintf("timeout %d: %s", c.Data.Fired, early)
		}
		if c.Data.Steps < r1Steps {
			c.Data.Due = c.Now().Add(time.Duration(c.Data.Fired) * r1Again)
			if _, err := c.RequestTimeoutAt(c.Data.Due, R1Due{}); err != nil {
				return err
			}
			return c.Send(r1Effects, R1Effect{ID: c.ID(), What: "due", N: c.Data.Fired})
		}
		c.MarkComplete()
		return c.Send(r1Effects, R1Effect{ID: c.ID(), What: "done", N: c.Data.Fired, Count: c.Data.Steps, Anomaly: c.Data.Anomaly})
	})
	return d
}

// r1QueueConfig: a short lock, so that a killed worker's messages come
// back fast. Kills, not bugs, drive delivery counts up (each kill
// redelivers what the worker held), so MaxDeliveryCount is above the
// default 10: a message in flight at ten kills is not what R1 is about.
func r1QueueConfig() transport.QueueConfig {
	return transport.QueueConfig{Name: r1Queue, LockDuration: time.Second, MaxDeliveryCount: 30}
}

func r1QueueConfigIn(inQueue bool) transport.QueueConfig {
	cfg := r1QueueConfig()
	cfg.MemoryStorage = inQueue
	return cfg
}

// r1Options are the options of the workers' dispatchers. With inQueue
// (state in the queue, queuestore) the queue is kept in memory: on a
// file-stored queue of one replica nats-server stages every atomic batch
// in a synced file store (see saga/queuestore), which is not what this
// test is about; a worker's SIGKILL loses nothing kept in the server's
// memory either.
func r1Options(inQueue bool) []saga.Option { return workerOptions(r1Saga(), r1QueueConfigIn(inQueue)) }

// workerOptions are the options of a worker process's dispatcher running
// s on a queue of config q: fast retries, a short drain.
func workerOptions(s saga.Saga, q transport.QueueConfig) []saga.Option {
	return []saga.Option{
		saga.WithSagas(s), saga.WithQueueConfig(q),
		saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 5, Backoff: func(int) time.Duration { return 250 * time.Millisecond }}),
		saga.WithDrainTimeout(3 * time.Second),
	}
}

// TestKillWorkerHelper is a worker process of TestKillWorkers. Run by go
// test, it returns at once. In a worker (r1WorkerEnv set) it runs a
// dispatcher on the r1 queue until it is killed or its stdin closes (the
// parent stopped it, or died), reporting each step on stdout.
func TestKillWorkerHelper(t *testing.T) {
	url := os.Getenv(r1WorkerEnv)
	if url == "" {
		return
	}
	n := newNode(t, url)
	inQueue := os.Getenv(r1StoreEnv) == "queue"
	runWorker(t, func(hooks saga.Option) *saga.Dispatcher {
		return n.dispatcher(t, r1Store(n, inQueue), r1Queue, append(r1Options(inQueue), hooks)...)
	})
}

// runWorker runs, in a worker process, the dispatcher newDispatcher makes
// with the hooks it is given, which report each step on stdout (R1STAT),
// until the process is killed or its stdin closes (the parent stopped it,
// or died).
func runWorker(t *testing.T, newDispatcher func(hooks saga.Option) *saga.Dispatcher) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	d := newDispatcher(saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		fmt.Printf("R1STAT %s %d %d\n", res.Outcome, res.Conflicts, info.DeliveryCount)
	}}))
	// Open the queue now, so that this worker's stream updates are over
	// when it reports ready.
	if err := d.Open(ctx); err != nil {
		t.Fatalf("open queue: %v", err)
	}
	fmt.Println("R1STAT ready 0 1")
	if err := d.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// r1Store is the store of a worker: the node's KV store, or the state of
// the r1 queue (queuestore: a step's record and timeouts in one write).
func r1Store(n *node, inQueue bool) saga.Store {
	if inQueue {
		return queuestore.New(n.broker, r1Queue)
	}
	return n.store
}

// TestKillWorkers runs the workload with the workers' state in a KV
// bucket, and in the queue's state (queuestore).
func TestKillWorkers(t *testing.T) {
	t.Run("kvstore", func(t *testing.T) { testKillWorkers(t, false) })
	t.Run("queuestore", func(t *testing.T) { testKillWorkers(t, true) })
}

func testKillWorkers(t *testing.T, inQueue bool) {
	rng := killRand(t, 0x52315231)
	instances, cycles := 640, 16
	if testing.Short() {
		instances, cycles = 60, 3
	}
	began := time.Now()

	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	// Create the queues before any worker runs (see TestCrashPoints on
	// concurrent creation).
	q := n.openQueue(t, r1QueueConfigIn(inQueue))
	effects := n.openQueue(t, transport.QueueConfig{Name: r1Effects})
	d := n.dispatcher(t, r1Store(n, inQueue), r1Queue, r1Options(inQueue)...) // sends and reads state; never runs
	fleet := &r1Fleet{t: t, url: srv.ClientURL(), inQueue: inQueue, stats: map[string]int{}}
	t.Cleanup(fleet.killAll)

	ids := make([]string, instances)
	for i := range ids {
		ids[i] = fmt.Sprintf("r1-%03d", i)
	}
	ctx := t.Context()
	var workers [2]*r1Worker
	kills := 0
	for c := range cycles {
		fleet.fill(workers[:])
		// Feed this cycle's share of the instances while both workers run,
		// spread over the time until the kill, so that kills land on
		// steps in flight rather than on idle workers.
		life := time.Duration(200+rng.IntN(1301)) * time.Millisecond
		alive := time.Now()
		batch := ids[c*instances/cycles : (c+1)*instances/cycles]
		for j, id := range batch {
			due := time.Duration(300+rng.IntN(501)) * time.Millisecond
			if _, err := d.Send(ctx, R1Start{ID: id, DueIn: due}, saga.WithMessageID("start-"+id)); err != nil {
				t.Fatalf("send start %s: %v", id, err)
			}
			r1SleepUntil(t, alive.Add(life*time.Duration(j+1)/time.Duration(len(batch))))
		}
		victims := []int{rng.IntN(2)}
		if rng.IntN(3) == 0 {
			victims = []int{0, 1}
		}
		for _, i := range victims {
			fleet.kill(workers[i])
			workers[i] = nil
			kills++
		}
		t.Logf("cycle %d: %d starts sent, killed %d worker(s) after %v", c+1, (c+1)*instances/cycles, len(victims), life.Round(time.Millisecond))
	}
	killPhase := time.Since(began)

	// Workers run undisturbed until every instance is done.
	fleet.fill(workers[:])
	within := 45 * time.Second
	if testing.Short() {
		within = 30 * time.Second
	}
	stuck := r1AwaitCompleted(t, d, ids, within)
	if len(stuck) == 0 {
		testutil.Await(t, 20*time.Second, func() string { return queueEmpty(t, q) })
	}
	for _, w := range workers {
		fleet.stop(w)
	}

	stored := peekAll(t, effects)
	got := r1Count(t, stored)
	r1Stuck(t, d, stuck, within, got)
	r1Verify(t, ids, got, q, effects)
	s := fleet.counts()
	t.Logf("%d instances, %d effects, %d kills in %d cycles (kill phase %v), %d worker starts; total %v",
		instances, len(stored), kills, cycles, killPhase.Round(time.Millisecond), fleet.started, time.Since(began).Round(time.Millisecond))
	t.Logf("steps reported by workers: %d handled (%d of them on a redelivery: run again after a kill before commit), "+
		"%d duplicate (redelivered after commit, found in the inbox), %d dropped, %d retried, %d abandoned, %d dead-lettered; %d conflicts",
		s[string(saga.Handled)], s["redelivered "+string(saga.Handled)], s[string(saga.Duplicate)], s[string(saga.Dropped)],
		s[string(saga.Retried)], s[string(saga.Abandoned)], s[string(saga.DeadLettered)], s["conflicts"])
}

// r1SleepUntil waits for the instant at, which the kill schedule picked.
func r1SleepUntil(t *testing.T, at time.Time) {
	t.Helper()
	select {
	case <-t.Context().Done():
		t.Fatal("test ended during the kill phase")
	case <-time.After(time.Until(at)):
	}
}

// r1AwaitCompleted polls the store until every instance is a tombstone or
// within passes, and returns the instances still not completed.
func r1AwaitCompleted(t *testing.T, d *saga.Dispatcher, ids []string, within time.Duration) []string {
	t.Helper()
	pending := slices.Clone(ids)
	deadline := time.Now().Add(within)
	for {
		pending = slices.DeleteFunc(pending, func(id string) bool {
			inst, err := d.Instance(ctxFor(t), "r1", id)
			if err != nil && !errors.Is(err, saga.ErrNotFound) {
				t.Fatalf("Instance(r1, %s): %v", id, err)
			}
			return err == nil && inst.Completed
		})
		if len(pending) == 0 || time.Now().After(deadline) {
			return pending
		}
		select {
		case <-t.Context().Done():
			return pending
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// r1Check compares an instance's effects with what one run of each of its
// steps gives: start, steps 1..r1Steps each with its own count, timeouts
// 1..K-1 that came early, and done as timeout K with every step counted

// r1Verify checks the effects an R1 workload's instances applied (each
// exactly once, none for an instance never started; it consumes got) and
// that nothing was dead-lettered in queues q and effects. It returns how
// many instances had wrong effects.
func r1Verify(t *testing.T, ids []string, got map[string]map[R1Effect]int, q, effects *transport.Queue) int {
	t.Helper()
	bad := 0
	for _, id := range ids {
		dup, missing, extra := r1Check(id, got[id])
		delete(got, id)
		if len(dup)+len(missing)+len(extra) == 0 {
			continue
		}
		if bad++; bad <= 20 {
			t.Errorf("%s: effects applied more than once %q; missing %q; unexpected %q", id, dup, missing, extra)
		}
	}
	if bad > 20 {
		t.Errorf("... %d instances with wrong effects in all", bad)
	}
	for id, es := range got {
		t.Errorf("effects for an instance never started, %q: %s", id, r1Format(es))
	}
	for _, dq := range []*transport.Queue{q.DeadLetterQueue(), effects.DeadLetterQueue()} {
		if dl := peekAll(t, dq); len(dl) > 0 {
			t.Errorf("%d messages dead-lettered in %s, first: type %s: %s: %s", len(dl), dq.Name(),
				dl[0].Properties[saga.TypeProperty], dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
		}
	}
	return bad
}

// and no anomaly.
func r1Check(id string, got map[R1Effect]int) (dup, missing, extra []string) {
	k := 0
	for e := range got {
		if e.What == "done" || e.What == "due" {
			k = max(k, e.N)
		}
	}
	want := map[R1Effect]bool{{ID: id, What: "start"}: true, {ID: id, What: "done", N: max(k, 1), Count: r1Steps}: true}
	for n := 1; n <= r1Steps; n++ {
		want[R1Effect{ID: id, What: "step", N: n, Count: n}] = true
	}
	for n := 1; n < k; n++ {
		want[R1Effect{ID: id, What: "due", N: n}] = true
	}
	for e, c := range got {
		switch {
		case !want[e]:
			extra = append(extra, fmt.Sprintf("%v ×%d", e, c))
		case c > 1:
			dup = append(dup, fmt.Sprintf("%v ×%d", e, c))
		}
	}
	for e := range want {
		if got[e] == 0 {
			missing = append(missing, e.String())
		}
	}
	slices.Sort(dup)
	slices.Sort(missing)
	slices.Sort(extra)
	return dup, missing, extra
}

// r1Count counts the stored effects by instance.
func r1Count(t *testing.T, stored []*transport.Message) map[string]map[R1Effect]int {
	t.Helper()
	got := map[string]map[R1Effect]int{}
	for _, m := range stored {
		var e R1Effect
		if err := json.Unmarshal(m.Body, &e); err != nil {
			t.Errorf("effect seq %d: body %q: %v", m.Seq, m.Body, err)
			continue
		}
		if got[e.ID] == nil {
			got[e.ID] = map[R1Effect]int{}
		}
		got[e.ID][e]++
	}
	return got
}

// r1Stuck reports the instances not completed within the wait (the first
// ten in full), as d sees them, with their effects.
func r1Stuck(t *testing.T, d *saga.Dispatcher, stuck []string, within time.Duration, got map[string]map[R1Effect]int) {
	t.Helper()
	for _, id := range stuck[:min(len(stuck), 10)] {
		t.Errorf("%s: not completed within %v: %s; effects %s", id, within, r1Describe(t, d, id), r1Format(got[id]))
	}
	if len(stuck) > 10 {
		t.Errorf("... and %d more not completed: %v", len(stuck)-10, stuck[10:])
	}
}

func r1Format(es map[R1Effect]int) string {
	var out []string
	for e, c := range es {
		out = append(out, fmt.Sprintf("%v ×%d", e, c))
	}
	slices.Sort(out)
	return "[" + strings.Join(out, "; ") + "]"
}

// r1Describe tells what the store holds for an instance.
func r1Describe(t *testing.T, d *saga.Dispatcher, id string) string {
	t.Helper()
	r, inst, ok := data[r1Data](t, d, "r1", id)
	if !ok {
		return "no record"
	}
	return fmt.Sprintf("data %+v, completed %t, updated %v, pending timeouts %+v", r, inst.Completed, inst.Updated.Format(time.StampMilli), inst.Timeouts)
}

// r1Fleet starts, kills and stops worker processes.
type r1Fleet struct {
	t       *testing.T
	url     string
	inQueue bool // the workers keep state with queuestore
	started int
	// helper and env, if set, run another worker: the test to run
	// (-test.run) and the variable that gets the NATS URL.
	helper, env string

	mu    sync.Mutex
	stats map[string]int
	live  []*r1Worker
}

type r1Worker struct {
	n      int
	ready  chan struct{} // closed when the worker has opened its queue
	cmd    *exec.Cmd
	stdin  io.Closer
	stderr bytes.Buffer // read only after done
	done   chan struct{}
	err    error // Wait's, after done
}

// start runs the test binary again as a worker and waits until it has
// set up its store and queue. Workers start one at a time, and are killed
// only once set up, because each start updates the KV and queue streams,
// and concurrent stream updates race inside nats-server v2.15.2
// (checkStreamCfgLocked reads another stream's mset.cfg without cfgMu,
// server/stream.go:2122, while updateWithAdvisory writes it, :2975): the
// race detector reports that in this process, which runs the server.
func (f *r1Fleet) start() *r1Worker {
	f.t.Helper()
	f.started++
	w := &r1Worker{n: f.started, ready: make(chan struct{}), done: make(chan struct{})}
	helper, env := cmp.Or(f.helper, "^TestKillWorkerHelper$"), cmp.Or(f.env, r1WorkerEnv)
	w.cmd = exec.Command(os.Args[0], "-test.run="+helper)
	w.cmd.Env = append(os.Environ(), env+"="+f.url)
	if f.inQueue {
		w.cmd.Env = append(w.cmd.Env, r1StoreEnv+"=queue")
	}
	w.cmd.Stdout = &r1StatWriter{f: f, w: w}
	w.cmd.Stderr = &w.stderr
	w.cmd.WaitDelay = 5 * time.Second
	stdin, err := w.cmd.StdinPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	w.stdin = stdin
	if err := w.cmd.Start(); err != nil {
		f.t.Fatalf("start worker: %v", err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	f.mu.Lock()
	f.live = append(f.live, w)
	f.mu.Unlock()
	select {
	case <-w.ready:
	case <-w.done:
		f.t.Fatalf("worker %d exited during set-up: %v\n%s", w.n, w.err, w.stderr.String())
	case <-time.After(30 * time.Second):
		f.t.Fatalf("worker %d not set up within 30s", w.n)
	}
	return w
}

// killRand returns the random source of a kill test's choices, seeded by
// the clock or by r1SeedEnv to rerun a failed run; stream tells tests
// apart.
func killRand(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(r1SeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", r1SeedEnv, s, err)
		}
	}
	t.Logf("seed %d (rerun with %s=%d)", seed, r1SeedEnv, seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// fill starts a worker in each empty place of workers.
func (f *r1Fleet) fill(workers []*r1Worker) {
	f.t.Helper()
	for i := range workers {
		if workers[i] == nil {
			workers[i] = f.start()
		}
	}
}

// kill sends SIGKILL to a worker and reaps it. A worker that already
// exited on its own, or that reported a data race or panic, fails the
// test.
func (f *r1Fleet) kill(w *r1Worker) {
	f.t.Helper()
	select {
	case <-w.done:
		f.t.Errorf("worker %d exited before it was killed: %v\n%s", w.n, w.err, w.stderr.String())
		return
	default:
	}
	if err := w.cmd.Process.Kill(); err != nil {
		f.t.Errorf("kill worker %d: %v", w.n, err)
	}
	f.reap(w)
}

// stop closes a worker's stdin, which makes it drain and exit; it must
// exit cleanly.
func (f *r1Fleet) stop(w *r1Worker) {
	f.t.Helper()
	_ = w.stdin.Close()
	select {
	case <-w.done:
	case <-time.After(15 * time.Second):
		f.t.Errorf("worker %d did not exit within 15s of its stdin closing; killing it", w.n)
		_ = w.cmd.Process.Kill()
	}
	f.reap(w)
	if w.err != nil {
		f.t.Errorf("worker %d: %v\n%s", w.n, w.err, w.stderr.String())
	}
}

func (f *r1Fleet) reap(w *r1Worker) {
	f.t.Helper()
	<-w.done
	f.mu.Lock()
	f.live = slices.DeleteFunc(f.live, func(x *r1Worker) bool { return x == w })
	f.mu.Unlock()
	if s := w.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
		f.t.Errorf("worker %d:\n%s", w.n, s)
	}
}

func (f *r1Fleet) killAll() {
	f.mu.Lock()
	live := slices.Clone(f.live)
	f.mu.Unlock()
	for _, w := range live {
		_ = w.cmd.Process.Kill()
		f.reap(w)
	}
}

func (f *r1Fleet) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.stats)
}

// r1StatWriter counts the "R1STAT <outcome> <conflicts> <delivery count>"
// lines a worker
// prints; exec calls Write from one goroutine per worker.
type r1StatWriter struct {
	f    *r1Fleet
	w    *r1Worker
	line []byte
}

func (w *r1StatWriter) Write(p []byte) (int, error) {
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if f := strings.Fields(string(w.line[:i])); len(f) == 4 && f[0] == "R1STAT" {
			conflicts, _ := strconv.Atoi(f[2])
			deliveries, _ := strconv.Atoi(f[3])
			if f[1] == "ready" {
				close(w.w.ready)
			}
			w.f.mu.Lock()
			w.f.stats[f[1]]++
			if deliveries > 1 {
				w.f.stats["redelivered "+f[1]]++
			}
			w.f.stats["conflicts"] += conflicts
			w.f.mu.Unlock()
		}
		w.line = w.line[i+1:]
	}
}
