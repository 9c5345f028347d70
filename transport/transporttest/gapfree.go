package transporttest

import (
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testGapFree checks S1 when everything happens at once: immediate sends,
// schedules that activate, and schedules that are cancelled (before or
// while they activate) must together leave the active sequence numbers
// exactly 1..N, with no gap and no duplicate.
func (s *suite) testGapFree(t *testing.T) {
	parallel(t, "Interleaved", s.testGapFreeInterleaved)
}

func (s *suite) testGapFreeInterleaved(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const n = 60
	start := time.Now()
	var (
		wg        sync.WaitGroup
		sentSeq   = make([]uint64, n)
		cancelled = make([]bool, n)
		due       = make([]time.Time, n)
	)
	wg.Go(func() {
		for i := range n {
			if _, err := q.Send(t.Context(), keyed(q, numbered("sent", i))); err != nil {
				t.Errorf("Send: %v", err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range n {
			due[i] = start.Add(200*time.Millisecond + time.Duration(i)*10*time.Millisecond)
			seq, err := q.Schedule(t.Context(), keyed(q, numbered("scheduled", i)), due[i])
			if err != nil {
				t.Errorf("Schedule: %v", err)
				return
			}
			if i%3 != 0 {
				continue
			}
			// Cancel every third: early ones right away, later ones
			// when they are about due, to race activation.
			if i >= n/2 {
				timer := time.NewTimer(time.Until(due[i]))
				select {
				case <-timer.C:
				case <-t.Context().Done():
					return
				}
			}
			switch err := q.Cancel(t.Context(), seq); {
			case err == nil:
				cancelled[i] = true
			case !activatedOutcome(err):
				t.Errorf("Cancel(%#x) = %v, want nil, %v or %v", seq, err, transport.ErrAlreadyActivated, transport.ErrNotFound)
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	want := n
	for i := range n {
		if !cancelled[i] {
			want++
		}
	}

	got := receiveN(t, q, want, time.Until(due[n-1])+s.f.ActivationSlack+awaitMargin)
	var seqs []uint64
	seenSent := make(map[int]bool)
	seenScheduled := make(map[int]bool)
	for _, a := range got {
		seqs = append(seqs, a.Seq)
		if i, ok := number(a.Message, "sent"); ok && i < n && !seenSent[i] {
			seenSent[i] = true
			sentSeq[i] = a.Seq
			if i > 0 && sentSeq[i-1] != 0 && a.Seq < sentSeq[i-1] {
				t.Errorf("%s: sent after sent-%d, which has the higher seq %#x", describe(a.Message), i-1, sentSeq[i-1])
			}
			continue
		}
		if i, ok := number(a.Message, "scheduled"); ok && i < n && !seenScheduled[i] && !cancelled[i] {
			seenScheduled[i] = true
			checkNotEarly(t, a, due[i])
			continue
		}
		t.Errorf("received unexpected, repeated or cancelled %s", describe(a.Message))
	}
	checkHomeSeqs(t, q, "active seqs (sent and activated)", seqs)
	expectNone(t, q, max(time.Until(due[n-1].Add(s.f.ActivationSlack+quietMargin)), quietMargin))
}
