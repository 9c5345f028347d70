package ordermachine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestOnJetStream runs the machine on an embedded nats-server with a
// processing service that answers the first request for o1 too late (it
// times out, is retried, and only the retry's answer completes the
// order) and faults o2's.
func TestOnJetStream(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatalf("starting an embedded nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := ordermachine.New(ordermachine.Config{ProcessTimeout: time.Second, History: 10})
	if err != nil {
		t.Fatal(err)
	}
	d, err := saga.NewDispatcher(broker, store, "orders", saga.WithSagas(o.Saga))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done; <-done })

	processing, err := broker.Queue(ctx, ordermachine.ProcessingQueue)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- process(runCtx, t, d, processing) }()

	for _, id := range []string{"o1", "o2"} {
		if _, err := d.Send(ctx, ordermachine.SubmitOrder{OrderID: id, OrderDate: time.Now(), Customer: "ann"}); err != nil {
			t.Fatal(err)
		}
		// The dispatcher runs steps concurrently: accept once the order
		// exists, or the acceptance could find no instance.
		testutil.AwaitTrue(t, 10*time.Second, id+" submitted", func() bool {
			_, err := d.Instance(ctx, "order", id)
			return err == nil
		})
		if _, err := d.Send(ctx, ordermachine.OrderAccepted{OrderID: id}); err != nil {
			t.Fatal(err)
		}
	}

	notifications, err := broker.Queue(ctx, ordermachine.NotificationsQueue)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for len(got) < 2 {
		ds, err := notifications.Receive(ctx, 2)
		if err != nil {
			inst, ierr := d.Instance(context.Background(), "order", "o1")
			if inst != nil {
				t.Logf("o1: %s %v", inst.Data, inst.Timeouts)
			}
			q, _ := broker.Queue(context.Background(), "orders")
			ms, _ := q.DeadLetterQueue().Peek(context.Background(), 0, 10)
			for _, m := range ms {
				t.Logf("dead letter %s %s", m.DeadLetterReason, m.DeadLetterDescription)
			}
			t.Fatalf("notifications so far %v: %v %v", got, err, ierr)
		}
		for _, del := range ds {
			switch del.Properties[saga.TypeProperty] {
			case saga.MessageName[ordermachine.OrderCompleted]():
				m, _ := saga.Decode[ordermachine.OrderCompleted](del.Message)
				got[m.OrderID] = m
			case saga.MessageName[ordermachine.OrderRejected]():
				m, _ := saga.Decode[ordermachine.OrderRejected](del.Message)
				got[m.OrderID] = m
			default:
				t.Errorf("unexpected notification %s", del.Properties[saga.TypeProperty])
			}
			_ = del.Complete(ctx)
		}
	}
	if got["o1"] != (ordermachine.OrderCompleted{OrderID: "o1"}) {
		t.Errorf("o1: %#v, want completed", got["o1"])
	}
	if got["o2"] != (ordermachine.OrderRejected{OrderID: "o2", Reason: "out of stock"}) {
		t.Errorf("o2: %#v, want rejected", got["o2"])
	}
	for _, id := range []string{"o1", "o2"} {
		if inst, err := d.Instance(ctx, "order", id); err == nil && !inst.Completed {
			t.Errorf("%s still running: %s", id, inst.Data)
		}
	}
}

// process is the processing service: it answers o1's first request only
// once it was retried, every other o1 request at once, and faults o2's.
func process(ctx context.Context, t *testing.T, d *saga.Dispatcher, q *transport.Queue) error {
	var late func()
	for ctx.Err() == nil {
		ds, err := q.Receive(ctx, 8)
		if err != nil {
			continue
		}
		for _, del := range ds {
			req, err := saga.Decode[ordermachine.ProcessOrder](del.Message)
			if err != nil {
				t.Errorf("processing request: %v", err)
				continue
			}
			reply := func(m any) {
				if _, err := d.SendTo(ctx, del.ReplyTo, m, saga.WithCorrelationID(del.CorrelationID)); err != nil && ctx.Err() == nil {
					t.Errorf("answer: %v", err)
				}
			}
			switch {
			case req.OrderID == "o2":
				reply(machine.NewFault(del.Message, "out of stock"))
			case req.Attempt == 1:
				// Held until the retry comes (the request timed out),
				// then answered just before the retry's answer: late.
				late = func() { reply(ordermachine.OrderProcessed{OrderID: req.OrderID}) }
			default:
				if late != nil {
					late()
				}
				reply(ordermachine.OrderProcessed{OrderID: req.OrderID})
			}
			_ = del.Complete(ctx)
		}
	}
	return nil
}
