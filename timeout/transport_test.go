package timeout_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// TestEarlyActivation follows timeouts of a transport engine with
// WithEarlyActivation on the memory broker, in virtual time: the message
// is scheduled lead before its due time and carries the due time; the
// ref and the listing speak of the due time; Cancel before the lead
// window cancels, within it reports ErrAlreadyFired, also for a ref of
// the timeout scheduled again.
func TestEarlyActivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		const lead = 300 * time.Millisecond
		s := timeout.NewTransport(b, timeout.WithEarlyActivation(lead))
		q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "early"})
		if err != nil {
			t.Fatal(err)
		}
		due := time.Now().Add(time.Minute)
		tmo := func(id string) timeout.Timeout {
			return timeout.Timeout{ID: id, Queue: "early", At: due, Saga: "S", Instance: id, Message: &transport.Message{Body: []byte(id)}}
		}
		fired, err := s.Schedule(ctx, tmo("fired"))
		if err != nil {
			t.Fatal(err)
		}
		cancelled, err := s.Schedule(ctx, tmo("cancelled"))
		if err != nil {
			t.Fatal(err)
		}

		// Pending: the due time, and the ref Schedule returned.
		listed := map[string]timeout.Pending{}
		for p, err := range s.Pending(ctx, timeout.Filter{Queue: "early"}) {
			if err != nil {
				t.Fatal(err)
			}
			listed[p.ID] = p
		}
		if p := listed["fired"]; !p.At.Equal(due) || p.Ref != fired {
			t.Errorf("listed %+v, want At %v and ref %s", p, due, fired)
		}
		ms, err := q.Peek(ctx, 0, 10)
		if err != nil || len(ms) != 2 {
			t.Fatalf("Peek: %d messages, %v", len(ms), err)
		}
		for _, m := range ms {
			if want := due.Add(-lead); !m.ScheduledAt.Equal(want) || m.Properties[timeout.PropertyDue] != due.UTC().Format(time.RFC3339Nano) {
				t.Errorf("message %s: ScheduledAt %v, %s %q; want %v and the due time %v",
					m.MessageID, m.ScheduledAt, timeout.PropertyDue, m.Properties[timeout.PropertyDue], want, due)
			}
		}

		// Before the lead window, Cancel is definite and the message gone.
		time.Sleep(time.Until(due.Add(-lead - time.Millisecond)))
		if err := s.Cancel(ctx, cancelled); err != nil {
			t.Errorf("Cancel %v before the due time (before the lead): %v, want nil", lead+time.Millisecond, err)
		}

		// Within the lead window the other is active, and has fired.
		time.Sleep(time.Millisecond)
		synctest.Wait()
		ds, err := q.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].MessageID != "fired" || time.Now().After(due.Add(-lead)) {
			t.Fatalf("received %d messages at %v, want fired at %v", len(ds), time.Now(), due.Add(-lead))
		}
		if err := s.Cancel(ctx, fired); !errors.Is(err, timeout.ErrAlreadyFired) {
			t.Errorf("Cancel %v before the due time, after the early activation: %v, want ErrAlreadyFired", time.Until(due), err)
		}
		if n := count(t, s); n != 0 {
			t.Errorf("%d timeouts listed after the activation, want 0", n)
		}
		// Scheduled again (a saga's retried flush does this): no second
		// message; its ref's Cancel also says fired, before the due time.
		again, err := s.Schedule(ctx, tmo("fired"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Cancel(ctx, again); !errors.Is(err, timeout.ErrAlreadyFired) {
			t.Errorf("Cancel of the ref scheduled again within the lead: %v, want ErrAlreadyFired", err)
		}
		if err := ds[0].Complete(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if ms, _ := q.Peek(ctx, 0, 10); len(ms) != 0 {
			t.Errorf("%d messages left, want none (the cancelled one never comes)", len(ms))
		}
	})
}

// TestEarlyActivationClamped checks that the lead is clamped to
// [0, MaxEarlyActivation].
func TestEarlyActivationClamped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		due := time.Now().Add(time.Hour)
		for _, tc := range []struct {
			lead, want time.Duration
		}{{-time.Second, 0}, {time.Hour, timeout.MaxEarlyActivation}} {
			s := timeout.NewTransport(b, timeout.WithEarlyActivation(tc.lead))
			id := tc.lead.String()
			if _, err := s.Schedule(ctx, timeout.Timeout{ID: id, Queue: "clamp", At: due, Message: &transport.Message{}}); err != nil {
				t.Fatal(err)
			}
			q, _ := b.Queue(ctx, "clamp")
			for m, err := range q.Browse(ctx, 0) {
				if err != nil {
					t.Fatal(err)
				}
				if m.MessageID == id && !m.ScheduledAt.Equal(due.Add(-tc.want)) {
					t.Errorf("WithEarlyActivation(%v): scheduled %v before the due time, want %v", tc.lead, due.Sub(m.ScheduledAt), tc.want)
				}
			}
		}
	})
}

func count(t *testing.T, s *timeout.Transport) int {
	t.Helper()
	n := 0
	for _, err := range s.Pending(t.Context(), timeout.Filter{Queue: "early"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}
