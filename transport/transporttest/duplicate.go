package transporttest

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testDuplicate checks S9: duplicate detection by MessageID within the
// queue's DuplicateWindow.
func (s *suite) testDuplicate(t *testing.T) {
	parallel(t, "Send", func(t *testing.T) { s.testDuplicateSend(t, 1) })
	parallel(t, "SendPartitioned", func(t *testing.T) { s.testDuplicateSend(t, partitions) })
	parallel(t, "Schedule", s.testDuplicateSchedule)
	parallel(t, "WindowExpires", s.testDuplicateWindow)
}

// sendDup sends m and returns the result, failing the test on error but
// not on Duplicate.
func sendDup(t *testing.T, q *transport.Queue, m *transport.Message) transport.SendResult {
	t.Helper()
	r, err := q.Send(t.Context(), m)
	if err != nil {
		t.Fatalf("Send(%s): %v", describe(m), err)
	}
	return r
}

func (s *suite) testDuplicateSend(t *testing.T, parts int) {
	_, q := s.open(t, transport.QueueConfig{Partitions: parts, DuplicateWindow: time.Minute})
	first := &transport.Message{Body: []byte("first"), MessageID: "order-1"}
	r1 := send(t, q, first)
	r2 := sendDup(t, q, &transport.Message{Body: []byte("second"), MessageID: "order-1"})
	if !r2.Duplicate || r2.Seq != r1.Seq {
		t.Errorf("second Send with MessageID %q = %+v, want Duplicate true and the first Seq %#x", first.MessageID, r2, r1.Seq)
	}
	other := send(t, q, &transport.Message{Body: []byte("other"), MessageID: "order-2"})
	noID := send(t, q, &transport.Message{Body: []byte("no id")})
	noID2 := send(t, q, &transport.Message{Body: []byte("no id")})
	if parts == 1 {
		for _, c := range []struct {
			name string
			seq  uint64
			want uint64
		}{{"first", r1.Seq, 1}, {"other MessageID", other.Seq, 2}, {"no MessageID", noID.Seq, 3}, {"no MessageID again", noID2.Seq, 4}} {
			if c.seq != c.want {
				t.Errorf("Send(%s): Seq %#x, want %d (a duplicate takes no seq)", c.name, c.seq, c.want)
			}
		}
	}
	got := receiveN(t, q, 4, awaitMargin)
	bodies := make(map[string]int)
	for _, a := range got {
		bodies[string(a.Body)]++
	}
	if bodies["first"] != 1 || bodies["second"] != 0 || bodies["other"] != 1 || bodies["no id"] != 2 {
		t.Errorf("received bodies %v, want first, other and no id twice, never second", bodies)
	}
	expectNone(t, q, quietMargin)

	// Completed, but still within the window: still a duplicate.
	r3 := sendDup(t, q, &transport.Message{Body: []byte("third"), MessageID: "order-1"})
	if !r3.Duplicate || r3.Seq != r1.Seq {
		t.Errorf("Send with MessageID %q after the first was completed = %+v, want Duplicate true, Seq %#x", first.MessageID, r3, r1.Seq)
	}
	expectNone(t, q, quietMargin)
}

func (s *suite) testDuplicateSchedule(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Minute})
	at := time.Now().Add(300 * time.Millisecond)
	seq1 := schedule(t, q, &transport.Message{Body: []byte("first"), MessageID: "timeout-1"}, at)
	seq2, err := q.Schedule(t.Context(), &transport.Message{Body: []byte("second"), MessageID: "timeout-1"}, at.Add(time.Second))
	if err != nil {
		t.Fatalf("second Schedule: %v", err)
	}
	if seq2 != seq1 {
		t.Errorf("second Schedule with the same MessageID: seq %#x, want the first's %#x", seq2, seq1)
	}
	m := &transport.Message{Body: []byte("third"), MessageID: "timeout-1", ScheduledAt: at}
	if r := sendDup(t, q, m); !r.Duplicate || r.Seq != seq1 {
		t.Errorf("Send with ScheduledAt and the same MessageID = %+v, want Duplicate true, Seq %#x", r, seq1)
	}
	if ms := peekAll(t, q); len(ms) != 1 || ms[0].Seq != seq1 {
		t.Errorf("Peek: seqs %s, want only %#x", seqsOf(ms), seq1)
	}
	a := receiveN(t, q, 1, time.Until(at)+s.f.ActivationSlack+awaitMargin)[0]
	if string(a.Body) != "first" || a.MessageID != "timeout-1" {
		t.Errorf("received body %q MessageID %q, want %q %q", a.Body, a.MessageID, "first", "timeout-1")
	}
	checkNotEarly(t, a, at)
	expectNone(t, q, time.Until(at.Add(time.Second+s.f.ActivationSlack+quietMargin)))
}

// testDuplicateWindow checks that a MessageID is remembered for the
// whole window, and forgotten after it.
func (s *suite) testDuplicateWindow(t *testing.T) {
	const window = time.Second
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: window})
	start := time.Now()
	send(t, q, &transport.Message{Body: []byte("first"), MessageID: "m"})
	var (
		again    transport.SendResult
		returned time.Time
	)
	eventually(t, window+awaitMargin, func() bool {
		again = sendDup(t, q, &transport.Message{Body: []byte("again"), MessageID: "m"})
		returned = time.Now()
		if again.Duplicate && again.Seq != 1 {
			t.Fatalf("duplicate Send: Seq %#x, want 1", again.Seq)
		}
		return !again.Duplicate
	}, "MessageID to be forgotten after the DuplicateWindow %v", window)
	if took := returned.Sub(start); took < window {
		t.Errorf("MessageID forgotten after %v, before the DuplicateWindow %v passed", took, window)
	}
	if again.Seq != 2 {
		t.Errorf("Send after the window: Seq %#x, want 2", again.Seq)
	}
	got := receiveN(t, q, 2, awaitMargin)
	if string(got[0].Body) != "first" || string(got[1].Body) != "again" {
		t.Errorf("received %q, %q; want first, again", got[0].Body, got[1].Body)
	}
}
