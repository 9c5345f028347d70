package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// CompleteNoWait settles a delivery as Complete does: the message is gone
// (once the broker applied it, which on JetStream is a moment later) and
// the delivery cannot be settled again.
func TestCompleteNoWait(t *testing.T) {
	mem, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	_, _, js := startServer(t, embedded.Options{})
	for name, b := range map[string]*transport.Broker{"memory": mem, "jetstream": js} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "nowait", LockDuration: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.Send(ctx, &transport.Message{Body: []byte("x"), MessageID: "m1"}); err != nil {
				t.Fatal(err)
			}
			var ds []*transport.Delivery
			for len(ds) == 0 {
				if ds, err = q.Receive(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := ds[0].CompleteNoWait(ctx); err != nil {
				t.Fatalf("CompleteNoWait: %v", err)
			}
			if err := ds[0].Complete(ctx); !errors.Is(err, transport.ErrAlreadySettled) {
				t.Errorf("Complete after CompleteNoWait: %v, want ErrAlreadySettled", err)
			}
			// Gone for good: not in the queue, not redelivered after the
			// lock would have expired.
			for deadline := time.Now().Add(5 * time.Second); ; {
				ms, err := q.Peek(ctx, 0, 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("queue still holds %d messages", len(ms))
				}
				time.Sleep(10 * time.Millisecond) // polling the queue's state, not syncing
			}
			rctx, rcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer rcancel()
			if ds, err := q.Receive(rctx, 1); len(ds) > 0 {
				t.Errorf("redelivered after CompleteNoWait: seq %d", ds[0].Seq)
			} else if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("receive: %v", err)
			}
		})
	}
}
