package transport_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// keyOf returns a PartitionKey that a queue of parts partitions puts in
// partition part (FNV-1a 64 of the key, modulo parts).
func keyOf(part, parts int) string {
	for i := 0; ; i++ {
		key := "k" + strconv.Itoa(i)
		h := fnv.New64a()
		h.Write([]byte(key))
		if int(h.Sum64()%uint64(parts)) == part {
			return key
		}
	}
}

// countPulls counts, on a connection of its own, the pull requests that
// reach each partition's consumer of queue.
func countPulls(t *testing.T, srv *embedded.Server, queue string) func(part int) int {
	t.Helper()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	n := map[int]int{}
	prefix := "$JS.API.CONSUMER.MSG.NEXT.JETSAGA_Q_" + queue + "_"
	if _, err := nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT.*.recv", func(m *nats.Msg) {
		rest, ok := strings.CutPrefix(m.Subject, prefix)
		if !ok {
			return
		}
		p, err := strconv.Atoi(strings.TrimSuffix(rest, ".recv"))
		if err != nil {
			return
		}
		mu.Lock()
		n[p]++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func(part int) int {
		mu.Lock()
		defer mu.Unlock()
		return n[part]
	}
}

// While one partition of a queue drains a backlog, Receive does not ask
// the partitions that have nothing on every sweep: each quiet partition
// gets a waiting pull (renewed once a second) and one request that does
// not wait as that pull starts, not a request per Receive.
func TestReceiveLeavesEmptyPartitionsAlone(t *testing.T) {
	srv, _, b := startServer(t, embedded.Options{})
	const parts, backlog, batch = 4, 400, 8
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "quiet", Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	hot := keyOf(0, parts)
	for i := range backlog {
		if _, err := q.Send(t.Context(), &transport.Message{MessageID: fmt.Sprint("hot-", i), PartitionKey: hot}); err != nil {
			t.Fatal(err)
		}
	}
	pulls := countPulls(t, srv, "quiet")
	start := time.Now()
	receives := 0
	for got := 0; got < backlog; receives++ {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		ds, err := q.Receive(ctx, batch)
		cancel()
		if err != nil {
			t.Fatalf("Receive after %d of %d: %v", got, backlog, err)
		}
		for _, d := range ds {
			if p := transport.Partition(d.Seq); p != 0 {
				t.Fatalf("a message of partition %d, which had none", p)
			}
			if err := d.Complete(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		got += len(ds)
	}
	// Each watching pull lives a second: two requests (the pull and the
	// request beside it) per started second, and the first sweep's.
	limit := 2*int(time.Since(start)/time.Second+1) + 1
	for p := 1; p < parts; p++ {
		if n := pulls(p); n > limit {
			t.Errorf("partition %d, empty, got %d pull requests during %d receives of partition 0's backlog (%v); want at most %d",
				p, n, receives, time.Since(start).Round(time.Millisecond), limit)
		}
	}
	t.Logf("%d receives in %v; pull requests to partition 0: %d, to the empty ones: %d, %d, %d",
		receives, time.Since(start).Round(time.Millisecond), pulls(0), pulls(1), pulls(2), pulls(3))
}

// A message sent, or a schedule that activates, on a partition that the
// receivers saw empty reaches a Receive at once, while another
// partition's burst keeps them busy: the partition is never left without
// a pull waiting on it or a receive asking (a lost wake-up would leave
// the message there until the burst ends).
func TestReceiveWakesForEmptyPartition(t *testing.T) {
	_, _, b := startServer(t, embedded.Options{})
	const parts, batch = 4, 8
	// The time from a message's enqueueing to its Receive, on a partition
	// thought empty, beside a burst: a sweep or two (milliseconds); a
	// receiver that waited for its pulls to expire instead would take up
	// to a second (pullWait).
	const bound = 500 * time.Millisecond
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "wake", Partitions: parts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	hot := keyOf(0, parts)
	sendHot := func(i int) error {
		_, err := q.Send(ctx, &transport.Message{MessageID: fmt.Sprint("hot-", i), PartitionKey: hot})
		return err
	}
	// The burst: partition 0 has a backlog before the receiver starts,
	// and more comes while the test runs.
	const preload, senders = 2000, 8
	var load sync.WaitGroup
	for s := range senders {
		load.Go(func() {
			for i := s; i < preload; i += senders {
				if err := sendHot(i); err != nil {
					t.Errorf("send to the busy partition: %v", err)
					return
				}
			}
		})
	}
	load.Wait()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		for i := preload; ctx.Err() == nil; i++ {
			if err := sendHot(i); err != nil && ctx.Err() == nil {
				t.Errorf("send to the busy partition: %v", err)
				return
			}
		}
	})
	type arrival struct {
		id   string
		late time.Duration
	}
	arrivals := make(chan arrival, 16)
	hotSeen := make(chan struct{})
	var short atomic.Int64 // receives that found fewer than batch: the burst ran dry
	// One receiver, whose handling takes a while (workPerBatch), so that
	// the backlog lasts.
	const workPerBatch = 5 * time.Millisecond
	wg.Go(func() {
		var once sync.Once
		for ctx.Err() == nil {
			ds, err := q.Receive(ctx, batch)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("Receive: %v", err)
				}
				return
			}
			if len(ds) < batch {
				short.Add(1)
			}
			now := time.Now()
			for _, d := range ds {
				if strings.HasPrefix(d.MessageID, "hot-") {
					once.Do(func() { close(hotSeen) })
				} else {
					arrivals <- arrival{d.MessageID, now.Sub(d.EnqueuedAt)}
				}
				_ = d.CompleteNoWait(ctx)
			}
			time.Sleep(workPerBatch)
		}
	})
	select {
	case <-hotSeen:
	case <-ctx.Done():
		t.Fatal("no message of the burst received")
	}
	// Rounds at different points of the watching pulls' lives (a second
	// each): just after the first sweeps, within a pull's life, and after
	// the first pulls expired.
	for round, after := range []time.Duration{0, 600 * time.Millisecond, 1300 * time.Millisecond} {
		time.Sleep(after)
		for p := 1; p < parts; p++ {
			m := &transport.Message{MessageID: fmt.Sprintf("cold-%d-%d", round, p), PartitionKey: keyOf(p, parts)}
			if p == parts-1 {
				if _, err := q.Schedule(ctx, m, time.Now().Add(100*time.Millisecond)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := q.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		for range parts - 1 {
			select {
			case a := <-arrivals:
				if a.late > bound {
					t.Errorf("%s, on a partition with nothing else, received %v after it was enqueued, beside a burst; want within %v", a.id, a.late, bound)
				} else {
					t.Logf("%s received %v after it was enqueued", a.id, a.late.Round(time.Microsecond))
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: a message on a partition with nothing else was not received within 5s beside the burst", round)
			}
		}
	}
	if n := short.Load(); n > 0 {
		t.Fatalf("%d receives found fewer than %d messages: the burst ran dry, and the test tested nothing", n, batch)
	}
}
