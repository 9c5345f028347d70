// Package machinetest asserts what state machines (package saga/machine)
// do in sagatest: the path of states an instance took.
package machinetest

import (
	"slices"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

type pather interface{ Path() []string }

// AssertPath fails the test unless the running instance id of def went
// through the states want, in order, from the first transition its
// history keeps (machine.WithHistory: without it, or with fewer
// transitions kept than taken, the path is shorter). A completed
// instance has no data, so no path: assert the path before its last
// step, or its effects after. def's data must embed machine.Instance.
func AssertPath[S any](t testing.TB, env *sagatest.Env, def *saga.Definition[S], id string, want ...string) {
	t.Helper()
	data := sagatest.State(t, env, def, id)
	p, ok := any(data).(pather)
	if !ok {
		t.Fatalf("machinetest: %T does not embed machine.Instance", data)
	}
	if got := p.Path(); !slices.Equal(got, want) {
		t.Errorf("%s/%s: path %v, want %v\n%s", def.Name(), id, got, want, env.Journal())
	}
}
