package temporal

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// TestScheduleOnTemporal runs a recurring schedule (every second, twelve
// seconds) whose ticks, which plan its occurrences, are timeouts on the
// Temporal engine (schedule.WithTimeouts): each occurrence is sent once,
// never before its nominal time, with its occurrence ID (with "~2" for
// one planned again after the pause cancelled it); a pause after the
// third stops them (the planned ones are cancelled, the pending tick's
// workflow too, or, if it fired, its tick is dropped); a resume goes on
// from the first occurrence after it, the ones in between counted as
// skipped. Every tick's workflow has then fired or been cancelled.
func TestScheduleOnTemporal(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b, WithBroker(b))
	s, err := schedule.New(b, schedule.WithQueue("sched-"+tq), schedule.WithTimeouts(e), schedule.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	work, err := b.Queue(t.Context(), "work-"+tq)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []*transport.Message
	)
	testutil.RunUntilCleanup(t, func(ctx context.Context) error {
		for {
			ds, err := work.Receive(ctx, 16)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			for _, d := range ds {
				mu.Lock()
				got = append(got, d.Message)
				mu.Unlock()
				if err := d.Complete(ctx); err != nil && ctx.Err() == nil {
					return err
				}
			}
		}
	})
	// received returns the occurrences received so far, as seconds from
	// base, and the messages.
	received := func(base time.Time) ([]int, []*transport.Message) {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for _, m := range got {
			n, err := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
			if err != nil {
				t.Fatalf("nominal %q: %v", m.Properties[schedule.PropertyNominal], err)
			}
			out = append(out, int(n.Sub(base)/time.Second))
		}
		return out, slices.Clone(got)
	}

	const last = 12
	base := time.Now().Add(2 * time.Second).Truncate(time.Second)
	err = s.Create(t.Context(), schedule.Schedule{Name: "every-second", Spec: schedule.Spec{Every: time.Second},
		Start: base, End: base.Add(last * time.Second),
		Action: schedule.Action{Queue: work.Name(), Message: &transport.Message{Subject: "Tick", Body: []byte("tick")}}})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Get(t.Context(), "every-second"); err != nil || info.Engine != DefaultEngineName {
		t.Fatalf("schedule %+v, %v: want its tick on %s", info, err, DefaultEngineName)
	}
	testutil.RunUntilCleanup(t, s.Run)

	testutil.Await(t, 20*time.Second, func() string {
		if n, _ := received(base); len(n) < 3 {
			return fmt.Sprintf("occurrences received %v, want 3 before the pause", n)
		}
		return ""
	})
	if err := s.Pause(t.Context(), "every-second", "test"); err != nil {
		t.Fatal(err)
	}
	info, err := s.Get(t.Context(), "every-second")
	if err != nil || !info.Paused || info.Engine != "" {
		t.Fatalf("after Pause: %+v, %v; want paused, no tick pending", info, err)
	}
	paused := time.Now()
	// The pause lasts over three nominal times; then Resume.
	select {
	case <-time.After(time.Until(paused.Add(3 * time.Second))):
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	}
	before, _ := received(base)
	if err := s.Resume(t.Context(), "every-second", ""); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Get(t.Context(), "every-second"); err != nil || info.Engine != DefaultEngineName {
		t.Fatalf("after Resume: %+v, %v; want the next tick on %s", info, err, DefaultEngineName)
	}
	testutil.Await(t, 30*time.Second, func() string {
		info, err := s.Get(t.Context(), "every-second")
		if err != nil {
			return err.Error()
		}
		if !info.Ended {
			return fmt.Sprintf("schedule not ended: next %v", info.Next)
		}
		// Counted at its time, the last occurrence reaches the queue up
		// to the server's activation tick later.
		if n, _ := received(base); int64(len(n)) < info.Sent {
			return fmt.Sprintf("occurrences received %v, %d sent", n, info.Sent)
		}
		return ""
	})
	info, err = s.Get(t.Context(), "every-second")
	if err != nil {
		t.Fatal(err)
	}
	ns2, msgs := received(base)
	// Contiguous before the pause and after it, each once, the gap being
	// the skipped occurrences.
	sorted := slices.Clone(ns2)
	sort.Ints(sorted)
	if !slices.Equal(sorted, ns2) {
		t.Errorf("occurrences received in the order %v, want in order", ns2)
	}
	var want []int
	for i := 0; i <= last; i++ {
		if i < len(before) || i > len(before)-1+int(info.Skipped) {
			want = append(want, i)
		}
	}
	if !slices.Equal(ns2, want) || info.Skipped < 2 || info.Sent != int64(len(want)) {
		t.Errorf("occurrences received %v (%d before the resume), info sent %d skipped %d; want %v: contiguous but for those skipped in the pause",
			ns2, len(before), info.Sent, info.Skipped, want)
	}
	var lateness []time.Duration
	for i, m := range msgs {
		nominal := base.Add(time.Duration(ns2[i]) * time.Second)
		if id := schedule.OccurrenceID("every-second", nominal); m.MessageID != id && m.MessageID != id+"~2" {
			t.Errorf("occurrence %d has ID %q, want %q", ns2[i], m.MessageID, schedule.OccurrenceID("every-second", nominal))
		}
		if m.EnqueuedAt.Before(nominal) {
			t.Errorf("occurrence %d sent %v early", ns2[i], nominal.Sub(m.EnqueuedAt))
		}
		lateness = append(lateness, m.EnqueuedAt.Sub(nominal))
	}
	slices.Sort(lateness)
	if len(lateness) > 0 {
		t.Logf("%d occurrences sent through Temporal ticks, %d skipped by the pause; lateness median %v, max %v",
			len(msgs), info.Skipped, lateness[len(lateness)/2], lateness[len(lateness)-1])
	}
	// Temporal: every tick (a plan) fired, or, the one pending at the
	// pause, cancelled or fired and dropped; none left running.
	testutil.Await(t, 10*time.Second, func() string {
		if running := timeoutWorkflows(t, c, tq, true); len(running) > 0 {
			return fmt.Sprintf("tick workflows still running: %v", running)
		}
		return ""
	})
	outcomes := map[string]int{}
	for _, wid := range timeoutWorkflows(t, c, tq, false) {
		var r result
		if err := c.GetWorkflow(t.Context(), wid, "").Get(t.Context(), &r); err != nil {
			t.Fatalf("result of %s: %v", wid, err)
		}
		outcomes[r.Outcome]++
	}
	t.Logf("tick workflows by outcome %v", outcomes)
	if outcomes[outcomeFired] < 1 || outcomes[outcomeCancelled] > 1 || len(outcomes) > 2 {
		t.Errorf("tick workflows by outcome %v, want fired ones, and at most one cancelled", outcomes)
	}
}
