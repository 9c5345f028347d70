package saga_test

// Stage step (step.go, effects.go behind context.go): one step of one
// instance: what a handler asks for checked at the call and before commit,
// and a timeout made stale by a step that committed first dropped.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// TestStaleTimeoutRacingStep settles the messages by hand, in the order
// that makes the race happen: the timeout has activated and been received
// when the step that completes the saga, or cancels the timeout, commits.
// The timeout must then be dropped, never handled.
func TestStaleTimeoutRacingStep(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for _, tc := range []struct {
		name string
		then any
	}{
		{"completed", RemDone{ID: "r-completed"}},
		{"cancelled", RemCancel{ID: "r-cancelled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, srv.ClientURL())
			qcfg := transport.QueueConfig{Name: "stale-" + tc.name, LockDuration: 10 * time.Second}
			q := n.openQueue(t, qcfg)
			var fired atomic.Int64
			var log stepLog
			d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(remSaga(&fired)), saga.WithQueueConfig(qcfg), saga.WithHooks(log.hooks()))
			ctx := ctxFor(t)
			receive := func(want int) map[string]*transport.Delivery {
				t.Helper()
				out := map[string]*transport.Delivery{}
				for len(out) < want {
					ds, err := q.Receive(ctx, want-len(out))
					if err != nil {
						t.Fatalf("receive: %v (have %d of %d)", err, len(out), want)
					}
					for _, del := range ds {
						out[del.Properties[saga.TypeProperty]] = del
					}
				}
				return out
			}

			// Each subtest has its own instance: messages without a MessageID
			// are identified by queue sequence number only, so the second
			// subtest's first message would look like a redelivery of the
			// first's to a shared instance (see the report).
			id := "r-" + tc.name
			if _, err := d.Send(ctx, RemStart{ID: id, After: 200 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			d.Handle(ctx, receive(1)[saga.MessageName[RemStart]()])
			testutil.Await(t, 10*time.Second, func() string {
				for _, m := range peekAll(t, q) {
					if m.State == transport.Active && m.Properties[saga.TypeProperty] == saga.MessageName[RemDue]() {
						return ""
					}
				}
				return "timeout not activated yet"
			})
			if _, err := d.Send(ctx, tc.then); err != nil {
				t.Fatal(err)
			}
			got := receive(2)
			d.Handle(ctx, got[fmt.Sprintf("%T", tc.then)])
			d.Handle(ctx, got[saga.MessageName[RemDue]()])

			ev := log.filter(saga.MessageName[RemDue]())
			if len(ev) != 1 || ev[0].Result.Outcome != saga.Dropped {
				t.Errorf("timeout steps %+v, want one, %s", ev, saga.Dropped)
			}
			if n := fired.Load(); n != 0 {
				t.Errorf("timeout handler ran %d times after the saga was %s", n, tc.name)
			}
			for _, e := range log.filter("") {
				if e.Result.Err != nil {
					t.Errorf("step %s: %v", e.Info.MessageType, e.Result.Err)
				}
			}
			r, inst, ok := data[remData](t, d, "reminder", id)
			switch {
			case !ok:
				t.Error("instance gone; want its record (a tombstone if completed)")
			case tc.name == "completed" && !inst.Completed:
				t.Errorf("instance %+v not completed", inst)
			case r.Fired != 0 || len(inst.Timeouts) != 0:
				t.Errorf("instance %+v (data %+v): want no timeout handled and none pending", inst, r)
			}
			if why := queueEmpty(t, q); why != "" {
				t.Error(why)
			}
		})
	}
}

type PStart struct{ ID, Note string }

type POut struct{ ID, Note string }

// TestInvalidEffectDoesNotPoisonInstance: an effect the transport
// refuses (here a property value with a control character, a message too
// large for the server, or an instance ID with a control character, which
// timeouts carry as a property) fails its step permanently before commit:
// the message is dead-lettered, its state change is not committed, and
// later messages for the instance are handled. (Committed, such an effect
// would fail on every try to carry it out, and so would every later step
// of the instance, each of which first carries out the stuck outbox.)
func TestInvalidEffectDoesNotPoisonInstance(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())

	t.Run("property", func(t *testing.T) {
		// A property value with a control character.
		dl := poisonCase(t, n, "poison", "bad\x01", func(m PStart) (POut, []saga.SendOption) {
			return POut(m), []saga.SendOption{saga.WithProperty("note", m.Note)}
		})
		if dl.DeadLetterReason != saga.ReasonPermanent {
			t.Errorf("reason %q (%.120s), want %q", dl.DeadLetterReason, dl.DeadLetterDescription, saga.ReasonPermanent)
		}
	})

	// A message too large for the server is refused before commit too.
	t.Run("oversized", func(t *testing.T) {
		dl := poisonCase(t, n, "big", "huge", func(m PStart) (POut, []saga.SendOption) {
			if m.Note == "huge" {
				m.Note = strings.Repeat("x", 2<<20) // the embedded server takes 1 MiB
			}
			return POut(m), nil
		})
		if dl.DeadLetterReason != saga.ReasonPermanent || !strings.Contains(dl.DeadLetterDescription, "too large") {
			t.Errorf("reason %q (%.120s), want %q, too large", dl.DeadLetterReason, dl.DeadLetterDescription, saga.ReasonPermanent)
		}
	})

	t.Run("control character in ID", func(t *testing.T) {
		qcfg := transport.QueueConfig{Name: "ctl", LockDuration: 2 * time.Second}
		q := n.openQueue(t, qcfg)
		d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(hostileSaga()), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))
		if _, err := d.Send(ctxFor(t), HStart{ID: "ctl\x01id"}); err != nil {
			t.Fatal(err)
		}
		run(t, d)
		awaitDeadLettered(t, q)
		if dl := peekAll(t, q.DeadLetterQueue()); dl[0].DeadLetterReason != saga.ReasonPermanent {
			t.Errorf("reason %q (%s), want %q", dl[0].DeadLetterReason, dl[0].DeadLetterDescription, saga.ReasonPermanent)
		}
		if h, inst, ok := data[hostileData](t, d, "hostile", "ctl\x01id"); ok {
			t.Errorf("instance stored (%+v, pending %v) for a message that was dead-lettered", h, inst.Timeouts)
		}
	})
}

// poisonCase runs a saga whose start handler sends what out makes of the
// message, feeds it a message with note bad and then one with note
// "fine" for the same instance, and checks that only the fine step
// committed and sent: the bad one is dead-lettered (and returned), and the
// instance is not poisoned by an outbox that can never be carried out.
func poisonCase(t *testing.T, n *node, name, bad string, out func(PStart) (POut, []saga.SendOption)) *transport.Message {
	t.Helper()
	qcfg := transport.QueueConfig{Name: name, LockDuration: 2 * time.Second}
	q := n.openQueue(t, qcfg)
	dest := n.openQueue(t, transport.QueueConfig{Name: name + "-out"})
	def := saga.Define[counter](name)
	saga.StartedBy(def, saga.By(func(m PStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m PStart) error {
			c.Data.Count++
			body, opts := out(m)
			return c.Send(dest.Name(), body, opts...)
		})
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))
	ctx := ctxFor(t)
	for _, note := range []string{bad, "fine"} {
		if _, err := d.Send(ctx, PStart{ID: "p-1", Note: note}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, d)
	awaitDeadLettered(t, q)
	dl := peekAll(t, q.DeadLetterQueue())
	if len(dl) != 1 {
		t.Fatalf("%d messages dead-lettered, want only the bad one", len(dl))
	}
	if c, _, _ := data[counter](t, d, name, "p-1"); c.Count != 1 {
		t.Errorf("count %d, want 1: only the fine message's step may commit", c.Count)
	}
	// A sent message reaches its queue a moment after the send.
	testutil.Await(t, 10*time.Second, func() string {
		if got := len(peekAll(t, dest)); got != 1 {
			return fmt.Sprintf("%d messages in %s, want the fine one", got, dest.Name())
		}
		return ""
	})
	return dl[0]
}

// Classification of what a handler asks for.

type BadSend struct{ ID, Queue string }

type BadTimeout struct{ ID string }

type unhandledDue struct{}

func TestInvalidRequestsArePermanentAtTheCall(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "badreq", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	var runs atomic.Int64
	var mu sync.Mutex
	callErrs := map[string]error{}
	def := saga.Define[counter]("badreq")
	saga.StartedBy(def, saga.By(func(m BadSend) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m BadSend) error {
			runs.Add(1)
			err := c.Send(m.Queue, FullOut{ID: m.ID})
			mu.Lock()
			callErrs[m.ID] = err
			mu.Unlock()
			return err
		})
	saga.StartedBy(def, saga.By(func(m BadTimeout) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m BadTimeout) error {
			runs.Add(1)
			_, err := c.RequestTimeout(time.Hour, unhandledDue{})
			mu.Lock()
			callErrs[m.ID] = err
			mu.Unlock()
			return err
		})
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))
	ctx := ctxFor(t)
	if _, err := d.Send(ctx, BadSend{ID: "q", Queue: "no such queue!"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Send(ctx, BadTimeout{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	testutil.Await(t, 20*time.Second, func() string {
		if got := len(peekAll(t, q.DeadLetterQueue())); got != 2 {
			return fmt.Sprintf("%d of 2 dead-lettered", got)
		}
		return queueEmpty(t, q)
	})
	mu.Lock()
	defer mu.Unlock()
	if err := callErrs["q"]; !errors.Is(err, saga.ErrPermanent) || !errors.Is(err, transport.ErrInvalidQueueName) {
		t.Errorf("c.Send to an invalid queue: %v; want saga.ErrPermanent and transport.ErrInvalidQueueName", err)
	}
	if err := callErrs["t"]; !errors.Is(err, saga.ErrPermanent) || !errors.Is(err, saga.ErrNoTimeoutHandler) {
		t.Errorf("RequestTimeout of a type without OnTimeout: %v; want saga.ErrPermanent and saga.ErrNoTimeoutHandler", err)
	}
	for _, m := range peekAll(t, q.DeadLetterQueue()) {
		if m.DeadLetterReason != saga.ReasonPermanent {
			t.Errorf("%s dead-lettered as %s (%s), want %s", m.Properties[saga.TypeProperty], m.DeadLetterReason, m.DeadLetterDescription, saga.ReasonPermanent)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("handlers ran %d times, want once each", n)
	}
	if got := scheduledByID(t, d, "badreq"); len(got) != 0 {
		t.Errorf("timeouts scheduled: %v", got)
	}
}

// awaitDeadLettered waits until q has dead-lettered a message and holds
// nothing more.
func awaitDeadLettered(t *testing.T, q *transport.Queue) {
	t.Helper()
	testutil.Await(t, 10*time.Second, func() string {
		if len(peekAll(t, q.DeadLetterQueue())) == 0 {
			return "nothing dead-lettered yet"
		}
		return queueEmpty(t, q)
	})
}
