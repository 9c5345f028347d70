package transporttest

import (
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testSend checks S1: sequence numbers and timestamps of sent messages,
// and that every property a sender sets comes back unchanged.
func (s *suite) testSend(t *testing.T) {
	parallel(t, "SeqIncreases", s.testSendSeqIncreases)
	parallel(t, "ConcurrentSeq", s.testSendConcurrentSeq)
	parallel(t, "RoundTrip", s.testSendRoundTrip)
	parallel(t, "EmptyMessage", s.testSendEmpty)
}

func (s *suite) testSendSeqIncreases(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	for i := range 5 {
		before := time.Now()
		r := send(t, q, numbered("m", i))
		after := time.Now()
		if want := homeSeq(q, uint64(i+1)); r.Seq != want {
			t.Errorf("Send #%d: Seq %#x, want %#x", i+1, r.Seq, want)
		}
		ms, err := q.Peek(t.Context(), r.Seq, 1)
		if err != nil {
			t.Fatalf("Peek(from %d, max 1): %v", r.Seq, err)
		}
		if len(ms) != 1 || ms[0].Seq != r.Seq {
			t.Fatalf("Peek(from %d, max 1) = %d messages, want the one just sent", r.Seq, len(ms))
		}
		checkEnqueuedAt(t, describe(ms[0]), ms[0], before, after)
	}
	for i, a := range receiveN(t, q, 5, awaitMargin) {
		if want := homeSeq(q, uint64(i+1)); a.Seq != want {
			t.Errorf("received #%d: Seq %#x, want %#x", i+1, a.Seq, want)
		}
		if n, _ := number(a.Message, "m"); n != i {
			t.Errorf("received #%d: body %q, want m-%d", i+1, a.Body, i)
		}
	}
}

// testSendConcurrentSeq sends from several goroutines at once: the
// messages are numbered exactly 1..n, and Send reports no number.
func (s *suite) testSendConcurrentSeq(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const senders, each = 8, 25
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				r, err := q.Send(t.Context(), keyed(q, numbered("m", g*each+i)))
				if err != nil {
					t.Errorf("Send: %v", err)
					return
				}
				if r.Seq != 0 || r.Duplicate {
					t.Errorf("Send: %+v, want Seq 0 (no number for an immediate send), Duplicate false", r)
				}
			}
		})
	}
	wg.Wait()
	var got []uint64
	for _, a := range receiveN(t, q, senders*each, awaitMargin) {
		got = append(got, a.Seq)
	}
	checkHomeSeqs(t, q, "received Seq", got)
}

func (s *suite) testSendRoundTrip(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	want := &transport.Message{
		Body:          []byte("{\"order\":42,\"bytes\":\"\x00\x01\xfe\xff\"}\r\n"),
		ContentType:   "application/json; charset=utf-8",
		MessageID:     "order-42",
		CorrelationID: "req-7",
		SessionID:     "customer-9",
		ReplyTo:       "replies",
		Subject:       "OrderPlaced",
		Properties: map[string]string{
			"tenant":    "acme",
			"Retry-At":  "2030-01-02T03:04:05.123456789Z",
			"empty":     "",
			"unicode_1": "héllo wörld ✓ 日本",
			"spaces":    "  leading and trailing  ",
		},
	}
	sent := want.Clone()
	before := time.Now()
	r := send(t, q, sent)
	after := time.Now()
	checkSameContent(t, "message after Send", sent, want)
	if sent.Seq != 0 || !sent.EnqueuedAt.IsZero() || sent.State != 0 {
		t.Errorf("Send modified its argument: Seq %#x EnqueuedAt %v State %v, want zero values",
			sent.Seq, sent.EnqueuedAt, sent.State)
	}
	if want := seqFor(q, sent, 1); r.Seq != want {
		t.Errorf("Send: Seq %#x, want %#x", r.Seq, want)
	}
	// The queue keeps its own copy: changing the sent message afterwards,
	// or a peeked one, must not change what is stored.
	sent.Body[0] = 'X'
	sent.Properties["tenant"] = "mallory"
	if ms := peekAll(t, q); len(ms) == 1 {
		ms[0].Body[0] = 'Y'
		ms[0].Properties["tenant"] = "eve"
	}

	ms := peekAll(t, q)
	if len(ms) != 1 {
		t.Fatalf("Peek: %d messages, want 1", len(ms))
	}
	p := ms[0]
	checkSameContent(t, "peeked", p, want)
	if p.Seq != r.Seq {
		t.Errorf("peeked: Seq %#x, want %#x", p.Seq, r.Seq)
	}
	if p.State != transport.Active {
		t.Errorf("peeked: State %v, want %v", p.State, transport.Active)
	}
	if !p.ScheduledAt.IsZero() {
		t.Errorf("peeked: ScheduledAt %v, want zero for a message sent without one", p.ScheduledAt)
	}
	checkEnqueuedAt(t, "peeked", p, before, after)

	a := receiveN(t, q, 1, awaitMargin)[0]
	checkSameContent(t, "received", a.Message, want)
	if a.Seq != r.Seq {
		t.Errorf("received: Seq %#x, want %#x", a.Seq, r.Seq)
	}
	if !a.EnqueuedAt.Equal(p.EnqueuedAt) {
		t.Errorf("received: EnqueuedAt %v, want %v as peeked", a.EnqueuedAt, p.EnqueuedAt)
	}
	if a.DeliveryCount != 1 {
		t.Errorf("received: DeliveryCount %d, want 1", a.DeliveryCount)
	}
	if a.DeadLetterReason != "" || a.DeadLetterSource != "" || a.DeadLetterSeq != 0 {
		t.Errorf("received: dead-letter fields %q %q %d set on a live message",
			a.DeadLetterReason, a.DeadLetterSource, a.DeadLetterSeq)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after Complete: %d messages, want 0", len(ms))
	}
}

func (s *suite) testSendEmpty(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	empty := &transport.Message{}
	r := send(t, q, empty)
	if want := homeSeq(q, 1); r.Seq != want {
		t.Errorf("Send(empty message): Seq %#x, want %#x", r.Seq, want)
	}
	a := receiveN(t, q, 1, awaitMargin)[0]
	checkSameContent(t, "received empty message", a.Message, empty)
}
