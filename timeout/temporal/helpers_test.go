package temporal

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The package's tests share one Temporal dev server (with the search
// attributes registered) and one embedded nats-server, started on first
// use; the restart test starts its own file-backed server.
var shared struct {
	once     sync.Once
	temporal *temporaltest.Server
	nats     *embedded.Server
	err      error
}

func TestMain(m *testing.M) {
	if os.Getenv(envChildWorker) != "" {
		os.Exit(runChildWorker())
	}
	if os.Getenv(envChildMigrate) != "" {
		os.Exit(runChildMigrate())
	}
	code := m.Run()
	if shared.temporal != nil {
		shared.temporal.Stop()
	}
	if shared.nats != nil {
		shared.nats.Shutdown()
	}
	os.Exit(code)
}

func servers(t *testing.T) (*temporaltest.Server, *embedded.Server) {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		shared.temporal, shared.err = temporaltest.Start(ctx, temporaltest.Options{SearchAttributes: searchAttributes}, t.Logf)
		if shared.err != nil {
			return
		}
		shared.nats, shared.err = embedded.Start(embedded.Options{})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.temporal, shared.nats
}

var searchAttributes = map[string]string{
	SearchAttributeQueue.GetName():    "Keyword",
	SearchAttributeSaga.GetName():     "Keyword",
	SearchAttributeInstance.GetName(): "Keyword",
}

// broker returns a JetStream broker on nats-server srv that t closes.
func broker(t *testing.T, srv *embedded.Server) *transport.Broker {
	t.Helper()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); nc.Close() })
	return b
}

var taskQueues atomic.Int64

// newTaskQueue returns a task queue of t's own, so that its workers and
// listings see only its timeouts.
func newTaskQueue() string {
	return fmt.Sprintf("tq-%d-%d", time.Now().UnixNano()%1e9, taskQueues.Add(1))
}

// servedEngine returns an engine on a task queue of its own, with a
// worker serving it until t ends, and the task queue's name. opts go to
// both the worker and the engine.
func servedEngine(t *testing.T, c client.Client, b *transport.Broker, opts ...Option) (*Engine, string) {
	t.Helper()
	tq := newTaskQueue()
	opts = append([]Option{WithTaskQueue(tq)}, opts...)
	startWorker(t, c, b, opts...)
	e, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e, tq
}

// startWorker runs a worker on c and b with opts until t ends.
func startWorker(t *testing.T, c client.Client, b *transport.Broker, opts ...Option) {
	t.Helper()
	opts = append([]Option{WithLogger(quietLogger()), WithWorkerOptions(worker.Options{})}, opts...)
	w, err := NewWorker(c, b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// receive returns the next message of q within d, completed, or nil.
func receive(t *testing.T, q *transport.Queue, d time.Duration) *transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	ds, err := q.Receive(ctx, 1)
	if err != nil {
		return nil
	}
	if err := ds[0].Complete(t.Context()); err != nil {
		t.Fatal(err)
	}
	return ds[0]
}
