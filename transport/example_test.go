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

func ExampleTopic() {
	ctx := context.Background()
	b, err := transport.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	orders, err := b.OpenTopic(ctx, transport.TopicConfig{Name: "orders", FilterProperties: []string{"region"}})
	if err != nil {
		log.Fatal(err)
	}
	// Each service opens its subscription at start; it is idempotent.
	billing, err := b.OpenSubscription(ctx, "orders", "billing", transport.SubscriptionConfig{
		Filter: transport.Filter{Subjects: []string{"OrderPlaced"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	eu, err := orders.OpenSubscription(ctx, "eu-audit", transport.SubscriptionConfig{
		Filter: transport.Filter{Properties: map[string]string{"region": "eu"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range []*transport.Message{
		{Subject: "OrderPlaced", Body: []byte("order 1"), Properties: map[string]string{"region": "eu"}},
		{Subject: "OrderPlaced", Body: []byte("order 2"), Properties: map[string]string{"region": "us"}},
		{Subject: "OrderCancelled", Body: []byte("order 1"), Properties: map[string]string{"region": "eu"}},
	} {
		if _, err := orders.Send(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	for _, sub := range []*transport.Subscription{billing, eu} {
		c, err := sub.Counts(ctx)
		if err != nil {
			log.Fatal(err)
		}
		ds, err := sub.Receive(ctx, 10)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (%d active):\n", sub.Name(), c.Active)
		for _, d := range ds {
			fmt.Printf("  seq %d %s %q\n", d.Seq, d.Subject, d.Body)
			if err := d.Complete(ctx); err != nil {
				log.Fatal(err)
			}
		}
	}
	c, err := orders.Counts(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held by the topic:", c.Active)
	// Output:
	// billing (2 active):
	//   seq 1 OrderPlaced "order 1"
	//   seq 2 OrderPlaced "order 2"
	// eu-audit (2 active):
	//   seq 1 OrderPlaced "order 1"
	//   seq 3 OrderCancelled "order 1"
	// held by the topic: 0
}
