package transport_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// TestTopicStreams checks the JetStream layout of a topic: its streams,
// interest retention, one consumer per subscription whatever the number
// of opens, and DeleteTopic removing every stream, the subscriptions'
// dead-letter queues included.
func TestTopicStreams(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	js, _ := jetstream.New(nc)
	cfg := transport.TopicConfig{Name: "orders", Partitions: 2, FilterProperties: []string{"region"}}
	sub := transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"Paid"}, Properties: map[string]string{"region": "eu"}}}
	for range 2 {
		tp, err := b.OpenTopic(ctx, cfg)
		if err != nil {
			t.Fatalf("OpenTopic: %v", err)
		}
		if _, err := tp.OpenSubscription(ctx, "billing", sub); err != nil {
			t.Fatalf("OpenSubscription: %v", err)
		}
	}
	var names []string
	for n := range js.StreamNames(ctx).Name() {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"JETSAGA_SD_6_orders_billing", "JETSAGA_TS_orders_0", "JETSAGA_TS_orders_1", "JETSAGA_T_orders_0", "JETSAGA_T_orders_1"}
	if !slices.Equal(names, want) {
		t.Errorf("streams = %q, want %q", names, want)
	}
	s, err := js.Stream(ctx, "JETSAGA_T_orders_1")
	if err != nil {
		t.Fatalf("topic stream: %v", err)
	}
	if r := s.CachedInfo().Config.Retention; r != jetstream.InterestPolicy {
		t.Errorf("topic stream retention %v, want interest", r)
	}
	var consumers []string
	for c := range s.ConsumerNames(ctx).Name() {
		consumers = append(consumers, c)
	}
	if !slices.Equal(consumers, []string{"U-billing"}) {
		t.Errorf("consumers of the topic stream = %q, want one per subscription", consumers)
	}
	c, err := s.Consumer(ctx, "U-billing")
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	// Paid, region eu: "_" + base64url of each.
	wantFilters := []string{"JETSAGA.T.orders.1.m._UGFpZA._ZXU", "JETSAGA.T.orders.1.s.*._UGFpZA._ZXU"}
	if got := c.CachedInfo().Config.FilterSubjects; !slices.Equal(got, wantFilters) {
		t.Errorf("filter subjects %q, want %q", got, wantFilters)
	}
	if err := b.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	for n := range js.StreamNames(ctx).Name() {
		t.Errorf("stream %s left after DeleteTopic", n)
	}
}

// topicServer starts a server and opens the topic cfg on it.
func topicServer(t *testing.T, cfg transport.TopicConfig) (jetstream.JetStream, *transport.Topic) {
	t.Helper()
	_, nc, b := startServer(t, embedded.Options{})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	tp, err := b.OpenTopic(t.Context(), cfg)
	if err != nil {
		t.Fatalf("OpenTopic: %v", err)
	}
	return js, tp
}

// TestTopicSubjectTokens checks that hostile types and property values
// become single subject tokens, never wildcards or separators.
func TestTopicSubjectTokens(t *testing.T) {
	ctx := t.Context()
	js, tp := topicServer(t, transport.TopicConfig{Name: "t", FilterProperties: []string{"a", "b"}})
	if _, err := tp.OpenSubscription(ctx, "all", transport.SubscriptionConfig{}); err != nil {
		t.Fatalf("OpenSubscription: %v", err)
	}
	m := &transport.Message{Subject: "x.*.>", SessionID: "s >", Properties: map[string]string{"a": strings.Repeat(".", 100)}}
	if _, err := tp.Send(ctx, m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	s, err := js.Stream(ctx, "JETSAGA_T_t_0")
	if err != nil {
		t.Fatalf("topic stream: %v", err)
	}
	// The message reaches the topic stream a moment after Send returns.
	var raw *jetstream.RawStreamMsg
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(5 * time.Second); raw == nil && time.Now().Before(deadline); <-tick.C {
		raw, _ = s.GetMsg(ctx, 1)
	}
	if raw == nil {
		t.Fatal("the message never reached the topic stream")
	}
	// P.T.t.0.s.<sid>.<type>.<a>.<b>
	tokens := strings.Split(raw.Subject, ".")
	if len(tokens) != 9 {
		t.Fatalf("subject %q has %d tokens, want 9", raw.Subject, len(tokens))
	}
	for _, tok := range tokens[5:] {
		if strings.ContainsAny(tok, "*> ") {
			t.Errorf("subject %q: token %q holds a wildcard or a space", raw.Subject, tok)
		}
	}
	if !strings.HasPrefix(tokens[7], "~") || tokens[8] != "-" {
		t.Errorf("subject %q: want a long value hashed (~...) and an absent one as -", raw.Subject)
	}
	// The copy in the schedule stream expires even if no receiver ever
	// purges it: 7 days, CancelRecordTTL's default.
	sched, err := js.Stream(ctx, "JETSAGA_TS_t_0")
	if err != nil {
		t.Fatalf("schedule stream: %v", err)
	}
	cp, err := sched.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	if ttl := cp.Header.Get("Nats-TTL"); ttl != "604800s" {
		t.Errorf("copy's Nats-TTL %q, want 604800s", ttl)
	}
}

// TestCountsConsumer checks the consumer that counts schedules: created
// by the first Counts, filtered on the schedules, never delivering.
func TestCountsConsumer(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	js, _ := jetstream.New(nc)
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "q"})
	if err != nil {
		t.Fatalf("OpenQueue: %v", err)
	}
	for range 3 {
		if _, err := q.Schedule(ctx, &transport.Message{Body: []byte("x")}, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("Schedule: %v", err)
		}
	}
	if c, err := q.Counts(ctx); err != nil || c.Scheduled != 3 {
		t.Fatalf("Counts = %+v, %v: want 3 scheduled", c, err)
	}
	c, err := js.Consumer(ctx, "JETSAGA_S_q_0", "count-scheduled")
	if err != nil {
		t.Fatalf("counting consumer: %v", err)
	}
	info := c.CachedInfo()
	if info.Config.AckPolicy != jetstream.AckNonePolicy || info.Config.FilterSubject != "JETSAGA.S.q.0.*.s" || info.Delivered.Stream != 0 {
		t.Errorf("counting consumer %+v: want AckNone, filtered on the schedules, nothing delivered", info)
	}
}

// TestSessionConsumersCollected checks that a session subscription does
// not keep a consumer per session: a receiver that closes with its
// session empty deletes the session's consumer.
func TestSessionConsumersCollected(t *testing.T) {
	ctx := t.Context()
	js, tp := topicServer(t, transport.TopicConfig{Name: "t"})
	sub, err := tp.OpenSubscription(ctx, "x", transport.SubscriptionConfig{RequiresSession: true})
	if err != nil {
		t.Fatalf("OpenSubscription: %v", err)
	}
	const sessions = 5
	for i := range sessions {
		if _, err := tp.Send(ctx, &transport.Message{Body: []byte("m"), SessionID: string(rune('a' + i))}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	s, err := js.Stream(ctx, "JETSAGA_T_t_0")
	if err != nil {
		t.Fatalf("topic stream: %v", err)
	}
	consumers := func() []string {
		var out []string
		for c := range s.ConsumerNames(ctx).Name() {
			out = append(out, c)
		}
		return out
	}
	for range sessions {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := sub.AcceptNextSession(wctx)
		if err != nil {
			cancel()
			t.Fatalf("AcceptNextSession: %v", err)
		}
		d, err := r.Receive(wctx)
		cancel()
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if err := d.Complete(ctx); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if n := len(consumers()); n < 2 {
			t.Errorf("consumers while a session is open: %d, want the subscription's and the session's", n)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if got := consumers(); !slices.Equal(got, []string{"U-x"}) {
		t.Errorf("consumers after every session closed empty = %q, want only the subscription's", got)
	}
}

// TestAbandonedSessionConsumerCollected checks that the consumer of a
// session whose receiver died (it never closed) goes too: the next
// AcceptNextSession that finds it idle and unlocked collects it.
func TestAbandonedSessionConsumerCollected(t *testing.T) {
	ctx := t.Context()
	js, tp := topicServer(t, transport.TopicConfig{Name: "t"})
	sub, err := tp.OpenSubscription(ctx, "x", transport.SubscriptionConfig{RequiresSession: true, LockDuration: time.Second})
	if err != nil {
		t.Fatalf("OpenSubscription: %v", err)
	}
	if _, err := tp.Send(ctx, &transport.Message{Body: []byte("m"), SessionID: "s"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r, err := sub.AcceptSession(ctx, "s")
	if err != nil {
		t.Fatalf("AcceptSession: %v", err)
	}
	d, err := r.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if err := d.Complete(ctx); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// r is dropped without Close, as by a receiver that died.
	s, err := js.Stream(ctx, "JETSAGA_T_t_0")
	if err != nil {
		t.Fatalf("topic stream: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := sub.AcceptNextSession(wctx)
		cancel()
		if !errors.Is(err, transport.ErrNoSession) {
			t.Fatalf("AcceptNextSession with no message = %v, want ErrNoSession", err)
		}
		var names []string
		for c := range s.ConsumerNames(ctx).Name() {
			names = append(names, c)
		}
		if slices.Equal(names, []string{"U-x"}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers 10s after the receiver died = %q, want only the subscription's", names)
		}
	}
}
