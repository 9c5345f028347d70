package machine_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
)

// A shipment is ready once it is both packed and paid, in any order.

type (
	Open   struct{ ID string }
	Packed struct{ ID string }
	Paid   struct{ ID string }
	Ready  struct{ ID string }
)

func readyMachine(t testing.TB) *saga.Definition[order] {
	t.Helper()
	m := machine.New[order]("shipment")
	waiting := m.State("Waiting")
	open := machine.NewEvent(m, saga.By(func(e Open) string { return e.ID }))
	packed := machine.NewEvent(m, saga.By(func(e Packed) string { return e.ID }))
	paid := machine.NewEvent(m, saga.By(func(e Paid) string { return e.ID }))
	both := machine.Composite(m, "PackedAndPaid", packed, paid)
	m.Initially(machine.When(open).TransitionTo(waiting))
	m.During(waiting,
		machine.When(paid).Then(func(ctx context.Context, c *saga.Context[order], _ Paid) error {
			c.Data.Total++ // the constituent's own activity runs too
			return nil
		}),
		machine.When(both).
			Then(func(ctx context.Context, c *saga.Context[order], e machine.CompositeRaised) error {
				return c.Send("dock", Ready{ID: c.ID()})
			}).
			Finalize())
	return m.MustBuild()
}

func TestCompositeRaisedOnceAllArrived(t *testing.T) {
	d := readyMachine(t)
	sagatest.Explore(t, []saga.Saga{d},
		func(t *testing.T, env *sagatest.Env) { env.Send(Open{ID: "s1"}) },
		[]sagatest.Input{sagatest.Send(Packed{ID: "s1"}), sagatest.Send(Paid{ID: "s1"})},
		func(t *testing.T, env *sagatest.Env) {
			env.AssertCompleted(t, d, "s1")
			env.AssertSent(t, "dock", Ready{ID: "s1"})
		})
}

func TestCompositeWaitsForTheOthers(t *testing.T) {
	d := readyMachine(t)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Open{ID: "s1"})
		env.Send(Packed{ID: "s1"})
		env.Send(Packed{ID: "s1"}, saga.WithMessageID("again")) // a second Packed counts once
		env.AssertRunning(t, d, "s1")
		if got := sagatest.Sent[Ready](env, "dock"); len(got) != 0 {
			t.Fatalf("ready %v before payment", got)
		}
		st := sagatest.State(t, env, d, "s1")
		if got := st.Machine.Arrived["composite/PackedAndPaid"]; len(got) != 1 {
			t.Errorf("arrived %v, want the one Packed", got)
		}
		env.Send(Paid{ID: "s1"})
		env.AssertCompleted(t, d, "s1")
	})
}

// Explore finds a race planted in a machine: Approve then Reject ends
// Rejected, Reject then Approve ends Approved — both orders are run.
func TestExploreFindsARaceInAMachine(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		m := machine.New[order]("claim")
		open, approved, rejected := m.State("Open"), m.State("Approved"), m.State("Rejected")
		start := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
		approve := machine.NewEvent(m, saga.By(func(e Approve) string { return e.Order }))
		reject := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
		m.Initially(machine.When(start).TransitionTo(open))
		m.During(machine.States(open, approved, rejected),
			machine.When(approve).TransitionTo(approved),
			machine.When(reject).TransitionTo(rejected))
		d := m.MustBuild()
		sagatest.Explore(t, []saga.Saga{d},
			func(t *testing.T, env *sagatest.Env) { env.Send(Submit{Order: "c1"}) },
			[]sagatest.Input{sagatest.Send(Approve{Order: "c1"}), sagatest.Send(Cancel{Order: "c1"})},
			func(t *testing.T, env *sagatest.Env) {
				if got := sagatest.State(t, env, d, "c1").CurrentState(); got != "Rejected" {
					t.Errorf("claim ends %s, want Rejected whatever the order", got)
				}
			})
	})
	if !strings.Contains(out, "order 2 of 2 failed") || !strings.Contains(out, "claim ends Approved, want Rejected") {
		t.Errorf("Explore's report does not name the failing order:\n%s", out)
	}
}

// Liveness needs no Expect: an instance in a state that accepts only a
// schedule it did not schedule waits for nothing, and sagatest fails the
// test that leaves it.
func TestStuckInstanceFailsTheTest(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		m := machine.New[order]("stuck")
		waiting := m.State("Waiting")
		start := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
		deadline := machine.NewSchedule[order, PaymentExpired](m, "Deadline", 0, nil)
		m.Initially(machine.When(start).TransitionTo(waiting)) // forgot .Schedule(deadline)
		m.During(waiting, machine.When(deadline.Received).Finalize())
		d := m.MustBuild()
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(Submit{Order: "o1"})
		})
	})
	if !regexp.MustCompile(`stuck/o1`).MatchString(out) {
		t.Errorf("the failure does not name the stuck instance:\n%s", out)
	}
}

// expectFailure runs body in a child process of the test binary and
// returns its output, failing the test if body passed.
func expectFailure(t *testing.T, body func(t *testing.T)) string {
	t.Helper()
	const child = "MACHINE_TEST_CHILD"
	if os.Getenv(child) == t.Name() {
		body(t)
		t.SkipNow() // a failure in body still fails the child
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), child+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("%s passed in a child process; want it to fail:\n%s", t.Name(), out)
	}
	return string(out)
}

// A composite bound in Initial starts the instance with its first
// constituent and raises once the last arrives.
func TestCompositeInInitially(t *testing.T) {
	m := machine.New[order]("pair")
	ready := m.State("Ready")
	packed := machine.NewEvent(m, saga.By(func(e Packed) string { return e.ID }))
	paid := machine.NewEvent(m, saga.By(func(e Paid) string { return e.ID }))
	open := machine.NewEvent(m, saga.By(func(e Open) string { return e.ID }))
	both := machine.Composite(m, "Both", packed, paid)
	m.Initially(machine.When(both).TransitionTo(ready))
	m.During(ready, machine.When(open).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Paid{ID: "p1"})
		if got := sagatest.State(t, env, d, "p1").CurrentState(); got != "Initial" {
			t.Fatalf("state %s after one of two, want Initial", got)
		}
		env.Send(Packed{ID: "p1"})
		if got := sagatest.State(t, env, d, "p1").CurrentState(); got != "Ready" {
			t.Fatalf("state %s after both, want Ready", got)
		}
		env.Send(Open{ID: "p1"})
		env.AssertCompleted(t, d, "p1")
	})
}
