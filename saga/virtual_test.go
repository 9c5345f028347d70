package saga_test

// Tests on the in-memory transport and store inside a testing/synctest
// bubble: days of virtual time in milliseconds.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// virtualEnv is a dispatcher running on the in-memory transport in a
// synctest bubble.
type virtualEnv struct {
	t     *testing.T
	ctx   context.Context
	b     *transport.Broker
	q     *transport.Queue
	d     *saga.Dispatcher
	store *memstore.Store
	log   *stepLog
}

func newVirtualEnv(t *testing.T, qcfg transport.QueueConfig, opts ...saga.Option) *virtualEnv {
	ctx, cancel := context.WithCancel(t.Context())
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.OpenQueue(ctx, qcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &virtualEnv{t: t, ctx: ctx, b: b, q: q, store: memstore.New(), log: &stepLog{}}
	opts = append([]saga.Option{saga.WithLogger(testutil.Logger()), saga.WithQueueConfig(qcfg), saga.WithConcurrency(1),
		saga.WithHooks(e.log.hooks())}, opts...)
	if e.d, err = saga.NewDispatcher(b, e.store, qcfg.Name, opts...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- e.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return e
}

func (e *virtualEnv) send(m any, opts ...saga.SendOption) {
	e.t.Helper()
	if _, err := e.d.Send(e.ctx, m, opts...); err != nil {
		e.t.Fatal(err)
	}
	synctest.Wait()
}

// last returns the outcome of the last step on a message of type M.
func last[M any](e *virtualEnv) stepEvent {
	e.t.Helper()
	ev := e.log.filter(saga.MessageName[M]())
	if len(ev) == 0 {
		e.t.Fatalf("no step on %s", saga.MessageName[M]())
	}
	return ev[len(ev)-1]
}

// Which timeout fired.

type TwoStart struct{ ID string }

type TwoDue struct{ Label string }

type TwoLate struct{}

type twoData struct {
	First, Second, Late saga.TimeoutHandle
	Log                 []string
}

func TestTimeoutHandleAndReschedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		def := saga.Define[twoData]("two")
		saga.StartedBy(def, saga.By(func(m TwoStart) string { return m.ID }),
			func(_ context.Context, c *saga.Context[twoData], _ TwoStart) error {
				var err1, err2 error
				c.Data.First, err1 = c.RequestTimeout(time.Hour, TwoDue{Label: "a"})
				c.Data.Second, err2 = c.RequestTimeout(2*time.Hour, TwoDue{Label: "b"})
				c.Data.Log = append(c.Data.Log, fmt.Sprintf("start: Timeout()=%q pending=%t,%t",
					c.Timeout(), c.IsPending(c.Data.First), c.IsPending(c.Data.Second)))
				return errors.Join(err1, err2)
			})
		saga.OnTimeout(def, func(_ context.Context, c *saga.Context[twoData], m TwoDue) error {
			which := map[saga.TimeoutHandle]string{c.Data.First: "first", c.Data.Second: "second"}[c.Timeout()]
			c.Data.Log = append(c.Data.Log, fmt.Sprintf("%s(%s): self pending=%t", which, m.Label, c.IsPending(c.Timeout())))
			if which != "first" {
				return nil
			}
			// Rescheduling the timeout being handled: not pending.
			_, err := c.RescheduleTimeout(c.Timeout(), c.Now().Add(time.Hour), TwoDue{Label: "again"})
			c.Data.Log = append(c.Data.Log, fmt.Sprintf("reschedule self: permanent=%t not-pending=%t",
				errors.Is(err, saga.ErrPermanent), errors.Is(err, saga.ErrTimeoutNotPending)))
			// Rescheduling the other with a payload of another type.
			old := c.Data.Second
			var rerr error
			c.Data.Late, rerr = c.RescheduleTimeout(old, c.Now().Add(3*time.Hour), TwoLate{})
			c.Data.Log = append(c.Data.Log, fmt.Sprintf("reschedule second: err=%v old pending=%t new pending=%t",
				rerr, c.IsPending(old), c.IsPending(c.Data.Late)))
			// A refused reschedule changes nothing.
			_, uerr := c.RescheduleTimeout(c.Data.Late, c.Now().Add(time.Hour), struct{ X int }{})
			c.Data.Log = append(c.Data.Log, fmt.Sprintf("reschedule to unhandled type: no-handler=%t late pending=%t",
				errors.Is(uerr, saga.ErrNoTimeoutHandler), c.IsPending(c.Data.Late)))
			return nil
		})
		saga.OnTimeout(def, func(_ context.Context, c *saga.Context[twoData], _ TwoLate) error {
			c.Data.Log = append(c.Data.Log, fmt.Sprintf("late: is Late=%t", c.Timeout() == c.Data.Late))
			return nil
		})
		e := newVirtualEnv(t, transport.QueueConfig{Name: "two"}, saga.WithSagas(def))
		e.send(TwoStart{ID: "x"})
		time.Sleep(4 * time.Hour)
		synctest.Wait()
		for _, ev := range e.log.filter("") {
			if ev.Result.Outcome != saga.Handled {
				t.Errorf("step %s: %s, %v", ev.Info.MessageType, ev.Result.Outcome, ev.Result.Err)
			}
		}
		inst, err := e.d.Instance(e.ctx, "two", "x")
		if err != nil {
			t.Fatal(err)
		}
		var d twoData
		if err := (saga.JSON{}).Unmarshal(inst.Data, &d); err != nil {
			t.Fatal(err)
		}
		want := []string{
			`start: Timeout()="" pending=true,true`,
			`first(a): self pending=false`,
			`reschedule self: permanent=true not-pending=true`,
			`reschedule second: err=<nil> old pending=false new pending=true`,
			`reschedule to unhandled type: no-handler=true late pending=true`,
			`late: is Late=true`,
		}
		if fmt.Sprint(d.Log) != fmt.Sprint(want) {
			t.Errorf("log:\n%q\nwant:\n%q", d.Log, want)
		}
		if len(inst.Timeouts) != 0 {
			t.Errorf("pending timeouts left: %+v", inst.Timeouts)
		}
	})
}

// Tombstone retention and the not-found handler.

type LinkIssued struct{ ID string }

type LinkClicked struct{ ID string }

type LinkOpened struct{ ID string }

type LinkRefused struct {
	ID        string
	Completed bool
	At        time.Time
}

func linkSaga() *saga.Definition[counter] {
	def := saga.Define[counter]("link", saga.WhenNotFound(saga.NotFoundPolicy{
		Handler: func(_ context.Context, c *saga.NotFoundContext, m any) error {
			at, completed := c.Completed()
			return c.Reply(LinkRefused{ID: c.ID(), Completed: completed, At: at})
		},
	}))
	saga.StartedBy(def, saga.By(func(m LinkIssued) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ LinkIssued) error {
			c.Data.Count++
			return nil
		})
	saga.Handles(def, saga.By(func(m LinkClicked) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m LinkClicked) error {
			c.MarkComplete()
			return c.Reply(LinkOpened(m))
		})
	return def
}

func TestTombstoneRetentionAndNotFoundHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newVirtualEnv(t, transport.QueueConfig{Name: "links", DuplicateWindow: time.Minute}, saga.WithSagas(linkSaga()))
		web, err := e.b.OpenQueue(e.ctx, transport.QueueConfig{Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		replies := func() []string {
			t.Helper()
			var out []string
			for m, err := range web.Browse(e.ctx, 0) {
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, m.Properties[saga.TypeProperty]+" "+string(m.Body))
			}
			return out
		}
		issue := func() { e.send(LinkIssued{ID: "l-1"}, saga.WithMessageID("issue-l-1")) }
		click := func(id string) { e.send(LinkClicked{ID: id}, saga.WithReplyTo("web")) }
		issue()
		time.Sleep(time.Minute)
		click("l-1")
		completedAt := time.Now()
		click("never")
		time.Sleep(time.Hour)
		click("l-1")

		// Within the retention a redelivered starter finds the tombstone.
		time.Sleep(DefaultRetentionMinus(2 * time.Hour))
		issue()
		if ev := last[LinkIssued](e); ev.Result.Outcome != saga.Duplicate {
			t.Errorf("starter sent again within the retention: %s, want %s", ev.Result.Outcome, saga.Duplicate)
		}
		if _, inst, _ := virtualData(t, e, "link", "l-1"); inst == nil || !inst.Completed {
			t.Errorf("within the retention: instance %+v, want its tombstone", inst)
		}

		// After it the tombstone is gone: the same message starts anew.
		time.Sleep(2 * time.Hour)
		if _, inst, _ := virtualData(t, e, "link", "l-1"); inst != nil {
			t.Errorf("after the retention: instance %+v, want none", inst)
		}
		click("l-1")
		issue()
		if ev := last[LinkIssued](e); ev.Result.Outcome != saga.Handled {
			t.Errorf("starter after the retention: %s, want %s", ev.Result.Outcome, saga.Handled)
		}

		// A not-found handler's invalid request is permanent.
		e.send(LinkClicked{ID: "no-reply-to"})
		dls, err := e.q.DeadLetterQueue().Peek(e.ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) != 1 || dls[0].DeadLetterReason != saga.ReasonPermanent || dls[0].Properties[saga.PropertyAttempts] != "1" {
			t.Errorf("dead letters %+v, want the message without ReplyTo, permanent, 1 attempt", dls)
		}

		ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
		want := []string{
			saga.MessageName[LinkOpened]() + ` {"ID":"l-1"}`,
			saga.MessageName[LinkRefused]() + ` {"ID":"never","Completed":false,"At":"0001-01-01T00:00:00Z"}`,
			saga.MessageName[LinkRefused]() + fmt.Sprintf(` {"ID":"l-1","Completed":true,"At":%q}`, ts(completedAt)),
			saga.MessageName[LinkRefused]() + ` {"ID":"l-1","Completed":false,"At":"0001-01-01T00:00:00Z"}`,
		}
		if got := replies(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("replies:\n%q\nwant:\n%q", got, want)
		}
	})
}

// DefaultRetentionMinus returns saga.DefaultRetention less d.
func DefaultRetentionMinus(d time.Duration) time.Duration { return saga.DefaultRetention - d }

// virtualData is data for a virtualEnv.
func virtualData(t *testing.T, e *virtualEnv, sagaName, id string) ([]byte, *saga.Instance, bool) {
	t.Helper()
	inst, err := e.d.Instance(e.ctx, sagaName, id)
	if errors.Is(err, saga.ErrNotFound) {
		return nil, nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return inst.Data, inst, true
}
