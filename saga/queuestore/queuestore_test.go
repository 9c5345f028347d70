package queuestore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/saga/storetest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestConformance runs the Store conformance suite on the state of a
// queue of its own per subtest, on JetStream and in memory.
func TestConformance(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*transport.Broker{"JetStream": js, "Memory": mem} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			storetest.Run(t, func(t *testing.T) saga.Store {
				q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "conformance-" + strconv.Itoa(int(n.Add(1)))})
				if err != nil {
					t.Fatal(err)
				}
				return queuestore.New(b, q.Name())
			}, storetest.Features{})
		})
	}
}

// The saga of the tests: started with two timeouts, one due soon and one
// in an hour; the first completes it, which cancels the other.
type reminder struct{ Fired time.Time }

type (
	remind   struct{ ID string }
	soon     struct{}
	nextHour struct{}
)

func reminderSaga(due time.Duration) *saga.Definition[reminder] {
	def := saga.Define[reminder]("reminder")
	saga.StartedBy(def, saga.By(func(m remind) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[reminder], m remind) error {
			if _, err := c.RequestTimeout(due, soon{}); err != nil {
				return err
			}
			_, err := c.RequestTimeout(time.Hour, nextHour{})
			return err
		})
	saga.OnTimeout(def, func(ctx context.Context, c *saga.Context[reminder], _ soon) error {
		c.Data.Fired = time.Now()
		c.MarkComplete()
		return nil
	})
	saga.OnTimeout(def, func(ctx context.Context, c *saga.Context[reminder], _ nextHour) error { return nil })
	return def
}

// publishes records the messages published on a subject, with the
// atomic batch each came in ("" if none).
type publishes struct {
	mu      sync.Mutex
	batches map[string][]string // subject kind → batch IDs
}

func watch(t *testing.T, nc *nats.Conn, subjects map[string]string) *publishes {
	t.Helper()
	p := &publishes{batches: make(map[string][]string)}
	for kind, subj := range subjects {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.batches[kind] = append(p.batches[kind], m.Header.Get("Nats-Batch-Id"))
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *publishes) of(kind string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.batches[kind]...)
}

// A step's state and the timeouts it requests are written in one atomic
// batch: every schedule the dispatcher publishes comes in the batch of a
// state record. Not on a queue of one replica with file storage, where
// each batch would be staged in a synced file: there no schedule comes in
// a batch. Either way the timeouts behave as with any store: the first
// fires on time and completes the instance, whose completion cancels the
// second.
func TestStepCommitsTimeoutsInOneWrite(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testStepCommits(t, true) })
	t.Run("file", func(t *testing.T) { testStepCommits(t, false) })
}

func testStepCommits(t *testing.T, inMemory bool) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := transport.NewJetStream(nc, transport.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	const queue, instances = "reminders", 20
	var mu sync.Mutex
	fired := make(map[string]bool) // instances whose first timeout was handled
	var early []string
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, r saga.StepResult) {
		if info.TimeoutDue.IsZero() || r.Outcome != saga.Handled {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fired[info.ID] = true
		if info.StartedAt.Before(info.TimeoutDue) {
			early = append(early, info.ID)
		}
	}}
	d, err := saga.NewDispatcher(b, queuestore.New(b, queue), queue,
		saga.WithSagas(reminderSaga(time.Second)), saga.WithLogger(testutil.Logger()), saga.WithHooks(hooks),
		saga.WithQueueConfig(transport.QueueConfig{MemoryStorage: inMemory}))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	pub := watch(t, nc, map[string]string{
		"schedule": "JETSAGA.S." + queue + ".0.*.s",
		"state":    "JETSAGA.V." + queue + ".0.>",
	})
	testutil.RunUntilCleanup(t, d.Run)
	for i := range instances {
		if _, err := d.Send(t.Context(), remind{ID: strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := b.Queue(t.Context(), queue)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 30*time.Second, func() string {
		mu.Lock()
		n := len(fired)
		mu.Unlock()
		if n < instances {
			return strconv.Itoa(n) + " of " + strconv.Itoa(instances) + " instances had their first timeout handled"
		}
		c, err := q.Counts(t.Context())
		if err != nil {
			return err.Error()
		}
		if c.Scheduled != 0 {
			return strconv.FormatInt(c.Scheduled, 10) + " messages still scheduled: the completion cancels the hour's timeout"
		}
		return ""
	})
	if len(early) > 0 {
		t.Errorf("timeouts handled before their due time: %v", early)
	}
	scheds, states := pub.of("schedule"), pub.of("state")
	inState := make(map[string]bool)
	for _, id := range states {
		if id != "" {
			inState[id] = true
		}
	}
	if len(scheds) != 2*instances {
		t.Errorf("%d schedules published, want %d (two timeouts per instance, each once)", len(scheds), 2*instances)
	}
	for i, id := range scheds {
		switch {
		case inMemory && (id == "" || !inState[id]):
			t.Errorf("schedule %d of %d published outside a state record's batch (batch %q)", i+1, len(scheds), id)
		case !inMemory && id != "":
			t.Errorf("schedule %d of %d published in batch %q on a queue of one replica with file storage", i+1, len(scheds), id)
		}
	}
}
