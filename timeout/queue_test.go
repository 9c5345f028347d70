package timeout_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// earlyEngine returns a transport engine on a memory broker that
// activates timeouts lead early, and the queue cfg on that broker; the
// broker closes with the test.
func earlyEngine(t *testing.T, cfg transport.QueueConfig, lead time.Duration) (*timeout.Queue, *transport.Queue) {
	t.Helper()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q, err := b.OpenQueue(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return timeout.NewQueue(b, timeout.WithEarlyActivation(lead)), q
}

// TestEarlyActivation follows timeouts of a transport engine with
// WithEarlyActivation on the memory broker, in virtual time: the message
// is scheduled lead before its due time and carries the due time; the
// ref and the listing speak of the due time; Cancel before the lead
// window cancels, within it reports ErrAlreadyFired, also for a ref of
// the timeout scheduled again; within the lead the listing shows the
// timeout as Activating (its message on the queue, held by its receiver)
// until its due time.
func TestEarlyActivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const lead = 300 * time.Millisecond
		s, q := earlyEngine(t, transport.QueueConfig{Name: "early"}, lead)
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
		var activating []timeout.Pending
		for p, err := range s.Pending(ctx, timeout.Filter{Queue: "early"}) {
			if err != nil {
				t.Fatal(err)
			}
			activating = append(activating, p)
		}
		if len(activating) != 1 || !activating[0].Activating || activating[0].ID != "fired" || !activating[0].At.Equal(due) || activating[0].Seq != ds[0].Seq {
			t.Errorf("listed after the activation, before the due time: %+v; want fired, Activating, due %v, seq %d", activating, due, ds[0].Seq)
		} else if err := s.Cancel(ctx, activating[0].Ref); !errors.Is(err, timeout.ErrAlreadyFired) {
			t.Errorf("Cancel of the activating timeout's listed ref %s: %v, want ErrAlreadyFired", activating[0].Ref, err)
		}
		time.Sleep(time.Until(due))
		if n := count(t, s); n != 0 {
			t.Errorf("%d timeouts listed at the due time, the message still held, want 0", n)
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
			s := timeout.NewQueue(b, timeout.WithEarlyActivation(tc.lead))
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

func count(t *testing.T, s *timeout.Queue) int {
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

// TestEarlyActivationDefault checks the lead a Queue gets without
// WithEarlyActivation: DefaultEarlyActivation on JetStream, whose server
// activates on a 250 ms tick; 0 on the memory broker, which activates on
// time; and that WithEarlyActivation(0) turns it off on JetStream.
func TestEarlyActivationDefault(t *testing.T) {
	mem, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	for _, tc := range []struct {
		name string
		s    *timeout.Queue
		want time.Duration
	}{
		{"memory", timeout.NewQueue(mem), 0},
		{"memory, 300ms", timeout.NewQueue(mem, timeout.WithEarlyActivation(300*time.Millisecond)), 300 * time.Millisecond},
		{"jetstream", timeout.NewQueue(js), timeout.DefaultEarlyActivation},
		{"jetstream, 0", timeout.NewQueue(js, timeout.WithEarlyActivation(0)), 0},
		{"jetstream, 1s", timeout.NewQueue(js, timeout.WithEarlyActivation(time.Second)), time.Second},
	} {
		if got := tc.s.EarlyActivation(); got != tc.want {
			t.Errorf("%s: EarlyActivation %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestActivatingReadsTheTail lists timeouts activated early on a queue
// with a backlog of older active messages, some of them completed (gaps
// in the sequence): Activating lists exactly the timeouts activated early
// and not yet due, not the backlog, nor a timeout already due, nor one
// still scheduled.
func TestActivatingReadsTheTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const lead = 2 * time.Second
		s, q := earlyEngine(t, transport.QueueConfig{Name: "tail", Partitions: 2}, lead)
		// A backlog: old messages, a second apart, and timeouts of the
		// engine that activated early and are long due.
		for i := range 300 {
			if _, err := q.Send(ctx, &transport.Message{MessageID: fmt.Sprint("old-", i)}); err != nil {
				t.Fatal(err)
			}
			if i%50 == 0 {
				if _, err := s.Schedule(ctx, timeout.Timeout{ID: fmt.Sprint("due-", i), Queue: "tail", At: time.Now().Add(time.Second), Message: &transport.Message{}}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Second)
		}
		ds, err := q.Receive(ctx, 100) // complete some: gaps
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if i%3 == 0 {
				if err := d.Complete(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		due := time.Now().Add(time.Minute)
		want := map[string]bool{}
		for i := range 20 {
			id := fmt.Sprint("soon-", i)
			if _, err := s.Schedule(ctx, timeout.Timeout{ID: id, Queue: "tail", At: due, Message: &transport.Message{}}); err != nil {
				t.Fatal(err)
			}
			want[id] = true
		}
		if _, err := s.Schedule(ctx, timeout.Timeout{ID: "later", Queue: "tail", At: due.Add(time.Hour), Message: &transport.Message{}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(due.Add(-lead / 2)))
		synctest.Wait()
		for _, l := range []struct {
			name string
			seq  func(yield func(timeout.Pending, error) bool)
		}{
			{"Activating", timeout.Activating(ctx, q, lead, time.Now())},
			{"Activating, the longest lead", timeout.Activating(ctx, q, timeout.MaxEarlyActivation, time.Now())},
			{"Pending", s.Pending(ctx, timeout.Filter{Queue: "tail"})},
		} {
			got := map[string]bool{}
			scheduled := 0
			for p, err := range l.seq {
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case !p.Activating:
					scheduled++
				case !want[p.ID] || !p.At.Equal(due) || transport.IsScheduledSeq(p.Seq):
					t.Errorf("%s: listed %+v, want only the timeouts due at %v, with their active seqs", l.name, p, due)
				default:
					got[p.ID] = true
				}
			}
			if len(got) != len(want) {
				t.Errorf("%s: %d of %d timeouts activated early listed as activating", l.name, len(got), len(want))
			}
			if wantScheduled := map[bool]int{true: 1}[l.name == "Pending"]; scheduled != wantScheduled {
				t.Errorf("%s: %d scheduled timeouts listed, want %d", l.name, scheduled, wantScheduled)
			}
		}
	})
}
