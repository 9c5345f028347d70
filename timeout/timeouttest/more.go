package timeouttest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// testMessage checks what a fired timeout delivers: the message's body,
// type and properties, MessageID set to the timeout's ID, and the
// properties naming the timeout's saga and instance.
func testMessage(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	at := time.Now().Add(200 * time.Millisecond)
	_, err := e.Scheduler.Schedule(t.Context(), timeout.Timeout{
		ID: "msg-1", Queue: q.Name(), At: at, Saga: "Loan", Instance: "loan-7",
		Message: &transport.Message{
			Body: []byte(`{"n":1}`), ContentType: "application/json", CorrelationID: "corr",
			MessageID: "ignored", Properties: map[string]string{"k": "v"},
		},
	})
	if err != nil {
		t.Fatalf("Schedule: %v", err)
	}
	d := receiveOne(t, q, time.Until(at)+f.Slack+5*time.Second, f)
	if d == nil {
		t.Fatal("timeout did not fire")
	}
	want := map[string]string{"k": "v", timeout.PropertyDue: at.UTC().Format(time.RFC3339Nano), timeout.PropertySaga: "Loan", timeout.PropertyInstance: "loan-7"}
	if d.Properties[timeout.PropertyTimeout] == "" {
		t.Errorf("property %s not set (all: %v)", timeout.PropertyTimeout, d.Properties)
	}
	for k, v := range want {
		if d.Properties[k] != v {
			t.Errorf("property %s = %q, want %q (all: %v)", k, d.Properties[k], v, d.Properties)
		}
	}
	if d.MessageID != "msg-1" || string(d.Body) != `{"n":1}` || d.ContentType != "application/json" || d.CorrelationID != "corr" {
		t.Errorf("delivered MessageID %q body %q content type %q correlation %q", d.MessageID, d.Body, d.ContentType, d.CorrelationID)
	}
}

// testHostileIDs schedules and cancels timeouts whose IDs and instance
// names hold subject wildcards, separators, spaces and long runs: each
// fires (or is cancelled) as its own timeout.
func testHostileIDs(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	at := time.Now().Add(300 * time.Millisecond)
	ids := []string{"a.b", "*", ">", "a b", "x.*.>", "ünï/cödé:%", strings.Repeat("x.", 64)}
	cancelled := ids[len(ids)-1]
	refs := map[string]timeout.Ref{}
	for _, id := range ids {
		due := at
		if id == cancelled {
			due = time.Now().Add(time.Hour) // beyond any engine's cancel margin
		}
		ref, err := e.Scheduler.Schedule(t.Context(), timeout.Timeout{ID: id, Queue: q.Name(), At: due, Saga: "S", Instance: id,
			Message: &transport.Message{Body: []byte(id)}})
		if err != nil {
			t.Fatalf("Schedule(%q): %v", id, err)
		}
		refs[id] = ref
	}
	if err := e.Scheduler.Cancel(t.Context(), refs[cancelled]); err != nil {
		t.Fatalf("Cancel(%q): %v", cancelled, err)
	}
	got := map[string]int{}
	deadline := time.Now().Add(time.Until(at) + f.Slack + 10*time.Second)
	for len(got) < len(ids)-1 && time.Now().Before(deadline) {
		d := receiveOne(t, q, time.Until(deadline), f)
		if d == nil {
			break
		}
		got[string(d.Body)]++
		if d.MessageID != string(d.Body) {
			t.Errorf("timeout %q delivered with MessageID %q", d.Body, d.MessageID)
		}
	}
	for _, id := range ids[:len(ids)-1] {
		if got[id] != 1 {
			t.Errorf("timeout %q delivered %d times, want 1", id, got[id])
		}
	}
	if d := receiveOne(t, q, f.Slack+500*time.Millisecond, f); d != nil {
		t.Errorf("unexpected delivery %q (the cancelled one is %q)", d.Body, cancelled)
	}
}

// testListing lists pending timeouts by queue, saga and instance, if the
// engine is a timeout.Lister: scheduled ones appear with their ref and
// due time; cancelled and fired ones disappear.
func testListing(t *testing.T, e Env, f Features) {
	if _, ok := e.Scheduler.(timeout.Lister); !ok {
		t.Fatalf("%T does not implement timeout.Lister: every engine of jetsaga lists its timeouts", e.Scheduler)
	}
	q := queueFor(t, e)
	soon := time.Now().Add(1500 * time.Millisecond)
	later := time.Now().Add(time.Hour)
	type spec struct {
		id, saga, inst string
		at             time.Time
	}
	specs := []spec{
		{"l-a1", "A", "1", later}, {"l-a2", "A", "2", later}, {"l-b1", "B", "1", later},
		{"l-fire", "A", "1", soon}, {"l-cancel", "A", "1", later},
	}
	refs := map[string]timeout.Ref{}
	for _, s := range specs {
		ref, err := e.Scheduler.Schedule(t.Context(), timeout.Timeout{ID: s.id, Queue: q.Name(), At: s.at, Saga: s.saga, Instance: s.inst,
			Message: &transport.Message{Body: []byte(s.id), Properties: map[string]string{"p": s.id}}})
		if err != nil {
			t.Fatalf("Schedule(%s): %v", s.id, err)
		}
		refs[s.id] = ref
	}
	list := func(flt timeout.Filter) map[string]timeout.Pending {
		out := map[string]timeout.Pending{}
		for p, err := range timeout.List(t.Context(), e.Scheduler, flt) {
			if err != nil {
				t.Fatalf("Pending(%+v): %v", flt, err)
			}
			if _, dup := out[p.ID]; dup {
				t.Errorf("Pending(%+v): %s listed twice", flt, p.ID)
			}
			out[p.ID] = p
		}
		return out
	}
	await := func(flt timeout.Filter, want ...string) map[string]timeout.Pending {
		t.Helper()
		slices.Sort(want)
		deadline := time.Now().Add(f.ListingLag + 5*time.Second)
		for {
			got := list(flt)
			ids := slices.Sorted(maps.Keys(got))
			if slices.Equal(ids, want) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("Pending(%+v) = %v, want %v", flt, ids, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	all := await(timeout.Filter{Queue: q.Name()}, "l-a1", "l-a2", "l-b1", "l-fire", "l-cancel")
	for _, s := range specs {
		p := all[s.id]
		if p.Ref != refs[s.id] || p.Queue != q.Name() || p.Saga != s.saga || p.Instance != s.inst || !p.At.Equal(s.at) || p.Properties["p"] != s.id {
			t.Errorf("listed %+v, want ref %s queue %s saga %s instance %s at %v property p=%s", p, refs[s.id], q.Name(), s.saga, s.inst, s.at, s.id)
		}
	}
	await(timeout.Filter{Queue: q.Name(), Saga: "B"}, "l-b1")
	await(timeout.Filter{Queue: q.Name(), Saga: "A", Instance: "1"}, "l-a1", "l-fire", "l-cancel")
	if err := e.Scheduler.Cancel(t.Context(), refs["l-cancel"]); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if receiveOne(t, q, time.Until(soon)+f.Slack+5*time.Second, f) == nil {
		t.Fatal("l-fire did not fire")
	}
	await(timeout.Filter{Queue: q.Name(), Saga: "A"}, "l-a1", "l-a2")
}

// testCancelRace cancels timeouts right at their activation time (their
// due time, less the early activation), many times:
// each Cancel's outcome must be true. nil: the timeout is never
// delivered; ErrAlreadyFired: it is delivered exactly once; nothing else.
//
// The race needs every timeout scheduled before it activates. The first
// round leaves 1 s for the scheduling; a round in which some Schedule
// returned after its timeout's activation (a slow machine or engine) is
// still checked, then run again, on a new queue, with more room; the test
// fails if no round of three was raced as meant.
func testCancelRace(t *testing.T, e Env, f Features) {
	lead := time.Second
	for round := 1; ; round++ {
		took, raced := cancelRaceRound(t, e, f, lead)
		if raced {
			return
		}
		if t.Failed() {
			return
		}
		if round == 3 {
			t.Fatalf("round %d: scheduling %d timeouts took %v, past the activation of the first due %v after the start: no round raced every cancel against a pending timeout", round, f.RaceRounds, took, lead)
		}
		t.Logf("round %d: scheduling %d timeouts took %v, past the activation of some (the first due %v after the start); again with more room", round, f.RaceRounds, took, lead)
		lead = 2*took + time.Second
	}
}

// cancelRaceRound is one round of testCancelRace, whose first timeout is
// due lead from now. It reports how long the scheduling took, and whether
// every Schedule returned before its timeout's activation.
func cancelRaceRound(t *testing.T, e Env, f Features, lead time.Duration) (took time.Duration, raced bool) {
	q := queueFor(t, e)
	n := f.RaceRounds
	start := time.Now()
	base := start.Add(lead)
	type result struct {
		ref timeout.Ref
		err error
	}
	results := make([]result, n)
	raced = true
	for i := range n {
		// Due times spread over 1 s, so that cancels land before, at and
		// after activation.
		at := base.Add(time.Duration(i) * time.Second / time.Duration(n))
		results[i].ref = schedule(t, e, q, fmt.Sprintf("race-%d", i), at)
		if !time.Now().Before(at.Add(-f.EarlyActivation)) {
			raced = false
		}
	}
	took = time.Since(start)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			at := base.Add(time.Duration(i) * time.Second / time.Duration(n))
			time.Sleep(time.Until(at.Add(-f.EarlyActivation))) // when it activates
			results[i].err = e.Scheduler.Cancel(t.Context(), results[i].ref)
		})
	}
	wg.Wait()
	want := map[string]bool{} // IDs that must arrive
	cancelled := 0
	for i, r := range results {
		switch {
		case r.err == nil:
			cancelled++
		case errors.Is(r.err, timeout.ErrAlreadyFired):
			want[fmt.Sprintf("race-%d", i)] = true
		default:
			t.Errorf("Cancel(race-%d): %v, want nil or ErrAlreadyFired", i, r.err)
		}
	}
	got := map[string]int{}
	deadline := time.Now().Add(f.Slack + 10*time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		d := receiveOne(t, q, time.Until(deadline), f)
		if d == nil {
			break
		}
		got[string(d.Body)]++
	}
	if d := receiveOne(t, q, f.Slack+time.Second, f); d != nil {
		got[string(d.Body)]++
	}
	for id := range want {
		if got[id] != 1 {
			t.Errorf("%s: Cancel said already fired; delivered %d times, want 1", id, got[id])
		}
	}
	for id, c := range got {
		if !want[id] {
			t.Errorf("%s: Cancel said cancelled; delivered %d times", id, c)
		}
	}
	t.Logf("%d cancels racing activation: %d cancelled, %d already fired; deliveries checked", n, cancelled, len(want))
	return took, raced
}
