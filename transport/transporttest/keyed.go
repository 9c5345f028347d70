package transporttest

import (
	"cmp"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// keyedPartitions is the number of partitions of every queue and topic a
// test opens with one partition when the suite runs with keys.
const keyedPartitions = 4

// RunKeyed runs every test of Run with fairness keys on: every queue and
// topic a test opens with one partition has four instead, and every
// message a test sends to one without a SessionID or a PartitionKey
// carries a PartitionKey of that queue or topic, in a partition other
// than the first, so that sequence numbers carry a partition id. Sessions
// keep choosing their partitions (a message's SessionID wins over a key),
// and tests that set their own keys or partitions keep them. Every
// promise the suite checks must hold per partition, as it holds on a
// queue of one.
func RunKeyed(t *testing.T, newBroker func(t *testing.T) *transport.Broker, f Features) {
	t.Helper()
	keyedBroker := func(b *transport.Broker, t *testing.T) *transport.Broker {
		keyedBrokers.Store(b, true)
		t.Cleanup(func() { keyedBrokers.Delete(b) })
		return b
	}
	nb := func(t *testing.T) *transport.Broker { return keyedBroker(newBroker(t), t) }
	if slow := f.SlowLink; slow != nil {
		f.SlowLink = func(t *testing.T, delay time.Duration) *transport.Broker {
			return keyedBroker(slow(t, delay), t)
		}
	}
	Run(t, nb, f)
}

var (
	// keyedBrokers holds the brokers made by RunKeyed's newBroker.
	keyedBrokers sync.Map // *transport.Broker → true
	// keyedNames holds the fairness key of each queue and topic opened
	// on a keyed broker, by name (names are unique to their test).
	keyedNames sync.Map // string → homeKey
)

// homeKey is the fairness key of a queue or topic and its partition.
type homeKey struct {
	key       string
	partition int
}

// keyedConfig returns the number of partitions a test opening a queue or
// topic named name with partitions gets on b, and registers the name's
// key when the suite runs with keys.
func keyedConfig(t *testing.T, b *transport.Broker, name string, partitions int) int {
	if _, ok := keyedBrokers.Load(b); !ok || partitions > 1 {
		return partitions
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	p := 1 + int(h.Sum32()%(keyedPartitions-1))
	keyedNames.Store(name, homeKey{keyIn(p, keyedPartitions, "tenant"), p})
	t.Cleanup(func() { keyedNames.Delete(name) })
	return keyedPartitions
}

// keyed gives m the fairness key of the queue or topic named to, if the
// suite runs with keys and m has neither a SessionID nor a PartitionKey,
// and returns m.
func keyed(to interface{ Name() string }, m *transport.Message) *transport.Message {
	if m == nil || m.SessionID != "" || m.PartitionKey != "" {
		return m
	}
	if k, ok := keyedNames.Load(to.Name()); ok {
		m.PartitionKey = k.(homeKey).key
	}
	return m
}

// home returns the partition of the queue or topic named to that the
// test's messages without a SessionID go to: 0, or the partition of its
// key when the suite runs with keys.
func home(to interface{ Name() string }) int {
	if k, ok := keyedNames.Load(to.Name()); ok {
		return k.(homeKey).partition
	}
	return 0
}

// homeSeq returns the active sequence number local of to's home
// partition: local itself on a queue of one partition.
func homeSeq(to interface{ Name() string }, local uint64) uint64 {
	return activeSeq(home(to), local)
}

// activeSeq returns the active sequence number local of partition p.
func activeSeq(p int, local uint64) uint64 {
	return uint64(p)<<transport.PartitionShift | local
}

// checkHomeSeqs checks that seqs are active sequence numbers of to's home
// partition, and that their local parts are exactly 1..len(seqs).
func checkHomeSeqs(t *testing.T, to interface{ Name() string }, what string, seqs []uint64) {
	t.Helper()
	local := make([]uint64, 0, len(seqs))
	for _, seq := range seqs {
		if p := transport.Partition(seq); p != home(to) || transport.IsScheduledSeq(seq) {
			t.Errorf("%s: seq %#x, want an active seq of partition %d", what, seq, home(to))
			continue
		}
		local = append(local, transport.LocalSeq(seq))
	}
	checkSeqs(t, what, local)
}

// partitionOf returns the partition a message goes to on a queue or topic
// of n partitions by the documented rule (FNV-1a 64 of its SessionID, or
// else PartitionKey, or else MessageID, modulo n), or -1 for a message
// without any of them on a partitioned queue (spread round-robin).
func partitionOf(n int, m *transport.Message) int {
	key := cmp.Or(m.SessionID, m.PartitionKey, m.MessageID)
	switch {
	case n == 1:
		return 0
	case key == "":
		return -1
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(n))
}

// seqFor returns the active sequence number local of the partition of q
// that m goes to.
func seqFor(q *transport.Queue, m *transport.Message, local uint64) uint64 {
	return activeSeq(partitionOf(q.Config().Partitions, m), local)
}

// stateKey returns a record key that starts with name: name itself, or,
// when the suite runs with keys, one of q's home partition, where the
// messages a commit schedules with the record go (see keyedCommit).
func stateKey(q *transport.Queue, name string) string {
	if _, ok := keyedNames.Load(q.Name()); !ok {
		return name
	}
	return keyIn(home(q), keyedPartitions, name)
}

// keyedCommit gives the messages c schedules q's fairness key, as keyed
// does, and returns c.
func keyedCommit(q *transport.Queue, c transport.StateCommit) transport.StateCommit {
	for _, m := range c.Schedule {
		keyed(q, m)
	}
	return c
}
