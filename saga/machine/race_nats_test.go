package machine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The race machine sends one request per instance and reports which of
// Completed, TimeoutExpired and Late it handled.

type (
	Begin   struct{ ID string }
	Ask     struct{ ID string }
	Answer  struct{ ID string }
	Outcome struct {
		ID   string
		What string
	}
)

func raceMachine(t testing.TB, timeout time.Duration) *saga.Definition[order] {
	t.Helper()
	m := machine.New[order]("race")
	waiting, expired := m.State("Waiting"), m.State("Expired")
	begin := machine.NewEvent(m, saga.By(func(e Begin) string { return e.ID }))
	ask := machine.NewRequest(m, "Ask", "asks", timeout,
		func(c *saga.Context[order]) Ask { return Ask{ID: c.ID()} },
		saga.By(func(e Answer) string { return e.ID }))
	report := func(what string) func(ctx context.Context, c *saga.Context[order], _ Answer) error {
		return func(ctx context.Context, c *saga.Context[order], _ Answer) error {
			return c.Send("outcomes", Outcome{ID: c.ID(), What: what})
		}
	}
	m.Initially(machine.When(begin).Request(ask).TransitionTo(waiting))
	m.During(waiting,
		machine.When(ask.Completed).Then(report("completed")).Finalize(),
		machine.When(ask.TimeoutExpired).
			Then(func(ctx context.Context, c *saga.Context[order], _ machine.Expired) error {
				return c.Send("outcomes", Outcome{ID: c.ID(), What: "expired"})
			}).
			TransitionTo(expired))
	m.During(expired, machine.When(ask.Late).Then(report("late")).Finalize())
	return m.MustBuild()
}

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
	d, err := saga.NewDispatcher(broker, store, "orders", saga.WithSagas(raceMachine(t, timeout)),
		saga.WithConcurrency(32), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)

	// The responder answers each request after a delay around the timeout.
	asks, err := broker.Queue(ctx, "asks")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	testutil.RunUntilCleanup(t, func(ctx context.Context) error {
		i := 0
		for ctx.Err() == nil {
			ds, err := asks.Receive(ctx, 64)
			if err != nil {
				continue
			}
			for _, del := range ds {
				req, err := saga.Decode[Ask](del.Message)
				if err != nil {
					t.Errorf("request: %v", err)
					continue
				}
				// Answer between 500 ms before and 300 ms after the
				// request's timeout, counted from when it was sent.
				offset := time.Duration(i%801-500) * time.Millisecond
				delay := time.Until(del.EnqueuedAt.Add(timeout + offset))
				i++
				replyTo, cid := del.ReplyTo, del.CorrelationID
				wg.Add(1)
				time.AfterFunc(delay, func() {
					defer wg.Done()
					if _, err := d.SendTo(context.WithoutCancel(ctx), replyTo, Answer(req), saga.WithCorrelationID(cid)); err != nil && ctx.Err() == nil {
						t.Errorf("answer %s: %v", req.ID, err)
					}
				})
				if err := del.Complete(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("complete: %v", err)
				}
			}
		}
		return nil
	})

	outcomes, err := broker.Queue(ctx, "outcomes")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := d.Send(ctx, Begin{ID: fmt.Sprintf("r%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	got := make(map[string][]string)
	counts := make(map[string]int)
	testutil.Await(t, time.Minute, func() string {
		rctx, stop := context.WithTimeout(ctx, time.Second)
		defer stop()
		ds, err := outcomes.Receive(rctx, 256)
		if err != nil && rctx.Err() == nil {
			return err.Error()
		}
		for _, del := range ds {
			o, err := saga.Decode[Outcome](del.Message)
			if err != nil {
				return err.Error()
			}
			got[o.ID] = append(got[o.ID], o.What)
			counts[o.What]++
			_ = del.Complete(ctx)
		}
		if counts["completed"]+counts["expired"] < n || counts["late"] < counts["expired"] {
			return fmt.Sprintf("outcomes so far: %v", counts)
		}
		return ""
	})
	for id, whats := range got {
		switch {
		case len(whats) == 1 && whats[0] == "completed":
		case len(whats) == 2 && whats[0] == "expired" && whats[1] == "late":
		default:
			t.Errorf("%s: outcomes %v, want [completed] or [expired late]", id, whats)
		}
	}
	if len(got) != n {
		t.Errorf("%d instances reported, want %d", len(got), n)
	}
	if counts["completed"] == 0 || counts["expired"] == 0 {
		t.Errorf("outcomes %v: want both sides of the race", counts)
	}
	q, err := broker.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if ms, err := q.DeadLetterQueue().Peek(ctx, 0, 10); err != nil || len(ms) > 0 {
		for _, m := range ms {
			t.Errorf("dead letter: %s %s", m.DeadLetterReason, m.DeadLetterDescription)
		}
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("outcomes: %v", counts)
}

// TestRequestRacesTimeoutInSagatest is the same race on the virtual
// clock: 200 instances whose answers arrive from 100 ms before to 100 ms
// after their timeout, in 10 ms steps. An answer before the due time
// completes; one at or after it (the timeout fires first at its instant)
// is late.
func TestRequestRacesTimeoutInSagatest(t *testing.T) {
	const n = 200
	const timeout = 2 * time.Second
	d := raceMachine(t, timeout)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start := env.Now()
		for i := range n {
			env.Send(Begin{ID: fmt.Sprintf("r%03d", i)})
		}
		cids := make(map[string]string)
		for _, m := range env.Messages("asks") {
			a, err := saga.Decode[Ask](m)
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
					env.Send(Answer{ID: id}, saga.WithCorrelationID(cids[id]))
				}
			}
		}
		got := make(map[string][]string)
		for _, o := range sagatest.Sent[Outcome](env, "outcomes") {
			got[o.ID] = append(got[o.ID], o.What)
		}
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
