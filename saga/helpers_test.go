package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestMain lets embedded.StartProcess re-execute this test binary as a
// nats-server child (TestTimeoutsSurviveServerKill).
func TestMain(m *testing.M) {
	embedded.RunChildIfRequested()
	os.Exit(m.Run())
}

// node is what one dispatcher process has: its own NATS connection, a
// broker and a store on it.
type node struct {
	nc     *nats.Conn
	broker *transport.Broker
	store  saga.Store
}

// newNode connects to url (reconnecting forever, so that it survives
// server restarts) and builds a broker and a KV store on the connection.
func newNode(t *testing.T, url string) *node {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return nodeOn(t, nc, kvstore.Config{}, 10*time.Second)
}

// nodeOn builds a broker and a KV store (cfg, created within wait) on nc,
// which it closes when the test ends.
func nodeOn(t *testing.T, nc *nats.Conn, cfg kvstore.Config, wait time.Duration) *node {
	t.Helper()
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc, transport.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	st, err := kvstore.New(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &node{nc: nc, broker: b, store: st}
}

// openQueue opens a queue on the node's broker.
func (n *node) openQueue(t *testing.T, cfg transport.QueueConfig) *transport.Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	q, err := n.broker.OpenQueue(ctx, cfg)
	if err != nil {
		t.Fatalf("open queue %s: %v", cfg.Name, err)
	}
	return q
}

// dispatcher makes a dispatcher on the node with quiet logs.
func (n *node) dispatcher(t *testing.T, store saga.Store, queue string, opts ...saga.Option) *saga.Dispatcher {
	t.Helper()
	if store == nil {
		store = n.store
	}
	d, err := saga.NewDispatcher(n.broker, store, queue, append([]saga.Option{saga.WithLogger(testutil.Logger())}, opts...)...)
	if err != nil {
		t.Fatalf("NewDispatcher: %v", err)
	}
	return d
}

// running is a dispatcher's Run in a goroutine.
type running struct {
	name   string
	cancel context.CancelFunc
	done   chan error
}

// run starts d.Run; the test's cleanup stops it and checks that Run
// returns nil.
func run(t *testing.T, d *saga.Dispatcher) *running { return runExpecting(t, d, nil) }

// runCrashing is run for a dispatcher whose connection the test closes
// (see crasher): Run may then return an error matching
// transport.ErrClosed, and must return nothing else.
func runCrashing(t *testing.T, d *saga.Dispatcher) *running {
	return runExpecting(t, d, transport.ErrClosed)
}

// runExpecting is run, where Run may also return an error matching
// closed, if not nil.
func runExpecting(t *testing.T, d *saga.Dispatcher, closed error) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	r := &running{name: t.Name() + " " + d.Queue(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() {
		start := time.Now()
		if err := r.wait(15 * time.Second); err != nil && (closed == nil || !errors.Is(err, closed)) {
			t.Errorf("Run: %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Logf("%s: Run took %v to return", r.name, took)
		}
	})
	return r
}

// wait cancels Run and waits at most within for it to return.
func (r *running) wait(within time.Duration) error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for a second wait
		return err
	case <-time.After(within):
		return fmt.Errorf("%s: Run did not return within %v of cancel", r.name, within)
	}
}

// ctxFor returns a context for one blocking call in a test.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// data loads the data of a saga instance; ok is false if it is missing.
func data[S any](t *testing.T, d *saga.Dispatcher, sagaName, id string) (s S, inst *saga.Instance, ok bool) {
	t.Helper()
	inst, err := d.Instance(ctxFor(t), sagaName, id)
	if errors.Is(err, saga.ErrNotFound) {
		return s, nil, false
	}
	if err != nil {
		t.Fatalf("Instance(%s, %.40q): %v", sagaName, id, err)
	}
	if len(inst.Data) > 0 {
		if err := json.Unmarshal(inst.Data, &s); err != nil {
			t.Fatalf("decoding %s/%.40q data %s: %v", sagaName, id, inst.Data, err)
		}
	}
	return s, inst, true
}

// peekAll returns every message stored in q, active and scheduled.
func peekAll(t *testing.T, q *transport.Queue) []*transport.Message {
	t.Helper()
	var out []*transport.Message
	for m, err := range q.Browse(ctxFor(t), 0) {
		if err != nil {
			t.Fatalf("browse %s: %v", q.Name(), err)
		}
		out = append(out, m)
	}
	return out
}

// queueEmpty explains why q still holds messages, or returns "".
func queueEmpty(t *testing.T, q *transport.Queue) string {
	t.Helper()
	ms := peekAll(t, q)
	if len(ms) == 0 {
		return ""
	}
	return fmt.Sprintf("queue %s holds %d messages (first: seq %d %s type %q)",
		q.Name(), len(ms), ms[0].Seq, ms[0].State, ms[0].Properties[saga.TypeProperty])
}

// stepEvent is one settled message as the StepDone hook saw it.
type stepEvent struct {
	Info   saga.StepInfo
	Result saga.StepResult
}

// stepLog records the steps of one or more dispatchers.
type stepLog struct {
	mu     sync.Mutex
	events []stepEvent
}

func (l *stepLog) hooks() saga.Hooks {
	return saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		l.mu.Lock()
		l.events = append(l.events, stepEvent{info, res})
		l.mu.Unlock()
	}}
}

// filter returns the events whose message type is typ ("" for all).
func (l *stepLog) filter(typ string) []stepEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []stepEvent
	for _, e := range l.events {
		if typ == "" || e.Info.MessageType == typ {
			out = append(out, e)
		}
	}
	return out
}

// Fault injection. A crash closes the node's NATS connection, so that
// its unacknowledged deliveries are redelivered after their lock and
// every later call fails, as if the process had died at that point.

var errCrashed = errors.New("test: dispatcher crashed")

type crasher struct {
	nc      *nats.Conn
	once    sync.Once
	crashed atomic.Bool
	done    chan struct{}
}

func newCrasher(nc *nats.Conn) *crasher { return &crasher{nc: nc, done: make(chan struct{})} }

func (c *crasher) crash() {
	c.once.Do(func() {
		c.crashed.Store(true)
		c.nc.Close()
		close(c.done)
	})
}

func (c *crasher) check() error {
	if c.crashed.Load() {
		return errCrashed
	}
	return nil
}

// putFault decides, for a Put of value, whether to crash before it is
// carried out, after it, or not at all.
type putFault func(key string, value []byte) (before, after bool)

// crashStore is a saga.Store that crashes its node at a chosen Put.
type crashStore struct {
	saga.Store
	c     *crasher
	fault putFault
}

func (s *crashStore) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	if err := s.c.check(); err != nil {
		return nil, 0, err
	}
	return s.Store.Load(ctx, key)
}

func (s *crashStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := s.c.check(); err != nil {
		return 0, err
	}
	var before, after bool
	if s.fault != nil {
		before, after = s.fault(key, value)
	}
	if before {
		s.c.crash()
		return 0, errCrashed
	}
	n, err := s.Store.Put(ctx, key, value, rev)
	if after && err == nil {
		s.c.crash()
		return 0, errCrashed
	}
	return n, err
}

func (s *crashStore) Delete(ctx context.Context, key string, rev uint64) error {
	if err := s.c.check(); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key, rev)
}

// crashScheduler is a timeout.Scheduler that crashes its node right after
// a chosen Schedule succeeded.
type crashScheduler struct {
	inner         timeout.Scheduler
	c             *crasher
	afterSchedule func(timeout.Timeout) bool
}

func (s *crashScheduler) Schedule(ctx context.Context, to timeout.Timeout) (timeout.Ref, error) {
	if err := s.c.check(); err != nil {
		return "", err
	}
	ref, err := s.inner.Schedule(ctx, to)
	if err == nil && s.afterSchedule != nil && s.afterSchedule(to) {
		s.c.crash()
		return "", errCrashed
	}
	return ref, err
}

func (s *crashScheduler) Cancel(ctx context.Context, ref timeout.Ref) error {
	if err := s.c.check(); err != nil {
		return err
	}
	return s.inner.Cancel(ctx, ref)
}

// hasOutbox reports whether an encoded saga record carries effects not
// yet carried out: true for the Put that commits a step with effects,
// false for the Put that clears them.
func hasOutbox(value []byte) bool {
	var rec struct {
		Outbox []json.RawMessage `json:"outbox"`
	}
	if err := json.Unmarshal(value, &rec); err != nil {
		panic(fmt.Sprintf("test: saga record is not JSON: %v", err))
	}
	return len(rec.Outbox) > 0
}

// rawSend sends m to q as is, for input no saga code would produce.
func rawSend(t *testing.T, q *transport.Queue, m *transport.Message) {
	t.Helper()
	if _, err := q.Send(ctxFor(t), m); err != nil {
		t.Fatalf("send %s: %v", m.MessageID, err)
	}
}

// fastRetry is the retry policy of tests where retries matter.
var fastRetry = saga.RetryPolicy{Immediate: 1, Delayed: 1, Backoff: func(int) time.Duration { return 200 * time.Millisecond }}

// startServer starts an embedded nats-server for one test, or fails it.
func startServer(t *testing.T) *embedded.Server { return testutil.StartServer(t, embedded.Options{}) }

// timeoutTooEarly says how a timeout handler on the default engine saw its
// timeout too early, "" if it did not: handled (Context.Now) before its
// due time due, Context.TimeoutDue other than due, or activated (the
// message's EnqueuedAt, by the server's clock on the same host) before
// the activation time its engine asked for (ScheduledAt) or more than the
// default engine's lead before due. Activation within the lead is the
// default engine's early activation (timeout.DefaultEarlyActivation on
// JetStream), which the dispatcher holds until due.
func timeoutTooEarly[S any](c *saga.Context[S], due time.Time) string {
	in := c.Incoming()
	var s string
	if c.Now().Before(due) {
		s += fmt.Sprintf("handled %v early; ", due.Sub(c.Now()))
	}
	if !c.TimeoutDue().Equal(due) {
		s += fmt.Sprintf("Context.TimeoutDue %v, requested for %v; ", c.TimeoutDue(), due)
	}
	if in.EnqueuedAt.Before(in.ScheduledAt) || in.EnqueuedAt.Before(due.Add(-timeout.DefaultEarlyActivation)) {
		s += fmt.Sprintf("activated %v before its due time (scheduled %v before); ", due.Sub(in.EnqueuedAt), due.Sub(in.ScheduledAt))
	}
	return s
}

// counterSaga counts the Incr messages of each instance.

type Incr struct{ ID string }

type counter struct{ Count int }

func counterSaga() *saga.Definition[counter] { return counterSagaWith(nil) }

// counterSagaWith is counterSaga whose handler calls before, if not nil,
// with the instance's ID, before it counts.
func counterSagaWith(before func(id string)) *saga.Definition[counter] {
	d := saga.Define[counter]("counter")
	saga.StartedBy(d, saga.By(func(m Incr) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ Incr) error {
			if before != nil {
				before(c.ID())
			}
			c.Data.Count++
			return nil
		})
	return d
}

// originalID returns the MessageID of the message a dead letter came
// from: a delayed retry has its own MessageID and carries the original's
// identity in a property.
func originalID(m *transport.Message) string {
	if origin, ok := m.Properties["jetsaga-origin"]; ok {
		return origin
	}
	return m.MessageID
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// remSaga requests a reminder timeout that later messages cancel, complete
// or probe; otherSaga, one timeout an hour ahead.

type RemStart struct {
	ID    string
	After time.Duration
}

type RemCancel struct{ ID string }

type RemDone struct{ ID string }

type RemProbe struct{ ID string }

type RemDue struct{}

type remData struct {
	H             saga.TimeoutHandle
	Due           time.Time
	Fired, Probes int
}

func remSaga(fired *atomic.Int64) *saga.Definition[remData] {
	d := saga.Define[remData]("reminder")
	saga.StartedBy(d, saga.By(func(m RemStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[remData], m RemStart) error {
			c.Data.Due = c.Now().Add(m.After)
			var err error
			c.Data.H, err = c.RequestTimeoutAt(c.Data.Due, RemDue{})
			return err
		})
	saga.Handles(d, saga.By(func(m RemCancel) string { return m.ID }),
		func(_ context.Context, c *saga.Context[remData], _ RemCancel) error {
			c.CancelTimeout(c.Data.H)
			return nil
		})
	saga.Handles(d, saga.By(func(m RemDone) string { return m.ID }),
		func(_ context.Context, c *saga.Context[remData], _ RemDone) error {
			c.MarkComplete()
			return nil
		})
	saga.Handles(d, saga.By(func(m RemProbe) string { return m.ID }),
		func(_ context.Context, c *saga.Context[remData], _ RemProbe) error {
			c.Data.Probes++
			return nil
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[remData], _ RemDue) error {
		fired.Add(1)
		c.Data.Fired++
		return nil
	})
	return d
}

type OtherStart struct{ ID string }

type OtherDue struct{}

func otherSaga() *saga.Definition[counter] {
	d := saga.Define[counter]("other")
	saga.StartedBy(d, saga.By(func(m OtherStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ OtherStart) error {
			_, err := c.RequestTimeout(time.Hour, OtherDue{})
			return err
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[counter], _ OtherDue) error {
		c.Data.Count++
		return nil
	})
	return d
}

// scheduledByID lists the timeouts waiting in d's queue for sagaName, by
// instance ID.
func scheduledByID(t *testing.T, d *saga.Dispatcher, sagaName string) map[string][]time.Time {
	t.Helper()
	out := map[string][]time.Time{}
	for st, err := range d.ScheduledTimeouts(ctxFor(t), sagaName) {
		if err != nil {
			t.Fatalf("ScheduledTimeouts: %v", err)
		}
		out[st.ID] = append(out[st.ID], st.At)
	}
	return out
}

// cacheSaga counts CacheIncr messages, 100 for a timeout one of them
// requested.

type CacheIncr struct {
	ID  string
	Arm bool          // request a timeout
	Due time.Duration // after this long
}

type CacheDue struct{}

type cacheData struct{ Count int }

func cacheSaga() *saga.Definition[cacheData] {
	d := saga.Define[cacheData]("cached")
	saga.StartedBy(d, saga.By(func(m CacheIncr) string { return m.ID }),
		func(_ context.Context, c *saga.Context[cacheData], m CacheIncr) error {
			c.Data.Count++
			if m.Arm {
				_, err := c.RequestTimeout(m.Due, CacheDue{})
				return err
			}
			return nil
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[cacheData], _ CacheDue) error {
		c.Data.Count += 100
		return nil
	})
	return d
}

// peekScheduled returns the scheduled messages of q.
func peekScheduled(t *testing.T, q *transport.Queue) []*transport.Message {
	t.Helper()
	var out []*transport.Message
	for _, m := range peekAll(t, q) {
		if m.State == transport.Scheduled {
			out = append(out, m)
		}
	}
	return out
}

// queueOnNewServer starts a server, connects a node to it and opens the
// queue qcfg describes there: the set-up of most tests of one dispatcher.
func queueOnNewServer(t *testing.T, qcfg transport.QueueConfig) (*node, *transport.Queue) {
	t.Helper()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	return n, n.openQueue(t, qcfg)
}
