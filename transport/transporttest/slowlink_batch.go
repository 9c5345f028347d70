package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testSlowLinkQueueBatch and testSlowLinkSubscriptionBatch check that a
// Receive over a slow link hands out what one pull brought together, and
// never a delivery whose lock has expired (see runSlowLinkBatch).
func (s *suite) testSlowLinkQueueBatch(t *testing.T) {
	_, q := s.open(t, slowLinkConfig)
	for i := range slowBatch {
		send(t, q, numbered("slow", i))
	}
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: slowBatch})
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.Queue(t.Context(), q.Name())
	if err != nil {
		t.Fatalf("Queue(%q) over the slow link: %v", q.Name(), err)
	}
	runSlowLinkBatch(t, sq.Receive, q.Config().Partitions)
}

func (s *suite) testSlowLinkSubscriptionBatch(t *testing.T) {
	tp, sub, ssub := s.slowLinkTopic(t, transport.SubscriptionConfig{})
	for i := range slowBatch {
		publish(t, tp, numbered("slow", i))
	}
	awaitCounts(t, "subscription", sub.Counts, transport.Counts{Active: slowBatch, Pending: slowBatch})
	runSlowLinkBatch(t, ssub.Receive, tp.Config().Partitions)
}

// slowBatch is how many messages runSlowLinkBatch receives.
const slowBatch = 5

// freshLock is how much of its lock a delivery has left at least when
// Receive returns it: three quarters of LockDuration (an older lock is
// renewed first). freshSlack allows for the time between the renewal and
// the test's look at the clock.
const (
	freshLock  = 3 * slowLinkLock / 4
	freshSlack = 200 * time.Millisecond
)

// runSlowLinkBatch receives the slowBatch messages numbered("slow", i),
// all stored before it starts, over a slow link, in a loop of Receives
// with a 5 s context and max 10, completing each delivery at once. On a
// queue of one partition the first Receive's first pull asks for up to
// 10 without waiting: it brings all of them, and the Receive that gets
// one must get them all. (With several partitions a Receive asks each
// for a share of 10 and what one cannot fill goes to another pull: the
// messages of one partition may come in more than one Receive.) Each
// delivery must be handed out with at least freshLock left on its lock
// (counted from the message's arrival, or its last renewal), never with
// an expired one, and with DeliveryCount 1; each Complete must succeed.
func runSlowLinkBatch(t *testing.T, receive func(context.Context, int) ([]*transport.Delivery, error), partitions int) {
	start := time.Now()
	deadline := start.Add(3*awaitMargin + 10*time.Second)
	var (
		batches []int
		log     []string
		wg      sync.WaitGroup
	)
	defer wg.Wait()
	got := 0
	for got < slowBatch && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		ds, err := receive(ctx, 10)
		cancel()
		returned := time.Now()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Receive over the slow link: %v", err)
			}
			continue
		}
		if len(ds) > 0 {
			batches = append(batches, len(ds))
		}
		for _, d := range ds {
			got++
			what := fmt.Sprintf("%s (DeliveryCount %d)", d.Body, d.DeliveryCount)
			until := d.LockedUntil()
			log = append(log, fmt.Sprintf("%s at +%v, locked until +%v", what,
				returned.Sub(start).Round(time.Millisecond), until.Sub(start).Round(time.Millisecond)))
			if left := until.Sub(returned); left < freshLock-freshSlack {
				t.Errorf("%s returned with %v left on its lock, want at least %v", what, left.Round(time.Millisecond), freshLock)
			}
			if d.DeliveryCount != 1 {
				t.Errorf("%s: want DeliveryCount 1", what)
			}
			// At once, each on its own: over the slow link a Complete
			// takes a round trip.
			wg.Go(func() {
				if err := d.Complete(t.Context()); err != nil {
					t.Errorf("Complete(%s): %v", what, err)
				}
			})
		}
	}
	t.Logf("over a link %v slow: %q; batches %v", slowLinkDelay, log, batches)
	if got < slowBatch {
		t.Fatalf("received %d of %d messages over a link %v slow", got, slowBatch, slowLinkDelay)
	}
	if partitions == 1 && batches[0] != slowBatch {
		t.Errorf("the first Receive that got messages got %d, want all %d (one pull brought them)", batches[0], slowBatch)
	}
}

// testSlowLinkCompetingOrder is runCompetingOrder over a slow link: most
// Receives end before their pulls reach the server, and the next ones
// hand out what those pulls bring.
func (s *suite) testSlowLinkCompetingOrder(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n = 24
	sendNumbered(t, q, n)
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.Queue(t.Context(), q.Name())
	if err != nil {
		t.Fatalf("Queue(%q) over the slow link: %v", q.Name(), err)
	}
	runCompetingOrder(t, sq, n, time.Minute)
}

// testSlowLinkCompetingOrderPartitioned is testSlowLinkCompetingOrder on
// a queue of several partitions: a Receive's pulls on each partition
// reach the server late, and what each brings is handed out in order.
func (s *suite) testSlowLinkCompetingOrderPartitioned(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	const n = 24
	sendKeyed(t, q, n, 4*partitions)
	slow := s.f.SlowLink(t, slowLinkDelay)
	sq, err := slow.Queue(t.Context(), q.Name())
	if err != nil {
		t.Fatalf("Queue(%q) over the slow link: %v", q.Name(), err)
	}
	runCompetingOrder(t, sq, n, time.Minute)
}
