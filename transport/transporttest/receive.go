package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testReceive checks S7: peek-lock receive and its settlements, lock
// expiry and renewal, dead-lettering, competing consumers and retrieval
// order.
func (s *suite) testReceive(t *testing.T) {
	parallel(t, "Complete", s.testReceiveComplete)
	parallel(t, "Batch", s.testReceiveBatch)
	parallel(t, "Abandon", s.testReceiveAbandon)
	parallel(t, "LockExpiry", s.testReceiveLockExpiry)
	parallel(t, "RenewLock", s.testReceiveRenewLock)
	parallel(t, "DoubleSettle", s.testReceiveDoubleSettle)
	parallel(t, "DeadLetter", s.testReceiveDeadLetter)
	parallel(t, "MaxDeliveryCount", s.testReceiveMaxDelivery)
	parallel(t, "MaxDeliveryCountLockExpiry", s.testReceiveMaxDeliveryLockExpiry)
	parallel(t, "Competing", s.testReceiveCompeting)
	parallel(t, "CompetingOrder", s.testReceiveCompetingOrder)
	parallel(t, "CompetingOrderPartitioned", s.testReceiveCompetingOrderPartitioned)
	parallel(t, "Interrupted", s.testReceiveInterrupted)
	parallel(t, "Order", s.testReceiveOrder)
	parallel(t, "ContextEnded", s.testReceiveContextEnded)
}

func (s *suite) testReceiveComplete(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	send(t, q, numbered("m", 0))
	a := receiveOne(t, q, awaitMargin)
	if err := a.Complete(t.Context()); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after Complete: seqs %s, want none", seqsOf(ms))
	}
	expectNone(t, q, quietMargin)
}

func (s *suite) testReceiveBatch(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	for i := range 5 {
		send(t, q, numbered("m", i))
	}
	ds, err := q.Receive(withTimeout(t, awaitMargin), 3)
	if err != nil {
		t.Fatalf("Receive(max 3): %v", err)
	}
	if len(ds) < 1 || len(ds) > 3 {
		t.Errorf("Receive(max 3) returned %d deliveries, want 1 to 3", len(ds))
	}
	for i, d := range ds {
		if want := homeSeq(q, uint64(i+1)); d.Seq != want {
			t.Errorf("Receive(max 3)[%d]: seq %#x, want %#x", i, d.Seq, want)
		}
		if err := d.Complete(t.Context()); err != nil {
			t.Errorf("Complete: %v", err)
		}
	}
	receiveN(t, q, 5-len(ds), awaitMargin)
	for _, max := range []int{0, -1} {
		if _, err := q.Receive(t.Context(), max); !errors.Is(err, transport.ErrInvalidOption) {
			t.Errorf("Receive(max %d) = %v, want %v", max, err, transport.ErrInvalidOption)
		}
	}
}

func (s *suite) testReceiveAbandon(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	want := &transport.Message{Body: []byte("again"), Subject: "s", Properties: map[string]string{"k": "v"}}
	seq := send(t, q, keyed(q, want).Clone()).Seq
	a := receiveOne(t, q, awaitMargin)
	if a.DeliveryCount != 1 {
		t.Errorf("first delivery: DeliveryCount %d, want 1", a.DeliveryCount)
	}
	if err := a.Abandon(t.Context()); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	b := receiveOne(t, q, awaitMargin)
	if b.Seq != seq || b.DeliveryCount != 2 {
		t.Errorf("after Abandon: seq %#x DeliveryCount %d, want seq %#x DeliveryCount 2", b.Seq, b.DeliveryCount, seq)
	}
	checkSameContent(t, "redelivered message", b.Message, want)
	if !b.EnqueuedAt.Equal(a.EnqueuedAt) {
		t.Errorf("redelivered message: EnqueuedAt %v, want %v as first delivered", b.EnqueuedAt, a.EnqueuedAt)
	}
	if err := b.Complete(t.Context()); err != nil {
		t.Errorf("Complete: %v", err)
	}
	expectNone(t, q, quietMargin)
}

// testReceiveLockExpiry leaves a message unsettled: once its lock expires
// it is redelivered, never before, and the late Complete of the first
// receiver fails with ErrLockLost.
func (s *suite) testReceiveLockExpiry(t *testing.T) {
	const lock = time.Second
	_, q := s.open(t, transport.QueueConfig{LockDuration: lock})
	seq := send(t, q, numbered("m", 0)).Seq
	before := time.Now()
	a := receiveOne(t, q, awaitMargin)
	until := a.LockedUntil()
	if until.Before(before.Add(lock-clockSkew)) || until.After(a.At.Add(lock+clockSkew)) {
		t.Errorf("LockedUntil %v, want about LockDuration %v after Receive (%v)", until, lock, a.At)
	}
	b := receiveOne(t, q, lock+awaitMargin)
	if b.Seq != seq || b.DeliveryCount != 2 {
		t.Errorf("after lock expiry: seq %#x DeliveryCount %d, want seq %#x DeliveryCount 2", b.Seq, b.DeliveryCount, seq)
	}
	if b.At.Before(until) {
		t.Errorf("redelivered at %v, %v before the first lock's LockedUntil %v", b.At, until.Sub(b.At), until)
	}
	if err := a.Complete(t.Context()); !errors.Is(err, transport.ErrLockLost) {
		t.Errorf("Complete after lock expiry and redelivery = %v, want %v", err, transport.ErrLockLost)
	}
	if err := b.Complete(t.Context()); err != nil {
		t.Errorf("Complete of the redelivery: %v", err)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after Complete: seqs %s, want none", seqsOf(ms))
	}
}

// testReceiveRenewLock renews a lock for more than twice LockDuration
// while a competing receiver waits: it gets nothing, and the holder can
// complete afterwards.
func (s *suite) testReceiveRenewLock(t *testing.T) {
	const lock = time.Second
	_, q := s.open(t, transport.QueueConfig{LockDuration: lock})
	send(t, q, numbered("m", 0))
	a := receiveOne(t, q, awaitMargin)
	first := a.LockedUntil()

	hold := 2*lock + lock/2
	competitor := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), hold)
		defer cancel()
		ds, err := q.Receive(ctx, 1)
		for _, d := range ds {
			err = fmt.Errorf("got %s while its lock was being renewed", describe(d.Message))
		}
		competitor <- err
	}()

	tick := time.NewTicker(lock / 4)
	defer tick.Stop()
	end := time.Now().Add(hold)
	for time.Now().Before(end) {
		<-tick.C
		if err := a.RenewLock(t.Context()); err != nil {
			t.Fatalf("RenewLock: %v", err)
		}
	}
	if last := a.LockedUntil(); !last.After(first) {
		t.Errorf("LockedUntil after renewals %v, want later than %v", last, first)
	}
	if err := <-competitor; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("competing Receive: %v, want %v", err, context.DeadlineExceeded)
	}
	if err := a.Complete(t.Context()); err != nil {
		t.Errorf("Complete after renewals: %v", err)
	}
	expectNone(t, q, quietMargin)
}

func (s *suite) testReceiveDoubleSettle(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	send(t, q, numbered("m", 0))
	send(t, q, numbered("m", 1))
	ds := make([]arrival, 2)
	for i := range ds {
		ds[i] = receiveOne(t, q, awaitMargin)
	}
	if err := ds[0].Complete(t.Context()); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := ds[1].DeadLetter(t.Context(), "r", "d"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	for i, a := range ds {
		for name, op := range map[string]func() error{
			"Complete":   func() error { return a.Complete(t.Context()) },
			"Abandon":    func() error { return a.Abandon(t.Context()) },
			"DeadLetter": func() error { return a.DeadLetter(t.Context(), "again", "") },
			"RenewLock":  func() error { return a.RenewLock(t.Context()) },
		} {
			if err := op(); !errors.Is(err, transport.ErrAlreadySettled) {
				t.Errorf("%s of settled delivery #%d = %v, want %v", name, i, err, transport.ErrAlreadySettled)
			}
		}
	}
	expectNone(t, q, quietMargin)
	if ms := peekAll(t, q.DeadLetterQueue()); len(ms) != 1 {
		t.Errorf("dead-letter queue: %d messages, want 1", len(ms))
	}
}

func (s *suite) testReceiveDeadLetter(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	send(t, q, numbered("m", 0)) // seq 1, completed here
	receiveN(t, q, 1, awaitMargin)
	want := &transport.Message{
		Body:          []byte("poison"),
		ContentType:   "application/json",
		MessageID:     "id-1",
		CorrelationID: "c-1",
		SessionID:     "s-1",
		ReplyTo:       "r",
		Subject:       "Bad",
		Properties:    map[string]string{"k": "v"},
	}
	seq := send(t, q, keyed(q, want).Clone()).Seq
	a := receiveOne(t, q, awaitMargin)
	if a.Seq != seq {
		t.Fatalf("received seq %#x, want %#x", a.Seq, seq)
	}
	const reason, desc = "ValidationFailed", "field \"amount\": must be positive"
	if err := a.DeadLetter(t.Context(), reason, desc); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	after := time.Now()
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek of the queue after DeadLetter: seqs %s, want none", seqsOf(ms))
	}

	dlq := q.DeadLetterQueue()
	check := func(what string, m *transport.Message) {
		t.Helper()
		checkSameContent(t, what, m, want)
		if m.DeadLetterReason != reason || m.DeadLetterDescription != desc {
			t.Errorf("%s: reason %q description %q, want %q %q", what, m.DeadLetterReason, m.DeadLetterDescription, reason, desc)
		}
		if m.DeadLetterSource != q.Name() || m.DeadLetterSeq != seq {
			t.Errorf("%s: source %q seq %#x, want %q %#x", what, m.DeadLetterSource, m.DeadLetterSeq, q.Name(), seq)
		}
		if m.Seq != 1 {
			t.Errorf("%s: Seq %#x, want 1, the dead-letter queue's own first seq", what, m.Seq)
		}
		checkEnqueuedAt(t, what, m, a.EnqueuedAt, after)
	}
	ms := peekAll(t, dlq)
	if len(ms) != 1 {
		t.Fatalf("Peek of the dead-letter queue: %d messages, want 1", len(ms))
	}
	if ms[0].State != transport.Active {
		t.Errorf("peeked dead letter: State %v, want %v", ms[0].State, transport.Active)
	}
	check("peeked dead letter", ms[0])
	d := receiveN(t, dlq, 1, awaitMargin)[0]
	check("received dead letter", d.Message)
	if ms := peekAll(t, dlq); len(ms) != 0 {
		t.Errorf("Peek of the dead-letter queue after Complete: seqs %s, want none", seqsOf(ms))
	}

	if _, err := dlq.Send(t.Context(), numbered("m", 9)); !errors.Is(err, transport.ErrUnsupported) {
		t.Errorf("Send to the dead-letter queue = %v, want %v", err, transport.ErrUnsupported)
	}
	if _, err := dlq.Schedule(t.Context(), numbered("m", 9), time.Now().Add(time.Hour)); !errors.Is(err, transport.ErrUnsupported) {
		t.Errorf("Schedule on the dead-letter queue = %v, want %v", err, transport.ErrUnsupported)
	}
	if !errors.Is(transport.ErrUnsupported, errors.ErrUnsupported) {
		t.Errorf("transport.ErrUnsupported does not match errors.ErrUnsupported")
	}
}

// awaitDeadLetter waits until q's dead-letter queue holds n messages and
// returns them.
func awaitDeadLetter(t *testing.T, q *transport.Queue, n int, timeout time.Duration) []*transport.Message {
	t.Helper()
	var ms []*transport.Message
	eventually(t, timeout, func() bool {
		var err error
		ms, err = q.DeadLetterQueue().Peek(t.Context(), 0, 100)
		if err != nil {
			t.Fatalf("Peek of the dead-letter queue: %v", err)
		}
		return len(ms) >= n
	}, "dead-letter queue of %s to hold %d messages", q.Name(), n)
	if len(ms) != n {
		t.Errorf("dead-letter queue: seqs %s, want %d messages", seqsOf(ms), n)
	}
	return ms
}

// testReceiveMaxDelivery abandons a message MaxDeliveryCount times: the
// next delivery moves it to the dead-letter queue instead.
func (s *suite) testReceiveMaxDelivery(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{MaxDeliveryCount: 2})
	want := &transport.Message{Body: []byte("again and again"), Properties: map[string]string{"k": "v"}}
	seq := send(t, q, keyed(q, want).Clone()).Seq
	for i := 1; i <= 2; i++ {
		a := receiveOne(t, q, awaitMargin)
		if a.Seq != seq || a.DeliveryCount != i {
			t.Fatalf("delivery %d: seq %#x DeliveryCount %d, want %#x %d", i, a.Seq, a.DeliveryCount, seq, i)
		}
		if err := a.Abandon(t.Context()); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
	}
	expectNone(t, q, quietMargin)
	ms := awaitDeadLetter(t, q, 1, awaitMargin)
	m := ms[0]
	checkSameContent(t, "dead letter", m, want)
	if m.DeadLetterReason != transport.ReasonMaxDeliveryCountExceeded {
		t.Errorf("dead letter: reason %q, want %q", m.DeadLetterReason, transport.ReasonMaxDeliveryCountExceeded)
	}
	if m.DeadLetterSource != q.Name() || m.DeadLetterSeq != seq {
		t.Errorf("dead letter: source %q seq %#x, want %q %#x", m.DeadLetterSource, m.DeadLetterSeq, q.Name(), seq)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek of the queue: seqs %s, want none", seqsOf(ms))
	}
}

// testReceiveMaxDeliveryLockExpiry lets the lock of the only allowed
// delivery expire: the message is dead-lettered, not redelivered.
func (s *suite) testReceiveMaxDeliveryLockExpiry(t *testing.T) {
	const lock = time.Second
	_, q := s.open(t, transport.QueueConfig{MaxDeliveryCount: 1, LockDuration: lock})
	seq := send(t, q, numbered("m", 0)).Seq
	a := receiveOne(t, q, awaitMargin)
	// Keep receiving past the lock and any redelivery grace the backend
	// adds (JetStream: a quarter of the lock, at least 0.5 s): the message
	// must come to no receiver, and a backend that dead-letters on the
	// next delivery attempt gets one.
	expectNone(t, q, 2*lock+quietMargin)
	ms := awaitDeadLetter(t, q, 1, awaitMargin)
	if ms[0].DeadLetterReason != transport.ReasonMaxDeliveryCountExceeded || ms[0].DeadLetterSeq != seq {
		t.Errorf("dead letter: reason %q seq %#x, want %q %#x", ms[0].DeadLetterReason, ms[0].DeadLetterSeq,
			transport.ReasonMaxDeliveryCountExceeded, seq)
	}
	if err := a.Complete(t.Context()); !errors.Is(err, transport.ErrLockLost) {
		t.Errorf("Complete after the message was dead-lettered = %v, want %v", err, transport.ErrLockLost)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek of the queue: seqs %s, want none", seqsOf(ms))
	}
}

// testReceiveCompeting has several receivers share 500 messages: each
// message is received by exactly one of them, exactly once.
func (s *suite) testReceiveCompeting(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n, receivers = 500, 4
	var wg sync.WaitGroup
	for g := range 5 {
		wg.Go(func() {
			for i := g; i < n; i += 5 {
				if _, err := q.Send(t.Context(), keyed(q, numbered("m", i))); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		count = make([]int, n)
		by    = make([]int, receivers)
		total atomic.Int64
	)
	for r := range receivers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := q.Receive(ctx, 10)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("receiver %d: Receive: %v", r, err)
					}
					return
				}
				for _, d := range ds {
					if err := d.Complete(t.Context()); err != nil {
						t.Errorf("receiver %d: Complete(%s): %v", r, describe(d.Message), err)
					}
					i, ok := number(d.Message, "m")
					if !ok || i >= n {
						t.Errorf("receiver %d: unexpected %s", r, describe(d.Message))
						continue
					}
					if d.DeliveryCount != 1 {
						t.Errorf("receiver %d: %s DeliveryCount %d, want 1", r, describe(d.Message), d.DeliveryCount)
					}
					mu.Lock()
					count[i]++
					by[r]++
					mu.Unlock()
					if total.Add(1) == n {
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
	t.Logf("messages per receiver: %v", by)
	expectNone(t, q, quietMargin)
}

// testReceiveOrder checks that a single receiver retrieves messages in
// sequence order, across batches.
func (s *suite) testReceiveOrder(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n = 50
	for i := range n {
		send(t, q, numbered("m", i))
	}
	ctx := withTimeout(t, awaitMargin)
	var last uint64
	for got := 0; got < n; {
		ds, err := q.Receive(ctx, 7)
		if err != nil {
			t.Fatalf("Receive after %d messages: %v", got, err)
		}
		for _, d := range ds {
			if want := homeSeq(q, transport.LocalSeq(last)+1); d.Seq != want {
				t.Errorf("received seq %#x after %#x, want %#x", d.Seq, last, want)
			}
			last = d.Seq
			got++
			if err := d.Complete(t.Context()); err != nil {
				t.Errorf("Complete: %v", err)
			}
		}
	}
}

func (s *suite) testReceiveContextEnded(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := q.Receive(ctx, 1)
	expectCtxErr(t, "Receive with a cancelled context", err, context.Canceled)

	const wait = 200 * time.Millisecond
	start := time.Now()
	_, err = q.Receive(withTimeout(t, wait), 1)
	expectCtxErr(t, "Receive on an empty queue", err, context.DeadlineExceeded)
	if took := time.Since(start); took < wait {
		t.Errorf("Receive on an empty queue returned after %v, before its context ended (%v)", took, wait)
	}

	// A cancellation (not a deadline) ends a waiting Receive promptly.
	start = time.Now()
	_, err = q.Receive(cancelAfter(t, wait), 1)
	expectCtxErr(t, "Receive cancelled while waiting", err, context.Canceled)
	checkPrompt(t, "Receive", start, wait)

	// A message sent after the context ended is still there.
	send(t, q, numbered("m", 0))
	receiveN(t, q, 1, awaitMargin)
}
