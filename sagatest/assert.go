package sagatest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/saga"
)

// State returns the data of the running instance of def with this id. It
// fails the test (t.Fatalf) if there is no such instance or it completed
// (a completed instance keeps no data).
func State[S any](t testing.TB, e *Env, def *saga.Definition[S], id string) S {
	t.Helper()
	s, _ := state(t, e, def, id)
	return s
}

// state is State, reporting whether it succeeded (t.Fatalf of a fake
// testing.TB may return).
func state[S any](t testing.TB, e *Env, def *saga.Definition[S], id string) (S, bool) {
	t.Helper()
	var s S
	inst := e.instance(t, def, id)
	switch {
	case inst == nil:
		t.Fatalf("sagatest: %s/%s at %s: no instance\n%s", def.Name(), id, e.offset(e.Now()), e.journalSection())
	case inst.Completed:
		t.Fatalf("sagatest: %s/%s at %s: completed, so it has no state\n%s", def.Name(), id, e.offset(e.Now()), e.journalSection())
	default:
		s, _, err := saga.InstanceOf(e.ctx, e.d, def, id) // upcast to def's version
		if err != nil {
			t.Fatalf("sagatest: %s/%s: decoding state: %v", def.Name(), id, err)
			break
		}
		return s, true
	}
	return s, false
}

// AssertState checks that the running instance of def with this id has
// data equal to want (reflect.DeepEqual, after a round trip through the
// codec, so unexported fields are zero; times are equal if they are the
// same instant, whatever their location). It reports a difference with
// t.Errorf, and a missing or completed instance with t.Fatalf.
func AssertState[S any](t testing.TB, e *Env, def *saga.Definition[S], id string, want S) {
	t.Helper()
	got, ok := state(t, e, def, id)
	if ok && !equal(got, want) {
		t.Errorf("sagatest: state of %s/%s at %s:\n  got  %s\n  want %s\n%s",
			def.Name(), id, e.offset(e.Now()), show(got), show(want), e.journalSection())
	}
}

// AssertCompleted checks that the instance of s with this id completed.
// The Env remembers the completions it saw (in its journal), so the
// assertion holds after the completed retention too
// (saga.WithCompletedRetention, 7 days by default), when the store has
// dropped the instance's tombstone and Dispatcher.Instance returns
// saga.ErrNotFound; AssertRunning and State then say it completed.
func (e *Env) AssertCompleted(t testing.TB, s saga.Saga, id string) {
	t.Helper()
	inst := e.instance(t, s, id)
	var got string
	switch {
	case inst == nil:
		got = "no instance"
	case inst.Completed:
		return
	default:
		got = "running, state" + e.bodySuffix(inst.Data)
		for _, p := range inst.Timeouts {
			got += fmt.Sprintf(", timeout %s due %s", p.Type, e.offset(p.At))
		}
	}
	t.Errorf("sagatest: %s/%s at %s: got %s, want completed\n%s", s.Name(), id, e.offset(e.Now()), got, e.journalSection())
}

// AssertRunning checks that an instance of s with this id is running: it
// started and has not completed.
func (e *Env) AssertRunning(t testing.TB, s saga.Saga, id string) {
	t.Helper()
	inst := e.instance(t, s, id)
	switch {
	case inst == nil:
		t.Errorf("sagatest: %s/%s at %s: got no instance, want a running one\n%s", s.Name(), id, e.offset(e.Now()), e.journalSection())
	case inst.Completed:
		t.Errorf("sagatest: %s/%s at %s: got completed, want running\n%s", s.Name(), id, e.offset(e.Now()), e.journalSection())
	}
}

// Sent returns the messages of type M sent to queue since the Env
// started, decoded, in the order they were sent. It fails the test if one
// cannot be decoded.
func Sent[M any](e *Env, queue string) []M {
	e.t.Helper()
	name := saga.MessageName[M]()
	var out []M
	for _, m := range e.Messages(queue) {
		if m.Properties[saga.TypeProperty] != name {
			continue
		}
		var v M
		if err := e.codec.Unmarshal(m.Body, &v); err != nil {
			e.t.Fatalf("sagatest: decoding %s (seq %d on %s): %v", name, m.Seq, queue, err)
		}
		out = append(out, v)
	}
	return out
}

// AssertSent checks the messages sent to queue since the Env started:
// those of the types of the wanted values, decoded, must equal want, in
// order (reflect.DeepEqual, except that times are equal if they are the
// same instant, whatever their location). Messages of other types are
// ignored. With no
// wanted values it checks that nothing was sent to queue.
func (e *Env) AssertSent(t testing.TB, queue string, want ...any) {
	t.Helper()
	types := make(map[string]reflect.Type)
	var names []string
	for _, w := range want {
		if w == nil {
			t.Fatalf("sagatest: AssertSent(%s): nil wanted message", queue)
			return
		}
		n := messageName(w)
		if _, ok := types[n]; !ok {
			types[n] = reflect.TypeOf(w)
			names = append(names, n)
		}
	}
	var got []any
	for _, m := range e.Messages(queue) {
		n := m.Properties[saga.TypeProperty]
		typ, ok := types[n]
		if !ok && len(want) > 0 {
			continue
		}
		if !ok { // nothing wanted: show what came
			got = append(got, raw(n+e.bodySuffix(m.Body)))
			continue
		}
		v, err := e.decode(typ, m.Body)
		if err != nil {
			t.Fatalf("sagatest: decoding %s (seq %d on %s): %v", n, m.Seq, queue, err)
			return
		}
		got = append(got, v)
	}
	if len(got) == len(want) && slices.EqualFunc(got, want, equal) {
		return
	}
	what := "messages"
	if len(names) > 0 {
		what = "messages of type " + strings.Join(names, ", ")
	}
	var sb strings.Builder
	if len(got) == len(want) {
		fmt.Fprintf(&sb, "sagatest: %s sent to %s by %s: got %d that differ from those wanted\n", what, queue, e.offset(e.Now()), len(got))
	} else {
		fmt.Fprintf(&sb, "sagatest: %s sent to %s by %s: got %d, want %d\n", what, queue, e.offset(e.Now()), len(got), len(want))
	}
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(want):
			fmt.Fprintf(&sb, "  #%d got  %s\n     want (nothing)\n", i+1, show(got[i]))
		case i >= len(got):
			fmt.Fprintf(&sb, "  #%d got  (nothing)\n     want %s\n", i+1, show(want[i]))
		case equal(got[i], want[i]):
			fmt.Fprintf(&sb, "  #%d ok   %s\n", i+1, show(got[i]))
		default:
			fmt.Fprintf(&sb, "  #%d got  %s\n     want %s\n", i+1, show(got[i]), show(want[i]))
		}
	}
	sb.WriteString(e.journalSection())
	t.Errorf("%s", sb.String())
}

// decode decodes body into a new value of type typ (a pointer type gets a
// pointer to a new value).
func (e *Env) decode(typ reflect.Type, body []byte) (any, error) {
	if typ.Kind() == reflect.Pointer {
		p := reflect.New(typ.Elem())
		return p.Interface(), e.codec.Unmarshal(body, p.Interface())
	}
	p := reflect.New(typ)
	if err := e.codec.Unmarshal(body, p.Interface()); err != nil {
		return nil, err
	}
	return p.Elem().Interface(), nil
}

// raw is text that show prints as it is.
type raw string

// show formats a value for a failure message: Go syntax, with its type.
func show(v any) string {
	if r, ok := v.(raw); ok {
		return string(r)
	}
	return fmt.Sprintf("%#v", v)
}
