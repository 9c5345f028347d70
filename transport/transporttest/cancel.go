package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testCancel checks S5: Cancel's outcome is definite and true.
func (s *suite) testCancel(t *testing.T) {
	parallel(t, "Pending", s.testCancelPending)
	parallel(t, "Twice", s.testCancelTwice)
	parallel(t, "AfterActivation", s.testCancelAfterActivation)
	parallel(t, "Unknown", s.testCancelUnknown)
	parallel(t, "RaceActivation", s.testCancelRace)
	parallel(t, "Many", s.testCancelMany)
}

// activatedOutcome reports whether err is the outcome of Cancel that
// means "no longer pending, delivered instead".
func activatedOutcome(err error) bool {
	return errors.Is(err, transport.ErrAlreadyActivated)
}

func (s *suite) testCancelPending(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	at := time.Now().Add(s.f.CancelMargin + 500*time.Millisecond)
	cancelled := schedule(t, q, numbered("cancelled", 0), at)
	kept := schedule(t, q, numbered("kept", 0), at)
	if err := q.Cancel(t.Context(), cancelled); err != nil {
		t.Fatalf("Cancel(pending seq %#x) = %v, want nil", cancelled, err)
	}
	ms := peekAll(t, q)
	if len(ms) != 1 || ms[0].Seq != kept {
		t.Errorf("Peek after Cancel: %d messages, want only the other scheduled one (seq %#x)", len(ms), kept)
	}
	a := receiveN(t, q, 1, time.Until(at)+s.f.ActivationSlack+awaitMargin)[0]
	if _, ok := number(a.Message, "kept"); !ok {
		t.Errorf("received %s, want the message that was not cancelled", describe(a.Message))
	}
	// Wait past the time the cancelled one would have activated.
	expectNone(t, q, time.Until(at)+s.f.ActivationSlack+quietMargin)
}

func (s *suite) testCancelTwice(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	seq := schedule(t, q, numbered("m", 0), time.Now().Add(time.Hour))
	if err := q.Cancel(t.Context(), seq); err != nil {
		t.Fatalf("first Cancel = %v, want nil", err)
	}
	if err := q.Cancel(t.Context(), seq); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("second Cancel = %v, want %v", err, transport.ErrNotFound)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after Cancel: %d messages, want 0", len(ms))
	}
}

func (s *suite) testCancelAfterActivation(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	at := time.Now().Add(100 * time.Millisecond)
	seq := schedule(t, q, numbered("m", 0), at)
	// Receiving it proves it has activated; leave it locked for now.
	a := receiveOne(t, q, time.Until(at)+s.f.ActivationSlack+awaitMargin)
	if err := q.Cancel(t.Context(), seq); !errors.Is(err, transport.ErrAlreadyActivated) {
		t.Errorf("Cancel after activation = %v, want %v", err, transport.ErrAlreadyActivated)
	}
	if err := a.Complete(t.Context()); err != nil {
		t.Errorf("Complete after a refused Cancel: %v", err)
	}
	// Once completed too, it activated: the answer does not change.
	if err := q.Cancel(t.Context(), seq); !errors.Is(err, transport.ErrAlreadyActivated) {
		t.Errorf("Cancel after activation and Complete = %v, want %v", err, transport.ErrAlreadyActivated)
	}
}

func (s *suite) testCancelUnknown(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	active := send(t, q, numbered("active", 0)).Seq
	pending := schedule(t, q, numbered("pending", 0), time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name string
		seq  uint64
	}{
		{"zero", 0},
		{"scheduled bit, local part 0", transport.ScheduledBit},
		{"active seq", active},
		{"unused scheduled seq", transport.ScheduledBit | 99999},
		{"pending seq's active twin", transport.LocalSeq(pending)},
		{"scheduled seq of a partition the queue lacks", 7<<transport.PartitionShift | pending},
		{"all bits", ^uint64(0)},
	} {
		if err := q.Cancel(t.Context(), tc.seq); !errors.Is(err, transport.ErrNotFound) {
			t.Errorf("Cancel(%s %#x) = %v, want %v", tc.name, tc.seq, err, transport.ErrNotFound)
		}
	}
	ms := peekAll(t, q)
	if len(ms) != 2 || ms[0].Seq != active || ms[1].Seq != pending {
		t.Errorf("Peek after refused Cancels: %d messages, want the active and the pending one untouched", len(ms))
	}
}

// testCancelRace schedules hundreds of messages for one instant and
// cancels each of them at a moment spread around that instant, so that
// cancellations race activation. Every Cancel that returned nil must
// mean the message never arrives; every other outcome must mean it
// arrives exactly once.
func (s *suite) testCancelRace(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n = 300
	at := time.Now().Add(1500 * time.Millisecond)
	seqs := make([]uint64, n)
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				seq, err := q.Schedule(t.Context(), keyed(q, numbered("m", i)), at)
				if err != nil {
					t.Errorf("Schedule #%d: %v", i, err)
					return
				}
				seqs[i] = seq
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if late := time.Since(at); late > -200*time.Millisecond {
		t.Logf("scheduling took until %v before the due time; fewer cancellations race activation", -late)
	}

	// Spread the cancellations over [at-100ms, at+slack+100ms].
	spread := s.f.ActivationSlack + 200*time.Millisecond
	outcomes := make([]error, n)
	for i := range n {
		wg.Go(func() {
			when := at.Add(-100*time.Millisecond + spread*time.Duration(i)/n)
			timer := time.NewTimer(time.Until(when))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-t.Context().Done():
				return
			}
			outcomes[i] = q.Cancel(t.Context(), seqs[i])
		})
	}
	wg.Wait()

	var cancelled, activated, unknown int
	mustArrive := make(map[int]bool)
	for i, err := range outcomes {
		switch {
		case err == nil:
			cancelled++
		case activatedOutcome(err):
			activated++
			mustArrive[i] = true
		default:
			unknown++
			t.Errorf("Cancel(%#x) = %v, want nil, %v or %v", seqs[i], err, transport.ErrAlreadyActivated, transport.ErrNotFound)
		}
	}
	t.Logf("%d cancelled, %d activated, %d unknown", cancelled, activated, unknown)

	ctx, cancel := context.WithDeadline(t.Context(), at.Add(s.f.ActivationSlack+awaitMargin))
	defer cancel()
	got := make(map[int]int)
	var received int
	for received < activated {
		ds, err := q.Receive(ctx, 50)
		now := time.Now()
		if err != nil {
			t.Fatalf("Receive after %d of %d messages whose Cancel did not succeed: %v", received, activated, err)
		}
		for _, d := range ds {
			if err := d.Complete(t.Context()); err != nil {
				t.Errorf("Complete(%s): %v", describe(d.Message), err)
			}
			i, ok := number(d.Message, "m")
			if !ok || i >= n {
				t.Errorf("received unexpected %s", describe(d.Message))
				continue
			}
			got[i]++
			checkNotEarly(t, arrival{d, now}, at)
			switch {
			case outcomes[i] == nil:
				t.Errorf("received m-%d, whose Cancel(%#x) returned nil", i, seqs[i])
			case got[i] > 1:
				t.Errorf("received m-%d %d times, want once", i, got[i])
			}
			if mustArrive[i] {
				received++
			}
		}
	}
	// Anything still to come would arrive by now.
	quiet := max(time.Until(at.Add(s.f.ActivationSlack+quietMargin)), quietMargin)
	ctx, cancel = context.WithTimeout(t.Context(), quiet)
	defer cancel()
	for {
		ds, err := q.Receive(ctx, 50)
		if err != nil {
			expectCtxErr(t, "Receive on a drained queue", err, context.DeadlineExceeded)
			break
		}
		for _, d := range ds {
			i, _ := number(d.Message, "m")
			t.Errorf("received %s after all expected ones (Cancel outcome %v)", describe(d.Message), outcomes[i])
			d.Complete(t.Context())
		}
	}
	for i := range mustArrive {
		if got[i] != 1 {
			t.Errorf("m-%d (Cancel outcome %v) received %d times, want once", i, outcomes[i], got[i])
		}
	}
}

func (s *suite) testCancelMany(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	far := time.Now().Add(time.Hour)
	pending := make([]uint64, 4)
	for i := range pending {
		pending[i] = schedule(t, q, numbered("pending", i), far)
	}
	if err := q.Cancel(t.Context(), pending[1]); err != nil {
		t.Fatalf("Cancel(%#x) = %v, want nil", pending[1], err)
	}
	fired := schedule(t, q, numbered("fired", 0), time.Now().Add(-time.Second))
	receiveN(t, q, 1, s.f.ActivationSlack+awaitMargin)
	active := send(t, q, numbered("active", 0)).Seq

	type want struct {
		name string
		ok   func(error) bool
		text string
	}
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	isNil := func(err error) bool { return err == nil }
	cases := []struct {
		seq uint64
		want
	}{
		{pending[0], want{"pending", isNil, "nil"}},
		{pending[1], want{"cancelled before", is(transport.ErrNotFound), "ErrNotFound"}},
		{pending[2], want{"pending", isNil, "nil"}},
		{fired, want{"activated", activatedOutcome, "ErrAlreadyActivated"}},
		{active, want{"active seq", is(transport.ErrNotFound), "ErrNotFound"}},
		{transport.ScheduledBit | 99999, want{"unknown", is(transport.ErrNotFound), "ErrNotFound"}},
		{pending[3], want{"pending", isNil, "nil"}},
		{pending[0], want{"same seq again", is(transport.ErrNotFound), "ErrNotFound"}},
	}
	seqs := make([]uint64, len(cases))
	for i, c := range cases {
		seqs[i] = c.seq
	}
	// The repeated pending[0] may be cancelled by either of its two
	// entries, which run concurrently: exactly one of them gets nil.
	errs := q.CancelMany(t.Context(), seqs)
	if len(errs) != len(seqs) {
		t.Fatalf("CancelMany(%d seqs) returned %d outcomes", len(seqs), len(errs))
	}
	if (errs[0] == nil) == (errs[7] == nil) {
		t.Errorf("CancelMany with seq %#x twice: outcomes %v and %v, want exactly one nil and one ErrNotFound", seqs[0], errs[0], errs[7])
	}
	if errs[0] != nil {
		errs[0], errs[7] = errs[7], errs[0]
	}
	for i, c := range cases {
		if !c.ok(errs[i]) {
			t.Errorf("CancelMany outcome #%d (%s seq %#x) = %v, want %s", i, c.name, c.seq, errs[i], c.text)
		}
	}
	ms := peekAll(t, q)
	if len(ms) != 1 || ms[0].Seq != active {
		t.Errorf("Peek after CancelMany: %v, want only the active message %#x", seqsOf(ms), active)
	}
}

func seqsOf(ms []*transport.Message) string {
	s := "["
	for i, m := range ms {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%#x", m.Seq)
	}
	return s + "]"
}
