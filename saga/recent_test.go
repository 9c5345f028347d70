package saga

import (
	"slices"
	"testing"
	"time"
)

// A dispatcher's last hour: settled steps counted by minute and saga
// type, dead letters and timeouts among them, timeouts by lateness in
// LatenessBounds' buckets; steps that run again (Waiting, Abandoned) not
// counted; minutes an hour old forgotten.
func TestRecentStats(t *testing.T) {
	var r recentStats
	t0 := time.Date(2026, 11, 29, 10, 0, 30, 0, time.UTC)
	step := func(at time.Time, sagaName string, due time.Time, o Outcome) {
		r.add(&StepInfo{Saga: sagaName, StartedAt: at, TimeoutDue: due}, StepResult{Outcome: o})
	}
	step(t0, "order", time.Time{}, Handled)
	step(t0, "order", time.Time{}, DeadLettered)
	step(t0, "order", time.Time{}, Waiting)
	step(t0, "order", time.Time{}, Abandoned)
	step(t0, "order", t0.Add(-10*time.Millisecond), Handled)        // exactly 10ms late: the first bucket
	step(t0, "order", t0.Add(time.Second), Handled)                 // early (held): the first bucket
	step(t0, "order", t0.Add(-11*time.Millisecond), Handled)        // the second
	step(t0.Add(time.Minute), "order", t0.Add(-time.Hour), Skipped) // beyond every bound
	step(t0, "payment", time.Time{}, Handled)
	if !r.hasNews() {
		t.Fatal("no news after steps")
	}
	got := r.snapshot(t0.Add(2 * time.Minute))
	if r.hasNews() {
		t.Error("news after a snapshot")
	}
	if len(got) != 3 {
		t.Fatalf("%d minutes, want 3: %+v", len(got), got)
	}
	o := got[0]
	wantLate := make([]int, len(LatenessBounds)+1)
	wantLate[0], wantLate[1] = 2, 1
	if o.Saga != "order" || !o.Minute.Equal(t0.Truncate(time.Minute)) || o.Steps != 5 || o.DeadLetters != 1 || o.Timeouts != 3 || !slices.Equal(o.Late, wantLate) {
		t.Errorf("order's first minute: %+v; want 5 steps, 1 dead letter, 3 timeouts late %v", o, wantLate)
	}
	if p := got[1]; p.Saga != "payment" || p.Steps != 1 || p.Late != nil {
		t.Errorf("payment's minute: %+v", p)
	}
	if n := got[2]; n.Steps != 1 || n.Timeouts != 1 || n.Late[len(LatenessBounds)] != 1 {
		t.Errorf("order's second minute: %+v; want the skipped timeout in the last bucket", n)
	}
	// An hour on, the first minute is gone; the second stays one more minute.
	if got := r.snapshot(t0.Add(time.Hour)); len(got) != 1 || got[0].Minute != t0.Truncate(time.Minute).Add(time.Minute) {
		t.Errorf("an hour on: %+v; want only the second minute", got)
	}
	if got := r.snapshot(t0.Add(time.Hour + time.Minute)); len(got) != 0 {
		t.Errorf("an hour after the last step: %+v", got)
	}
}
