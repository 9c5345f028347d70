package temporal

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Moving pending timeouts between the JetStream engine and Temporal with
// saga.Dispatcher.MigrateTimeouts, on a real nats-server and a real
// Temporal dev server, while they fire, and with the migrating process
// killed mid-way.

// migrateCount is how many timeouts TestMigrateTimeoutsThereAndBack
// moves. Of the 300, the first 240 are due over 20 s and fire while they
// move; the last migrateLate are due a minute out, so that some are still
// pending for the way back however slowly the machine moves (down to 5 a
// second, the slowest measured with the cores shared, the way there takes
// under a minute). At 1,000 the way there measured 30/s (the timeouts
// firing meanwhile share the cores), which leaves the late ones pending
// only on machines that move at least 18 a second: 1,000 there and back
// would need the late ones minutes out. TestMigrateKilled moves
// migrateKilledCount one way, where no such floor applies.
const (
	migrateCount = 300
	migrateLate  = 60
)

// migrateKilledCount is how many timeouts TestMigrateKilled moves, as
// issue 24 asks: 1,000 pending timeouts, firing while they move, and the
// migrating process killed mid-way.
const migrateKilledCount = 1000

// The child process of TestMigrateKilled is this test binary, run with
// these environment variables.
const (
	envChildMigrate = "JETSAGA_TEST_CHILD_MIGRATE" // the Temporal frontend host:port
	envChildSetup   = "JETSAGA_TEST_CHILD_SETUP"   // NATS URL, task queue, queue, bucket, saga
)

type (
	migBegin struct {
		ID  string
		Due time.Time
	}
	migDue  struct{}
	migData struct {
		Due   time.Time
		Fired int
		Early bool
	}
)

func (migDue) MessageName() string { return "mig.Due" }

// migrationSaga is the saga of the migration tests: each instance asks
// for one timeout at a given instant, and counts in its state how often
// it was handled and whether it came early.
func migrationSaga(name string) *saga.Definition[migData] {
	flow := saga.Define[migData](name)
	saga.StartedBy(flow, saga.By(func(m migBegin) string { return m.ID }),
		func(_ context.Context, c *saga.Context[migData], m migBegin) error {
			c.Data.Due = m.Due
			_, err := c.RequestTimeoutAt(m.Due, migDue{})
			return err
		})
	saga.OnTimeout(flow, func(_ context.Context, c *saga.Context[migData], _ migDue) error {
		c.Data.Fired++
		c.Data.Early = c.Data.Early || time.Now().Before(c.Data.Due)
		return nil
	})
	return flow
}

// migrationSetup is what the parent and the child of a migration test
// share: the queue, the bucket, the saga type and the task queue.
type migrationSetup struct {
	natsURL, taskQueue, queue, bucket, saga string
}

func (s migrationSetup) String() string {
	return strings.Join([]string{s.natsURL, s.taskQueue, s.queue, s.bucket, s.saga}, " ")
}

func parseSetup(v string) migrationSetup {
	f := strings.Fields(v)
	return migrationSetup{natsURL: f[0], taskQueue: f[1], queue: f[2], bucket: f[3], saga: f[4]}
}

// migrationDispatcher builds the dispatcher of a migration test on nc and
// Temporal client c: timeouts go to JetStream (the default), Temporal is
// in the router for timeouts moved there.
func migrationDispatcher(ctx context.Context, s migrationSetup, nc *nats.Conn, c client.Client, opts ...saga.Option) (*saga.Dispatcher, *transport.Broker, *Engine, error) {
	b, err := transport.NewJetStream(nc)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: s.bucket, MemoryStorage: true})
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := New(c, WithTaskQueue(s.taskQueue), WithBroker(b), WithLogger(quietLogger()))
	if err != nil {
		return nil, nil, nil, err
	}
	router := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{e.Route(math.MaxInt64)}}
	d, err := saga.NewDispatcher(b, store, s.queue, append([]saga.Option{saga.WithSagas(migrationSaga(s.saga)), saga.WithTimeouts(router),
		saga.WithLogger(quietLogger())}, opts...)...)
	return d, b, e, err
}

// runChildMigrate runs MigrateTimeouts to Temporal and says "moved <id>"
// on stdout for each timeout, until it is killed.
func runChildMigrate() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child migration:", err); return 1 }
	s := parseSetup(os.Getenv(envChildSetup))
	ctx := context.Background()
	c, err := client.Dial(client.Options{HostPort: os.Getenv(envChildMigrate), Logger: log.NewStructuredLogger(quietLogger())})
	if err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		return fail(err)
	}
	d, _, _, err := migrationDispatcher(ctx, s, nc, c)
	if err != nil {
		return fail(err)
	}
	for m, err := range d.MigrateTimeouts(ctx, s.saga, DefaultEngineName) {
		if err != nil {
			return fail(err)
		}
		fmt.Printf("%s %s %s\n", m.Outcome, m.ID, m.To)
	}
	fmt.Println("done")
	return 0
}

// migration is a running migration test: a dispatcher that handles the
// timeouts, a worker that delivers them from Temporal, and n instances
// each waiting for one timeout.
type migration struct {
	t     *testing.T
	setup migrationSetup
	d     *saga.Dispatcher
	c     client.Client
	ids   []string
	due   map[string]time.Time // by instance, as sent
	// handled counts the timeouts the dispatcher handled (StepDone,
	// outcome Handled): cheaper to ask often than every instance's state.
	handled atomic.Int64
	mu      sync.Mutex
	// handledAt lists, by instance, when each step that handled its
	// timeout began: what the checks count, beside the instance's state
	// (which a lost update could reset).
	handledAt map[string][]time.Time
}

// startMigration starts n instances whose timeouts are due from first on,
// one every spread/(n-late), all scheduled on JetStream; the last late of
// them are due from first+lateAt on instead, 100 ms apart.
func startMigration(t *testing.T, name string, n int, first, spread time.Duration, late int, lateAt time.Duration) *migration {
	srv, ns := servers(t)
	c := srv.Client(t)
	tq := newTaskQueue()
	s := migrationSetup{natsURL: ns.ClientURL(), taskQueue: tq, queue: name + "-" + tq, bucket: "mig_" + strings.ReplaceAll(tq, "-", "_"), saga: name}
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	m := &migration{t: t, setup: s, c: c, ids: make([]string, n), due: make(map[string]time.Time, n), handledAt: map[string][]time.Time{}}
	count := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		if info.MessageType == saga.MessageName[migDue]() && res.Outcome == saga.Handled {
			m.handled.Add(1)
			m.mu.Lock()
			m.handledAt[info.ID] = append(m.handledAt[info.ID], info.StartedAt)
			m.mu.Unlock()
		}
	}}
	d, b, _, err := migrationDispatcher(t.Context(), s, nc, c, saga.WithHooks(count))
	if err != nil {
		t.Fatal(err)
	}
	m.d = d
	t.Cleanup(func() { b.Close() })
	startWorker(t, c, b, WithTaskQueue(tq))
	testutil.RunUntilCleanup(t, d.Run)
	began := time.Now()
	start := began.Add(first)
	for i := range n {
		m.ids[i] = fmt.Sprintf("%s-%04d", name, i)
		due := start.Add(time.Duration(i) * spread / time.Duration(n-late))
		if i >= n-late {
			due = start.Add(lateAt + time.Duration(i-(n-late))*100*time.Millisecond)
		}
		m.due[m.ids[i]] = due
		if _, err := d.Send(t.Context(), migBegin{ID: m.ids[i], Due: due}); err != nil {
			t.Fatal(err)
		}
	}
	// Every timeout is scheduled on JetStream, or was there and fired
	// already (on a machine slower than the test's first due time allows
	// for).
	testutil.Await(t, 60*time.Second, func() string {
		if k, h := m.listed(timeout.QueueEngine), int(m.handled.Load()); k+h < n {
			return fmt.Sprintf("%d of %d timeouts scheduled on JetStream, %d fired", k, n, h)
		}
		return ""
	})
	t.Logf("%d timeouts scheduled on JetStream in %v, %d fired meanwhile", n, time.Since(began).Round(time.Millisecond), m.handled.Load())
	return m
}

// listed counts the saga's timeouts the engine lists.
func (m *migration) listed(engine string) int {
	k := 0
	for st, err := range m.d.ScheduledTimeouts(m.t.Context(), m.setup.saga) {
		if err != nil {
			m.t.Fatalf("ScheduledTimeouts: %v", err)
		}
		if st.Ref.Engine() == engine {
			k++
		}
	}
	return k
}

// state loads each instance's state.
func (m *migration) state() map[string]migData {
	out := make(map[string]migData, len(m.ids))
	for _, id := range m.ids {
		inst, err := m.d.Instance(m.t.Context(), m.setup.saga, id)
		if err != nil {
			m.t.Fatalf("Instance %s: %v", id, err)
		}
		var s migData
		if err := json.Unmarshal(inst.Data, &s); err != nil {
			m.t.Fatal(err)
		}
		out[id] = s
	}
	return out
}

// migrate moves every timeout to engine to and returns the outcomes by
// instance (each instance has one timeout), and their counts.
func (m *migration) migrate(to string) (map[string]saga.Migrated, map[saga.MigrateOutcome]int) {
	byID, counts := map[string]saga.Migrated{}, map[saga.MigrateOutcome]int{}
	start := time.Now()
	for r, err := range m.d.MigrateTimeouts(m.t.Context(), m.setup.saga, to) {
		if err != nil {
			m.t.Fatalf("to %s: %+v: %v", to, r, err)
		}
		if r.Outcome == saga.MigrateMoved && r.To.Engine() != to {
			m.t.Errorf("to %s: %+v: moved elsewhere", to, r)
		}
		if r.Outcome != saga.MigrateMoved && r.Outcome != saga.MigrateFired {
			m.t.Errorf("to %s: %+v: want moved or fired", to, r)
		}
		if o, ok := byID[r.ID]; ok {
			m.t.Errorf("to %s: %s reported %+v, then %+v", to, r.ID, o, r)
		}
		byID[r.ID] = r
		counts[r.Outcome]++
	}
	took := time.Since(start)
	m.t.Logf("to %s: %v in %v (%.0f/s)", to, counts, took.Round(time.Millisecond), float64(counts[saga.MigrateMoved])/took.Seconds())
	return byID, counts
}

// awaitGone waits until engine lists none of the saga's timeouts. Right
// after a migration away from it, it may still list those it activated
// early (not moved: they fire there) and stale copies whose cancel raced
// their activation (dropped when they fire).
func (m *migration) awaitGone(engine string) {
	m.t.Helper()
	testutil.Await(m.t, 10*time.Second, func() string {
		if k := m.listed(engine); k != 0 {
			return fmt.Sprintf("%s still lists %d timeouts after the move", engine, k)
		}
		return ""
	})
}

// check waits for every timeout to fire, then checks each was handled
// once and not early, and that no engine holds any of them.
func (m *migration) check() {
	testutil.Await(m.t, 90*time.Second, func() string {
		m.mu.Lock()
		defer m.mu.Unlock()
		if k := len(m.handledAt); k < len(m.ids) {
			return fmt.Sprintf("%d of %d timeouts handled", k, len(m.ids))
		}
		return ""
	})
	// Stale copies (cancelled too late) fire and are dropped; wait for the
	// engines to hold none, then for the queue to be empty.
	for _, eng := range []string{timeout.QueueEngine, DefaultEngineName} {
		testutil.Await(m.t, 30*time.Second, func() string {
			r, err := m.d.DrainReport(m.t.Context(), m.setup.saga, eng)
			if err != nil {
				return err.Error()
			}
			if len(r.Pending)+len(r.Stale) > 0 {
				return fmt.Sprintf("%s holds %d pending, %d stale", eng, len(r.Pending), len(r.Stale))
			}
			return ""
		})
	}
	for id, s := range m.state() {
		if s.Fired != 1 || s.Early {
			m.t.Errorf("%s: its state says handled %d times, early %v; want once, not early", id, s.Fired, s.Early)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range m.ids {
		at := m.handledAt[id]
		if len(at) != 1 {
			m.t.Errorf("%s: %d steps handled its timeout, at %v; want one", id, len(at), at)
		}
		for _, a := range at {
			if a.Before(m.due[id]) {
				m.t.Errorf("%s: handled at %v, %v before its due time", id, a, m.due[id].Sub(a))
			}
		}
	}
}

// TestMigrateTimeoutsThereAndBack moves migrateCount pending timeouts from
// JetStream to Temporal and back while they fire: each is handled once,
// none before its due time, none lost.
func TestMigrateTimeoutsThereAndBack(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	n := migrateCount
	m := startMigration(t, "migtb", n, 3*time.Second, 20*time.Second, migrateLate, time.Minute)
	before := m.handled.Load()
	_, there := m.migrate(DefaultEngineName)
	if there[saga.MigrateMoved] == 0 {
		t.Fatalf("nothing moved to Temporal: %v", there)
	}
	m.awaitGone(timeout.QueueEngine)
	_, back := m.migrate(timeout.QueueEngine)
	if back[saga.MigrateMoved] == 0 {
		t.Fatalf("nothing moved back: %v", back)
	}
	if during := m.handled.Load() - before; during == 0 {
		t.Errorf("no timeout fired during the migration: the test does not test firing meanwhile")
	}
	m.check()
}

// TestMigrateKilled moves migrateKilledCount pending timeouts from
// JetStream to Temporal while they fire (due over 25 s from 5 s after the
// test sent them), in a process that it kills (SIGKILL) a third of the way
// through, then migrates again: no timeout is reported moved by both
// runs, none is left on JetStream, and each is handled once, none early,
// none lost.
func TestMigrateKilled(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	n := migrateKilledCount
	m := startMigration(t, "migkill", n, 5*time.Second, 25*time.Second, 0, 0)
	srv, _ := servers(t)
	firedBefore := m.handled.Load()

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChildMigrate+"="+srv.HostPort(), envChildSetup+"="+m.setup.String())
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	lines := make(chan string, n+1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	first := map[string]saga.Migrated{} // what the killed run reported, by instance
	for len(first) < n/3 {
		select {
		case l, ok := <-lines:
			if !ok || l == "done" {
				t.Fatalf("the child migration ended before it was killed (reported %d)", len(first))
			}
			f := strings.Fields(l)
			if len(f) < 2 {
				t.Fatalf("the child migration printed %q", l)
			}
			r := saga.Migrated{Outcome: saga.MigrateOutcome(f[0]), ID: f[1]}
			if len(f) > 2 {
				r.To = timeout.Ref(f[2])
			}
			if _, ok := first[r.ID]; ok {
				t.Errorf("the child migration reported %s twice", r.ID)
			}
			first[r.ID] = r
		case <-time.After(60 * time.Second):
			t.Fatalf("the child migration reported %d in 60s", len(first))
		}
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	firedByKill := m.handled.Load()
	t.Logf("killed the migrating process after it reported %d (%d fired meanwhile)", len(first), firedByKill-firedBefore)

	second, counts := m.migrate(DefaultEngineName)
	firedByEnd := m.handled.Load()
	// A timeout the first run reported is done: the second must not move
	// it again. The one being moved at the kill is moved by the second
	// run, or was moved by the first (committed and carried out, not
	// reported); a timeout that fired before either run reached it is in
	// neither. The second run lists a timeout the first moved only while
	// its old copy is still on JetStream: one due within the transport's
	// cancel margin when its move cancelled it (the migration runs along
	// the due front here) counts as activating, and stays listed until it
	// activates (it is then dropped). The second run must then find the
	// move done: moved, to the very ref the first reported, or fired (on
	// Temporal, since the first run moved it).
	again := 0
	for id, r := range second {
		r1, ok := first[id]
		switch {
		case !ok:
		case r1.Outcome == saga.MigrateMoved && r.Outcome == saga.MigrateMoved && r.To == r1.To,
			r1.Outcome == saga.MigrateMoved && r.Outcome == saga.MigrateFired:
			again++
		default:
			t.Errorf("%s: the killed run reported %s (to %q), the second %s (to %q)", id, r1.Outcome, r1.To, r.Outcome, r.To)
		}
	}
	if again > 0 {
		t.Logf("%d timeouts the killed run moved were listed again (old copy activating), found moved to the same ref or fired", again)
	}
	if counts[saga.MigrateMoved] == 0 {
		t.Errorf("the second run moved nothing: %v", counts)
	}
	m.awaitGone(timeout.QueueEngine)
	if during := firedByEnd - firedBefore; during == 0 {
		t.Errorf("no timeout fired during the migration: the test does not test firing meanwhile")
	} else {
		t.Logf("%d timeouts fired during the migration (%d during the killed run)", during, firedByKill-firedBefore)
	}
	m.check()
}
