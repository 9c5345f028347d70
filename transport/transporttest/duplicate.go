package transporttest

import (
	"errors"
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
	parallel(t, "WhateverBecameOfIt", s.testDuplicateFates)
}

// sendDup sends m and returns the result, failing the test on error but
// not on Duplicate.
func sendDup(t *testing.T, q *transport.Queue, m *transport.Message) transport.SendResult {
	t.Helper()
	r, err := q.Send(t.Context(), keyed(q, m))
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
	if !r2.Duplicate || r2.Seq != 0 {
		t.Errorf("second Send with MessageID %q = %+v, want Duplicate true, Seq 0", first.MessageID, r2)
	}
	other := send(t, q, &transport.Message{Body: []byte("other"), MessageID: "order-2"})
	noID := send(t, q, &transport.Message{Body: []byte("no id")})
	noID2 := send(t, q, &transport.Message{Body: []byte("no id")})
	if parts == 1 { // send fills in the active Seq
		for _, c := range []struct {
			name string
			seq  uint64
			want uint64
		}{{"first", r1.Seq, 1}, {"other MessageID", other.Seq, 2}, {"no MessageID", noID.Seq, 3}, {"no MessageID again", noID2.Seq, 4}} {
			if want := homeSeq(q, c.want); c.seq != want {
				t.Errorf("Send(%s): Seq %#x, want %#x (a duplicate takes no seq)", c.name, c.seq, want)
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
	if !r3.Duplicate {
		t.Errorf("Send with MessageID %q after the first was completed = %+v, want Duplicate true", first.MessageID, r3)
	}
	expectNone(t, q, quietMargin)
}

func (s *suite) testDuplicateSchedule(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Minute})
	at := time.Now().Add(300 * time.Millisecond)
	seq1 := schedule(t, q, &transport.Message{Body: []byte("first"), MessageID: "timeout-1"}, at)
	seq2, err := q.Schedule(t.Context(), keyed(q, &transport.Message{Body: []byte("second"), MessageID: "timeout-1"}), at.Add(time.Second))
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
		if !again.Duplicate && returned.Sub(start) < window {
			t.Fatalf("MessageID forgotten after %v, before the DuplicateWindow %v passed", returned.Sub(start), window)
		}
		return !again.Duplicate || !s.f.DedupForgetsOnTime && returned.Sub(start) > window+100*time.Millisecond
	}, "MessageID to be forgotten after the DuplicateWindow %v", window)
	if again.Duplicate {
		// The backend remembers IDs at least for the window, and forgets
		// them in its own time.
		return
	}
	got := receiveN(t, q, 2, awaitMargin)
	if string(got[0].Body) != "first" || string(got[1].Body) != "again" {
		t.Errorf("received %q, %q; want first, again", got[0].Body, got[1].Body)
	}
}

// testDuplicateFates checks that a MessageID is remembered within the
// window whatever became of its message: consumed, activated, cancelled,
// dead-lettered or still pending, for sends and schedules alike (one ID
// space per queue).
func (s *suite) testDuplicateFates(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Hour})
	ids := seedFates(t, q, s.f.CancelMargin)
	checkAllDuplicates(t, q, ids)
}

// seedFates leaves one message of each fate in q and returns their IDs:
// sent and completed, sent and dead-lettered, sent and pending, scheduled
// and activated (and completed), scheduled and cancelled, scheduled and
// pending.
func seedFates(t *testing.T, q *transport.Queue, margin time.Duration) []string {
	t.Helper()
	send(t, q, &transport.Message{Body: []byte("completed"), MessageID: "fate-completed"})
	send(t, q, &transport.Message{Body: []byte("dead"), MessageID: "fate-dead"})
	for _, d := range receiveDeliveries(t, q, 2) {
		var err error
		if string(d.Body) == "dead" {
			err = d.DeadLetter(t.Context(), "Test", "seeding a dead letter")
		} else {
			err = d.Complete(t.Context())
		}
		if err != nil {
			t.Fatalf("settling %s: %v", describe(d.Message), err)
		}
	}
	at := time.Now().Add(100 * time.Millisecond)
	fired := schedule(t, q, &transport.Message{Body: []byte("fired"), MessageID: "fate-fired"}, at)
	cancelled := schedule(t, q, &transport.Message{Body: []byte("cancelled"), MessageID: "fate-cancelled"}, time.Now().Add(time.Hour+margin))
	if err := q.Cancel(t.Context(), cancelled); err != nil {
		t.Fatalf("Cancel(%#x): %v", cancelled, err)
	}
	schedule(t, q, &transport.Message{Body: []byte("pending"), MessageID: "fate-pending"}, time.Now().Add(time.Hour))
	for _, d := range receiveDeliveries(t, q, 1) {
		if string(d.Body) != "fired" {
			t.Fatalf("received %s, want the scheduled message that fired", describe(d.Message))
		}
		if err := d.Complete(t.Context()); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	if err := q.Cancel(t.Context(), fired); !errors.Is(err, transport.ErrAlreadyActivated) {
		t.Errorf("Cancel(%#x) after it fired = %v, want %v", fired, err, transport.ErrAlreadyActivated)
	}
	send(t, q, &transport.Message{Body: []byte("waiting"), MessageID: "fate-waiting"})
	return []string{"fate-completed", "fate-dead", "fate-fired", "fate-cancelled", "fate-pending", "fate-waiting"}
}

// checkAllDuplicates sends and schedules each ID again: every one must be
// a duplicate, and nothing new may arrive.
func checkAllDuplicates(t *testing.T, q *transport.Queue, ids []string) {
	t.Helper()
	for _, id := range ids {
		if r := sendDup(t, q, &transport.Message{Body: []byte("again"), MessageID: id}); !r.Duplicate {
			t.Errorf("Send with MessageID %q again: %+v, want Duplicate", id, r)
		}
		m := &transport.Message{Body: []byte("again, scheduled"), MessageID: id, ScheduledAt: time.Now()}
		if r := sendDup(t, q, m); !r.Duplicate {
			t.Errorf("Schedule with MessageID %q again: %+v, want Duplicate", id, r)
		}
	}
	// The one message still waiting arrives; no copy of any other does.
	for _, d := range receiveDeliveries(t, q, 1) {
		if string(d.Body) != "waiting" {
			t.Errorf("received %s, want only the message that was waiting", describe(d.Message))
		}
		if err := d.Complete(t.Context()); err != nil {
			t.Errorf("Complete: %v", err)
		}
	}
	expectNone(t, q, quietMargin)
}

// receiveDeliveries receives exactly n deliveries, unsettled.
func receiveDeliveries(t *testing.T, q *transport.Queue, n int) []*transport.Delivery {
	t.Helper()
	ctx := withTimeout(t, awaitMargin)
	var out []*transport.Delivery
	for len(out) < n {
		ds, err := q.Receive(ctx, n-len(out))
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}
