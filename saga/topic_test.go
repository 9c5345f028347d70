package saga_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Events of the publish/subscribe test.
type (
	placeOrder    struct{ Order string }
	orderPlaced   struct{ Order string }
	orderCanceled struct{ Order string }
)

func (placeOrder) MessageName() string    { return "shop.PlaceOrder" }
func (orderPlaced) MessageName() string   { return "shop.OrderPlaced" }
func (orderCanceled) MessageName() string { return "shop.OrderCanceled" }

type orderState struct{ Placed bool }
type billState struct {
	Billed   int
	Canceled bool
}

// ordering publishes OrderPlaced when an order is placed.
func ordering() *saga.Definition[orderState] {
	d := saga.Define[orderState]("ordering")
	saga.StartedBy(d, saga.By(func(m placeOrder) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m placeOrder) error {
			c.Data.Placed = true
			return c.Publish(orderPlaced(m))
		})
	return d
}

// billing bills each placed order; withCancel also handles cancellations
// (a later version of the endpoint).
func billing(withCancel bool) *saga.Definition[billState] {
	d := saga.Define[billState]("billing")
	saga.StartedBy(d, saga.By(func(m orderPlaced) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[billState], m orderPlaced) error {
			c.Data.Billed++
			return nil
		})
	if withCancel {
		saga.StartedBy(d, saga.By(func(m orderCanceled) string { return m.Order }),
			func(ctx context.Context, c *saga.Context[billState], m orderCanceled) error {
				c.Data.Canceled = true
				return nil
			})
	}
	return d
}

// TestPublishSubscribe: an endpoint publishes events to a topic; a second
// endpoint, added later, receives those published after it started
// (without the publisher changing), once per endpoint although two of its
// processes run; a new version of it, handling one more type, takes over
// what waited in the old version's subscription and drops that
// subscription.
func TestPublishSubscribe(t *testing.T) {
	srv := startServer(t)
	pub := newNode(t, srv.ClientURL())
	topic := transport.TopicConfig{Name: "shop-events"}
	var done sync.Map // order IDs whose step (commit and effects) is done
	orders := pub.dispatcher(t, nil, "orders", saga.WithSagas(ordering()), saga.WithTopic(topic),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, _ saga.StepResult) { done.Store(info.ID, true) }}))
	run(t, orders)
	place := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := orders.Send(ctxFor(t), placeOrder{Order: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// placed: the order's step is done, its event published.
	placed := func(id string) string {
		if _, ok := done.Load(id); !ok {
			return "order " + id + " not placed yet"
		}
		return ""
	}

	// Before any subscriber: published to nobody. A probe subscription
	// tells when the event has entered the topic (on JetStream a moment
	// after it was sent), so that billing subscribes only after that.
	tp, err := pub.broker.OpenTopic(ctxFor(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := tp.OpenSubscription(ctxFor(t), "probe", transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"shop.OrderPlaced"}}})
	if err != nil {
		t.Fatal(err)
	}
	place("o-early")
	testutil.Await(t, 10*time.Second, func() string {
		if why := placed("o-early"); why != "" {
			return why
		}
		if c, err := probe.Counts(ctxFor(t)); err != nil || c.Active == 0 {
			return fmt.Sprintf("o-early's event not in the topic yet (%+v, %v)", c, err)
		}
		return ""
	})

	// The billing endpoint arrives, in two processes.
	subNames := func() []string {
		tp, err := pub.broker.Topic(ctxFor(t), topic.Name)
		if err != nil {
			t.Fatal(err)
		}
		var names []string // billing's: orders subscribes too, to PlaceOrder
		for n, err := range tp.Subscriptions(ctxFor(t)) {
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(n, "billing-") {
				names = append(names, n)
			}
		}
		return names
	}
	b1, b2 := newNode(t, srv.ClientURL()), newNode(t, srv.ClientURL())
	v1a := b1.dispatcher(t, nil, "billing", saga.WithSagas(billing(false)), saga.WithTopic(topic))
	v1b := b2.dispatcher(t, nil, "billing", saga.WithSagas(billing(false)), saga.WithTopic(topic))
	ra, rb := run(t, v1a), run(t, v1b)
	testutil.Await(t, 10*time.Second, func() string {
		if n := subNames(); len(n) != 1 {
			return fmt.Sprintf("billing's subscriptions %q, want one", n)
		}
		return ""
	})
	v1Sub := subNames()[0]

	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("o-%d", i))
	}
	place(ids...)
	testutil.Await(t, 20*time.Second, func() string {
		for _, id := range ids {
			s, _, ok := data[billState](t, v1a, "billing", id)
			if !ok {
				return "order " + id + " not billed yet"
			}
			if s.Billed != 1 {
				return fmt.Sprintf("order %s billed %d times", id, s.Billed)
			}
		}
		return ""
	})
	if _, _, ok := data[billState](t, v1a, "billing", "o-early"); ok {
		t.Errorf("o-early, published before billing subscribed, was billed")
	}

	// Billing stops; events wait in its subscription meanwhile.
	if err := errors.Join(ra.wait(15*time.Second), rb.wait(15*time.Second)); err != nil {
		t.Fatal(err)
	}
	place("o-waiting-1", "o-waiting-2")
	testutil.Await(t, 10*time.Second, func() string { return placed("o-waiting-2") })

	// Version 2 handles cancellations too: a new subscription, and the old
	// one is drained into it and deleted.
	v2 := b1.dispatcher(t, nil, "billing", saga.WithSagas(billing(true)), saga.WithTopic(topic))
	run(t, v2)
	testutil.Await(t, 20*time.Second, func() string {
		for _, id := range []string{"o-waiting-1", "o-waiting-2"} {
			if s, _, ok := data[billState](t, v2, "billing", id); !ok || s.Billed != 1 {
				return "order " + id + " not billed once by version 2"
			}
		}
		if n := subNames(); len(n) != 1 || n[0] == v1Sub {
			return fmt.Sprintf("subscriptions %q, want only version 2's (not %s)", n, v1Sub)
		}
		return ""
	})
	if _, err := v2.Publish(ctxFor(t), orderCanceled{Order: "o-3"}); err != nil {
		t.Fatal(err)
	}
	place("o-late")
	testutil.Await(t, 20*time.Second, func() string {
		if s, _, ok := data[billState](t, v2, "billing", "o-3"); !ok || !s.Canceled || s.Billed != 1 {
			return "o-3's cancellation not handled"
		}
		if s, _, ok := data[billState](t, v2, "billing", "o-late"); !ok || s.Billed != 1 {
			return "o-late not billed once"
		}
		return ""
	})
	if slices.Contains(subNames(), v1Sub) {
		t.Errorf("version 1's subscription %s still exists", v1Sub)
	}
}

// TestPublishOptions: Publish without a topic, and an endpoint with more
// event types than a subscription can filter on, are refused.
func TestPublishOptions(t *testing.T) {
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	d := n.dispatcher(t, nil, "plain", saga.WithSagas(ordering()))
	if _, err := d.Publish(ctxFor(t), orderPlaced{Order: "x"}); !errors.Is(err, saga.ErrNoTopic) {
		t.Errorf("Publish without WithTopic = %v, want ErrNoTopic", err)
	}
	if _, err := saga.NewDispatcher(n.broker, n.store, "q", saga.WithSagas(ordering()), saga.WithTopic(transport.TopicConfig{Name: "a.b"})); !errors.Is(err, saga.ErrInvalidOption) {
		t.Errorf("WithTopic with an invalid name = %v, want ErrInvalidOption", err)
	}
}

// Publish and subscribe, on the in-memory transport: the ordering
// endpoint publishes OrderPlaced to the "shop" topic; the billing
// endpoint, started later, gets the events published from then on,
// without the publisher knowing it.
func Example_publishSubscribe() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	broker, _ := transport.NewMemory()
	store := memstore.New()
	shop := saga.WithTopic(transport.TopicConfig{Name: "shop"})
	placed := make(chan string, 2) // orders whose step is done, event published
	orders, _ := saga.NewDispatcher(broker, store, "orders", saga.WithSagas(ordering()), shop,
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, _ saga.StepResult) { placed <- info.ID }}))
	billingEndpoint, _ := saga.NewDispatcher(broker, store, "billing", saga.WithSagas(billing(false)), shop)
	go orders.Run(ctx)

	// until polls cond, for the example's output to be fixed.
	until := func(cond func() bool) {
		for deadline := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	exists := func(d *saga.Dispatcher, name, id string) bool {
		_, err := d.Instance(ctx, name, id)
		return err == nil
	}

	orders.Send(ctx, placeOrder{Order: "o-1"}) // nobody bills it: billing is not there yet
	<-placed

	go billingEndpoint.Run(ctx)
	topic, _ := broker.Topic(ctx, "shop")
	until(func() bool {
		n := 0
		for range topic.Subscriptions(ctx) {
			n++
		}
		return n == 2 // ordering's (to PlaceOrder) and billing's
	})
	orders.Send(ctx, placeOrder{Order: "o-2"})
	until(func() bool { return exists(billingEndpoint, "billing", "o-2") })

	for _, id := range []string{"o-1", "o-2"} {
		fmt.Printf("%s billed: %v\n", id, exists(billingEndpoint, "billing", id))
	}
	// Output:
	// o-1 billed: false
	// o-2 billed: true
}
