package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jetsaga/jetsaga/transport"
)

// testPartitionFair checks that a Receive on a queue of several
// partitions shares its batch among the partitions with messages, so that
// a burst in one partition does not hold back the others: with a batch
// of at least the number of partitions, each Receive takes from every
// partition with messages ready; with a batch of one, as many Receives
// in a row as there are partitions visit each.
func (s *suite) testPartitionFair(t *testing.T) {
	parallel(t, "Batch", s.testPartitionFairBatch)
	parallel(t, "One", s.testPartitionFairOne)
	parallel(t, "ReceiveFrom", s.testReceiveFrom)
}

// keyIn returns a partition key that chooses partition p of a queue of
// n partitions, by the documented rule (FNV-1a 64 of the key, modulo n).
func keyIn(p, n int, prefix string) string {
	for i := 0; ; i++ {
		if key := fmt.Sprintf("%s-%d", prefix, i); partitionOf(n, &transport.Message{PartitionKey: key}) == p {
			return key
		}
	}
}

// sendBurst sends n messages "hot-i" with a key in partition 0 and one
// "cold-<p>-<round>" with a key in each other partition, in that order
// (the colds checked to have landed where the rule says).
func sendBurst(t *testing.T, q *transport.Queue, n, round int) {
	t.Helper()
	hot := keyIn(0, partitions, "hot")
	for i := range n {
		m := numbered("hot", i)
		m.PartitionKey = hot
		send(t, q, m)
	}
	for p := 1; p < partitions; p++ {
		m := numbered(fmt.Sprintf("cold-%d", p), round)
		m.PartitionKey = keyIn(p, partitions, "cold")
		if seq := send(t, q, m).Seq; transport.Partition(seq) != p {
			t.Fatalf("a message with key %q went to partition %d, want %d (FNV-1a 64 modulo %d)", m.PartitionKey, transport.Partition(seq), p, partitions)
		}
	}
}

// testPartitionFairBatch: 200 messages wait in partition 0 and one in
// each other partition; each Receive of a batch of 2 × partitions must
// return every waiting cold message and fill the rest of its batch with
// hot ones, round after round.
func (s *suite) testPartitionFairBatch(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	const hot, batch, rounds = 200, 2 * partitions, 3
	sendBurst(t, q, hot, 0)
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: hot + partitions - 1})
	for round := range rounds {
		if round > 0 {
			sendBurst(t, q, 0, round)
		}
		ds, err := q.Receive(withTimeout(t, awaitMargin), batch)
		if err != nil {
			t.Fatalf("round %d: Receive: %v", round, err)
		}
		colds := 0
		var got []string
		for _, d := range ds {
			got = append(got, string(d.Body))
			if _, ok := number(d.Message, "hot"); !ok {
				colds++
			}
			complete(t, d)
		}
		if colds != partitions-1 || len(ds) != batch {
			t.Errorf("round %d: Receive(%d) with %d partitions, one holding a burst and each other one message: got %d deliveries, %d not of the burst, want %d and %d: %q",
				round, batch, partitions, len(ds), colds, batch, partitions-1, got)
		}
	}
}

// testPartitionFairOne: the same burst, and Receives of one message:
// the first partitions-many must bring one from each partition.
func (s *suite) testPartitionFairOne(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	const hot = 200
	sendBurst(t, q, hot, 0)
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: hot + partitions - 1})
	seen := map[int]int{}
	var got []string
	for range partitions {
		ds, err := q.Receive(withTimeout(t, awaitMargin), 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Receive(1) = %d deliveries, %v; want 1", len(ds), err)
		}
		seen[transport.Partition(ds[0].Seq)]++
		got = append(got, string(ds[0].Body))
		complete(t, ds[0])
	}
	if len(seen) != partitions {
		t.Errorf("%d Receive(1) in a row, with %d partitions holding messages (one a burst): got messages of %d partitions, want one of each: %q",
			partitions, partitions, len(seen), got)
	}
}

// testReceiveFrom: ReceiveFrom takes only from the partitions it is
// given, in order within each, leaves the others' messages to other
// receives, and refuses an empty list or a partition out of range.
func (s *suite) testReceiveFrom(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	const each = 3
	for i := range each {
		for p := range partitions {
			m := numbered(fmt.Sprintf("p%d", p), i)
			m.PartitionKey = keyIn(p, partitions, "key")
			send(t, q, m)
		}
	}
	awaitCounts(t, "queue", q.Counts, transport.Counts{Active: each * partitions})
	for _, bad := range [][]int{nil, {}, {partitions}, {-1}, {0, partitions}} {
		if _, err := q.ReceiveFrom(t.Context(), 1, bad); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("ReceiveFrom(partitions %v) = %v, want %v", bad, err, transport.ErrInvalidOption)
		}
	}
	from := []int{1, 3}
	receive := func(ctx context.Context, max int) ([]*transport.Delivery, error) {
		return q.ReceiveFrom(ctx, max, from)
	}
	last := map[int]uint64{}
	for _, a := range receiveFrom(t, "From ", receive, each*len(from), awaitMargin) {
		p := transport.Partition(a.Seq)
		if !slices.Contains(from, p) {
			t.Errorf("ReceiveFrom(%v) returned %s of partition %d", from, describe(a.Message), p)
		}
		if a.Seq <= last[p] {
			t.Errorf("ReceiveFrom(%v): seq %s after %s", from, transport.FormatSeq(a.Seq), transport.FormatSeq(last[p]))
		}
		last[p] = a.Seq
	}
	expectNoneFrom(t, "From ", receive, quietMargin)
	for _, a := range receiveN(t, q, each*(partitions-len(from)), awaitMargin) {
		if p := transport.Partition(a.Seq); slices.Contains(from, p) {
			t.Errorf("Receive after ReceiveFrom(%v) drained those partitions returned %s of partition %d", from, describe(a.Message), p)
		}
	}
}
