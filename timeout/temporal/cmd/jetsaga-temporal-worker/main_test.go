package main

import (
	"context"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestWorkerDelivers runs the command against a Temporal dev server and
// an embedded nats-server, with a task queue, engine name and prefix of
// its own: a timeout scheduled by an engine with the same settings is
// delivered to its queue on time, and the worker stops when its context
// ends.
func TestWorkerDelivers(t *testing.T) {
	srv := temporaltest.New(t, temporaltest.Options{})
	ns, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)

	var logs testutil.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-temporal", srv.HostPort(), "-nats", ns.ClientURL(), "-prefix", "WORKERTEST",
			"-task-queue", "tq-worker", "-engine-name", "vault", "-log-level", "warn"}, &logs, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	case <-time.After(time.Minute):
		t.Fatal("worker not ready within a minute")
	}

	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := transport.NewJetStream(nc, transport.WithPrefix("WORKERTEST"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := temporal.New(srv.Client(t), temporal.WithTaskQueue("tq-worker"), temporal.WithEngineName("vault"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "worker-test"})
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(500 * time.Millisecond)
	ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: "w1", Queue: q.Name(), At: due, Message: &transport.Message{Body: []byte("w1")}})
	if err != nil {
		t.Fatal(err)
	}
	if ref.Engine() != "vault" {
		t.Errorf("ref %q, want engine vault", ref)
	}
	rctx, rcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer rcancel()
	ds, err := q.Receive(rctx, 1)
	if err != nil {
		t.Fatalf("not delivered: %v\n%s", err, logs.String())
	}
	if string(ds[0].Body) != "w1" || ds[0].EnqueuedAt.Before(due) {
		t.Errorf("delivered %q at %v, due %v", ds[0].Body, ds[0].EnqueuedAt, due)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop")
	}
}
