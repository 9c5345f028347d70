package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// The slow-link cases in the shape users met: the queue or subscription
// is opened first over a fast link, then opened again (not attached) by a
// second broker over the slow link; five messages are sent; then the slow
// broker receives in a loop of Receives with a 10 s context and max 10,
// completing each delivery at once (see runSlowLinkOpened).

func (s *suite) testSlowLinkQueueOpen(t *testing.T) {
	_, q := s.open(t, slowLinkConfig)
	cfg := q.Config()
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.OpenQueue(t.Context(), cfg)
	if err != nil {
		t.Fatalf("OpenQueue(%q) over the slow link: %v", q.Name(), err)
	}
	for i := range slowBatch {
		send(t, q, numbered("slow", i))
	}
	runSlowLinkOpened(t, sq.Receive, q.DeadLetterQueue())
}

func (s *suite) testSlowLinkSubscriptionOpen(t *testing.T) {
	tp, sub, ssub := s.slowLinkTopicOpened(t, transport.SubscriptionConfig{})
	for i := range slowBatch {
		publish(t, tp, numbered("slow", i))
	}
	runSlowLinkOpened(t, ssub.Receive, sub.DeadLetterQueue())
}

func (s *suite) testSlowLinkSessionOpen(t *testing.T) {
	cfg := slowLinkConfig
	cfg.RequiresSession = true
	_, q := s.open(t, cfg)
	cfg = q.Config()
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.OpenQueue(t.Context(), cfg)
	if err != nil {
		t.Fatalf("OpenQueue(%q) over the slow link: %v", q.Name(), err)
	}
	for i := range slowBatch {
		m := numbered("slow", i)
		m.SessionID = "s"
		send(t, q, m)
	}
	r, err := sq.AcceptSession(t.Context(), "s")
	if err != nil {
		t.Fatalf("AcceptSession over the slow link: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	runSlowLinkOpened(t, sessionReceive(r), q.DeadLetterQueue())
}

func (s *suite) testSlowLinkSubscriptionSessionOpen(t *testing.T) {
	tp, sub, ssub := s.slowLinkTopicOpened(t, transport.SubscriptionConfig{RequiresSession: true})
	for i := range slowBatch {
		m := numbered("slow", i)
		m.SessionID = "s"
		publish(t, tp, m)
	}
	r, err := ssub.AcceptSession(t.Context(), "s")
	if err != nil {
		t.Fatalf("AcceptSession over the slow link: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	runSlowLinkOpened(t, sessionReceive(r), sub.DeadLetterQueue())
}

// slowLinkTopicOpened opens a topic and its subscription "sub" with the
// slow-link lock and delivery count over a fast link, then opens the same
// subscription again over the slow link; it returns the topic, the fast
// subscription and the slow one.
func (s *suite) slowLinkTopicOpened(t *testing.T, cfg transport.SubscriptionConfig) (*transport.Topic, *transport.Subscription, *transport.Subscription) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{Name: queueName(t, "")})
	cfg.LockDuration, cfg.MaxDeliveryCount = slowLinkConfig.LockDuration, slowLinkConfig.MaxDeliveryCount
	sub := openSub(t, tp, "sub", cfg)
	slow := s.f.SlowLink(t, slowLinkDelay)
	ssub, err := slow.OpenSubscription(t.Context(), tp.Name(), "sub", cfg)
	if err != nil {
		t.Fatalf("OpenSubscription over the slow link: %v", err)
	}
	return tp, sub, ssub
}

// runSlowLinkOpened receives the slowBatch messages numbered("slow", i),
// all sent before it starts, in a loop of Receives with a 10 s context
// and max 10, completing each delivery at once, each on its own. Each
// delivery must be handed out with at least freshLock left on its lock
// (never an expired one) and DeliveryCount 1, each Complete must succeed,
// and nothing may be dead-lettered (R9).
func runSlowLinkOpened(t *testing.T, receive func(context.Context, int) ([]*transport.Delivery, error), dlq *transport.Queue) {
	start := time.Now()
	deadline := start.Add(3*awaitMargin + 20*time.Second)
	var (
		mu   sync.Mutex
		log  []string
		errs []error
		wg   sync.WaitGroup
	)
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for len(seen) < slowBatch && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		ds, err := receive(ctx, 10)
		cancel()
		returned := time.Now()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Receive over the slow link: %v", err)
			}
			continue
		}
		for _, d := range ds {
			seen[string(d.Body)] = true
			what := fmt.Sprintf("%s (DeliveryCount %d)", d.Body, d.DeliveryCount)
			until := d.LockedUntil()
			mu.Lock()
			log = append(log, fmt.Sprintf("%s at +%v, locked until +%v", what,
				returned.Sub(start).Round(time.Millisecond), until.Sub(start).Round(time.Millisecond)))
			mu.Unlock()
			if left := until.Sub(returned); left < freshLock-freshSlack {
				report(fmt.Errorf("%s returned with %v left on its lock, want at least %v", what, left.Round(time.Millisecond), freshLock))
			}
			if d.DeliveryCount != 1 {
				report(fmt.Errorf("%s: want DeliveryCount 1", what))
			}
			wg.Go(func() {
				if err := d.Complete(t.Context()); err != nil {
					report(fmt.Errorf("Complete(%s): %w", what, err))
				}
			})
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("over a link %v slow: %q", slowLinkDelay, log)
	if len(seen) < slowBatch {
		t.Errorf("received %d of %d messages over a link %v slow", len(seen), slowBatch, slowLinkDelay)
	}
	for _, err := range errs {
		t.Errorf("over the slow link: %v", err)
	}
	if ms, err := dlq.Peek(t.Context(), 0, 10); err != nil {
		t.Errorf("Peek of the dead-letter queue: %v", err)
	} else if len(ms) > 0 {
		var dl []string
		for _, m := range ms {
			dl = append(dl, string(m.Body)+" "+m.DeadLetterReason)
		}
		slices.Sort(dl)
		t.Errorf("dead-lettered, though each message should first reach the receiver with a live lock: %q", dl)
	}
}
