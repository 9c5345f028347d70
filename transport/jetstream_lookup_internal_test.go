package transport

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport/embedded"
)

// An activation whose cancel record landed as it activated must not be
// delivered, and while the lookup of that record fails the receiver
// cannot tell: it keeps every activation of the pull back, without
// counting a delivery, until the lookup answers. A real server does not
// fail on demand; lookupFault does. Both lookups are covered: one
// multi_last direct get per pull (streams with one replica), and one get
// per activation from the leader (replicated streams).
func TestCancelRecordLookupFailureKeepsActivations(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	for _, replicated := range []bool{false, true} {
		t.Run("replicated="+strconv.FormatBool(replicated), func(t *testing.T) {
			testLookupFailure(t, srv, replicated)
		})
	}
}

// connectBroker returns a connection to srv and a broker over it, both
// closed when the test ends.
func connectBroker(t *testing.T, srv *embedded.Server) (*nats.Conn, *Broker) {
	t.Helper()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	b, err := NewJetStream(nc)
	if err != nil {
		t.Fatalf("NewJetStream: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return nc, b
}

func testLookupFailure(t *testing.T, srv *embedded.Server, replicated bool) {
	nc, b := connectBroker(t, srv)
	ctx := t.Context()
	name := "lookup" + strconv.FormatBool(replicated)
	q, err := b.OpenQueue(ctx, QueueConfig{Name: name, MaxDeliveryCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	jq := q.d.(*jsQueue)
	// The per-activation lookup from the leader, as on a replicated
	// stream (it works on one replica too).
	jq.parts[0].replicated = replicated

	var failing atomic.Bool
	var faults atomic.Int64
	failing.Store(true)
	jq.lookupFault = func() error {
		if !failing.Load() {
			return nil
		}
		faults.Add(1)
		return errors.New("injected: cancel record lookup timed out")
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(300 * time.Millisecond)
	cancelled, err := q.Schedule(ctx, &Message{MessageID: "cancelled", Body: []byte("cancelled")}, due)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Schedule(ctx, &Message{MessageID: "kept", Body: []byte("kept")}, due); err != nil {
		t.Fatal(err)
	}
	sched, err := js.Stream(ctx, "JETSAGA_S_"+name+"_0")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sched.GetMsg(ctx, LocalSeq(cancelled))
	if err != nil {
		t.Fatal(err)
	}
	// Both activate, unreceived.
	queue, err := js.Stream(ctx, "JETSAGA_Q_"+name+"_0")
	if err != nil {
		t.Fatal(err)
	}
	await(t, 10*time.Second, "both activations in the queue stream", func() bool {
		info, err := queue.Info(ctx)
		return err == nil && info.State.Msgs == 2
	})
	// A cancel record for "cancelled" that landed as it activated: its
	// Cancel returned nil.
	rec := &nats.Msg{Subject: strings.TrimSuffix(raw.Subject, ".s") + ".x." + strconv.FormatUint(LocalSeq(cancelled), 10) + "." + cancelWriteToken, Header: nats.Header{}}
	rec.Header.Set(hdrCancelled, "1")
	if _, err := js.PublishMsg(ctx, rec); err != nil {
		t.Fatal(err)
	}

	// While the lookup fails, nothing is delivered; the receiver keeps
	// trying.
	await(t, 20*time.Second, "the receiver to retry the failing lookup", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		ds, err := q.Receive(rctx, 10)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range ds {
			t.Fatalf("delivered %q (DeliveryCount %d) while the cancel record lookup failed", d.Body, d.DeliveryCount)
		}
		return faults.Load() >= 3
	})

	// Once it answers: the activation not cancelled arrives, first, with
	// DeliveryCount 1; the cancelled one never does, and is gone.
	failing.Store(false)
	var got *Delivery
	await(t, 20*time.Second, "the activation not cancelled once the lookup answers", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ds, err := q.Receive(rctx, 10)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range ds {
			if string(d.Body) != "kept" {
				t.Fatalf("delivered %q (DeliveryCount %d), whose Cancel returned nil", d.Body, d.DeliveryCount)
			}
			got = d
		}
		return got != nil
	})
	if got.DeliveryCount != 1 {
		t.Errorf("first delivery after the lookup failed: DeliveryCount %d, want 1", got.DeliveryCount)
	}
	if err := got.Complete(ctx); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	await(t, 10*time.Second, "the queue stream to be empty", func() bool {
		info, err := queue.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}

// On a replicated partition the cancel record lookups of one pull's
// activations (a get from the leader each) run at once: one after the
// other, a pull of eight on a busy 3-node cluster took up to 160 ms, and
// a receive over several partitions held the others' messages for them
// (issue 47). lookupFault stands for the lookup here: each waits, up to a
// second, for another to be in flight.
func TestReplicatedLookupsAtOnce(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, b := connectBroker(t, srv)
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, QueueConfig{Name: "lookups"})
	if err != nil {
		t.Fatal(err)
	}
	jq := q.d.(*jsQueue)
	jq.parts[0].replicated = true // the per-activation lookup from the leader
	const n = 4
	var (
		mu             sync.Mutex
		inFlight, most int
		two            = make(chan struct{}) // closed once two were in flight
	)
	jq.lookupFault = func() error {
		mu.Lock()
		if inFlight++; inFlight > most {
			if most = inFlight; most == 2 {
				close(two)
			}
		}
		mu.Unlock()
		select {
		case <-two:
		case <-time.After(time.Second):
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}
	due := time.Now().Add(200 * time.Millisecond)
	for i := range n {
		if _, err := q.Schedule(ctx, &Message{Body: []byte(strconv.Itoa(i))}, due); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	queue, err := js.Stream(ctx, "JETSAGA_Q_lookups_0")
	if err != nil {
		t.Fatal(err)
	}
	await(t, 10*time.Second, "the activations in the queue stream", func() bool {
		info, err := queue.Info(ctx)
		return err == nil && info.State.Msgs == n
	})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := q.Receive(rctx, n)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(ds) < 2 {
		t.Fatalf("received %d activations in one receive, want at least 2 for this test", len(ds))
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("the lookups of %d activations of one pull ran one at a time (at most %d at once)", len(ds), most)
	}
	for _, d := range ds {
		if err := d.Complete(ctx); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
}

// await polls cond every 10 ms until it holds, failing the test after
// timeout.
func await(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still waiting for %s", timeout, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
