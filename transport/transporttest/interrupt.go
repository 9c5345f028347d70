package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testReceiveInterrupted checks that a Receive whose context is
// cancelled with cause ErrReceiveInterrupted returns at once with that
// error, and releases nothing: a message sent as it was interrupted is
// received next with DeliveryCount 1, as after a deadline.
func (s *suite) testReceiveInterrupted(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	for i := range 3 {
		ctx, interrupt := context.WithCancelCause(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := q.ReceiveFrom(ctx, 5, []int{0})
			done <- err
		}()
		// Let the Receive start waiting (it may or may not have by then:
		// either way nothing may be lost).
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		interrupt(transport.ErrReceiveInterrupted)
		select {
		case err := <-done:
			if !errors.Is(err, transport.ErrReceiveInterrupted) {
				t.Errorf("round %d: interrupted Receive = %v, want %v", i, err, transport.ErrReceiveInterrupted)
			}
		case <-time.After(promptMargin):
			t.Fatalf("round %d: Receive still waiting %v after its interruption", i, promptMargin)
		}
		checkPrompt(t, "interrupted Receive", start, 0)
		m := numbered("after", i)
		send(t, q, m)
		a := receiveOne(t, q, awaitMargin)
		if !sameContent(a.Message, m) || a.DeliveryCount != 1 {
			t.Errorf("round %d: after an interrupted Receive, got %s with DeliveryCount %d, want %s first delivered", i, describe(a.Message), a.DeliveryCount, describe(m))
		}
		complete(t, a.Delivery)
	}
}
