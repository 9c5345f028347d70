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

// slowLinkDelay is how late a slow link's requests reach the server: more
// than the second a client library typically waits past a pull's expiry.
const slowLinkDelay = 1200 * time.Millisecond

// testSlowLink checks R9: a receiver whose requests reach the server
// slowLinkDelay late still gets each message first with DeliveryCount 1,
// soon after it was sent, and nothing reaches the dead-letter queue that
// no receiver saw — on a queue, a subscription, and sessions of both.
func (s *suite) testSlowLink(t *testing.T) {
	if s.f.SlowLink == nil {
		t.Skip("transporttest: Features.SlowLink is nil: the backend has no link to slow down")
	}
	parallel(t, "Queue", s.testSlowLinkQueue)
	parallel(t, "Subscription", s.testSlowLinkSubscription)
	parallel(t, "Session", s.testSlowLinkSession)
	parallel(t, "SubscriptionSession", s.testSlowLinkSubscriptionSession)
	parallel(t, "QueueBatch", s.testSlowLinkQueueBatch)
	parallel(t, "SubscriptionBatch", s.testSlowLinkSubscriptionBatch)
	parallel(t, "CompetingOrder", s.testSlowLinkCompetingOrder)
	parallel(t, "CompetingOrderPartitioned", s.testSlowLinkCompetingOrderPartitioned)
	parallel(t, "QueueOpen", s.testSlowLinkQueueOpen)
	parallel(t, "SubscriptionOpen", s.testSlowLinkSubscriptionOpen)
	parallel(t, "SessionOpen", s.testSlowLinkSessionOpen)
	parallel(t, "SubscriptionSessionOpen", s.testSlowLinkSubscriptionSessionOpen)
}

// slowLinkConfig: short locks and few deliveries, so that a message lost
// to a pull its receiver no longer reads shows as a raised DeliveryCount
// or a dead letter within the test.
var slowLinkConfig = transport.QueueConfig{LockDuration: slowLinkLock, MaxDeliveryCount: 3}

const slowLinkLock = 3 * time.Second

func (s *suite) testSlowLinkQueue(t *testing.T) {
	_, q := s.open(t, slowLinkConfig)
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.Queue(t.Context(), q.Name())
	if err != nil {
		t.Fatalf("Queue(%q) over the slow link: %v", q.Name(), err)
	}
	runSlowLink(t, sq.Receive, func(m *transport.Message) {
		send(t, q, m)
	}, q.DeadLetterQueue(), "", q.Config().Partitions)
}

func (s *suite) testSlowLinkSession(t *testing.T) {
	cfg := slowLinkConfig
	cfg.RequiresSession = true
	_, q := s.open(t, cfg)
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.Queue(t.Context(), q.Name())
	if err != nil {
		t.Fatalf("Queue(%q) over the slow link: %v", q.Name(), err)
	}
	r, err := sq.AcceptSession(t.Context(), "s")
	if err != nil {
		t.Fatalf("AcceptSession over the slow link: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	runSlowLink(t, sessionReceive(r), func(m *transport.Message) {
		send(t, q, m)
	}, q.DeadLetterQueue(), "s", 1)
}

func (s *suite) slowLinkTopic(t *testing.T, cfg transport.SubscriptionConfig) (*transport.Topic, *transport.Subscription, *transport.Subscription) {
	b := s.newBroker(t)
	tp := openTopic(t, b, transport.TopicConfig{Name: queueName(t, "")})
	cfg.LockDuration, cfg.MaxDeliveryCount = slowLinkConfig.LockDuration, slowLinkConfig.MaxDeliveryCount
	sub := openSub(t, tp, "sub", cfg)
	slow := s.f.SlowLink(t, slowLinkDelay)
	stp, err := slow.Topic(t.Context(), tp.Name())
	if err != nil {
		t.Fatalf("Topic(%q) over the slow link: %v", tp.Name(), err)
	}
	ssub, err := stp.Subscription(t.Context(), "sub")
	if err != nil {
		t.Fatalf("Subscription over the slow link: %v", err)
	}
	return tp, sub, ssub
}

func (s *suite) testSlowLinkSubscription(t *testing.T) {
	tp, sub, ssub := s.slowLinkTopic(t, transport.SubscriptionConfig{})
	runSlowLink(t, ssub.Receive, func(m *transport.Message) {
		publish(t, tp, m)
	}, sub.DeadLetterQueue(), "", tp.Config().Partitions)
}

func (s *suite) testSlowLinkSubscriptionSession(t *testing.T) {
	tp, sub, ssub := s.slowLinkTopic(t, transport.SubscriptionConfig{RequiresSession: true})
	r, err := ssub.AcceptSession(t.Context(), "s")
	if err != nil {
		t.Fatalf("AcceptSession over the slow link: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	runSlowLink(t, sessionReceive(r), func(m *transport.Message) {
		publish(t, tp, m)
	}, sub.DeadLetterQueue(), "s", 1)
}

func sessionReceive(r *transport.SessionReceiver) func(context.Context, int) ([]*transport.Delivery, error) {
	return func(ctx context.Context, _ int) ([]*transport.Delivery, error) {
		d, err := r.Receive(ctx)
		if err != nil {
			return nil, err
		}
		return []*transport.Delivery{d}, nil
	}
}

// runSlowLink receives over the slow link in a loop, as a dispatcher
// would (Receive with a 5 s context, max 10, each delivery completed
// without holding up the next Receive), while send sends five messages
// (of session sid, if set) a few hundred milliseconds apart over a fast
// link. Each message must first arrive with DeliveryCount 1 within
// 2×slowLinkDelay plus a second of its send (in a session, of its send or
// of the previous message's arrival, whichever is later: the session's
// next message leaves only once the previous one's completion reached the
// server): a message handed to a pull its receiver no longer reads would
// come back only once its lock expired, and with DeliveryCount 2; and a
// receive that makes a request of the server between a message's arrival
// and its return (a purge, a renewal it waits for) holds it back a round
// trip, which with the completion's and the pull's own trips exceeds the
// bound. On a queue or topic of several partitions (partitions > 1) the
// bound is a round trip longer: a Receive asks each partition for a share
// of its batch. (A session receiver takes from its session's partition
// only: pass 1.) Each delivery must come with at least freshLock left on
// its lock. Nothing may be dead-lettered.
func runSlowLink(t *testing.T, receive func(context.Context, int) ([]*transport.Delivery, error),
	send func(*transport.Message), dlq *transport.Queue, sid string, partitions int) {
	const n = 5
	prompt := 2*slowLinkDelay + time.Second
	if partitions > 1 {
		// A Receive asks each partition for a share of its batch: more
		// messages than that in one partition within a round trip wait
		// for the next pull, a round trip later.
		prompt += slowLinkDelay
	}
	type first struct {
		count int
		after time.Duration // since its send
	}
	var (
		mu    sync.Mutex
		sent  = map[string]time.Time{}
		got   = map[string]first{}
		order []string
		errs  []error
		last  time.Time // the latest first arrival
	)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		once := sync.OnceFunc(func() { close(started) })
		for ctx.Err() == nil {
			once()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ds, err := receive(rctx, 10)
			cancel()
			now := time.Now()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("receive: %w", err))
					mu.Unlock()
				}
				continue
			}
			for _, d := range ds {
				body := string(d.Body)
				mu.Lock()
				if left := d.LockedUntil().Sub(now); left < freshLock-freshSlack {
					errs = append(errs, fmt.Errorf("%s (DeliveryCount %d) returned with %v left on its lock, want at least %v",
						body, d.DeliveryCount, left.Round(time.Millisecond), freshLock))
				}
				if _, ok := got[body]; !ok {
					since := sent[body]
					if sid != "" && last.After(since) {
						since = last
					}
					got[body] = first{d.DeliveryCount, now.Sub(since)}
					last = now
					order = append(order, fmt.Sprintf("%s: DeliveryCount %d after %v", body, d.DeliveryCount, now.Sub(since).Round(time.Millisecond)))
				}
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := d.Complete(context.WithoutCancel(ctx)); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("Complete(%s): %w", body, err))
						mu.Unlock()
					}
				}()
			}
		}
	}()
	<-started
	for i := range n {
		m := numbered("slow", i)
		m.SessionID = sid
		mu.Lock()
		sent[string(m.Body)] = time.Now()
		mu.Unlock()
		send(m)
		if i < n-1 {
			time.Sleep(300 * time.Millisecond) // the sender's pace, not a wait for a condition
		}
	}
	// Wait for all to arrive; on failure, report what did.
	deadline := time.Now().Add(3*awaitMargin + 10*time.Second)
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for {
		mu.Lock()
		all := len(got) == n
		mu.Unlock()
		if all || time.Now().After(deadline) {
			break
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal("test ended while waiting for the messages")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("first arrivals over a link %v slow: %q", slowLinkDelay, order)
	if len(got) < n {
		t.Errorf("received %d of %d messages over a link %v slow", len(got), n, slowLinkDelay)
	}
	for body, f := range got {
		if f.count != 1 {
			t.Errorf("%s first reached the receiver with DeliveryCount %d, want 1", body, f.count)
		}
		if f.after > prompt {
			t.Errorf("%s first reached the receiver %v after it was sent (or the session's previous message arrived), want within %v", body, f.after.Round(time.Millisecond), prompt)
		}
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
		t.Errorf("dead-lettered, though every message was first received with DeliveryCount 1 and completed: %q", dl)
	}
}
