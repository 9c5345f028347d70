package machinetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/saga/machine/machinetest"
	"github.com/jetsaga/jetsaga/sagatest"
)

type (
	ticket struct{ machine.Instance }
	Opened struct{ ID string }
	Moved  struct{ ID string }
	Closed struct{ ID string }
)

func tickets() *saga.Definition[ticket] {
	m := machine.New[ticket]("ticket", machine.WithHistory(5))
	open, moved := m.State("Open"), m.State("Moved")
	opened := machine.NewEvent(m, saga.By(func(e Opened) string { return e.ID }))
	move := machine.NewEvent(m, saga.By(func(e Moved) string { return e.ID }))
	closed := machine.NewEvent(m, saga.By(func(e Closed) string { return e.ID }))
	m.Initially(machine.When(opened).TransitionTo(open))
	m.During(machine.States(open, moved), machine.When(move).TransitionTo(moved), machine.When(closed).Finalize())
	return m.MustBuild()
}

func TestAssertPath(t *testing.T) {
	d := tickets()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Opened{ID: "t1"})
		env.Send(Moved{ID: "t1"})
		machinetest.AssertPath(t, env, d, "t1", "Initial", "Open", "Moved")
	})
}

func TestAssertPathFails(t *testing.T) {
	if os.Getenv("MACHINETEST_CHILD") == "1" {
		d := tickets()
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(Opened{ID: "t1"})
			machinetest.AssertPath(t, env, d, "t1", "Initial", "Moved")
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAssertPathFails$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MACHINETEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a wrong path passed:\n%s", out)
	}
	if !strings.Contains(string(out), "ticket/t1: path [Initial Open], want [Initial Moved]") {
		t.Errorf("the failure does not say the path:\n%s", out)
	}
}
