package transporttest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testPartition checks S1 and S2 on partitioned queues: the partition id
// in the top bits, sessions pinned to one partition, gap-free sequences
// per partition, and Cancel per partition.
func (s *suite) testPartition(t *testing.T) {
	parallel(t, "Seqs", s.testPartitionSeqs)
	parallel(t, "Sessions", s.testPartitionSessions)
	parallel(t, "Scheduled", s.testPartitionScheduled)
	parallel(t, "Key", s.testPartitionKey)
	parallel(t, "Fair", s.testPartitionFair)
}

const partitions = 4

// checkPartitionSeqs checks that seqs, all active, fall in the queue's
// partitions and that each partition's local seqs are exactly 1..n.
func checkPartitionSeqs(t *testing.T, what string, seqs []uint64) {
	t.Helper()
	local := make([][]uint64, partitions)
	for _, seq := range seqs {
		p := transport.Partition(seq)
		if p < 0 || p >= partitions {
			t.Errorf("%s: seq %#x in partition %d, want 0 to %d", what, seq, p, partitions-1)
			continue
		}
		if transport.IsScheduledSeq(seq) {
			t.Errorf("%s: seq %#x is a scheduled seq, want an active one", what, seq)
			continue
		}
		local[p] = append(local[p], transport.LocalSeq(seq))
	}
	for p, ls := range local {
		checkSeqs(t, fmt.Sprintf("%s: partition %d", what, p), ls)
	}
}

func (s *suite) testPartitionSeqs(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	if got := q.Config().Partitions; got != partitions {
		t.Errorf("Config().Partitions = %d, want %d", got, partitions)
	}
	var (
		seqs []uint64
		last = make([]uint64, partitions)
	)
	record := func(m *transport.Message) uint64 {
		t.Helper()
		seq := send(t, q, m).Seq
		if p := transport.Partition(seq); p >= 0 && p < partitions {
			if transport.LocalSeq(seq) != last[p]+1 {
				t.Errorf("Send(%s): local seq %d in partition %d, want %d", describe(m), transport.LocalSeq(seq), p, last[p]+1)
			}
			last[p] = transport.LocalSeq(seq)
		}
		seqs = append(seqs, seq)
		return seq
	}
	for i := range 40 {
		record(numbered("plain", i))
	}
	for i := range 10 {
		m := numbered("id", i)
		m.MessageID = fmt.Sprintf("message-%d", i)
		record(m)
	}
	sessionPartition := make(map[string]int)
	for i := range 20 {
		m := numbered("session", i)
		m.SessionID = fmt.Sprintf("s-%d", i%5)
		p := transport.Partition(record(m))
		if want, ok := sessionPartition[m.SessionID]; ok && p != want {
			t.Errorf("session %q: message in partition %d, earlier ones in %d", m.SessionID, p, want)
		}
		sessionPartition[m.SessionID] = p
	}
	checkPartitionSeqs(t, "SendResult seqs", seqs)
	for p, n := range last {
		if n == 0 {
			t.Errorf("partition %d got no message of %d sent without a session", p, len(seqs))
		}
	}

	peeked := peekAll(t, q)
	checkAscending(t, "Peek", peeked)
	want := slices.Sorted(slices.Values(seqs))
	if got := seqsOfSlice(peeked); !slices.Equal(got, want) {
		t.Errorf("Peek: %d seqs, want the %d sent:\n got %#x\nwant %#x", len(got), len(want), got, want)
	}

	var got []uint64
	for _, a := range receiveN(t, q, len(seqs), awaitMargin) {
		got = append(got, a.Seq)
		if a.SessionID != "" && transport.Partition(a.Seq) != sessionPartition[a.SessionID] {
			t.Errorf("received %s in partition %d, want %d", describe(a.Message), transport.Partition(a.Seq), sessionPartition[a.SessionID])
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("received seqs\n %#x\nwant the sent ones\n %#x", got, want)
	}
}

func seqsOfSlice(ms []*transport.Message) []uint64 {
	seqs := make([]uint64, len(ms))
	for i, m := range ms {
		seqs[i] = m.Seq
	}
	return seqs
}

func (s *suite) testPartitionSessions(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions, RequiresSession: true})
	const sessions, each = 8, 5
	seqs := make(map[string][]uint64)
	for i := range each {
		for j := range sessions {
			id := fmt.Sprintf("s-%d", j)
			m := numbered(id, i)
			m.SessionID = id
			seqs[id] = append(seqs[id], send(t, q, m).Seq)
		}
	}
	var all []uint64
	for id, ss := range seqs {
		all = append(all, ss...)
		for _, seq := range ss {
			if transport.Partition(seq) != transport.Partition(ss[0]) {
				t.Errorf("session %q: seqs %#x in different partitions", id, ss)
				break
			}
		}
	}
	checkPartitionSeqs(t, "session seqs", all)
	for id, ss := range seqs {
		r := acceptSession(t, q, id)
		for i, want := range ss {
			a := receiveSession(t, r, awaitMargin)
			if a.Seq != want {
				t.Errorf("session %q: message %d has seq %#x, want %#x", id, i, a.Seq, want)
			}
			complete(t, a.Delivery)
		}
		r.Close()
	}
}

// testPartitionScheduled schedules round-robin over the partitions,
// cancels some, lets the rest activate, and checks that sent and
// activated messages together keep each partition gap-free.
func (s *suite) testPartitionScheduled(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	for i := range 8 {
		send(t, q, numbered("sent", i))
	}
	// Room for 16 schedules, a Peek and 7 cancels before the margin, on a
	// replicated queue under the race detector too.
	at := time.Now().Add(s.f.CancelMargin + 2*time.Second)
	far := time.Now().Add(time.Hour)
	soon := make([]uint64, 12)
	for i := range soon {
		soon[i] = schedule(t, q, numbered("soon", i), at)
	}
	later := make([]uint64, 4)
	for i := range later {
		later[i] = schedule(t, q, numbered("later", i), far)
	}
	used := make(map[int]bool)
	for _, seq := range slices.Concat(soon, later) {
		p := transport.Partition(seq)
		if p < 0 || p >= partitions {
			t.Errorf("scheduled seq %#x in partition %d, want 0 to %d", seq, p, partitions-1)
		}
		used[p] = true
	}
	if len(used) < 2 {
		t.Errorf("16 scheduled messages sent round-robin landed in %d partition(s), want several", len(used))
	}
	ms := peekAll(t, q)
	if len(ms) != 8+12+4 {
		t.Errorf("Peek: %d messages, want %d", len(ms), 8+12+4)
	}
	checkAscending(t, "Peek", ms)

	cancelled := map[uint64]bool{soon[1]: true, soon[2]: true, soon[7]: true}
	for _, seq := range slices.Concat([]uint64{soon[1], soon[2], soon[7]}, later) {
		if err := q.Cancel(t.Context(), seq); err != nil {
			t.Errorf("Cancel(%#x) in partition %d = %v, want nil", seq, transport.Partition(seq), err)
		}
		if err := q.Cancel(t.Context(), seq); !errors.Is(err, transport.ErrNotFound) {
			t.Errorf("second Cancel(%#x) in partition %d = %v, want %v", seq, transport.Partition(seq), err, transport.ErrNotFound)
		}
	}
	for _, m := range peekAll(t, q) {
		if m.State == transport.Scheduled && (cancelled[m.Seq] || slices.Contains(later, m.Seq)) {
			t.Errorf("Peek after Cancel shows cancelled %s", describe(m))
		}
	}

	want := 8 + len(soon) - len(cancelled)
	got := receiveN(t, q, want, time.Until(at)+s.f.ActivationSlack+awaitMargin)
	var seqs []uint64
	for _, a := range got {
		seqs = append(seqs, a.Seq)
		if i, ok := number(a.Message, "soon"); ok {
			if cancelled[soon[i]] {
				t.Errorf("received cancelled %s", describe(a.Message))
			}
			checkNotEarly(t, a, at)
		}
	}
	checkPartitionSeqs(t, "sent and activated seqs", seqs)
	expectNone(t, q, max(time.Until(at.Add(s.f.ActivationSlack+quietMargin)), quietMargin))
}

// testPartitionKey checks that a PartitionKey chooses the partition: a
// key's sent and scheduled messages all share one, whatever their
// MessageIDs; the key reaches the receiver; and a key that is too long,
// has a control character, or differs from the message's SessionID is
// refused with ErrInvalidMessage.
func (s *suite) testPartitionKey(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	keys := []string{"tenant-a", "tenant-b", "acct.42", "*", ">", "a b.>", "ключ"}
	partOf := map[string]int{}
	var sent []uint64
	for i := range 4 * len(keys) {
		key := keys[i%len(keys)]
		m := numbered(key, i)
		m.PartitionKey = key
		m.MessageID = fmt.Sprintf("id-%d", i) // would choose partitions of their own
		seq := send(t, q, m).Seq
		sent = append(sent, seq)
		p := transport.Partition(seq)
		if want, ok := partOf[key]; ok && p != want {
			t.Errorf("PartitionKey %q: message %d in partition %d, earlier ones in %d", key, i, p, want)
		}
		partOf[key] = p
	}
	checkPartitionSeqs(t, "PartitionKey seqs", sent)
	used := map[int]bool{}
	for _, p := range partOf {
		used[p] = true
	}
	if len(used) < 2 {
		t.Errorf("%d keys all chose partition %v, want several partitions", len(keys), partOf)
	}
	for i, key := range keys {
		m := numbered("later-"+key, i)
		m.PartitionKey = key
		if seq := schedule(t, q, m, time.Now().Add(time.Hour)); transport.Partition(seq) != partOf[key] {
			t.Errorf("PartitionKey %q: scheduled in partition %d, its sent messages in %d", key, transport.Partition(seq), partOf[key])
		}
	}
	for _, a := range receiveN(t, q, len(sent), awaitMargin) {
		if a.PartitionKey == "" || transport.Partition(a.Seq) != partOf[a.PartitionKey] {
			t.Errorf("received %s with PartitionKey %q in partition %d, want its key's partition %d",
				describe(a.Message), a.PartitionKey, transport.Partition(a.Seq), partOf[a.PartitionKey])
		}
	}

	_, sq := s.open(t, transport.QueueConfig{Partitions: partitions, RequiresSession: true})
	same := numbered("same", 0)
	same.SessionID, same.PartitionKey = "s-1", "s-1"
	if seq := send(t, sq, same).Seq; transport.Partition(seq) != transport.Partition(send(t, sq, &transport.Message{SessionID: "s-1", Body: []byte("x")}).Seq) {
		t.Errorf("a PartitionKey equal to the SessionID moved the message out of its session's partition")
	}
	for _, bad := range []struct {
		q *transport.Queue
		m transport.Message
	}{
		{q, transport.Message{PartitionKey: strings.Repeat("k", 129)}},
		{q, transport.Message{PartitionKey: "tenant\x00a"}},
		{q, transport.Message{PartitionKey: "tenant\na"}},
		{sq, transport.Message{SessionID: "s-1", PartitionKey: "s-2"}},
	} {
		m := bad.m
		m.Body = []byte("bad")
		if _, err := bad.q.Send(t.Context(), keyed(bad.q, &m)); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("Send with PartitionKey %.40q (SessionID %q) = %v, want %v", m.PartitionKey, m.SessionID, err, transport.ErrInvalidMessage)
		}
		if _, err := bad.q.Schedule(t.Context(), keyed(bad.q, &m), time.Now().Add(time.Hour)); !errors.Is(err, transport.ErrInvalidMessage) {
			t.Errorf("Schedule with PartitionKey %.40q (SessionID %q) = %v, want %v", m.PartitionKey, m.SessionID, err, transport.ErrInvalidMessage)
		}
	}
}
