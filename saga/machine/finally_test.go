package machine_test

import (
	"context"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
)

type Note struct {
	ID   string
	Text string
}

// doorMachine: Close in Open goes to Closed; in Closed, DuringAny's
// binding of Close and the state's own both run, in declaration order (as
// MassTransit adds activities per state and event); Lock finalizes only
// with a total; Finally sends a note.
func doorMachine(t testing.TB) *machine.Machine[order] {
	t.Helper()
	m := machine.New[order]("door")
	open, closed := m.State("Open"), m.State("Closed")
	start := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
	closeE := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
	lock := machine.NewEvent(m, saga.By(func(e Approve) string { return e.Order }))
	note := func(text string) func(ctx context.Context, c *saga.Context[order], _ Cancel) error {
		return func(ctx context.Context, c *saga.Context[order], _ Cancel) error {
			return c.Send("notes", Note{ID: c.ID(), Text: text})
		}
	}
	m.Initially(machine.When(start).
		Then(func(ctx context.Context, c *saga.Context[order], e Submit) error {
			c.Data.Total = e.Total
			return nil
		}).
		TransitionTo(open))
	m.DuringAny(machine.When(closeE).Then(note("any")).TransitionTo(closed))
	m.During(closed,
		machine.When(closeE).Then(note("already closed")),
		machine.When(lock).If(func(c *saga.Context[order], _ Approve) bool { return c.Data.Total > 0 },
			func(a *machine.Activity[order, Approve]) { a.Finalize() }))
	m.Finally(func(ctx context.Context, c *saga.Context[order]) error {
		return c.Send("notes", Note{ID: c.ID(), Text: "finally"})
	})
	m.MustBuild()
	return m
}

func TestFinallyAndDuringAny(t *testing.T) {
	m := doorMachine(t)
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "d1", Total: 0})
		env.Send(Cancel{Order: "d1"})
		env.Send(Cancel{Order: "d1"}, saga.WithMessageID("again"))
		env.Send(Approve{Order: "d1"}) // no total: stays Closed
		env.AssertRunning(t, d, "d1")
		env.Send(Submit{Order: "d2", Total: 5})
		env.Send(Cancel{Order: "d2"})
		env.Send(Approve{Order: "d2"})
		env.AssertCompleted(t, d, "d2")
		env.AssertSent(t, "notes",
			Note{ID: "d1", Text: "any"}, Note{ID: "d1", Text: "any"}, Note{ID: "d1", Text: "already closed"},
			Note{ID: "d2", Text: "any"}, Note{ID: "d2", Text: "finally"})
	})
}

func TestMermaidIfWithoutElse(t *testing.T) {
	golden(t, "door.mmd", doorMachine(t).Mermaid())
}
