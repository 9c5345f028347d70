package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// engineSpy is a real timeout engine (a queue engine named "eng" on the
// harness's broker) that records what the scheduler asks of it, and
// refuses to schedule while down is set: a fault a real engine gives only
// when its server is down.
type engineSpy struct {
	inner timeout.Scheduler

	mu        sync.Mutex
	down      bool
	slow      time.Duration // how long Schedule takes to return after scheduling
	scheduled []timeout.Timeout
	cancels   map[timeout.Ref]error
}

func newEngineSpy(b *transport.Broker) *engineSpy {
	return &engineSpy{inner: timeout.NewQueue(b, timeout.WithEngineName("eng")), cancels: map[timeout.Ref]error{}}
}

// newEngineHarness is a harness whose scheduler's ticks wait on an
// engineSpy.
func newEngineHarness(t *testing.T) (*harness, *engineSpy) {
	t.Helper()
	h := newHarness(t)
	eng := newEngineSpy(h.b)
	var err error
	if h.s, err = schedule.New(h.b, schedule.WithLogger(discard()), schedule.WithTimeouts(eng)); err != nil {
		t.Fatal(err)
	}
	return h, eng
}

var errEngineDown = errors.New("test: engine down")

func (e *engineSpy) Schedule(ctx context.Context, t timeout.Timeout) (timeout.Ref, error) {
	e.mu.Lock()
	down := e.down
	e.mu.Unlock()
	if down {
		return "", errEngineDown
	}
	ref, err := e.inner.Schedule(ctx, t)
	e.mu.Lock()
	if err == nil {
		e.scheduled = append(e.scheduled, t)
	}
	slow := e.slow
	e.mu.Unlock()
	time.Sleep(slow)
	return ref, err
}

func (e *engineSpy) Cancel(ctx context.Context, ref timeout.Ref) error {
	err := e.inner.Cancel(ctx, ref)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancels[ref] = err
	return err
}

func (e *engineSpy) setDown(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down = down
}

// ticks returns the due times of the ticks scheduled on the engine, as
// offsets from base.
func (e *engineSpy) ticks(base time.Time) []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []time.Duration
	for _, t := range e.scheduled {
		out = append(out, t.At.Sub(base))
	}
	return out
}

// pendingTicks returns the ticks waiting on the schedule queue, by the
// engine that wrote them: "eng", or "" for the scheduler's own.
func pendingTicks(t *testing.T, h *harness) map[string]int {
	t.Helper()
	q, err := h.b.Queue(h.ctx, schedule.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for m, err := range q.Browse(h.ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if m.State == transport.Scheduled {
			out[m.Properties[timeout.PropertyTimeout]]++
		}
	}
	return out
}

// With WithTimeouts a schedule's ticks, which plan its occurrences, are
// timeouts on the engine given: every 3 seconds for a minute, planned a
// minute ahead, the ticks are due when half the horizon is left before
// the first occurrence not planned (-27 s: created at -60 s, 0 s planned;
// 6 s: 3 to 33 s planned), then at the last occurrence (60 s), all on the
// engine (none written on the queue); each occurrence is sent once, none
// early; Pause cancels the pending tick on the engine, Resume schedules
// the next one there.
func TestTicksOnATimeoutEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, eng := newEngineHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: 3 * time.Second}, Start: base, End: base.Add(60 * time.Second)})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(28*time.Second + 500*time.Millisecond))
		info, err := h.s.Get(h.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if info.Engine != "eng" {
			t.Errorf("Info.Engine %q, want the engine's name, eng", info.Engine)
		}
		if got := pendingTicks(t, h); got["eng"] != 1 || len(got) != 1 {
			t.Errorf("ticks pending on the schedule queue by writer: %v, want one, the engine's", got)
		}
		want := []time.Duration{-27 * time.Second, 6 * time.Second, 60 * time.Second}
		if got := eng.ticks(base); !slices.Equal(got, want) {
			t.Errorf("ticks on the engine due at %v from the first occurrence, want %v", got, want)
		}

		if err := h.s.Pause(h.ctx, "s", "on the engine"); err != nil {
			t.Fatal(err)
		}
		eng.mu.Lock()
		if len(eng.scheduled) == 0 {
			eng.mu.Unlock()
			t.Fatal("no tick was scheduled on the engine")
		}
		last := eng.scheduled[len(eng.scheduled)-1]
		cancels := maps.Clone(eng.cancels)
		eng.mu.Unlock()
		if len(cancels) != 1 {
			t.Errorf("Pause cancelled %v on the engine, want the pending tick %s", cancels, last.ID)
		}
		for ref, err := range cancels {
			if err != nil {
				t.Errorf("Pause: cancel of %s: %v, want it cancelled", ref, err)
			}
		}
		if got := pendingTicks(t, h); len(got) != 0 {
			t.Errorf("ticks pending after Pause: %v, want none", got)
		}
		sleepUntil(base.Add(40*time.Second + 500*time.Millisecond))
		if err := h.s.Resume(h.ctx, "s", ""); err != nil {
			t.Fatal(err)
		}
		if info, _ := h.s.Get(h.ctx, "s"); info.Engine != "eng" || info.Skipped != 4 {
			t.Errorf("after Resume, Info.Engine %q skipped %d, want eng and 4 (30 to 39 s)", info.Engine, info.Skipped)
		}
		sleepUntil(base.Add(61 * time.Second))
		got, msgs := h.received(base)
		var wantSecs []int
		for i := 0; i <= 60; i += 3 {
			if i < 30 || i > 40 {
				wantSecs = append(wantSecs, i)
			}
		}
		equalInts(t, "nominal seconds", got, wantSecs)
		for i, m := range msgs {
			if nominal := base.Add(time.Duration(got[i]) * time.Second); m.EnqueuedAt.Before(nominal) {
				t.Errorf("occurrence %d sent %v early", got[i], nominal.Sub(m.EnqueuedAt))
			}
		}
	})
}

// A Pause at 5.5 s on a schedule every second whose ticks wait on an
// engine stops the occurrences after it: those planned are cancelled.
func TestPauseWhileATickIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := newEngineHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(20 * time.Second)})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(5*time.Second + 500*time.Millisecond)) // the tick of 6 s came at 4.7 s
		if err := h.s.Pause(h.ctx, "s", ""); err != nil {
			t.Fatal(err)
		}
		sleepUntil(base.Add(8 * time.Second))
		got, _ := h.received(base)
		equalInts(t, "nominal seconds", got, seq(0, 5))
		if info, _ := h.s.Get(h.ctx, "s"); info.Sent != 6 {
			t.Errorf("Info.Sent %d, want 6", info.Sent)
		}
	})
}

// An engine that refuses ticks (its server down) does not stop a
// schedule: the ticks go on the schedule queue meanwhile, and back on the
// engine once it takes them again; every occurrence is sent once. A
// schedule every second for 100 s, planned a minute ahead: ticks at
// -29 s (Create's), 2 s (written while the engine is down: on the queue),
// 33 s, 64 s and 100 s (the last occurrence).
func TestTicksFallBackToTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, eng := newEngineHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(100 * time.Second)})
		h.run()
		defer h.stopRun()
		engines := func() string {
			info, err := h.s.Get(h.ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("%s %v", info.Engine, pendingTicks(t, h))
		}
		sleepUntil(base.Add(-40 * time.Second))
		eng.setDown(true)
		sleepUntil(base.Add(-25 * time.Second))
		if got, want := engines(), "queue map[:1]"; got != want {
			t.Errorf("with the engine down: engine and pending ticks %q, want %q", got, want)
		}
		eng.setDown(false)
		sleepUntil(base.Add(5 * time.Second))
		if info, _ := h.s.Get(h.ctx, "s"); info.Engine != "eng" {
			t.Errorf("with the engine back: Info.Engine %q, want eng", info.Engine)
		}
		sleepUntil(base.Add(101 * time.Second))
		got, _ := h.received(base)
		equalInts(t, "nominal seconds", got, seq(0, 100))
		want := []time.Duration{-29 * time.Second, 33 * time.Second, 64 * time.Second, 100 * time.Second}
		if got := eng.ticks(base); !slices.Equal(got, want) {
			t.Errorf("ticks on the engine due at %v from the first occurrence, want %v", got, want)
		}
	})
}

// A tick due at once that the engine delivers before the scheduler has
// written the record naming it (the engine is slow to answer) is not
// taken for a stale one: Run waits for the record, and every occurrence
// is sent.
func TestTickBeforeItsRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		eng := newEngineSpy(h.b)
		eng.slow = 100 * time.Millisecond
		var err error
		if h.s, err = schedule.New(h.b, schedule.WithLogger(discard()), schedule.WithTimeouts(eng)); err != nil {
			t.Fatal(err)
		}
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(5 * time.Second)})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(6 * time.Second))
		got, _ := h.received(base)
		equalInts(t, "nominal seconds", got, seq(0, 5))
	})
}

// A tick scheduled on the engine for a record that is then not written
// (Create of a name that is taken) is cancelled, so that it does not fire
// for nothing.
func TestOrphanTickCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, eng := newEngineHarness(t)
		// (Beyond the horizon: Create plans no occurrence, and writes the
		// tick first.)
		sch := schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Hour}, Start: time.Now().Add(10 * time.Minute),
			Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}}
		h.create(sch)
		if err := h.s.Create(h.ctx, sch); !errors.Is(err, schedule.ErrExists) {
			t.Fatalf("second Create: %v, want ErrExists", err)
		}
		eng.mu.Lock()
		scheduled, cancels := len(eng.scheduled), eng.cancels
		eng.mu.Unlock()
		if scheduled != 2 || len(cancels) != 1 {
			t.Fatalf("engine: %d scheduled, cancels %v; want 2 scheduled and the second cancelled", scheduled, cancels)
		}
		for ref, err := range cancels {
			if err != nil {
				t.Errorf("cancel of the orphan tick %s: %v, want it cancelled", ref, err)
			}
		}
		if got := pendingTicks(t, h); got["eng"] != 1 || len(got) != 1 {
			t.Errorf("ticks pending: %v, want the first schedule's only", got)
		}
	})
}
