package transporttest

import (
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testSchedule checks S3 and S4: both ways to schedule, and activation as
// a new active message that is never early.
func (s *suite) testSchedule(t *testing.T) {
	parallel(t, "NeverEarly", s.testScheduleNeverEarly)
	parallel(t, "Activation", s.testScheduleActivation)
	parallel(t, "SendWithScheduledAt", s.testScheduleViaSend)
	parallel(t, "PastTime", s.testSchedulePast)
	parallel(t, "ZeroTime", s.testScheduleZero)
}

// testScheduleNeverEarly schedules 20 messages due over 1.2 s that starts
// peekRoom ahead, in an order other than their due order, and checks that
// Peek then lists them all and that none is enqueued or received before
// it is due.
// peekRoom is time for the schedules and the Peek after them before the
// first is due: Peek is no snapshot, and a message that activates while
// it reads may be in neither of the lists it reads (on a loaded cluster,
// 20 schedules took more than the 300 ms this once was).
const peekRoom = 3 * time.Second

func (s *suite) testScheduleNeverEarly(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n = 20
	start := time.Now()
	due := make([]time.Time, n)
	scheduled := make(map[uint64]bool)
	for k := range n {
		i := k * 7 % n // 0, 7, 14, 1, 8, ...: not in due order
		due[i] = start.Add(peekRoom + time.Duration(i)*1200*time.Millisecond/(n-1))
		seq := schedule(t, q, numbered("m", i), due[i])
		if scheduled[seq] {
			t.Errorf("Schedule returned seq %#x twice", seq)
		}
		scheduled[seq] = true
	}
	if ms := peekAll(t, q); len(ms) != n {
		t.Errorf("Peek after scheduling: %d messages, want %d", len(ms), n)
	}
	var seqs []uint64
	seen := make(map[int]bool)
	for _, a := range receiveN(t, q, n, due[n-1].Sub(start)+s.f.ActivationSlack+awaitMargin) {
		i, ok := number(a.Message, "m")
		if !ok || i >= n || seen[i] {
			t.Errorf("received unexpected or repeated %s", describe(a.Message))
			continue
		}
		seen[i] = true
		checkNotEarly(t, a, due[i])
		checkEnqueuedAt(t, describe(a.Message), a.Message, due[i], a.At)
		if scheduled[a.Seq] {
			t.Errorf("%s: activated message kept its scheduled seq", describe(a.Message))
		}
		seqs = append(seqs, a.Seq)
	}
	checkHomeSeqs(t, q, "active seqs of activated messages", seqs)
	expectNone(t, q, quietMargin)
}

// testScheduleActivation follows one scheduled message from Schedule
// through Peek to its activation.
func (s *suite) testScheduleActivation(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	send(t, q, numbered("active", 0)) // seq 1

	// A time in another zone must mean the same instant.
	at := time.Now().Add(400 * time.Millisecond).In(time.FixedZone("UTC+5", 5*3600))
	want := &transport.Message{
		Body:          []byte("timeout"),
		ContentType:   "text/plain",
		MessageID:     "timeout-1",
		CorrelationID: "saga-1",
		Subject:       "Expired",
		Properties:    map[string]string{"token": "t-1"},
	}
	seq := schedule(t, q, keyed(q, want).Clone(), at)
	if seq == 1 || transport.LocalSeq(seq) == 0 {
		t.Errorf("Schedule: seq %#x, want a scheduled seq distinct from the active seq 1 and with a non-zero local part", seq)
	}

	ms := peekAll(t, q)
	if len(ms) != 2 {
		t.Fatalf("Peek before activation: %d messages, want 2 (one active, one scheduled)", len(ms))
	}
	if ms[0].Seq != homeSeq(q, 1) || ms[0].State != transport.Active {
		t.Errorf("Peek[0]: seq %#x state %v, want seq %#x %v", ms[0].Seq, ms[0].State, homeSeq(q, 1), transport.Active)
	}
	p := ms[1]
	if p.Seq != seq || p.State != transport.Scheduled {
		t.Errorf("Peek[1]: seq %#x state %v, want seq %#x %v", p.Seq, p.State, seq, transport.Scheduled)
	}
	if !p.ScheduledAt.Equal(at) {
		t.Errorf("Peek[1]: ScheduledAt %v, want %v", p.ScheduledAt, at)
	}
	checkSameContent(t, "peeked scheduled message", p, want)

	if a := receiveN(t, q, 1, awaitMargin)[0]; a.Seq != homeSeq(q, 1) {
		t.Errorf("first Receive: %s, want the active seq %#x (the scheduled one is not due yet)", describe(a.Message), homeSeq(q, 1))
	}
	a := receiveOne(t, q, time.Until(at)+s.f.ActivationSlack+awaitMargin)
	checkNotEarly(t, a, at)
	checkEnqueuedAt(t, "activated message", a.Message, at, a.At)
	checkSameContent(t, "activated message", a.Message, want)
	if wantSeq := homeSeq(q, 2); a.Seq != wantSeq {
		t.Errorf("activated message: Seq %#x, want %#x, the next active seq (scheduled seq was %#x)", a.Seq, wantSeq, seq)
	}
	if a.DeliveryCount != 1 {
		t.Errorf("activated message: DeliveryCount %d, want 1", a.DeliveryCount)
	}

	ms = peekAll(t, q)
	if len(ms) != 1 {
		t.Fatalf("Peek after activation: %d messages, want 1 (the locked activated message)", len(ms))
	}
	if ms[0].Seq != a.Seq || ms[0].State != transport.Active || !ms[0].ScheduledAt.Equal(at) {
		t.Errorf("Peek after activation: seq %#x state %v ScheduledAt %v, want seq %#x %v %v",
			ms[0].Seq, ms[0].State, ms[0].ScheduledAt, a.Seq, transport.Active, at)
	}
	if err := a.Complete(t.Context()); err != nil {
		t.Errorf("Complete: %v", err)
	}
}

// testScheduleViaSend schedules with Send and ScheduledAt set.
func (s *suite) testScheduleViaSend(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	at := time.Now().Add(300 * time.Millisecond)
	m := numbered("m", 0)
	m.ScheduledAt = at
	r := send(t, q, m)
	if !transport.IsScheduledSeq(r.Seq) {
		t.Errorf("Send with ScheduledAt: Seq %#x, want a scheduled seq (IsScheduledSeq)", r.Seq)
	}
	if !m.ScheduledAt.Equal(at) {
		t.Errorf("Send modified ScheduledAt of its argument")
	}
	ms := peekAll(t, q)
	if len(ms) != 1 || ms[0].Seq != r.Seq || ms[0].State != transport.Scheduled || !ms[0].ScheduledAt.Equal(at) {
		t.Errorf("Peek: %d messages, want one with seq %#x state %v ScheduledAt %v", len(ms), r.Seq, transport.Scheduled, at)
	}
	a := receiveN(t, q, 1, time.Until(at)+s.f.ActivationSlack+awaitMargin)[0]
	checkNotEarly(t, a, at)
	if want := homeSeq(q, 1); a.Seq != want {
		t.Errorf("activated message: Seq %#x, want %#x", a.Seq, want)
	}
	// The next immediate send continues the active sequence.
	if r, want := send(t, q, numbered("m", 1)), homeSeq(q, 2); r.Seq != want {
		t.Errorf("Send after activation: Seq %#x, want %#x", r.Seq, want)
	}
}

// testSchedulePast schedules for times already passed, both ways: the
// messages activate promptly, keeping ScheduledAt.
func (s *suite) testSchedulePast(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	before := time.Now()
	due := []time.Time{before.Add(-time.Hour), before.Add(-time.Second)}
	seq := schedule(t, q, numbered("m", 0), due[0])
	m := numbered("m", 1)
	m.ScheduledAt = due[1]
	if r := send(t, q, m); !transport.IsScheduledSeq(r.Seq) || r.Seq == seq {
		t.Errorf("Send with past ScheduledAt: Seq %#x, want a new scheduled seq", r.Seq)
	}
	got := receiveN(t, q, 2, s.f.ActivationSlack+time.Second)
	for _, a := range got {
		i, ok := number(a.Message, "m")
		if !ok || i > 1 {
			t.Errorf("received unexpected %s", describe(a.Message))
			continue
		}
		checkNotEarly(t, a, due[i])
		checkEnqueuedAt(t, describe(a.Message), a.Message, before, a.At)
	}
	checkHomeSeqs(t, q, "activated seqs", []uint64{got[0].Seq, got[1].Seq})
}

func (s *suite) testScheduleZero(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	seq, err := q.Schedule(t.Context(), keyed(q, numbered("m", 0)), time.Time{})
	if !errors.Is(err, transport.ErrInvalidMessage) {
		t.Errorf("Schedule(zero time) = %#x, %v; want %v", seq, err, transport.ErrInvalidMessage)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after refused Schedule: %d messages, want 0", len(ms))
	}
	if r, want := send(t, q, numbered("m", 1)), homeSeq(q, 1); r.Seq != want {
		t.Errorf("Send after refused Schedule: Seq %#x, want %#x", r.Seq, want)
	}
}
