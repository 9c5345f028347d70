package saga_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
)

// The saga store's KV bucket (R3) without a leader — two of the three
// nodes stopped — while the queue (R1, on the surviving node) stays
// writable: messages keep arriving, every step finds the store
// unavailable and waits (with a retry policy that would dead-letter at the
// first failure), and once the nodes are back every message is applied
// exactly once and nothing is dead-lettered.
func TestLeaderlessBucketWaits(t *testing.T) {
	t.Parallel()
	c := startCluster(t)

	qcfg := transport.QueueConfig{Name: "leaderless", LockDuration: 2 * time.Second}
	probe := clusterNode(t, c, 0)
	probe.openQueue(t, qcfg)
	// Everything on the queue's node; the bucket's other replicas on the
	// nodes that will stop.
	lead, err := c.LeaderOf(t.Context(), "JETSAGA_Q_leaderless_0")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := c.ConnectTo(lead)
	if err != nil {
		t.Fatal(err)
	}
	n := nodeOn(t, nc, kvstore.Config{Bucket: "leaderless", Replicas: 3}, 30*time.Second)
	var log stepLog
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(counterSaga()), saga.WithQueueConfig(qcfg),
		saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: -1}), saga.WithDrainTimeout(3*time.Second),
		saga.WithHooks(log.hooks()))
	q := n.openQueue(t, qcfg)
	run(t, d)

	const ids = 20
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := d.Send(ctxFor(t), Incr{ID: fmt.Sprintf("c-%02d", i)}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	send(0, ids/2)
	var stopped []int
	for i := range c.Size() {
		if i != lead {
			if err := c.Stop(i); err != nil {
				t.Fatal(err)
			}
			stopped = append(stopped, i)
		}
	}
	// The queue stays writable without the others.
	send(ids/2, ids)
	testutil.Await(t, 60*time.Second, func() string {
		if h := d.Health(); !h.Waiting || h.Attempts < 5 || time.Since(h.Since) < 3*time.Second {
			return fmt.Sprintf("the dispatcher does not wait for the bucket: %+v", h)
		}
		return ""
	})
	for _, i := range stopped {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LeaderOf(wctx, "KV_leaderless"); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 60*time.Second, func() string {
		for i := range ids {
			id := fmt.Sprintf("c-%02d", i)
			got, _, ok := data[counter](t, d, "counter", id)
			if !ok || got.Count != 1 {
				return fmt.Sprintf("%s: %+v (found %v), want Count 1", id, got, ok)
			}
		}
		return queueEmpty(t, q)
	})
	for _, m := range peekAll(t, q.DeadLetterQueue()) {
		t.Errorf("dead-lettered: %s: %s %s", originalID(m), m.DeadLetterReason, m.DeadLetterDescription)
	}
	if h := d.Health(); h.Waiting {
		t.Errorf("still waiting after the nodes came back: %+v", h)
	}
}
