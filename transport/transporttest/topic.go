package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
)

// testTopic checks topics and subscriptions: fan-out through filters,
// scheduled messages reaching every matching subscription once with the
// topic's sequence number, per-subscription dead-letter queues, sessions,
// the subscription life cycle, and hostile filter values.
func (s *suite) testTopic(t *testing.T) {
	parallel(t, "FanOut", s.testTopicFanOut)
	parallel(t, "Scheduled", s.testTopicScheduled)
	parallel(t, "DeadLetter", s.testTopicDeadLetter)
	parallel(t, "Lifecycle", s.testTopicLifecycle)
	parallel(t, "HostileFilters", s.testTopicHostileFilters)
	parallel(t, "Sessions", s.testTopicSessions)
	parallel(t, "Duplicate", s.testTopicDuplicate)
	parallel(t, "Partitions", s.testTopicPartitions)
	parallel(t, "Browse", s.testTopicBrowse)
	parallel(t, "ConcurrentOpen", s.testTopicConcurrentOpen)
	parallel(t, "SessionAgain", s.testTopicSessionAgain)
}

// testTopicSessionAgain checks a session that comes back after all its
// messages were completed and its receiver closed, while another
// subscription still holds the old messages: only the new ones are
// delivered, once, through AcceptSession and AcceptNextSession alike.
func (s *suite) testTopicSessionAgain(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	x := openSub(t, tp, "x", transport.SubscriptionConfig{RequiresSession: true})
	openSub(t, tp, "holder", transport.SubscriptionConfig{}) // never received from
	round := func(r int, accept func() (*transport.SessionReceiver, error)) {
		t.Helper()
		for i := range 3 {
			publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "r%d-%d", r, i), SessionID: "S"})
		}
		rcv, err := accept()
		if err != nil {
			t.Fatalf("round %d: accept: %v", r, err)
		}
		for i := range 3 {
			a := receiveSession(t, rcv, awaitMargin)
			if want := fmt.Sprintf("r%d-%d", r, i); string(a.Body) != want {
				t.Errorf("round %d: received %s, want %s (only the new messages, in order)", r, describe(a.Message), want)
			}
			complete(t, a.Delivery)
		}
		if d, err := rcv.Receive(withTimeout(t, quietMargin)); err == nil {
			t.Errorf("round %d: unexpected %s", r, describe(d.Message))
		}
		if err := rcv.Close(); err != nil {
			t.Errorf("round %d: Close: %v", r, err)
		}
	}
	for r := range 4 {
		if r%2 == 0 {
			round(r, func() (*transport.SessionReceiver, error) { return x.AcceptSession(withTimeout(t, awaitMargin), "S") })
		} else {
			round(r, func() (*transport.SessionReceiver, error) { return x.AcceptNextSession(withTimeout(t, awaitMargin)) })
		}
	}
	awaitCounts(t, "session subscription", x.Counts, transport.Counts{})
	awaitCounts(t, "topic (the holder keeps every message)", tp.Counts, transport.Counts{Active: 12})
}

// testTopicConcurrentOpen opens one subscription from several brokers at
// once, as services starting together do: all get it, and it is one
// subscription. Opened at once with different filters, exactly one
// filter wins and the others are refused.
func (s *suite) testTopicConcurrentOpen(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	const opens = 6
	// Other brokers, if brokers made by newBroker share topics (brokers on
	// one server do; memory brokers do not).
	brokers := []*transport.Broker{b}
	for range 2 {
		if other := s.newBroker(t); func() error { _, err := other.Topic(t.Context(), tp.Name()); return err }() == nil {
			brokers = append(brokers, other)
		}
	}
	for _, cfg := range []transport.SubscriptionConfig{{}, {RequiresSession: true}} {
		name := fmt.Sprintf("same-%t", cfg.RequiresSession)
		var wg sync.WaitGroup
		errs := make([]error, opens)
		for i := range opens {
			wg.Go(func() {
				_, errs[i] = brokers[i%len(brokers)].OpenSubscription(t.Context(), tp.Name(), name, cfg)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("OpenSubscription(%s) #%d at once with the same config: %v", name, i, err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, opens)
	for i := range opens {
		wg.Go(func() {
			cfg := transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{fmt.Sprint("t", i)}}}
			_, errs[i] = brokers[i%len(brokers)].OpenSubscription(t.Context(), tp.Name(), "differ", cfg)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("OpenSubscription with filters t%d and t%d at once both succeeded, want one refused", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, transport.ErrInvalidConfig):
			t.Errorf("OpenSubscription with filter t%d = %v, want nil or %v", i, err, transport.ErrInvalidConfig)
		}
	}
	sub, err := tp.Subscription(t.Context(), "differ")
	if err != nil || won < 0 || !slices.Equal(sub.Config().Filter.Subjects, []string{fmt.Sprint("t", won)}) {
		t.Errorf("the subscription opened at once with different filters: %v, %v: want the winner's filter t%d", sub, err, won)
	}
	for _, name := range []string{"same-false", "same-true"} {
		publish(t, tp, &transport.Message{Body: []byte(name), SessionID: "x"})
	}
	if got := receiveSub(t, openSub(t, tp, "same-false", transport.SubscriptionConfig{}), 2, awaitMargin); len(got) != 2 {
		t.Errorf("received %d, want 2", len(got))
	}
}

// openTopic deletes any topic left under cfg's name, opens it afresh and
// deletes it again when the test ends. An empty cfg.Name is replaced by
// queueName(t, "topic").
func openTopic(t *testing.T, b *transport.Broker, cfg transport.TopicConfig) *transport.Topic {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = queueName(t, "topic")
	}
	if err := b.DeleteTopic(t.Context(), cfg.Name); err != nil {
		t.Fatalf("DeleteTopic(%q) before the test: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.DeleteTopic(ctx, cfg.Name); err != nil && !errors.Is(err, transport.ErrClosed) {
			t.Errorf("DeleteTopic(%q) after the test: %v", cfg.Name, err)
		}
	})
	cfg.Partitions = keyedConfig(t, b, cfg.Name, cfg.Partitions)
	tp, err := b.OpenTopic(t.Context(), cfg)
	if err != nil {
		t.Fatalf("OpenTopic(%+v): %v", cfg, err)
	}
	return tp
}

func openSub(t *testing.T, tp *transport.Topic, name string, cfg transport.SubscriptionConfig) *transport.Subscription {
	t.Helper()
	sub, err := tp.OpenSubscription(t.Context(), name, cfg)
	if err != nil {
		t.Fatalf("OpenSubscription(%q, %+v): %v", name, cfg, err)
	}
	return sub
}

func publish(t *testing.T, tp *transport.Topic, m *transport.Message) {
	t.Helper()
	r, err := tp.Send(t.Context(), keyed(tp, m))
	if err != nil {
		t.Fatalf("Topic.Send(%s): %v", describe(m), err)
	}
	if r.Duplicate {
		t.Fatalf("Topic.Send(%s): Duplicate true, want false", describe(m))
	}
}

// receiveSub receives n messages from sub within timeout, completing
// each, and returns them in the order received.
func receiveSub(t *testing.T, sub *transport.Subscription, n int, timeout time.Duration) []arrival {
	t.Helper()
	return receiveFrom(t, sub.Name()+": ", sub.Receive, n, timeout)
}

// expectNoneSub fails the test if sub delivers any message within d.
func expectNoneSub(t *testing.T, sub *transport.Subscription, d time.Duration) {
	t.Helper()
	expectNoneFrom(t, sub.Name()+": ", sub.Receive, d)
}

// bodies returns the bodies of as, sorted.
func bodies(as []arrival) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a.Body)
	}
	slices.Sort(out)
	return out
}

func (s *suite) testTopicFanOut(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{FilterProperties: []string{"region", "tier"}})
	// Each subscription's filter, and which messages it must pass.
	subs := map[string]struct {
		filter transport.Filter
		wants  func(typ, region, tier string) bool
	}{
		"all":     {transport.Filter{}, func(string, string, string) bool { return true }},
		"created": {transport.Filter{Subjects: []string{"OrderCreated"}}, func(typ, _, _ string) bool { return typ == "OrderCreated" }},
		"eu":      {transport.Filter{Properties: map[string]string{"region": "eu"}}, func(_, region, _ string) bool { return region == "eu" }},
		"both": {
			transport.Filter{Subjects: []string{"OrderCreated", "OrderPaid"}, Properties: map[string]string{"region": "eu", "tier": "gold"}},
			func(typ, region, tier string) bool {
				return (typ == "OrderCreated" || typ == "OrderPaid") && region == "eu" && tier == "gold"
			},
		},
		"nothing": {transport.Filter{Subjects: []string{"NeverSent"}}, func(string, string, string) bool { return false }},
	}
	opened := make(map[string]*transport.Subscription)
	for name, sub := range subs {
		opened[name] = openSub(t, tp, name, transport.SubscriptionConfig{Filter: sub.filter})
	}
	types := []string{"OrderCreated", "OrderPaid", "OrderShipped", ""}
	regions := []string{"eu", "us", ""}
	var sent []*transport.Message
	start := time.Now()
	for i := range 24 {
		m := &transport.Message{Body: fmt.Appendf(nil, "m-%02d", i), Subject: types[i%len(types)], Properties: map[string]string{}}
		if r := regions[i%len(regions)]; r != "" {
			m.Properties["region"] = r
		}
		if i%2 == 0 {
			m.Properties["tier"] = "gold"
		}
		m.Properties["other"] = "x"
		publish(t, tp, m)
		sent = append(sent, m)
	}
	end := time.Now()
	// Every subscription gets exactly what its filter passes, with the
	// topic's sequence numbers: the same on every subscription.
	seqOf := make(map[string]uint64) // body → seq
	enqOf := make(map[string]time.Time)
	for name, spec := range subs {
		var want []string
		for _, m := range sent {
			if spec.wants(m.Subject, m.Properties["region"], m.Properties["tier"]) {
				want = append(want, string(m.Body))
			}
		}
		sub := opened[name]
		got := receiveSub(t, sub, len(want), awaitMargin)
		if g := bodies(got); !slices.Equal(g, want) {
			t.Errorf("subscription %s received %q, want %q", name, g, want)
		}
		for i, a := range got {
			if i > 0 && a.Seq <= got[i-1].Seq {
				t.Errorf("subscription %s: seq %#x after %#x, want ascending (one partition)", name, a.Seq, got[i-1].Seq)
			}
			checkEnqueuedAt(t, "subscription "+name+" "+describe(a.Message), a.Message, start, end)
			if a.DeliveryCount != 1 {
				t.Errorf("subscription %s %s: DeliveryCount %d, want 1", name, describe(a.Message), a.DeliveryCount)
			}
			body := string(a.Body)
			if seq, ok := seqOf[body]; ok && seq != a.Seq {
				t.Errorf("%s: seq %#x on subscription %s, %#x on another: want the topic's one on all", body, a.Seq, name, seq)
			}
			if at, ok := enqOf[body]; ok && !at.Equal(a.EnqueuedAt) {
				t.Errorf("%s: EnqueuedAt %v on subscription %s, %v on another: want the topic's one on all", body, a.EnqueuedAt, name, at)
			}
			seqOf[body], enqOf[body] = a.Seq, a.EnqueuedAt
			for _, m := range sent {
				if string(m.Body) == body {
					checkSameContent(t, "subscription "+name, a.Message, m)
				}
			}
		}
		expectNoneSub(t, sub, quietMargin/5)
	}
	// Every sent message passed "all", so the topic's seqs are 1..24.
	checkHomeSeqs(t, tp, "topic seqs", slices.Collect(maps.Values(seqOf)))
	// Everything is completed everywhere: the topic holds nothing.
	eventually(t, awaitMargin, func() bool {
		c, err := tp.Counts(t.Context())
		return err == nil && c == transport.Counts{}
	}, "topic counts to be zero once every subscription completed everything")
}

func (s *suite) testTopicScheduled(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	a := openSub(t, tp, "a", transport.SubscriptionConfig{})
	c := openSub(t, tp, "c", transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"tick"}}})
	due := time.Now().Add(s.f.CancelMargin + time.Second)
	seqs := make([]uint64, 4)
	for i := range seqs {
		var err error
		seqs[i], err = tp.Schedule(t.Context(), keyed(tp, &transport.Message{Body: fmt.Appendf(nil, "s-%d", i), Subject: "tick"}), due)
		if err != nil {
			t.Fatalf("Topic.Schedule: %v", err)
		}
		if !transport.IsScheduledSeq(seqs[i]) {
			t.Fatalf("Topic.Schedule = %#x: not a scheduled seq", seqs[i])
		}
	}
	// One more that only a passes, sent with ScheduledAt.
	r, err := tp.Send(t.Context(), keyed(tp, &transport.Message{Body: []byte("s-other"), Subject: "other", ScheduledAt: due}))
	if err != nil || !transport.IsScheduledSeq(r.Seq) {
		t.Fatalf("Topic.Send with ScheduledAt = %+v, %v: want a scheduled seq", r, err)
	}
	ms, err := tp.Peek(t.Context(), 0, 100)
	if err != nil {
		t.Fatalf("Topic.Peek: %v", err)
	}
	if got := seqsOfSlice(ms); !slices.Equal(got, append(slices.Clone(seqs), r.Seq)) {
		t.Errorf("Topic.Peek before activation: %#x, want the scheduled %#x", got, append(slices.Clone(seqs), r.Seq))
	}
	if n, err := tp.Counts(t.Context()); err != nil || n.Scheduled != 5 || n.Active != 0 {
		t.Errorf("Topic.Counts before activation = %+v, %v: want 5 scheduled, 0 active", n, err)
	}
	if err := tp.Cancel(t.Context(), seqs[3]); err != nil {
		t.Fatalf("Topic.Cancel(%#x): %v", seqs[3], err)
	}
	if err := tp.Cancel(t.Context(), seqs[3]); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("second Topic.Cancel(%#x) = %v, want %v", seqs[3], err, transport.ErrNotFound)
	}
	wait := time.Until(due) + s.f.ActivationSlack + awaitMargin
	gotA := receiveSub(t, a, 4, wait)
	gotC := receiveSub(t, c, 3, wait)
	seqOf := make(map[string]uint64)
	for _, x := range gotA {
		checkNotEarly(t, x, due)
		seqOf[string(x.Body)] = x.Seq
	}
	if want := []string{"s-0", "s-1", "s-2", "s-other"}; !slices.Equal(bodies(gotA), want) {
		t.Errorf("subscription a received %q, want %q", bodies(gotA), want)
	}
	if want := []string{"s-0", "s-1", "s-2"}; !slices.Equal(bodies(gotC), want) {
		t.Errorf("subscription c received %q, want %q", bodies(gotC), want)
	}
	for _, x := range gotC {
		checkNotEarly(t, x, due)
		if seqOf[string(x.Body)] != x.Seq {
			t.Errorf("%s: seq %#x on c, %#x on a: want the topic's one on both", x.Body, x.Seq, seqOf[string(x.Body)])
		}
	}
	checkHomeSeqs(t, tp, "activated topic seqs", slices.Collect(maps.Values(seqOf)))
	for i, seq := range seqs[:3] {
		if err := tp.Cancel(t.Context(), seq); !errors.Is(err, transport.ErrAlreadyActivated) {
			t.Errorf("Topic.Cancel(s-%d) after activation = %v, want %v", i, err, transport.ErrAlreadyActivated)
		}
	}
	expectNoneSub(t, a, quietMargin)
	expectNoneSub(t, c, quietMargin/5)
}

func (s *suite) testTopicDeadLetter(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	lock := 2 * time.Second
	x := openSub(t, tp, "x", transport.SubscriptionConfig{MaxDeliveryCount: 2, LockDuration: lock})
	y := openSub(t, tp, "y", transport.SubscriptionConfig{})
	publish(t, tp, &transport.Message{Body: []byte("poison"), MessageID: "p"})
	publish(t, tp, &transport.Message{Body: []byte("bad")})
	// x: "poison" is abandoned until MaxDeliveryCount, "bad" dead-lettered
	// by hand; y completes both.
	ctx := withTimeout(t, awaitMargin)
	for poisoned, bad := 0, false; poisoned < 2 || !bad; {
		ds, err := x.Receive(ctx, 2)
		if err != nil {
			t.Fatalf("x.Receive (poison delivered %d times, bad %t): %v", poisoned, bad, err)
		}
		for _, d := range ds {
			var err error
			switch string(d.Body) {
			case "bad":
				bad = true
				err = d.DeadLetter(t.Context(), "Invalid", "a bad message")
			case "poison":
				if poisoned++; d.DeliveryCount != poisoned {
					t.Errorf("poison: DeliveryCount %d, want %d", d.DeliveryCount, poisoned)
				}
				err = d.Abandon(t.Context())
			}
			if err != nil {
				t.Fatalf("settle %s: %v", describe(d.Message), err)
			}
		}
	}
	expectNoneSub(t, x, lock+quietMargin) // the third delivery of "poison" dead-letters it
	if got := receiveSub(t, y, 2, awaitMargin); !slices.Equal(bodies(got), []string{"bad", "poison"}) {
		t.Errorf("y received %q, want both messages", bodies(got))
	}
	dlq := x.DeadLetterQueue()
	if want := tp.Name() + "/Subscriptions/x/$DeadLetterQueue"; dlq.Name() != want {
		t.Errorf("DeadLetterQueue().Name() = %q, want %q", dlq.Name(), want)
	}
	got := receiveN(t, dlq, 2, awaitMargin)
	reasons := map[string]string{}
	for _, a := range got {
		reasons[string(a.Body)] = a.DeadLetterReason
		if a.DeadLetterSource != x.Path() {
			t.Errorf("dead-lettered %s: DeadLetterSource %q, want %q", describe(a.Message), a.DeadLetterSource, x.Path())
		}
		if a.DeadLetterSeq == 0 || transport.IsScheduledSeq(a.DeadLetterSeq) {
			t.Errorf("dead-lettered %s: DeadLetterSeq %#x, want the topic's active seq", describe(a.Message), a.DeadLetterSeq)
		}
	}
	if want := map[string]string{"poison": transport.ReasonMaxDeliveryCountExceeded, "bad": "Invalid"}; !maps.Equal(reasons, want) {
		t.Errorf("dead-letter reasons %v, want %v", reasons, want)
	}
	if ms, err := y.DeadLetterQueue().Peek(t.Context(), 0, 10); err != nil || len(ms) != 0 {
		t.Errorf("y's dead-letter queue: %d messages, %v: want none (dead-letter queues are per subscription)", len(ms), err)
	}
}

func (s *suite) testTopicLifecycle(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{FilterProperties: []string{"k"}})
	ctx := t.Context()
	cfg := transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"b", "a"}, Properties: map[string]string{"k": "v"}}}
	first := openSub(t, tp, "s1", cfg)
	// Idempotent: the same config (subjects in another order) is the same
	// subscription; through the broker too.
	cfg2 := cfg
	cfg2.Filter.Subjects = []string{"a", "b", "a"}
	if _, err := b.OpenSubscription(ctx, tp.Name(), "s1", cfg2); err != nil {
		t.Errorf("OpenSubscription again with the same filter: %v", err)
	}
	for _, c := range []transport.SubscriptionConfig{
		{Filter: transport.Filter{Subjects: []string{"a"}}},
		{Filter: cfg.Filter, RequiresSession: true},
	} {
		if _, err := tp.OpenSubscription(ctx, "s1", c); !errors.Is(err, transport.ErrInvalidConfig) {
			t.Errorf("OpenSubscription(s1, %+v) over another config = %v, want %v", c, err, transport.ErrInvalidConfig)
		}
	}
	undeclared := transport.SubscriptionConfig{Filter: transport.Filter{Properties: map[string]string{"nope": "v"}}}
	if _, err := tp.OpenSubscription(ctx, "s2", undeclared); !errors.Is(err, transport.ErrFilterNotDeclared) {
		t.Errorf("OpenSubscription with a filter on an undeclared property = %v, want %v", err, transport.ErrFilterNotDeclared)
	}
	for _, name := range []string{"", "a.b", "a*", strings.Repeat("x", 65)} {
		if _, err := tp.OpenSubscription(ctx, name, transport.SubscriptionConfig{}); !errors.Is(err, transport.ErrInvalidQueueName) {
			t.Errorf("OpenSubscription(%q) = %v, want %v", name, err, transport.ErrInvalidQueueName)
		}
	}
	if _, err := b.OpenSubscription(ctx, queueName(t, "missing"), "s", transport.SubscriptionConfig{}); !errors.Is(err, transport.ErrTopicNotFound) {
		t.Errorf("OpenSubscription on a missing topic = %v, want %v", err, transport.ErrTopicNotFound)
	}
	if _, err := tp.Subscription(ctx, "missing"); !errors.Is(err, transport.ErrTopicNotFound) {
		t.Errorf("Subscription(missing) = %v, want %v", err, transport.ErrTopicNotFound)
	}
	if _, err := tp.OpenSubscription(ctx, "s3", transport.SubscriptionConfig{}); err != nil {
		t.Fatalf("OpenSubscription(s3): %v", err)
	}
	var names []string
	for n, err := range tp.Subscriptions(ctx) {
		if err != nil {
			t.Fatalf("Subscriptions: %v", err)
		}
		names = append(names, n)
	}
	if want := []string{"s1", "s3"}; !slices.Equal(names, want) {
		t.Errorf("Subscriptions = %q, want %q", names, want)
	}
	if got, err := tp.Subscription(ctx, "s1"); err != nil || !slices.Equal(got.Config().Filter.Subjects, []string{"a", "b"}) ||
		!maps.Equal(got.Config().Filter.Properties, first.Config().Filter.Properties) {
		t.Errorf("Subscription(s1) = %+v, %v: want the config it was opened with", got, err)
	}
	m := &transport.Message{Body: []byte("one"), Subject: "a", Properties: map[string]string{"k": "v"}}
	publish(t, tp, m)
	// A sent message enters the topic a moment after Send returns.
	eventually(t, awaitMargin, func() bool {
		ms, err := tp.Peek(ctx, 0, 10)
		return err == nil && len(ms) == 1
	}, "the message sent to show up in the topic")
	// Deleting s3 with a message pending loses nothing for s1; a new
	// subscription gets only later messages.
	if err := tp.DeleteSubscription(ctx, "s3"); err != nil {
		t.Fatalf("DeleteSubscription(s3): %v", err)
	}
	if err := tp.DeleteSubscription(ctx, "s3"); err != nil {
		t.Errorf("DeleteSubscription of a deleted subscription: %v, want nil", err)
	}
	late := openSub(t, tp, "late", transport.SubscriptionConfig{})
	publish(t, tp, &transport.Message{Body: []byte("two"), Subject: "b", Properties: map[string]string{"k": "v"}})
	eventually(t, awaitMargin, func() bool {
		ms, err := late.Peek(ctx, 0, 10)
		return err == nil && len(ms) > 0
	}, "the second message to show in the late subscription's Peek")
	if ms, err := late.Peek(ctx, 0, 10); err != nil || len(ms) != 1 || string(ms[0].Body) != "two" {
		t.Errorf("Peek of a subscription opened after a message = %d messages, %v: want only the later one", len(ms), err)
	}
	if got := receiveSub(t, first, 2, awaitMargin); !slices.Equal(bodies(got), []string{"one", "two"}) {
		t.Errorf("s1 received %q, want one and two", bodies(got))
	}
	if got := receiveSub(t, late, 1, awaitMargin); string(got[0].Body) != "two" {
		t.Errorf("a subscription opened after a message received %q, want only later messages", got[0].Body)
	}
	expectNoneSub(t, late, quietMargin)
	// An attached topic is the same topic.
	tp2, err := b.Topic(ctx, tp.Name())
	if err != nil || !slices.Equal(tp2.Config().FilterProperties, tp.Config().FilterProperties) {
		t.Errorf("Topic(%q) = %v: want the topic as opened", tp.Name(), err)
	}
	if _, err := b.OpenTopic(ctx, transport.TopicConfig{Name: tp.Name(), FilterProperties: []string{"other"}}); !errors.Is(err, transport.ErrInvalidConfig) {
		t.Errorf("OpenTopic with other FilterProperties = %v, want %v", err, transport.ErrInvalidConfig)
	}
	if _, err := b.Topic(ctx, queueName(t, "missing")); !errors.Is(err, transport.ErrTopicNotFound) {
		t.Errorf("Topic(missing) = %v, want %v", err, transport.ErrTopicNotFound)
	}
}

// hostileValues are filter values that must match only themselves.
var hostileValues = []string{"*", ">", "a.b", "a b", "", " ", "_", "-", "~x", "*.>", strings.Repeat("é", 40), strings.Repeat("v", 60) + "1", strings.Repeat("v", 60) + "2"}

func (s *suite) testTopicHostileFilters(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{FilterProperties: []string{"p"}})
	subs := make([]*transport.Subscription, len(hostileValues))
	for i, v := range hostileValues {
		subs[i] = openSub(t, tp, fmt.Sprintf("p%d", i), transport.SubscriptionConfig{Filter: transport.Filter{
			Subjects:   []string{v},
			Properties: map[string]string{"p": v},
		}})
	}
	for i, v := range hostileValues {
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "v%d", i), Subject: v, Properties: map[string]string{"p": v}})
		// Right type, other value; and no property at all.
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "x%d", i), Subject: v, Properties: map[string]string{"p": v + "x"}})
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "n%d", i), Subject: v})
	}
	for i, sub := range subs {
		got := receiveSub(t, sub, 1, awaitMargin)
		if want := fmt.Sprintf("v%d", i); string(got[0].Body) != want {
			t.Errorf("filter on %q received %q, want %q", hostileValues[i], got[0].Body, want)
		}
	}
	for _, sub := range subs {
		expectNoneSub(t, sub, quietMargin/5)
	}
}

func (s *suite) testTopicSessions(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	lock := 2 * time.Second
	cfg := transport.SubscriptionConfig{RequiresSession: true, LockDuration: lock}
	sa := openSub(t, tp, "sa", cfg)
	plain := openSub(t, tp, "plain", transport.SubscriptionConfig{})
	if _, err := sa.Receive(t.Context(), 1); !errors.Is(err, transport.ErrSessionRequired) {
		t.Errorf("Receive on a session subscription = %v, want %v", err, transport.ErrSessionRequired)
	}
	if _, err := plain.AcceptSession(t.Context(), "x"); !errors.Is(err, transport.ErrNotSessionQueue) {
		t.Errorf("AcceptSession on a subscription without sessions = %v, want %v", err, transport.ErrNotSessionQueue)
	}
	for i := range 3 {
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "A-%d", i), SessionID: "A"})
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "B-%d", i), SessionID: "B.*>"})
	}
	publish(t, tp, &transport.Message{Body: []byte("no-session")})
	awaitCounts(t, "session subscription", sa.Counts, transport.Counts{Active: 6, Pending: 6})
	// The same subscription through another broker (another connection).
	peer := s.peerSub(t, sa)
	r1, err := sa.AcceptSession(withTimeout(t, awaitMargin), "A")
	if err != nil {
		t.Fatalf("AcceptSession(A): %v", err)
	}
	if _, err := peer.AcceptSession(withTimeout(t, awaitMargin), "A"); !errors.Is(err, transport.ErrSessionLocked) {
		t.Errorf("AcceptSession(A) through another broker while held = %v, want %v", err, transport.ErrSessionLocked)
	}
	r2, err := peer.AcceptNextSession(withTimeout(t, awaitMargin))
	if err != nil {
		t.Fatalf("AcceptNextSession through another broker: %v", err)
	}
	if r2.SessionID() != "B.*>" {
		t.Errorf("AcceptNextSession while A is held = %q, want %q", r2.SessionID(), "B.*>")
	}
	for _, r := range []*transport.SessionReceiver{r1, r2} {
		var prev uint64
		for i := range 3 {
			a := receiveSession(t, r, awaitMargin)
			if want := fmt.Sprintf("%s-%d", r.SessionID()[:1], i); string(a.Body) != want {
				t.Errorf("session %q message %d: %q, want %q (in order)", r.SessionID(), i, a.Body, want)
			}
			if a.Seq <= prev {
				t.Errorf("session %q: seq %#x after %#x", r.SessionID(), a.Seq, prev)
			}
			prev = a.Seq
			complete(t, a.Delivery)
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	// The message without a session went only to the plain subscription.
	if got := receiveSub(t, plain, 7, awaitMargin); len(got) != 7 {
		t.Errorf("plain subscription received %d messages, want 7", len(got))
	}
	if _, err := sa.AcceptNextSession(withTimeout(t, quietMargin)); !errors.Is(err, transport.ErrNoSession) {
		t.Errorf("AcceptNextSession with every session done = %v, want %v", err, transport.ErrNoSession)
	}
	c, err := sa.Counts(t.Context())
	if err != nil || c.Active != 0 {
		t.Errorf("session subscription counts after completing everything = %+v, %v: want 0 active", c, err)
	}
	// Nothing is held by the topic any more.
	if c, err := tp.Counts(t.Context()); err != nil || c != (transport.Counts{}) {
		t.Errorf("topic counts after every subscription completed everything = %+v, %v: want zero", c, err)
	}
}

func (s *suite) testTopicBrowse(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	x := openSub(t, tp, "x", transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"x"}}})
	all := openSub(t, tp, "all", transport.SubscriptionConfig{})
	for i := range 6 {
		subject := "x"
		if i%2 == 1 {
			subject = "y"
		}
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "m-%d", i), Subject: subject})
	}
	browse := func(sub *transport.Subscription, from uint64) []string {
		t.Helper()
		var out []string
		for m, err := range sub.Browse(t.Context(), from) {
			if err != nil {
				t.Fatalf("%s: Browse: %v", sub.Name(), err)
			}
			if m.State != transport.Active {
				t.Errorf("%s: Browse: %s in state %v, want active", sub.Name(), describe(m), m.State)
			}
			out = append(out, fmt.Sprintf("%d:%s", m.Seq, m.Body))
		}
		return out
	}
	// seq formats the topic's local seq n and its body as browse does.
	seq := func(n uint64, body string) string { return fmt.Sprintf("%d:%s", homeSeq(tp, n), body) }
	eventually(t, awaitMargin, func() bool { return len(browse(all, 0)) == 6 }, "all six messages to show in Browse")
	if got, want := browse(x, 0), []string{seq(1, "m-0"), seq(3, "m-2"), seq(5, "m-4")}; !slices.Equal(got, want) {
		t.Errorf("Browse of a filtered subscription = %q, want %q (its messages, with the topic's seqs)", got, want)
	}
	if got, want := browse(x, homeSeq(tp, 2)), []string{seq(3, "m-2"), seq(5, "m-4")}; !slices.Equal(got, want) {
		t.Errorf("Browse from seq 2 = %q, want %q", got, want)
	}
	// A locked message is still active; a completed one is gone.
	d := receiveSub(t, x, 1, awaitMargin)[0]
	if string(d.Body) != "m-0" {
		t.Fatalf("first received from x: %s, want m-0", describe(d.Message))
	}
	ds, err := x.Receive(withTimeout(t, awaitMargin), 1)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if got, want := browse(x, 0), []string{seq(3, "m-2"), seq(5, "m-4")}; !slices.Equal(got, want) {
		t.Errorf("Browse after completing m-0 and locking m-2 = %q, want %q", got, want)
	}
	if err := ds[0].Complete(t.Context()); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got := browse(all, homeSeq(tp, 4)); len(got) != 3 {
		t.Errorf("Browse of the unfiltered subscription from 4 = %q, want seqs 4, 5, 6", got)
	}
}

// peerSub returns sub as another process sees it: through a second
// broker if brokers made by newBroker share topics, else sub itself.
func (s *suite) peerSub(t *testing.T, sub *transport.Subscription) *transport.Subscription {
	t.Helper()
	tp, err := s.newBroker(t).Topic(t.Context(), sub.Topic().Name())
	if err != nil {
		return sub
	}
	peer, err := tp.Subscription(t.Context(), sub.Name())
	if err != nil {
		t.Fatalf("Subscription(%q) through another broker: %v", sub.Name(), err)
	}
	return peer
}

func (s *suite) testTopicDuplicate(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{DuplicateWindow: time.Hour})
	sub := openSub(t, tp, "s", transport.SubscriptionConfig{})
	publish(t, tp, &transport.Message{Body: []byte("once"), MessageID: "id-1"})
	for range 2 {
		r, err := tp.Send(t.Context(), keyed(tp, &transport.Message{Body: []byte("again"), MessageID: "id-1"}))
		if err != nil || !r.Duplicate {
			t.Errorf("Topic.Send of a remembered MessageID = %+v, %v: want Duplicate", r, err)
		}
	}
	seq, err := tp.Schedule(t.Context(), keyed(tp, &transport.Message{Body: []byte("later"), MessageID: "id-2"}), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("Topic.Schedule: %v", err)
	}
	r, err := tp.Send(t.Context(), keyed(tp, &transport.Message{Body: []byte("later again"), MessageID: "id-2"}))
	if err != nil || !r.Duplicate || r.Seq != seq {
		t.Errorf("Topic.Send of a pending schedule's MessageID = %+v, %v: want Duplicate with seq %#x", r, err, seq)
	}
	if got := receiveSub(t, sub, 1, awaitMargin); string(got[0].Body) != "once" {
		t.Errorf("received %q, want once", got[0].Body)
	}
	expectNoneSub(t, sub, quietMargin)
}

func (s *suite) testTopicPartitions(t *testing.T) {
	b := s.newBroker(t)
	const parts = 3
	tp := openTopic(t, b, transport.TopicConfig{Partitions: parts})
	x := openSub(t, tp, "x", transport.SubscriptionConfig{})
	y := openSub(t, tp, "y", transport.SubscriptionConfig{})
	const n = 30
	for i := range n {
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "m-%02d", i), MessageID: fmt.Sprint("id-", i)})
	}
	gx, gy := receiveSub(t, x, n, awaitMargin), receiveSub(t, y, n, awaitMargin)
	seqs := map[string]uint64{}
	perPart := make([][]uint64, parts)
	for _, a := range gx {
		seqs[string(a.Body)] = a.Seq
		perPart[transport.Partition(a.Seq)] = append(perPart[transport.Partition(a.Seq)], transport.LocalSeq(a.Seq))
	}
	for _, a := range gy {
		if seqs[string(a.Body)] != a.Seq {
			t.Errorf("%s: seq %#x on y, %#x on x: want the topic's one on both", a.Body, a.Seq, seqs[string(a.Body)])
		}
	}
	for p, local := range perPart {
		ms := make([]*transport.Message, len(local))
		for i, l := range local {
			ms[i] = &transport.Message{Seq: l}
		}
		checkSeqs(t, fmt.Sprintf("partition %d local seqs", p), seqsOfSlice(ms))
	}
}

// testCounts checks Counts on a queue, a topic and a subscription: exact
// at rest, never negative while sends, receives, cancellations and
// activations run concurrently.
func (s *suite) testCounts(t *testing.T) {
	parallel(t, "Queue", s.testCountsQueue)
	parallel(t, "Subscription", s.testCountsSubscription)
	parallel(t, "Concurrent", s.testCountsConcurrent)
}

func awaitCounts(t *testing.T, what string, get func(context.Context) (transport.Counts, error), want transport.Counts) {
	t.Helper()
	awaitCountsWithin(t, awaitMargin, what, get, want)
}

// awaitCountsWithin is awaitCounts with its own bound.
func awaitCountsWithin(t *testing.T, within time.Duration, what string, get func(context.Context) (transport.Counts, error), want transport.Counts) {
	t.Helper()
	// The explanation is made at each poll, so that a failure shows the
	// last counts read (formatted once, before polling, it showed zeros).
	testutil.Await(t, within, func() string {
		got, err := get(t.Context())
		if err == nil && got == want {
			return ""
		}
		return fmt.Sprintf("%s counts %+v (err %v), want %+v", what, got, err, want)
	})
}

func (s *suite) testCountsQueue(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	awaitCounts(t, "empty queue", q.Counts, transport.Counts{})
	for i := range 5 {
		send(t, q, numbered("a", i))
	}
	far := time.Now().Add(time.Hour)
	var seqs []uint64
	for i := range 4 {
		seqs = append(seqs, schedule(t, q, numbered("s", i), far))
	}
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: 5, Scheduled: 4})
	if err := q.Cancel(t.Context(), seqs[0]); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	got := receiveOne(t, q, awaitMargin)
	if err := got.DeadLetter(t.Context(), "r", "d"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	receiveN(t, q, 1, awaitMargin)
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: 3, Scheduled: 3, DeadLettered: 1})
	awaitCounts(t, "dead-letter queue", q.DeadLetterQueue().Counts, transport.Counts{Active: 1})
}

func (s *suite) testCountsSubscription(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{})
	x := openSub(t, tp, "x", transport.SubscriptionConfig{})
	y := openSub(t, tp, "y", transport.SubscriptionConfig{Filter: transport.Filter{Subjects: []string{"y"}}})
	for i := range 4 {
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "m-%d", i), Subject: "y"})
	}
	publish(t, tp, &transport.Message{Body: []byte("x only")})
	if _, err := tp.Schedule(t.Context(), keyed(tp, &transport.Message{Body: []byte("later")}), time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Topic.Schedule: %v", err)
	}
	awaitCounts(t, "subscription x", x.Counts, transport.Counts{Active: 5, Pending: 5})
	awaitCounts(t, "subscription y", y.Counts, transport.Counts{Active: 4, Pending: 4})
	awaitCounts(t, "topic", tp.Counts, transport.Counts{Active: 5, Scheduled: 1})
	a := receiveSub(t, x, 1, awaitMargin) // completed
	_ = a
	ds, err := x.Receive(withTimeout(t, awaitMargin), 1)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	awaitCounts(t, "subscription x with one locked", x.Counts, transport.Counts{Active: 4, Pending: 3})
	if err := ds[0].DeadLetter(t.Context(), "r", "d"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	awaitCounts(t, "subscription x", x.Counts, transport.Counts{Active: 3, Pending: 3, DeadLettered: 1})
	receiveSub(t, y, 4, awaitMargin)
	awaitCounts(t, "subscription y", y.Counts, transport.Counts{})
	receiveSub(t, x, 3, awaitMargin)
	awaitCounts(t, "topic after everything is completed", tp.Counts, transport.Counts{Scheduled: 1})
}

// testCountsConcurrent runs senders, schedulers, cancellers racing
// activation, and receivers at once, reading counts all the while: none
// may be negative, and at rest they must be exact.
func (s *suite) testCountsConcurrent(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{Partitions: 2})
	sub := openSub(t, tp, "s", transport.SubscriptionConfig{})
	_, q := s.open(t, transport.QueueConfig{})
	ctx := t.Context()
	var wg sync.WaitGroup
	var stop atomic.Bool
	var negative atomic.Value
	// Watchers.
	for _, get := range []func(context.Context) (transport.Counts, error){q.Counts, tp.Counts, sub.Counts} {
		wg.Go(func() {
			// Sample every few milliseconds: a tight loop of API calls
			// would starve the server's JetStream API.
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for ; !stop.Load(); <-tick.C {
				c, err := get(ctx)
				if err == nil && (c.Active < 0 || c.Pending < 0 || c.Scheduled < 0 || c.DeadLettered < 0 || c.Pending > c.Active) {
					negative.Store(c)
				}
			}
		})
	}
	const n = 40
	var delivered, cancelled atomic.Int64
	type target struct {
		send     func(context.Context, *transport.Message) (transport.SendResult, error)
		cancel   func(context.Context, uint64) error
		received *atomic.Int64
	}
	var qGot, sGot atomic.Int64
	targets := []target{{q.Send, q.Cancel, &qGot}, {tp.Send, tp.Cancel, &sGot}}
	var work sync.WaitGroup
	for ti, tg := range targets {
		work.Go(func() {
			for i := range n {
				m := &transport.Message{Body: fmt.Appendf(nil, "%d-%d", ti, i)}
				if i%2 == 1 {
					m.ScheduledAt = time.Now().Add(s.f.CancelMargin + 300*time.Millisecond)
				}
				r, err := tg.send(ctx, m)
				if err != nil {
					t.Errorf("send: %v", err)
					return
				}
				if i%2 == 0 {
					delivered.Add(1)
					continue
				}
				work.Go(func() {
					// Aim the cancel at the instant the backend stops
					// cancelling, give or take 100 ms: cancel races
					// activation (a timing, not a synchronisation).
					offset := time.Duration(i%5-2) * 50 * time.Millisecond
					<-time.After(time.Until(m.ScheduledAt) - s.f.CancelMargin + offset)
					switch err := tg.cancel(ctx, r.Seq); {
					case err == nil:
						cancelled.Add(1)
					case errors.Is(err, transport.ErrAlreadyActivated):
						delivered.Add(1)
					default:
						t.Errorf("Cancel(%#x): %v", r.Seq, err)
					}
				})
			}
		})
	}
	// Receivers.
	recv := func(receive func(context.Context, int) ([]*transport.Delivery, error), got *atomic.Int64) {
		for !stop.Load() {
			ds, err := receive(withTimeout(t, 200*time.Millisecond), 10)
			if err != nil {
				continue
			}
			for _, d := range ds {
				if err := d.Complete(ctx); err == nil {
					got.Add(1)
				}
			}
		}
	}
	wg.Go(func() { recv(q.Receive, &qGot) })
	wg.Go(func() { recv(sub.Receive, &sGot) })
	work.Wait()
	eventually(t, 2*awaitMargin, func() bool {
		return qGot.Load()+sGot.Load() == delivered.Load()
	}, "received %d+%d messages, want %d (cancelled %d)", qGot.Load(), sGot.Load(), delivered.Load(), cancelled.Load())
	stop.Store(true)
	wg.Wait()
	if c := negative.Load(); c != nil {
		t.Errorf("counts read during the run: %+v: want none negative, Pending at most Active", c)
	}
	// Half of each target's messages were scheduled.
	t.Logf("of %d scheduled messages, %d cancelled and %d activated (Cancel answered ErrAlreadyActivated)",
		n, cancelled.Load(), n-cancelled.Load())
	awaitCounts(t, "queue at rest", q.Counts, transport.Counts{})
	awaitCounts(t, "topic at rest", tp.Counts, transport.Counts{})
	awaitCounts(t, "subscription at rest", sub.Counts, transport.Counts{})
}

// testRestartTopic checks that topics, subscriptions, their scheduled and
// active messages and their duplicate detection survive an abrupt
// restart of the server: every message reaches each matching
// subscription once, with the same topic sequence number.
func (s *suite) testRestartTopic(t *testing.T) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{FilterProperties: []string{"k"}, DuplicateWindow: time.Hour})
	all := openSub(t, tp, "all", transport.SubscriptionConfig{})
	some := openSub(t, tp, "some", transport.SubscriptionConfig{Filter: transport.Filter{Properties: map[string]string{"k": "1"}}})
	lock := 2 * time.Second
	sess := openSub(t, tp, "sess", transport.SubscriptionConfig{RequiresSession: true, LockDuration: lock})
	const scheduled, active = 10, 10
	due := time.Now().Add(2 * time.Second)
	for i := range scheduled {
		m := &transport.Message{Body: fmt.Appendf(nil, "s-%d", i), MessageID: fmt.Sprint("s-", i), SessionID: fmt.Sprint("S", i%3),
			Properties: map[string]string{"k": fmt.Sprint(i % 2)}}
		if _, err := tp.Schedule(t.Context(), keyed(tp, m), due); err != nil {
			t.Fatalf("Topic.Schedule: %v", err)
		}
	}
	for i := range active {
		publish(t, tp, &transport.Message{Body: fmt.Appendf(nil, "a-%d", i), MessageID: fmt.Sprint("a-", i), SessionID: fmt.Sprint("S", i%3),
			Properties: map[string]string{"k": fmt.Sprint(i % 2)}})
	}
	// One session's first message is received and completed before the
	// restart; the rest wait. (The server writes consumer state to disk a
	// moment after it confirms an acknowledgement, so a SIGKILL may undo
	// that completion: the message is then delivered again, once, after
	// its lock expired.)
	r, err := sess.AcceptSession(withTimeout(t, awaitMargin), "S0")
	if err != nil {
		t.Fatalf("AcceptSession(S0): %v", err)
	}
	first := receiveSession(t, r, awaitMargin)
	complete(t, first.Delivery)
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	s.f.Restart(t, true, time.Until(due.Add(-time.Second)))
	eventually(t, 2*awaitMargin, func() bool {
		_, err := tp.Peek(t.Context(), 0, 1)
		return err == nil
	}, "the topic to answer after the restart")
	for i := range active {
		// Sent again in its session, which picks its partition.
		r, err := tp.Send(t.Context(), &transport.Message{Body: []byte("dup"), MessageID: fmt.Sprint("a-", i), SessionID: fmt.Sprint("S", i%3)})
		if err != nil || !r.Duplicate {
			t.Errorf("Topic.Send of MessageID a-%d after the restart = %+v, %v: want Duplicate", i, r, err)
		}
	}
	// The subscriptions are still there, through a new broker too.
	peer := s.peerSub(t, some)
	wait := time.Until(due) + s.f.ActivationSlack + 2*awaitMargin
	gotAll := receiveSub(t, all, scheduled+active, wait)
	gotSome := receiveSub(t, peer, (scheduled+active)/2, wait)
	seqs := map[string]uint64{}
	for _, a := range gotAll {
		if _, dup := seqs[string(a.Body)]; dup {
			t.Errorf("all: %s received twice", a.Body)
		}
		seqs[string(a.Body)] = a.Seq
		if strings.HasPrefix(string(a.Body), "s-") {
			checkNotEarly(t, a, due)
		}
	}
	checkPartitionSeqs(t, "topic seqs across the restart", slices.Collect(maps.Values(seqs)))
	for _, a := range gotSome {
		if a.Properties["k"] != "1" {
			t.Errorf("some: received %s with k=%q, want only k=1", describe(a.Message), a.Properties["k"])
		}
		if seqs[string(a.Body)] != a.Seq {
			t.Errorf("%s: seq %#x on some, %#x on all: want the topic's one on both", a.Body, a.Seq, seqs[string(a.Body)])
		}
	}
	// The session subscription gets the rest, each session in order.
	ctx := withTimeout(t, wait+lock)
	got := map[string]bool{string(first.Body): true}
	redelivered := false
	for len(got) < scheduled+active {
		r, err := sess.AcceptNextSession(ctx)
		if err != nil {
			t.Fatalf("sess: AcceptNextSession after %d of %d messages: %v", len(got), scheduled+active, err)
		}
		var prev uint64
		for {
			d, err := r.Receive(withTimeout(t, quietMargin))
			if err != nil {
				break
			}
			if got[string(d.Body)] {
				if string(d.Body) != string(first.Body) || redelivered {
					t.Errorf("sess: %s received twice", describe(d.Message))
				}
				redelivered = true
				if d.Seq != first.Seq || d.DeliveryCount < 2 {
					t.Errorf("sess: %s delivered again (completion lost to the SIGKILL) with DeliveryCount %d, want the same seq %#x and a count above 1",
						describe(d.Message), d.DeliveryCount, first.Seq)
				}
			}
			got[string(d.Body)] = true
			if d.Seq != seqs[string(d.Body)] || d.Seq <= prev {
				t.Errorf("sess: %s after seq %#x: want the topic's seq %#x, ascending", describe(d.Message), prev, seqs[string(d.Body)])
			}
			prev = d.Seq
			complete(t, d)
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	expectNoneSub(t, all, quietMargin)
	expectNoneSub(t, some, quietMargin/5)
	// A hand-over of the session subscription that the restart cut short
	// leaves what it had read to its ack wait (JetStream: 10 s) before
	// the next hand-over reads it: the counts settle within that.
	const afterCutHandover = 10*time.Second + awaitMargin
	awaitCountsWithin(t, afterCutHandover, "session subscription after the restart", sess.Counts, transport.Counts{})
	awaitCountsWithin(t, afterCutHandover, "topic after the restart", tp.Counts, transport.Counts{})
}
