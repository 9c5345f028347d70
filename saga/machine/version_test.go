package machine_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
)

// Renaming a state is a data version: version 2 renames AwaitingPayment
// to AwaitingPay with an upcaster, and a version-1 record carries on,
// its schedule included.
func TestRenamedStateUpcast(t *testing.T) {
	o := newOrderMachine(t)
	var rec []byte
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		rec = env.StoredRecord(o.def, "o1")
		env.Send(Cancel{Order: "o1"}) // leave nothing pending in this Env
	})

	rename := saga.Upcast(func(old order) (order, error) {
		if old.Machine.State == "AwaitingPayment" {
			old.Machine.State = "AwaitingPay"
		}
		return old, nil
	})
	m := machine.New[order]("order", machine.WithDefinitionOptions(saga.DataVersion(2, rename)))
	awaiting := m.State("AwaitingPay")
	submit := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
	pay := machine.NewEvent(m, saga.By(func(e Pay) string { return e.Order }))
	deadline := machine.NewSchedule[order, PaymentExpired](m, "PaymentTimeout", time.Hour, nil)
	m.Initially(machine.When(submit).Schedule(deadline).TransitionTo(awaiting))
	m.During(awaiting,
		machine.When(pay).Unschedule(deadline).Finalize(),
		machine.When(deadline.Received).Finalize())
	v2 := m.MustBuild()
	sagatest.Run(t, []saga.Saga{v2}, func(t *testing.T, env *sagatest.Env) {
		env.Restore(v2, "o1", rec)
		if got := sagatest.State(t, env, v2, "o1").CurrentState(); got != "AwaitingPay" {
			t.Fatalf("state %s after upcasting, want AwaitingPay", got)
		}
		env.Send(Pay{Order: "o1"})
		env.AssertCompleted(t, v2, "o1")
	})
}

// Crash points hold for a machine: the dispatcher dies in the step of
// Pay (before its commit, or before its outbox is cleared), the message is
// redelivered in every position among the inputs, and the request is
// sent once and the order ends in Checking either way.
func TestCrashDuringAnActivity(t *testing.T) {
	o := newOrderMachine(t)
	for _, at := range []sagatest.CrashPoint{sagatest.BeforeCommit, sagatest.BeforeOutboxCleared, sagatest.BeforeAck} {
		sagatest.Explore(t, []saga.Saga{o.def},
			func(t *testing.T, env *sagatest.Env) { env.Send(Submit{Order: "o1", Total: 10}) },
			[]sagatest.Input{
				sagatest.Crash(sagatest.Send(Pay{Order: "o1"}), at),
				sagatest.Send(Submit{Order: "o2", Total: 10}), // another order meanwhile
			},
			func(t *testing.T, env *sagatest.Env) {
				if got := stateOf(t, env, o, "o1"); got != "Checking" {
					t.Errorf("crash %v: state %s, want Checking", at, got)
				}
				if n := len(sagatest.Sent[CheckStock](env, "warehouse")); n != 1 {
					t.Errorf("crash %v: %d stock requests, want 1", at, n)
				}
				if n := len(env.Timeouts(o.def, "o1")); n != 1 {
					t.Errorf("crash %v: %d timeouts pending, want the request's only", at, n)
				}
			})
	}
}
