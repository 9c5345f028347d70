package transporttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testReceiveCompetingOrder checks S7's retrieval order under
// competition: goroutines receiving from one Queue, each with short
// Receives of small batches, each see increasing sequence numbers.
func (s *suite) testReceiveCompetingOrder(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n = 300
	sendNumbered(t, q, n)
	runCompetingOrder(t, q, n, 30*time.Second)
}

// testReceiveCompetingOrderPartitioned is testReceiveCompetingOrder on a
// queue of several partitions, whose Receives take from each partition:
// each goroutine sees increasing sequence numbers in every partition.
func (s *suite) testReceiveCompetingOrderPartitioned(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	const n = 300
	sendKeyed(t, q, n, 4*partitions)
	runCompetingOrder(t, q, n, 30*time.Second)
}

// sendNumbered sends numbered("m", 0..n-1) to q, in that order, and waits
// until all are active.
func sendNumbered(t *testing.T, q *transport.Queue, n int) {
	t.Helper()
	for i := range n {
		if _, err := q.Send(t.Context(), keyed(q, numbered("m", i))); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: int64(n)})
}

// sendKeyed sends numbered("m", 0..n-1) to q, in that order, with keys
// spread over its partitions (keys of its own: message i has "key-(i mod
// keys)"), and waits until all are active.
func sendKeyed(t *testing.T, q *transport.Queue, n, keys int) {
	t.Helper()
	for i := range n {
		m := numbered("m", i)
		m.PartitionKey = fmt.Sprintf("key-%d", i%keys)
		if _, err := q.Send(t.Context(), keyed(q, m)); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: int64(n)})
}

// runCompetingOrder has three goroutines receive the n messages
// numbered("m", 0..n-1) already stored on q, each in a loop of Receives
// with a 300 ms context and a batch of 1 to 5, completing each delivery.
// Each message must be received once, with DeliveryCount 1, and each
// goroutine must get increasing sequence numbers (per partition): no
// Receive hands out a first delivery older than one the Queue already
// handed out.
func runCompetingOrder(t *testing.T, q *transport.Queue, n int, within time.Duration) {
	t.Helper()
	const receivers = 3
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	var (
		mu    sync.Mutex
		count = make([]int, n)
		total atomic.Int64
		wg    sync.WaitGroup
	)
	for r := range receivers {
		wg.Go(func() {
			last := map[int]uint64{} // partition -> the last seq this goroutine got
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				ds, err := q.Receive(rctx, 1+rand.IntN(5))
				rcancel()
				if err != nil {
					if ctx.Err() == nil && rctx.Err() == nil {
						t.Errorf("receiver %d: Receive: %v", r, err)
						return
					}
					continue
				}
				for _, d := range ds {
					p := transport.Partition(d.Seq)
					if prev := last[p]; d.Seq <= prev {
						t.Errorf("receiver %d: seq %s after %s", r, transport.FormatSeq(d.Seq), transport.FormatSeq(prev))
					}
					last[p] = d.Seq
					if d.DeliveryCount != 1 {
						t.Errorf("receiver %d: %s DeliveryCount %d, want 1", r, describe(d.Message), d.DeliveryCount)
					}
					if err := d.Complete(t.Context()); err != nil {
						t.Errorf("receiver %d: Complete(%s): %v", r, describe(d.Message), err)
					}
					i, ok := number(d.Message, "m")
					if !ok || i >= n {
						t.Errorf("receiver %d: unexpected %s", r, describe(d.Message))
						continue
					}
					mu.Lock()
					count[i]++
					mu.Unlock()
					if total.Add(1) == int64(n) {
						cancel()
					}
				}
			}
		})
	}
	wg.Wait()
	for i, c := range count {
		if c != 1 {
			t.Errorf("m-%d received %d times, want once", i, c)
		}
	}
}
