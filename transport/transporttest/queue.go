package transporttest

import (
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testQueue checks what a queue is: attaching to one as configured, its
// MaxBytes cap, and its dead-letter queue's name and shape.
func (s *suite) testQueue(t *testing.T) {
	parallel(t, "Attach", s.testQueueAttach)
	parallel(t, "AttachMissing", s.testQueueAttachMissing)
	parallel(t, "MaxBytes", s.testQueueMaxBytes)
	parallel(t, "DeadLetterQueue", s.testQueueDeadLetter)
}

// testQueueAttach checks that Broker.Queue returns an existing queue with
// the config it was opened with, not the default one.
func (s *suite) testQueueAttach(t *testing.T) {
	b, q := s.open(t, transport.QueueConfig{
		Partitions:       partitions,
		RequiresSession:  true,
		LockDuration:     3 * time.Second,
		MaxDeliveryCount: 3,
		DuplicateWindow:  time.Minute,
	})
	first := send(t, q, &transport.Message{Body: []byte("1"), SessionID: "s"}).Seq

	a, err := b.Queue(t.Context(), q.Name())
	if err != nil {
		t.Fatalf("Queue(%q): %v", q.Name(), err)
	}
	want, got := q.Config(), a.Config()
	if got.Name != want.Name || got.Partitions != want.Partitions || got.RequiresSession != want.RequiresSession ||
		got.LockDuration != want.LockDuration || got.MaxDeliveryCount != want.MaxDeliveryCount ||
		got.DuplicateWindow != want.DuplicateWindow {
		t.Errorf("Queue(%q).Config() = %+v, want %+v as opened", q.Name(), got, want)
	}
	if _, err := a.Send(t.Context(), keyed(a, numbered("m", 0))); !errors.Is(err, transport.ErrSessionRequired) {
		t.Errorf("Send without SessionID through the attached queue = %v, want %v", err, transport.ErrSessionRequired)
	}
	second := send(t, a, &transport.Message{Body: []byte("2"), SessionID: "s"}).Seq
	if transport.Partition(second) != transport.Partition(first) || transport.LocalSeq(second) != transport.LocalSeq(first)+1 {
		t.Errorf("Send through the attached queue: seq %#x, want the next seq of %#x's partition", second, first)
	}
	r := acceptSession(t, q, "s")
	for _, want := range []uint64{first, second} {
		a := receiveSession(t, r, awaitMargin)
		if a.Seq != want {
			t.Errorf("received seq %#x, want %#x", a.Seq, want)
		}
		complete(t, a.Delivery)
	}

	for _, name := range []string{"", "a.b", "a b"} {
		if _, err := b.Queue(t.Context(), name); !errors.Is(err, transport.ErrInvalidQueueName) {
			t.Errorf("Queue(%q) = %v, want %v", name, err, transport.ErrInvalidQueueName)
		}
	}
}

// testQueueAttachMissing checks that Broker.Queue creates a missing queue
// with the default config.
func (s *suite) testQueueAttachMissing(t *testing.T) {
	b := s.newBroker(t)
	name := queueName(t, "")
	reserveQueue(t, b, name)
	q, err := b.Queue(t.Context(), name)
	if err != nil {
		t.Fatalf("Queue(%q) of a missing queue: %v", name, err)
	}
	cfg := q.Config()
	if cfg.Name != name || cfg.Partitions != 1 || cfg.RequiresSession || cfg.LockDuration != 30*time.Second ||
		cfg.MaxDeliveryCount != 10 || cfg.DuplicateWindow != 10*time.Minute {
		t.Errorf("Queue(%q).Config() = %+v, want the defaults", name, cfg)
	}
	if r, want := send(t, q, numbered("m", 0)), homeSeq(q, 1); r.Seq != want {
		t.Errorf("Send: Seq %#x, want %#x", r.Seq, want)
	}
	receiveN(t, q, 1, awaitMargin)
}

// testQueueMaxBytes fills a queue capped by MaxBytes: the send that does
// not fit fails with ErrQueueFull and stores nothing, scheduled messages
// are not capped, and once the queue is drained sends continue with the
// next sequence number.
func (s *suite) testQueueMaxBytes(t *testing.T) {
	const max, size = 64 << 10, 8 << 10
	_, q := s.open(t, transport.QueueConfig{MaxBytes: max})
	body := make([]byte, size)
	stored := 0
	var full error
	for range 2 * max / size {
		if _, err := q.Send(t.Context(), keyed(q, &transport.Message{Body: body})); err != nil {
			full = err
			break
		}
		stored++
	}
	if !errors.Is(full, transport.ErrQueueFull) {
		t.Fatalf("sending %d bytes in %d-byte messages to a queue with MaxBytes %d: %v after %d, want %v",
			2*max, size, max, full, stored, transport.ErrQueueFull)
	}
	if stored == 0 || stored > max/size {
		t.Errorf("%d messages of %d bytes stored under MaxBytes %d, want 1 to %d", stored, size, max, max/size)
	}
	eventually(t, awaitMargin, func() bool { return len(peekAll(t, q)) == stored },
		"Peek after ErrQueueFull: want the %d messages stored", stored)
	seq, err := q.Schedule(t.Context(), keyed(q, &transport.Message{Body: body}), time.Now().Add(time.Hour))
	if err != nil {
		t.Errorf("Schedule on a full queue = %v, want nil: scheduled messages are not capped", err)
	}
	receiveN(t, q, stored, awaitMargin)
	if r, want := send(t, q, &transport.Message{Body: body}), homeSeq(q, uint64(stored+1)); r.Seq != want {
		t.Errorf("Send after draining: Seq %#x, want %#x", r.Seq, want)
	}
	if err == nil {
		if err := q.Cancel(t.Context(), seq); err != nil {
			t.Errorf("Cancel(%#x): %v", seq, err)
		}
	}
}

// testQueueDeadLetter checks the dead-letter queue of a partitioned
// queue: its name, its single partition, and what it keeps of each
// dead-lettered message.
func (s *suite) testQueueDeadLetter(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	dlq := q.DeadLetterQueue()
	if want := q.Name() + transport.DeadLetterSuffix; dlq.Name() != want {
		t.Errorf("DeadLetterQueue().Name() = %q, want %q", dlq.Name(), want)
	}
	if cfg := dlq.Config(); cfg.Partitions != 1 || cfg.RequiresSession {
		t.Errorf("DeadLetterQueue().Config(): Partitions %d RequiresSession %v, want 1 false", cfg.Partitions, cfg.RequiresSession)
	}
	const n = 8
	seqs := make(map[uint64]bool)
	for i := range n {
		seqs[send(t, q, numbered("m", i)).Seq] = true
	}
	ctx := withTimeout(t, awaitMargin)
	for dead := 0; dead < n; {
		ds, err := q.Receive(ctx, n-dead)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range ds {
			if err := d.DeadLetter(t.Context(), "r", "d"); err != nil {
				t.Fatalf("DeadLetter(%s): %v", describe(d.Message), err)
			}
			dead++
		}
	}
	var got []uint64
	for i, a := range receiveN(t, dlq, n, awaitMargin) {
		got = append(got, a.Seq)
		if transport.Partition(a.Seq) != 0 {
			t.Errorf("dead letter #%d: seq %#x in partition %d, want 0", i, a.Seq, transport.Partition(a.Seq))
		}
		if !seqs[a.DeadLetterSeq] {
			t.Errorf("dead letter #%d: DeadLetterSeq %#x, want one of the original seqs", i, a.DeadLetterSeq)
		}
		delete(seqs, a.DeadLetterSeq)
		if a.DeadLetterSource != q.Name() {
			t.Errorf("dead letter #%d: DeadLetterSource %q, want %q", i, a.DeadLetterSource, q.Name())
		}
	}
	checkSeqs(t, "dead-letter queue seqs", got)
}
