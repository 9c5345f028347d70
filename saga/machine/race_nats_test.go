package machine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/requestrace"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The race machine (internal/requestrace) sends one request per instance
// and reports which of Completed, TimeoutExpired and Late it handled.

var raceNames = requestrace.Names{Saga: "race", Asks: "asks", Outcomes: "outcomes"}

// TestRequestRacesTimeoutOnJetStream: 1,000 requests whose answers are
// sent from 500 ms before to 300 ms after their 2 s timeout, on an
// embedded nats-server: each instance handles exactly one of Completed
// and TimeoutExpired, every expired one handles its answer as Late, and
// nothing is dead-lettered or lost.
func TestRequestRacesTimeoutOnJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 1,000 requests on an embedded nats-server take about 20 s")
	}
	const n = 1000
	const timeout = 2 * time.Second
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	broker, err := transport.NewJetStream(nc, transport.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: "race"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := saga.NewDispatcher(broker, store, "orders", saga.WithSagas(requestrace.Machine(t, raceNames, timeout)),
		saga.WithConcurrency(32), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)

	// The responder answers each request between 500 ms before and
	// 300 ms after its timeout, counted from when it was sent.
	asks, err := broker.Queue(ctx, raceNames.Asks)
	if err != nil {
		t.Fatal(err)
	}
	requestrace.Respond(t, asks, timeout, func(i int) time.Duration { return time.Duration(i%801-500) * time.Millisecond },
		func(ctx context.Context, replyTo string, a requestrace.Answer, cid string) {
			if _, err := d.SendTo(ctx, replyTo, a, saga.WithCorrelationID(cid)); err != nil && t.Context().Err() == nil {
				t.Errorf("answer %s: %v", a.ID, err)
			}
		})

	outcomes, err := broker.Queue(ctx, raceNames.Outcomes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := d.Send(ctx, requestrace.Begin{ID: fmt.Sprintf("r%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	r := requestrace.Collect(t, ctx, outcomes, n, time.Minute, nil)
	r.Check(t, n)
	q, err := broker.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	requestrace.NoDeadLetters(t, ctx, q)
	t.Logf("outcomes: %v", r.Counts)
}

// TestRequestRacesTimeoutInSagatest is the same race on the virtual
// clock: 200 instances whose answers arrive from 100 ms before to 100 ms
// after their timeout, in 10 ms steps. An answer before the due time
// completes; one at or after it (the timeout fires first at its instant)
// is late.
func TestRequestRacesTimeoutInSagatest(t *testing.T) {
	const n = 200
	const timeout = 2 * time.Second
	d := requestrace.Machine(t, raceNames, timeout)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start := env.Now()
		for i := range n {
			env.Send(requestrace.Begin{ID: fmt.Sprintf("r%03d", i)})
		}
		cids := make(map[string]string)
		for _, m := range env.Messages("asks") {
			a, err := saga.Decode[requestrace.Ask](m)
			if err != nil {
				t.Fatal(err)
			}
			cids[a.ID] = m.CorrelationID
		}
		offset := func(i int) time.Duration { return time.Duration(i%21-10) * 10 * time.Millisecond }
		for step := -10; step <= 10; step++ {
			env.AdvanceTo(start.Add(timeout + time.Duration(step)*10*time.Millisecond))
			for i := range n {
				if offset(i) == time.Duration(step)*10*time.Millisecond {
					id := fmt.Sprintf("r%03d", i)
					env.Send(requestrace.Answer{ID: id}, saga.WithCorrelationID(cids[id]))
				}
			}
		}
		got := requestrace.Outcomes(sagatest.Sent[requestrace.Outcome](env, raceNames.Outcomes)).Got
		for i := range n {
			id := fmt.Sprintf("r%03d", i)
			want := []string{"expired", "late"}
			if offset(i) < 0 {
				want = []string{"completed"}
			}
			if !slices.Equal(got[id], want) {
				t.Errorf("%s (answer at %+v): outcomes %v, want %v", id, offset(i), got[id], want)
			}
			env.AssertCompleted(t, d, id)
		}
	})
}
