package transport_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestReopenSendsNoStreamUpdate checks that reopening existing queues,
// topics and subscriptions, one after the other and many at once, sends
// no stream update request. nats-server rewrites a stream store's config
// on every update, changed or not, under a lock its consumer creation
// does not take: concurrent opens that updated streams while others
// created consumers raced inside the server.
func TestReopenSendsNoStreamUpdate(t *testing.T) {
	srv, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	qcfg := transport.QueueConfig{Name: "reopen", Partitions: 2}
	scfg := transport.QueueConfig{Name: "reopen-s", RequiresSession: true}
	tcfg := transport.TopicConfig{Name: "reopen", FilterProperties: []string{"k"}}
	subs := []struct {
		name string
		cfg  transport.SubscriptionConfig
	}{
		{"all", transport.SubscriptionConfig{}},
		{"k", transport.SubscriptionConfig{Filter: transport.Filter{Properties: map[string]string{"k": "v"}}}},
		{"sess", transport.SubscriptionConfig{RequiresSession: true}},
	}
	openAll := func(b *transport.Broker) error {
		for _, cfg := range []transport.QueueConfig{qcfg, scfg} {
			if _, err := b.OpenQueue(ctx, cfg); err != nil {
				return fmt.Errorf("OpenQueue(%s): %w", cfg.Name, err)
			}
		}
		tp, err := b.OpenTopic(ctx, tcfg)
		if err != nil {
			return fmt.Errorf("OpenTopic: %w", err)
		}
		for _, s := range subs {
			if _, err := tp.OpenSubscription(ctx, s.name, s.cfg); err != nil {
				return fmt.Errorf("OpenSubscription(%s): %w", s.name, err)
			}
		}
		return nil
	}
	if err := openAll(b); err != nil {
		t.Fatal(err)
	}

	var updates atomic.Int64
	var mu sync.Mutex
	var streams []string
	watch, err := nc.Subscribe("$JS.API.STREAM.UPDATE.>", func(m *nats.Msg) {
		updates.Add(1)
		mu.Lock()
		streams = append(streams, m.Subject)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Unsubscribe()

	if err := openAll(b); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	const opens = 6
	var wg sync.WaitGroup
	errs := make([]error, opens)
	for i := range opens {
		other, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(other.Close)
		ob, err := transport.NewJetStream(other)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ob.Close() })
		wg.Go(func() { errs[i] = openAll(ob) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent reopen #%d: %v", i, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := updates.Load(); n != 0 {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("reopening existing queues, a topic and its subscriptions sent %d stream updates (%q), want none", n, streams)
	}
}
