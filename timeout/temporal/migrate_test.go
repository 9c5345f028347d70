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
// moves (TestMigrateKilled a quarter of them). Issue 24 asks for 1,000; on
// the 2-core machines under -race a move measured 25-35 ms each way on a
// quiet machine, and up to 200 ms with the cores shared (each cancel on
// Temporal is a workflow update a worker answers; each move commits the
// record twice), so 1,000 there and back would take over a minute. Of
// the 300, the first 240 are due over 20 s and fire while they move; the
// last migrateLate are due a minute out, so some are still pending for
// the way back however slowly the machine moves (down to 5 a second, the
// slowest measured with the cores shared, the way there takes under a
// minute).
const (
	migrateCount = 300
	migrateLate  = 60
)

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
	router := &timeout.Router{Default: timeout.NewTransport(b), Routes: []timeout.Route{e.Route(math.MaxInt64)}}
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
		fmt.Printf("%s %s\n", m.Outcome, m.ID)
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
	d, b, _, err := migrationDispatcher(t.Context(), s, nc, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	startWorker(t, c, b, WithTaskQueue(tq))
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	m := &migration{t: t, setup: s, d: d, c: c, ids: make([]string, n)}
	start := time.Now().Add(first)
	for i := range n {
		m.ids[i] = fmt.Sprintf("%s-%04d", name, i)
		due := start.Add(time.Duration(i) * spread / time.Duration(n-late))
		if i >= n-late {
			due = start.Add(lateAt + time.Duration(i-(n-late))*100*time.Millisecond)
		}
		if _, err := d.Send(t.Context(), migBegin{ID: m.ids[i], Due: due}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, 60*time.Second, func() string {
		if k := m.listed(timeout.TransportEngine); k < n {
			return fmt.Sprintf("%d of %d timeouts scheduled on JetStream", k, n)
		}
		return ""
	})
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

func (m *migration) fired() int {
	k := 0
	for _, s := range m.state() {
		if s.Fired > 0 {
			k++
		}
	}
	return k
}

// migrate moves every timeout to engine to and counts the outcomes.
func (m *migration) migrate(to string) map[saga.MigrateOutcome]int {
	out := map[saga.MigrateOutcome]int{}
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
		out[r.Outcome]++
	}
	took := time.Since(start)
	m.t.Logf("to %s: %v in %v (%.0f/s)", to, out, took.Round(time.Millisecond), float64(out[saga.MigrateMoved])/took.Seconds())
	return out
}

// check waits for every timeout to fire, then checks each was handled
// once and not early, and that no engine holds any of them.
func (m *migration) check() {
	testutil.Await(m.t, 90*time.Second, func() string {
		if k := m.fired(); k < len(m.ids) {
			return fmt.Sprintf("%d of %d timeouts fired", k, len(m.ids))
		}
		return ""
	})
	// Stale copies (cancelled too late) fire and are dropped; wait for the
	// engines to hold none, then for the queue to be empty.
	for _, eng := range []string{timeout.TransportEngine, DefaultEngineName} {
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
			m.t.Errorf("%s: handled %d times, early %v; want once, not early", id, s.Fired, s.Early)
		}
	}
}

// TestMigrateTimeoutsThereAndBack moves migrateCount pending timeouts from
// JetStream to Temporal and back while they fire: each is handled once,
// none before its due time, none lost.
func TestMigrateTimeoutsThereAndBack(t *testing.T) {
	n := migrateCount
	m := startMigration(t, "migtb", n, 3*time.Second, 20*time.Second, migrateLate, time.Minute)
	before := m.fired()
	there := m.migrate(DefaultEngineName)
	if there[saga.MigrateMoved] == 0 {
		t.Fatalf("nothing moved to Temporal: %v", there)
	}
	if k := m.listed(timeout.TransportEngine); k != 0 {
		t.Errorf("JetStream still lists %d timeouts after the move", k)
	}
	back := m.migrate(timeout.TransportEngine)
	if back[saga.MigrateMoved] == 0 {
		t.Fatalf("nothing moved back: %v", back)
	}
	if during := m.fired() - before; during == 0 {
		t.Errorf("no timeout fired during the migration: the test does not test firing meanwhile")
	}
	m.check()
}

// TestMigrateKilled kills (SIGKILL) a process migrating timeouts from
// JetStream to Temporal mid-way, then migrates again: each timeout is
// handled once, none early, none lost.
func TestMigrateKilled(t *testing.T) {
	n := migrateCount / 4
	m := startMigration(t, "migkill", n, 10*time.Second, 5*time.Second, 0, 0)
	srv, _ := servers(t)

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
	moved := 0
	for moved < n/3 {
		select {
		case l, ok := <-lines:
			if !ok || l == "done" {
				t.Fatalf("the child migration ended before it was killed (moved %d)", moved)
			}
			moved++
		case <-time.After(60 * time.Second):
			t.Fatalf("the child migration moved %d in 60s", moved)
		}
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	t.Logf("killed the migrating process after %d moves", moved)

	res := m.migrate(DefaultEngineName)
	// The timeout being moved at the kill is moved by the second run, or
	// was moved by the first (committed and carried out, not reported).
	if k := moved + res[saga.MigrateMoved] + res[saga.MigrateFired]; k != n && k != n-1 {
		t.Errorf("first run moved %d, second %v: want the %d timeouts moved (or fired) by one or the other", moved, res, n)
	}
	if k := m.listed(timeout.TransportEngine); k != 0 {
		t.Errorf("JetStream still lists %d timeouts after the second run", k)
	}
	m.check()
}
