package ordermachine_test

import (
	"flag"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/ordermachine"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/saga/machine/machinetest"
	"github.com/jetsaga/jetsaga/sagatest"
)

var update = flag.Bool("update", false, "rewrite testdata/order.mmd")

func newOrder(t *testing.T) *ordermachine.Order {
	t.Helper()
	o, err := ordermachine.New(ordermachine.Config{History: 20})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// lastRequest returns the latest processing request and its
// CorrelationID, which the answer carries.
func lastRequest(t *testing.T, env *sagatest.Env) (ordermachine.ProcessOrder, string) {
	t.Helper()
	ms := env.Messages(ordermachine.ProcessingQueue)
	if len(ms) == 0 {
		t.Fatalf("no processing request\n%s", env.Journal())
	}
	m := ms[len(ms)-1]
	p, err := saga.Decode[ordermachine.ProcessOrder](m)
	if err != nil {
		t.Fatal(err)
	}
	return p, m.CorrelationID
}

var day = 24 * time.Hour

func submit(env *sagatest.Env, id string) {
	env.Send(ordermachine.SubmitOrder{OrderID: id, OrderDate: env.Now(), Customer: "ann"})
}

func TestOrderCompletes(t *testing.T) {
	o := newOrder(t)
	sagatest.Run(t, []saga.Saga{o.Saga}, func(t *testing.T, env *sagatest.Env) {
		submit(env, "o1")
		env.Advance(2 * day)
		env.Send(ordermachine.OrderAccepted{OrderID: "o1"})
		machinetest.AssertPath(t, env, o.Saga, "o1", "Initial", "Submitted", "Accepted")
		_, cid := lastRequest(t, env)
		env.Advance(10 * time.Second)
		env.Send(ordermachine.OrderProcessed{OrderID: "o1"}, saga.WithCorrelationID(cid))
		env.AssertCompleted(t, o.Saga, "o1")
		env.Advance(31 * day) // the completion timeout was unscheduled
		env.AssertSent(t, ordermachine.NotificationsQueue, ordermachine.OrderCompleted{OrderID: "o1"})
	})
}

func TestOrderRejectedOnFault(t *testing.T) {
	o := newOrder(t)
	sagatest.Run(t, []saga.Saga{o.Saga}, func(t *testing.T, env *sagatest.Env) {
		submit(env, "o1")
		env.Send(ordermachine.OrderAccepted{OrderID: "o1"})
		req := env.Messages(ordermachine.ProcessingQueue)[0]
		env.Send(machine.NewFault(req, "card declined"), saga.WithCorrelationID(req.CorrelationID))
		env.AssertCompleted(t, o.Saga, "o1")
		env.Advance(31 * day)
		env.AssertSent(t, ordermachine.NotificationsQueue, ordermachine.OrderRejected{OrderID: "o1", Reason: "card declined"})
	})
}

// A request that times out is sent again; the first one's late answer
// is ignored, the retry's completes the order.
func TestOrderRetriesAndIgnoresLateAnswers(t *testing.T) {
	o := newOrder(t)
	sagatest.Run(t, []saga.Saga{o.Saga}, func(t *testing.T, env *sagatest.Env) {
		submit(env, "o1")
		env.Send(ordermachine.OrderAccepted{OrderID: "o1"})
		_, first := lastRequest(t, env)
		env.Advance(30 * time.Second)
		p, second := lastRequest(t, env)
		if p.Attempt != 2 || second == first {
			t.Fatalf("after the timeout: request %+v (%s), want attempt 2 with a new CorrelationID", p, second)
		}
		env.Send(ordermachine.OrderProcessed{OrderID: "o1"}, saga.WithCorrelationID(first)) // late
		env.AssertRunning(t, o.Saga, "o1")
		env.Send(ordermachine.OrderProcessed{OrderID: "o1"}, saga.WithCorrelationID(second))
		env.AssertCompleted(t, o.Saga, "o1")
	})
}

// Three requests time out: the order stalls, is accepted again, and
// without an answer expires 30 days after it was submitted.
func TestOrderStallsThenExpires(t *testing.T) {
	o := newOrder(t)
	sagatest.Run(t, []saga.Saga{o.Saga}, func(t *testing.T, env *sagatest.Env) {
		start := env.Now()
		submit(env, "o1")
		env.Send(ordermachine.OrderAccepted{OrderID: "o1"})
		env.Advance(2 * time.Minute)
		if n := len(env.Messages(ordermachine.ProcessingQueue)); n != 3 {
			t.Errorf("%d requests, want 3", n)
		}
		machinetest.AssertPath(t, env, o.Saga, "o1", "Initial", "Submitted", "Accepted", "Stalled")
		env.Advance(10 * day)
		env.Send(ordermachine.OrderAccepted{OrderID: "o1"}) // accepted again: three more
		env.AdvanceTo(start.Add(30*day - time.Second))
		env.AssertRunning(t, o.Saga, "o1")
		env.AdvanceTo(start.Add(30 * day))
		env.AssertCompleted(t, o.Saga, "o1")
		env.AssertSent(t, ordermachine.NotificationsQueue, ordermachine.OrderExpired{OrderID: "o1"})
		if n := len(env.Messages(ordermachine.ProcessingQueue)); n != 6 {
			t.Errorf("%d requests, want 6", n)
		}
	})
}

func TestOrderNeverAcceptedExpires(t *testing.T) {
	o := newOrder(t)
	sagatest.Run(t, []saga.Saga{o.Saga}, func(t *testing.T, env *sagatest.Env) {
		submit(env, "o1")
		submit(env, "o1") // a second submit is ignored
		env.Advance(30 * day)
		env.AssertCompleted(t, o.Saga, "o1")
		env.AssertSent(t, ordermachine.NotificationsQueue, ordermachine.OrderExpired{OrderID: "o1"})
	})
}

// The answer and the request's timeout at one instant, in both orders:
// the order completes once, or retries; never both.
func TestOrderAnswerRacingTimeout(t *testing.T) {
	o := newOrder(t)
	sagatest.Explore(t, []saga.Saga{o.Saga},
		func(t *testing.T, env *sagatest.Env) {
			submit(env, "o1")
			env.Send(ordermachine.OrderAccepted{OrderID: "o1"})
		},
		[]sagatest.Input{
			sagatest.TimeoutOf[machine.Expired](o.Saga, "o1"),
			sagatest.Send(ordermachine.OrderProcessed{OrderID: "o1"}, saga.WithCorrelationID("order/ProcessOrder/1/o1")),
		},
		func(t *testing.T, env *sagatest.Env) {
			completed := len(sagatest.Sent[ordermachine.OrderCompleted](env, ordermachine.NotificationsQueue))
			retried := len(env.Messages(ordermachine.ProcessingQueue)) == 2
			if (completed == 1) == retried {
				t.Errorf("completed %d, retried %v: want exactly one", completed, retried)
			}
			if retried {
				_, cid := lastRequest(t, env)
				env.Send(ordermachine.OrderProcessed{OrderID: "o1"}, saga.WithCorrelationID(cid))
			}
			env.AssertCompleted(t, o.Saga, "o1")
		})
}

func TestDiagram(t *testing.T) {
	got := newOrder(t).Machine.Mermaid()
	testutil.Golden(t, "order.mmd", got, *update)
}
