package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// memoryWithWork returns a scheduler on a memory broker (closed when t
// ends) and the broker's queue "work".
func memoryWithWork(t *testing.T) (*Scheduler, *transport.Queue) {
	t.Helper()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	s, err := New(b, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	work, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	return s, work
}

// flakyTarget is a queue that is unavailable (transport.ErrUnavailable)
// while down is set.
type flakyTarget struct {
	q    *transport.Queue
	mu   sync.Mutex
	down bool
	refs int // sends refused
}

func (f *flakyTarget) Send(ctx context.Context, m *transport.Message) (transport.SendResult, error) {
	f.mu.Lock()
	down := f.down
	if down {
		f.refs++
	}
	f.mu.Unlock()
	if down {
		return transport.SendResult{}, fmt.Errorf("test: %w", transport.ErrUnavailable)
	}
	return f.q.Send(ctx, m)
}

func (f *flakyTarget) CancelMany(ctx context.Context, seqs []uint64) []error {
	return f.q.CancelMany(ctx, seqs)
}

func (f *flakyTarget) set(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// A target that is unavailable for far longer than MaxDeliveryCount
// redeliveries of a tick would take: Run keeps the tick (its lock
// renewed) and sends the occurrence once the target is back — the
// schedule goes on; nothing is dead-lettered.
func TestRunWaitsOutAnUnavailableTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, work := memoryWithWork(t)
		ctx := t.Context()
		b := s.b
		target := &flakyTarget{q: work, down: true}
		s.targets["q:work"] = target
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		if err := s.Create(ctx, Schedule{Name: "s", Spec: Spec{Every: time.Minute}, Start: base,
			Action: Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}}); err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		time.Sleep(time.Until(base.Add(30 * time.Minute))) // virtual time
		synctest.Wait()
		target.mu.Lock()
		refused := target.refs
		target.mu.Unlock()
		if refused < 20 {
			t.Fatalf("the target refused %d sends in half an hour: Run did not keep trying", refused)
		}
		home, err := b.Queue(ctx, DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		for m, err := range home.DeadLetterQueue().Browse(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			t.Fatalf("tick dead-lettered during the outage: %s %s", m.DeadLetterReason, m.DeadLetterDescription)
		}
		target.set(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		n := 0
		for m, err := range work.Browse(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject == "Tick" {
				n++
			}
		}
		if n == 0 {
			t.Fatal("no occurrence sent after the target came back")
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
