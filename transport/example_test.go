package transport_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

func exampleQueue(ctx context.Context, cfg transport.QueueConfig) (*transport.Broker, *transport.Queue) {
	b, err := transport.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	q, err := b.OpenQueue(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	return b, q
}

func ExampleNewMemory() {
	ctx := context.Background()
	b, err := transport.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "orders"})
	if err != nil {
		log.Fatal(err)
	}

	r, err := q.Send(ctx, &transport.Message{Body: []byte("order 42"), MessageID: "order-42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate:", r.Duplicate)

	ds, err := q.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Printf("received seq %d %q, delivery %d\n", d.Seq, d.Body, d.DeliveryCount)
		if err := d.Complete(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// duplicate: false
	// received seq 1 "order 42", delivery 1
}

func ExampleQueue_Cancel() {
	ctx := context.Background()
	b, q := exampleQueue(ctx, transport.QueueConfig{Name: "reminders"})
	defer b.Close()

	seq, err := q.Schedule(ctx, &transport.Message{Body: []byte("chase payment")}, time.Now().Add(14*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("scheduled:", transport.IsScheduledSeq(seq))
	fmt.Println("cancel:", q.Cancel(ctx, seq))
	fmt.Println("again:", errors.Is(q.Cancel(ctx, seq), transport.ErrNotFound))

	// A time in the past activates at once, so cancelling comes too late.
	seq, err = q.Schedule(ctx, &transport.Message{Body: []byte("overdue")}, time.Now().Add(-time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("overdue:", errors.Is(q.Cancel(ctx, seq), transport.ErrAlreadyActivated))
	// Output:
	// scheduled: true
	// cancel: <nil>
	// again: true
	// overdue: true
}

func ExampleQueue_Browse() {
	ctx := context.Background()
	b, q := exampleQueue(ctx, transport.QueueConfig{Name: "timeouts"})
	defer b.Close()

	for _, m := range []*transport.Message{
		{Body: []byte("now")},
		{Body: []byte("in an hour"), ScheduledAt: time.Now().Add(time.Hour)},
		{Body: []byte("also now")},
	} {
		if _, err := q.Send(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	for m, err := range q.Browse(ctx, 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-9s seq %d %q\n", m.State, transport.LocalSeq(m.Seq), m.Body)
	}
	// Output:
	// active    seq 1 "now"
	// active    seq 2 "also now"
	// scheduled seq 1 "in an hour"
}
