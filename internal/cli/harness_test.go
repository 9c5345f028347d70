package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The demo workload: an order saga that requests two timeouts when an
// order is placed, completes when it is paid, and fails for good (a dead
// letter) while "broken" for orders marked Fragile.

type OrderPlaced struct {
	Order   string
	Fragile bool
}
type OrderPaid struct{ Order string }
type remind struct{}
type expire struct{}

func (OrderPlaced) MessageName() string { return "shop.OrderPlaced" }
func (OrderPaid) MessageName() string   { return "shop.OrderPaid" }
func (remind) MessageName() string      { return "shop.Remind" }
func (expire) MessageName() string      { return "shop.Expire" }

type orderState struct {
	Order  string
	Paid   bool
	Remind saga.TimeoutHandle
}

// workload is a dispatcher running the order saga on an embedded server.
type workload struct {
	t      *testing.T
	srv    *embedded.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	broker *transport.Broker
	d      *saga.Dispatcher
	prefix string
	bucket string
	queue  string
	// stateQueue: the records are in this queue's state, not the bucket.
	stateQueue string

	broken  atomic.Bool
	mu      sync.Mutex
	handled map[string]int // "placed/o1" → committed steps (StepDone, Handled)
	done    []saga.StepInfo
	results []saga.StepResult
}

func newWorkload(t *testing.T, hooks ...saga.Hooks) *workload {
	t.Helper()
	return newWorkloadWith(t, nil, hooks...)
}

// newWorkloadWith is newWorkload with the dispatcher's timeout engine
// made by timeouts (nil: the default).
func newWorkloadWith(t *testing.T, timeouts func(*transport.Broker) timeout.Scheduler, hooks ...saga.Hooks) *workload {
	t.Helper()
	return startWorkload(t, timeouts, false, hooks...)
}

// startWorkload is newWorkloadWith, with the order saga's records in its
// queue's state (saga/queuestore) if inQueue, and the commands then run
// with --state-queue.
func startWorkload(t *testing.T, timeouts func(*transport.Broker) timeout.Scheduler, inQueue bool, hooks ...saga.Hooks) *workload {
	t.Helper()
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &workload{t: t, srv: srv, nc: nc, prefix: "OPS", bucket: "ops_sagas", queue: "orders", handled: map[string]int{}}
	w.broken.Store(true)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.broker, err = transport.NewJetStream(nc, transport.WithPrefix(w.prefix), transport.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.broker.Close() })
	w.js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var store saga.Store
	if inQueue {
		w.stateQueue = w.queue
		store = queuestore.New(w.broker, w.queue)
	} else if store, err = kvstore.New(ctx, w.js, kvstore.Config{Bucket: w.bucket}); err != nil {
		t.Fatal(err)
	}
	opts := []saga.Option{saga.WithSagas(w.orderSaga()), saga.WithLogger(logger), saga.WithRetry(saga.NoRetry),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
			w.mu.Lock()
			w.done = append(w.done, info)
			w.results = append(w.results, res)
			if k, ok := stepKeys[info.MessageType]; ok && res.Outcome == saga.Handled {
				w.handled[k+"/"+info.ID]++ // committed
			}
			w.mu.Unlock()
		}})}
	if timeouts != nil {
		opts = append(opts, saga.WithTimeouts(timeouts(w.broker)))
	}
	for _, h := range hooks {
		opts = append(opts, saga.WithHooks(h))
	}
	w.d, err = saga.NewDispatcher(w.broker, store, w.queue, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.d.Open(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, w.d.Run)
	return w
}

// dispatcher runs a second dispatcher beside the order saga's, on the
// workload's server, prefix and bucket: on queue, with opts (the sagas
// it runs among them), until the test ends.
func (w *workload) dispatcher(queue string, opts ...saga.Option) *saga.Dispatcher {
	w.t.Helper()
	store, err := kvstore.New(w.t.Context(), w.js, kvstore.Config{Bucket: w.bucket})
	if err != nil {
		w.t.Fatal(err)
	}
	d, err := saga.NewDispatcher(w.broker, store, queue, append([]saga.Option{saga.WithLogger(testutil.Logger())}, opts...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	testutil.RunUntilCleanup(w.t, d.Run)
	return d
}

// sendAll sends msgs with d, in order.
func sendAll(t *testing.T, d *saga.Dispatcher, msgs ...any) {
	t.Helper()
	for _, m := range msgs {
		if _, err := d.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *workload) orderSaga() saga.Saga {
	d := saga.Define[orderState]("order")
	saga.Index(d, "order", func(s orderState) string { return s.Order }, saga.Unique())
	saga.Index(d, "shop", func(s orderState) string { return "main" })
	saga.StartedBy(d, saga.By(func(m OrderPlaced) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m OrderPlaced) error {
			if m.Fragile && w.broken.Load() {
				return saga.Permanent(fmt.Errorf("order %s: the warehouse service refuses fragile goods", m.Order))
			}
			c.Data.Order = m.Order
			h, err := c.RequestTimeout(time.Hour, remind{})
			if err != nil {
				return err
			}
			c.Data.Remind = h
			if _, err := c.RequestTimeout(2*time.Hour, expire{}); err != nil {
				return err
			}
			return nil
		})
	saga.Handles(d, saga.By(func(m OrderPaid) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m OrderPaid) error {
			c.Data.Paid = true
			c.MarkComplete()
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[orderState], _ remind) error { return nil })
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[orderState], _ expire) error {
		c.MarkComplete()
		return nil
	})
	return d
}

// stepKeys name the committed steps handledCount counts.
var stepKeys = map[string]string{"shop.OrderPlaced": "placed", "shop.OrderPaid": "paid"}

func (w *workload) handledCount(k string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.handled[k]
}

// outcomes counts StepDone outcomes of messages of type typ.
func (w *workload) outcomes(typ string) map[saga.Outcome]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[saga.Outcome]int{}
	for i, info := range w.done {
		if info.MessageType == typ {
			out[w.results[i].Outcome]++
		}
	}
	return out
}

func (w *workload) send(m any, opts ...saga.SendOption) {
	w.t.Helper()
	if _, err := w.d.Send(context.Background(), m, opts...); err != nil {
		w.t.Fatal(err)
	}
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the jetsaga command in-process against the workload's server.
func (w *workload) run(args ...string) result {
	return w.runWith(nil, "", args...)
}

func (w *workload) runWith(opts []Option, stdin string, args ...string) result {
	w.t.Helper()
	var out, errb bytes.Buffer
	full := []string{"--server", w.srv.ClientURL(), "--prefix", w.prefix, "--bucket", w.bucket}
	if w.stateQueue != "" {
		full = []string{"--server", w.srv.ClientURL(), "--prefix", w.prefix, "--state-queue", w.stateQueue}
	}
	full = append(full, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, full, strings.NewReader(stdin), &out, &errb, opts...)
	return result{out.String(), errb.String(), code}
}

// must runs a command that must exit with code.
func (w *workload) must(code int, args ...string) result {
	w.t.Helper()
	r := w.run(args...)
	if r.code != code {
		w.t.Fatalf("jetsaga %s: want exit %d, got %v", strings.Join(args, " "), code, r)
	}
	return r
}

// jsonOf runs a --json command that must succeed and decodes its output.
func jsonOf[T any](w *workload, code int, args ...string) T {
	w.t.Helper()
	r := w.must(code, append(args, "--json")...)
	var v T
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		w.t.Fatalf("jetsaga %s --json: %v\n%v", strings.Join(args, " "), err, r)
	}
	if dec.More() {
		w.t.Fatalf("jetsaga %s --json: trailing output\n%v", strings.Join(args, " "), r)
	}
	return v
}

func (w *workload) queueHandle(name string) *transport.Queue {
	w.t.Helper()
	q, err := w.broker.Queue(context.Background(), name)
	if err != nil {
		w.t.Fatal(err)
	}
	return q
}

// count of messages in q (and its DLQ) by browsing.
func browseCount(t *testing.T, q *transport.Queue) int {
	t.Helper()
	n := 0
	for _, err := range q.Browse(context.Background(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
	return v
}

// regexpLine reports whether some line of s matches the expression.
func regexpLine(s, expr string) bool {
	re := regexp.MustCompile(expr)
	for _, line := range strings.Split(s, "\n") {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}
