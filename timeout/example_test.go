package timeout_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Timeouts as scheduled messages on a transport queue, here in memory; on
// JetStream pass a broker made by transport.NewJetStream instead.
func ExampleQueue() {
	ctx := context.Background()
	broker, _ := transport.NewMemory()
	defer broker.Close()
	s := timeout.NewQueue(broker)

	soon, _ := s.Schedule(ctx, timeout.Timeout{ID: "remind-ann", Queue: "reminders",
		At: time.Now().Add(20 * time.Millisecond), Message: &transport.Message{Body: []byte("remind ann")}})
	later, _ := s.Schedule(ctx, timeout.Timeout{ID: "remind-bob", Queue: "reminders",
		At: time.Now().Add(time.Hour), Message: &transport.Message{Body: []byte("remind bob")}})
	fmt.Println("engine:", soon.Engine())
	fmt.Println("cancel bob:", s.Cancel(ctx, later))

	q, _ := broker.Queue(ctx, "reminders")
	ds, _ := q.Receive(ctx, 10)
	for _, d := range ds {
		fmt.Printf("received %q, not early: %t\n", d.Body, !d.EnqueuedAt.Before(d.ScheduledAt))
		d.Complete(ctx)
	}
	err := s.Cancel(ctx, soon)
	fmt.Println("cancel ann after it fired:", errors.Is(err, timeout.ErrAlreadyFired))
	// Output:
	// engine: queue
	// cancel bob: <nil>
	// received "remind ann", not early: true
	// cancel ann after it fired: true
}
