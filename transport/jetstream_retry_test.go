package transport_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// After a write whose answer was lost (it took effect; the try waited out
// its limit), the transport asks again, and every operation still
// reports what it did: a send or schedule is stored once and is not a
// duplicate, a schedule returns its number, a Cancel of a schedule is
// nil, a Complete is nil, and nothing is delivered twice.
func TestRetryAfterLostAnswer(t *testing.T) {
	_, _, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "lost", DuplicateWindow: time.Hour, LockDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var lose atomic.Bool // lose the next answer
	t.Cleanup(transport.SetAnswerLost(func() bool { return lose.CompareAndSwap(true, false) }))
	lost := func(what string, f func() error) {
		t.Helper()
		lose.Store(true)
		if err := f(); err != nil {
			t.Errorf("%s, its first answer lost: %v", what, err)
		}
		if lose.Load() {
			t.Fatalf("%s: no answer was lost", what)
		}
	}
	lost("Send with a MessageID", func() error {
		r, err := q.Send(ctx, &transport.Message{Body: []byte("with id"), MessageID: "a"})
		if err == nil && r.Duplicate {
			return errors.New("Duplicate true for the first send")
		}
		return err
	})
	if r, err := q.Send(ctx, &transport.Message{Body: []byte("with id"), MessageID: "a"}); err != nil || !r.Duplicate {
		t.Errorf("Send of MessageID a again: %+v, %v; want Duplicate", r, err)
	}
	lost("Send without MessageID", func() error {
		_, err := q.Send(ctx, &transport.Message{Body: []byte("without id")})
		return err
	})
	var seqs []uint64
	for _, id := range []string{"s", ""} {
		lost("Schedule with MessageID "+id, func() error {
			r, err := q.Send(ctx, &transport.Message{Body: []byte("sched " + id), MessageID: id, ScheduledAt: time.Now().Add(time.Hour)})
			if err == nil && (r.Duplicate || r.Seq == 0) {
				return errors.New("no seq, or Duplicate true, for the first schedule")
			}
			seqs = append(seqs, r.Seq)
			return err
		})
	}
	ms, err := q.Peek(ctx, transport.ScheduledBit, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || len(seqs) != 2 || ms[0].Seq != seqs[0] || ms[1].Seq != seqs[1] {
		t.Errorf("scheduled after two schedules: %d (%v), want the two numbers returned %v", len(ms), ms, seqs)
	}
	lost("Cancel", func() error { return q.Cancel(ctx, seqs[0]) })
	if err := q.Cancel(ctx, seqs[0]); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Cancel again: %v, want ErrNotFound", err)
	}
	// The two sends, each delivered once; Complete with its answer lost.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []string
	for len(got) < 2 {
		ds, err := q.Receive(rctx, 2)
		if err != nil {
			t.Fatalf("received %v, then %v", got, err)
		}
		for _, d := range ds {
			got = append(got, string(d.Body))
			lost("Complete", func() error { return d.Complete(ctx) })
		}
	}
	rctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if ds, err := q.Receive(rctx, 10); err == nil {
		for _, d := range ds {
			t.Errorf("delivered again after %v: %q (DeliveryCount %d)", got, d.Body, d.DeliveryCount)
		}
	}
}
