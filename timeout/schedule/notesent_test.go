package schedule

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// gatedTarget orders a writer's planning against a Run's catch-up: the
// first scheduled send waits until an immediate send is stored, and that
// immediate send returns only once created is closed.
type gatedTarget struct {
	q       *transport.Queue
	sentNow chan struct{} // closed once an immediate send is stored
	created chan struct{} // closed by the test once Create returned
	first   bool
}

func (g *gatedTarget) Send(ctx context.Context, m *transport.Message) (transport.SendResult, error) {
	if m.ScheduledAt.IsZero() {
		res, err := g.q.Send(ctx, m)
		close(g.sentNow)
		<-g.created
		return res, err
	}
	if !g.first {
		g.first = true
		<-g.sentNow
	}
	return g.q.Send(ctx, m)
}

func (g *gatedTarget) CancelMany(ctx context.Context, seqs []uint64) []error {
	return g.q.CancelMany(ctx, seqs)
}

// A schedule created at the instant of its first occurrence: a Run
// handles the tick of Create's first write (the plan intended, its
// messages not yet scheduled) and sends the due occurrence by catch-up,
// while Create schedules it too (a duplicate then) and writes the record
// first. The Run's write loses; the occurrence, which the record now
// plans, is counted once, not again by the Run (noteSent).
func TestCatchUpBesideTheWriterCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, work := memoryWithWork(t)
		ctx := t.Context()
		g := &gatedTarget{q: work, sentNow: make(chan struct{}), created: make(chan struct{})}
		s.targets["q:work"] = g
		if _, err := s.queue(ctx); err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		time.Sleep(time.Until(base))
		if err := s.Create(ctx, Schedule{Name: "s", Spec: Spec{Every: 2 * time.Second}, Start: base, End: base.Add(10 * time.Second),
			Action: Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}}); err != nil {
			t.Fatal(err)
		}
		close(g.created)
		time.Sleep(time.Until(base.Add(time.Minute)))
		synctest.Wait()
		got := map[string]int{}
		for m, err := range work.Browse(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			got[m.Properties[PropertyNominal]]++
		}
		info, err := s.Get(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		for nominal, n := range got {
			if n != 1 {
				t.Errorf("occurrence %s received %d times", nominal, n)
			}
		}
		if info.Sent != int64(len(got)) || len(got) != 6 || !info.Ended {
			t.Errorf("Info.Sent %d, ended %v; received %d occurrences, want 6 (0 to 10 s)", info.Sent, info.Ended, len(got))
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
