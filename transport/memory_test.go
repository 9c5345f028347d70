package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func openMem(t *testing.T, cfg QueueConfig, opts ...Option) (*Broker, *Queue) {
	t.Helper()
	b, err := NewMemory(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q, err := b.OpenQueue(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, q
}

func memMsg(body string) *Message { return &Message{Body: []byte(body)} }

func memSend(t *testing.T, q *Queue, m *Message) uint64 {
	t.Helper()
	r, err := q.Send(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if !m.ScheduledAt.IsZero() || r.Duplicate {
		return r.Seq
	}
	if r.Seq != 0 {
		t.Fatalf("Send: Seq %#x, want 0 for an immediate send", r.Seq)
	}
	// The memory broker stores a send at once: it is its partition's
	// newest active message.
	return memLastActive(t, q, q.partitionOf(m))
}

func memLastActive(t *testing.T, q *Queue, p int) uint64 {
	t.Helper()
	var last uint64
	for m, err := range q.Browse(t.Context(), makeSeq(p, false, 0)) {
		if err != nil {
			t.Fatal(err)
		}
		if Partition(m.Seq) != p || m.State != Active {
			break
		}
		last = m.Seq
	}
	return last
}

func memReceive(t *testing.T, q *Queue) *Delivery {
	t.Helper()
	ds, err := q.Receive(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return ds[0]
}

func memPeekAll(t *testing.T, q *Queue) []*Message {
	t.Helper()
	ms, err := q.Peek(t.Context(), 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

type memReceived struct {
	d   *Delivery
	err error
}

// memReceiveAsync receives one delivery in the background, from the queue or
// a session receiver.
func memReceiveAsync(ctx context.Context, receive func(context.Context) (*Delivery, error)) <-chan memReceived {
	ch := make(chan memReceived, 1)
	go func() {
		d, err := receive(ctx)
		ch <- memReceived{d, err}
	}()
	return ch
}

func memQueueReceiver(q *Queue) func(context.Context) (*Delivery, error) {
	return func(ctx context.Context) (*Delivery, error) {
		ds, err := q.Receive(ctx, 1)
		if err != nil {
			return nil, err
		}
		return ds[0], nil
	}
}

// blocked reports whether the background receive is still waiting once the
// bubble is idle.
func memBlocked(ch <-chan memReceived) bool {
	synctest.Wait()
	return len(ch) == 0
}

func TestMemoryScheduleActivatesOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q"})
		ctx := t.Context()
		scheduledAt := time.Now()
		at := scheduledAt.Add(30 * 24 * time.Hour)
		seq, err := q.Schedule(ctx, memMsg("due"), at)
		if err != nil {
			t.Fatal(err)
		}
		if want := makeSeq(0, true, 1); seq != want {
			t.Fatalf("got seq %#x, want %#x", seq, want)
		}
		got := memReceiveAsync(ctx, memQueueReceiver(q))

		time.Sleep(time.Until(at) - time.Nanosecond)
		if !memBlocked(got) {
			t.Fatal("delivered before its time")
		}
		ms := memPeekAll(t, q)
		if len(ms) != 1 || ms[0].State != Scheduled || ms[0].Seq != seq ||
			!ms[0].ScheduledAt.Equal(at) || !ms[0].EnqueuedAt.Equal(scheduledAt) {
			t.Fatalf("got %+v, want one scheduled message", ms)
		}

		time.Sleep(time.Nanosecond)
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		d := r.d
		if d.Seq != makeSeq(0, false, 1) || d.State != Active || !d.EnqueuedAt.Equal(at) ||
			!d.ScheduledAt.Equal(at) || d.EnqueuedAt.Location() != time.UTC || string(d.Body) != "due" {
			t.Fatalf("got %+v, want active seq 1 enqueued and scheduled at %v", d.Message, at)
		}
		if err := q.Cancel(ctx, seq); !errors.Is(err, ErrAlreadyActivated) {
			t.Fatalf("Cancel after activation: got %v, want %v", err, ErrAlreadyActivated)
		}
	})
}

func TestMemoryScheduleInPastActivatesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q"})
		due := time.Now().Add(-time.Hour)
		r, err := q.Send(t.Context(), &Message{Body: []byte("late"), ScheduledAt: due})
		if err != nil {
			t.Fatal(err)
		}
		d := memReceive(t, q)
		if d.Seq != makeSeq(0, false, 1) || !d.ScheduledAt.Equal(due) || !d.EnqueuedAt.Equal(time.Now()) {
			t.Fatalf("got %+v, want seq 1 due %v enqueued now", d.Message, due)
		}
		if err := q.Cancel(t.Context(), r.Seq); !errors.Is(err, ErrAlreadyActivated) {
			t.Fatalf("got %v, want %v", err, ErrAlreadyActivated)
		}
	})
}

func TestMemoryCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q"})
		ctx := t.Context()
		seq, err := q.Schedule(ctx, memMsg("x"), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name    string
			seq     uint64
			wantErr error
		}{
			{"pending", seq, nil},
			{"cancelled", seq, ErrNotFound},
			{"never existed", makeSeq(0, true, 99), ErrNotFound},
			{"active seq", makeSeq(0, false, 1), ErrNotFound},
		}
		for _, tt := range tests {
			if err := q.Cancel(ctx, tt.seq); !errors.Is(err, tt.wantErr) {
				t.Errorf("%s: got %v, want %v", tt.name, err, tt.wantErr)
			}
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if ms := memPeekAll(t, q); len(ms) != 0 {
			t.Fatalf("cancelled message activated: %+v", ms)
		}
	})
}

func TestMemoryCancelRacesActivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q"})
		ctx := t.Context()
		at := time.Now().Add(time.Minute)
		var seqs []uint64
		for i := range 500 {
			seq, err := q.Schedule(ctx, memMsg(fmt.Sprint(i)), at)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		time.Sleep(time.Until(at)) // wakes with the activation timers
		errs := q.CancelMany(ctx, seqs)
		synctest.Wait()

		active := make(map[string]bool)
		for _, m := range memPeekAll(t, q) {
			if m.State != Active {
				t.Fatalf("still pending after its time: %+v", m)
			}
			active[string(m.Body)] = true
		}
		t.Logf("activated %d of %d", len(active), len(errs))
		for i, err := range errs {
			switch delivered := active[fmt.Sprint(i)]; {
			case err == nil && delivered:
				t.Errorf("%d: cancelled but activated", i)
			case errors.Is(err, ErrAlreadyActivated) && !delivered:
				t.Errorf("%d: reported activated but absent", i)
			case err != nil && !errors.Is(err, ErrAlreadyActivated):
				t.Errorf("%d: got %v, want nil or %v", i, err, ErrAlreadyActivated)
			}
		}
	})
}

func TestMemoryLockExpiryAndRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", LockDuration: 10 * time.Second})
		ctx := t.Context()
		memSend(t, q, memMsg("x"))
		d1 := memReceive(t, q)
		if want := time.Now().Add(10 * time.Second); !d1.LockedUntil().Equal(want) {
			t.Fatalf("LockedUntil: got %v, want %v", d1.LockedUntil(), want)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := d1.Complete(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Complete after expiry: got %v, want %v", err, ErrLockLost)
		}

		d2 := memReceive(t, q)
		if d2.DeliveryCount != 2 || d2.Seq != d1.Seq {
			t.Fatalf("got seq %d count %d, want seq %d count 2", d2.Seq, d2.DeliveryCount, d1.Seq)
		}
		time.Sleep(5 * time.Second)
		if err := d2.RenewLock(ctx); err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(10 * time.Second); !d2.LockedUntil().Equal(want) {
			t.Fatalf("renewed LockedUntil: got %v, want %v", d2.LockedUntil(), want)
		}
		time.Sleep(9 * time.Second) // past the first expiry, before the renewed one
		synctest.Wait()
		if err := d1.Abandon(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("stale delivery: got %v, want %v", err, ErrLockLost)
		}
		if err := d2.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		if err := d2.Complete(ctx); !errors.Is(err, ErrAlreadySettled) {
			t.Fatalf("second Complete: got %v, want %v", err, ErrAlreadySettled)
		}
		if ms := memPeekAll(t, q); len(ms) != 0 {
			t.Fatalf("completed message still stored: %+v", ms)
		}
	})
}

func TestMemoryCompetingConsumers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q"})
		for i := range 3 {
			memSend(t, q, memMsg(fmt.Sprint(i)))
		}
		a, b := memReceive(t, q), memReceive(t, q)
		if a.Seq != makeSeq(0, false, 1) || b.Seq != makeSeq(0, false, 2) {
			t.Fatalf("got seqs %d, %d, want 1, 2", a.Seq, b.Seq)
		}
		if err := a.Abandon(t.Context()); err != nil {
			t.Fatal(err)
		}
		ds, err := q.Receive(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 2 || ds[0].Seq != a.Seq || ds[0].DeliveryCount != 2 || ds[1].Seq != makeSeq(0, false, 3) {
			t.Fatalf("got %d deliveries, want abandoned seq 1 (count 2) then seq 3", len(ds))
		}
	})
}

func TestMemoryDeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "orders", MaxDeliveryCount: 2})
		ctx := t.Context()
		first := memSend(t, q, &Message{Body: []byte("poison"), Properties: map[string]string{"k": "v"}})
		second := memSend(t, q, memMsg("bad"))
		for want := 1; want <= 2; want++ {
			d := memReceive(t, q)
			if d.Seq != first || d.DeliveryCount != want {
				t.Fatalf("got seq %d count %d, want %d count %d", d.Seq, d.DeliveryCount, first, want)
			}
			if err := d.Abandon(ctx); err != nil {
				t.Fatal(err)
			}
		}
		d := memReceive(t, q) // the third delivery of first moves it to the DLQ
		if d.Seq != second {
			t.Fatalf("got seq %d, want %d", d.Seq, second)
		}
		if err := d.DeadLetter(ctx, "Invalid", "cannot parse"); err != nil {
			t.Fatal(err)
		}

		dlq := q.DeadLetterQueue()
		ms := memPeekAll(t, dlq)
		want := []struct {
			seq    uint64
			reason string
		}{{first, ReasonMaxDeliveryCountExceeded}, {second, "Invalid"}}
		if len(ms) != len(want) {
			t.Fatalf("got %d dead letters, want %d", len(ms), len(want))
		}
		for i, w := range want {
			m := ms[i]
			if m.Seq != makeSeq(0, false, uint64(i+1)) || m.DeadLetterSeq != w.seq || m.DeadLetterReason != w.reason ||
				m.DeadLetterSource != "orders" || !m.EnqueuedAt.Equal(time.Now()) {
				t.Errorf("dead letter %d: got %+v, want from seq %d with reason %s", i, m, w.seq, w.reason)
			}
		}
		if ms[0].Properties["k"] != "v" || ms[1].DeadLetterDescription != "cannot parse" {
			t.Errorf("fields not kept: %+v, %+v", ms[0], ms[1])
		}
		if left := memPeekAll(t, q); len(left) != 0 {
			t.Fatalf("dead-lettered messages left in queue: %+v", left)
		}

		dd := memReceive(t, dlq)
		if err := dd.DeadLetter(ctx, "again", ""); !errors.Is(err, ErrUnsupported) {
			t.Errorf("DeadLetter from DLQ: got %v, want %v", err, ErrUnsupported)
		}
		if _, err := dlq.Send(ctx, memMsg("x")); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Send to DLQ: got %v, want %v", err, ErrUnsupported)
		}
		if _, err := dlq.Schedule(ctx, memMsg("x"), time.Now()); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Schedule to DLQ: got %v, want %v", err, ErrUnsupported)
		}
		if err := dlq.Cancel(ctx, makeSeq(0, true, 1)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Cancel on DLQ: got %v, want %v", err, ErrUnsupported)
		}
		if err := dd.Complete(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMemorySequencesGapFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", Partitions: 3})
		ctx := t.Context()
		local := map[uint64][]uint64{} // partition and ScheduledBit -> local seqs
		add := func(seq uint64) {
			k := seq &^ seqMask
			local[k] = append(local[k], LocalSeq(seq))
		}
		for i := range 30 {
			m := &Message{MessageID: fmt.Sprint("id-", i)}
			if i%3 == 0 { // the first is due now and activates at once
				m.ScheduledAt = time.Now().Add(time.Duration(i) * time.Minute)
			}
			r, err := q.Send(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if IsScheduledSeq(r.Seq) {
				add(r.Seq)
			}
		}
		d := memReceive(t, q)
		if err := d.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		add(d.Seq)
		time.Sleep(15 * time.Minute)
		synctest.Wait()
		for m, err := range q.Browse(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			if m.State == Active {
				add(m.Seq)
			}
		}
		var active int
		for k, seqs := range local {
			slices.Sort(seqs)
			for i, s := range seqs {
				if s != uint64(i+1) {
					t.Fatalf("partition %d scheduled=%t: got local seqs %v, want 1..%d", Partition(k), k&ScheduledBit != 0, seqs, len(seqs))
				}
			}
			if k&ScheduledBit == 0 {
				active += len(seqs)
			}
		}
		if want := 20 + 6; active != want { // sent, plus schedules due by 15m
			t.Fatalf("got %d active seqs, want %d", active, want)
		}
	})
}

func TestMemoryPeekPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", Partitions: 2})
		ctx := t.Context()
		var want []uint64
		for i := range 20 {
			want = append(want, memSend(t, q, &Message{Body: []byte("x"), MessageID: fmt.Sprint(i)}))
			seq, err := q.Schedule(ctx, memMsg("later"), time.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, seq)
		}
		slices.Sort(want)
		var got []uint64
		for from := uint64(0); ; {
			ms, err := q.Peek(ctx, from, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				got = append(got, m.Seq)
			}
			if len(ms) < 7 {
				break
			}
			from = ms[len(ms)-1].Seq + 1
		}
		if !slices.Equal(got, want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	})
}

func TestMemoryDuplicateDetection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", DuplicateWindow: time.Minute})
		ctx := t.Context()
		send := func(m *Message) SendResult {
			t.Helper()
			r, err := q.Send(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if first := send(&Message{MessageID: "a"}); first != (SendResult{}) {
			t.Fatalf("first: got %+v, want no seq, no duplicate", first)
		}
		if r := send(&Message{MessageID: "a"}); r != (SendResult{Duplicate: true}) {
			t.Fatalf("repeat: got %+v, want a duplicate", r)
		}
		later := time.Now().Add(time.Hour)
		if r := send(&Message{MessageID: "a", ScheduledAt: later}); r != (SendResult{Duplicate: true}) {
			t.Fatalf("schedule with a sent MessageID: got %+v, want a duplicate (one ID space)", r)
		}
		sched := send(&Message{MessageID: "b", ScheduledAt: later})
		if sched.Duplicate || !IsScheduledSeq(sched.Seq) {
			t.Fatalf("schedule: got %+v", sched)
		}
		if r := send(&Message{MessageID: "b", ScheduledAt: later}); r != (SendResult{Seq: sched.Seq, Duplicate: true}) {
			t.Fatalf("repeat schedule: got %+v, want duplicate of %d", r, sched.Seq)
		}
		if n := len(memPeekAll(t, q)); n != 2 {
			t.Fatalf("got %d stored, want 2", n)
		}
		time.Sleep(time.Minute)
		if r := send(&Message{MessageID: "a"}); r.Duplicate {
			t.Fatalf("after window: got %+v, want a new message", r)
		}
		if seq := memLastActive(t, q, 0); seq != makeSeq(0, false, 2) {
			t.Fatalf("after window: stored as seq %#x, want 2", seq)
		}
	})
}

func TestMemorySizeLimits(t *testing.T) {
	_, q := openMem(t, QueueConfig{Name: "q", MaxBytes: 4096})
	ctx := t.Context()
	big := &Message{Body: make([]byte, DefaultMaxPayload)}
	if _, err := q.Send(ctx, big); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("Send: got %v, want %v", err, ErrMessageTooLarge)
	}
	if _, err := q.Schedule(ctx, big, time.Now().Add(time.Hour)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("Schedule: got %v, want %v", err, ErrMessageTooLarge)
	}
	memSend(t, q, &Message{Body: make([]byte, 2048)})
	if _, err := q.Send(ctx, &Message{Body: make([]byte, 2048)}); err == nil || !strings.Contains(err.Error(), "MaxBytes") {
		t.Fatalf("Send over MaxBytes: got %v, want MaxBytes error", err)
	}
	if n := len(memPeekAll(t, q)); n != 1 {
		t.Fatalf("got %d stored, want 1", n)
	}
}

func TestMemoryStoresCopies(t *testing.T) {
	_, q := openMem(t, QueueConfig{Name: "q"})
	m := &Message{Body: []byte("abc"), Properties: map[string]string{"k": "v"}}
	memSend(t, q, m)
	m.Body[0], m.Properties["k"] = 'X', "changed"
	memPeekAll(t, q)[0].Body[1] = 'Y'
	d := memReceive(t, q)
	if string(d.Body) != "abc" || d.Properties["k"] != "v" || m.Seq != 0 {
		t.Fatalf("got %q %v (sent Seq %d), want an untouched copy", d.Body, d.Properties, m.Seq)
	}
}

func TestMemorySessionsOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", RequiresSession: true, Partitions: 4})
		ctx := t.Context()
		for _, s := range []string{"A", "B", "A"} {
			memSend(t, q, &Message{SessionID: s, Body: []byte(s)})
		}
		accept := func(id string) *SessionReceiver {
			r, err := q.AcceptSession(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		r1, rb := accept("A"), accept("B")
		if _, err := q.AcceptSession(ctx, "A"); !errors.Is(err, ErrSessionLocked) {
			t.Fatalf("second AcceptSession of A: %v, want ErrSessionLocked", err)
		}
		a1, err := r1.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		next := memReceiveAsync(ctx, r1.Receive)
		if !memBlocked(next) {
			t.Fatal("second message of a session delivered while the first is locked")
		}
		if b, err := rb.Receive(ctx); err != nil || b.SessionID != "B" {
			t.Fatalf("other session: got %v, %v", b, err)
		}
		if err := a1.Complete(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-next
		if r.err != nil || r.d.SessionID != "A" || r.d.Seq <= a1.Seq {
			t.Fatalf("got %+v, want the next message of A", r)
		}
		if _, err := q.Receive(ctx, 1); !errors.Is(err, ErrSessionRequired) {
			t.Fatalf("Receive on session queue: got %v, want %v", err, ErrSessionRequired)
		}
	})
}

func TestMemorySessionLockExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", RequiresSession: true, LockDuration: time.Minute})
		ctx := t.Context()
		first := memSend(t, q, &Message{SessionID: "s"})
		memSend(t, q, &Message{SessionID: "s"})
		dead, err := q.AcceptSession(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dead.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		dead.Close() // a crashed consumer: its message stays locked
		if _, err := dead.Receive(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Receive after Close: got %v, want %v", err, ErrClosed)
		}
		live, err := q.AcceptSession(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		got := memReceiveAsync(ctx, live.Receive)
		time.Sleep(time.Minute - time.Nanosecond)
		if !memBlocked(got) {
			t.Fatal("session moved on before the lock expired")
		}
		time.Sleep(time.Nanosecond)
		if r := <-got; r.err != nil || r.d.Seq != first || r.d.DeliveryCount != 2 {
			t.Fatalf("got %+v, want seq %d again with count 2", r, first)
		}
	})
}

func TestMemoryAcceptNextSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q := openMem(t, QueueConfig{Name: "q", RequiresSession: true, Partitions: 2})
		ctx := t.Context()
		memSend(t, q, &Message{SessionID: "old"})
		time.Sleep(time.Second)
		memSend(t, q, &Message{SessionID: "new"})
		var ids []string
		for range 2 {
			r, err := q.AcceptNextSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.SessionID())
		}
		if !slices.Equal(ids, []string{"old", "new"}) {
			t.Fatalf("got sessions %v, want [old new]", ids)
		}
		ctx2, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := q.AcceptNextSession(ctx2); !errors.Is(err, ErrNoSession) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("all sessions locked: got %v, want %v", err, ErrNoSession)
		}
	})
}

func TestMemoryClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, q := openMem(t, QueueConfig{Name: "q"})
		ctx := t.Context()
		seq := memSend(t, q, memMsg("x"))
		d := memReceive(t, q)
		if _, err := q.Schedule(ctx, memMsg("later"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		waiting := memReceiveAsync(ctx, memQueueReceiver(q))
		if !memBlocked(waiting) {
			t.Fatal("receive returned with nothing available")
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if r := <-waiting; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("blocked Receive: got %v, want %v", r.err, ErrClosed)
		}
		time.Sleep(2 * time.Hour) // stopped timers fire nothing
		checks := map[string]error{
			"Complete":  d.Complete(ctx),
			"Cancel":    q.Cancel(ctx, seq|ScheduledBit),
			"Close":     b.Close(),
			"OpenQueue": func() error { _, err := b.OpenQueue(ctx, QueueConfig{Name: "q"}); return err }(),
			"Send":      func() error { _, err := q.Send(ctx, memMsg("x")); return err }(),
			"Peek":      func() error { _, err := q.Peek(ctx, 0, 1); return err }(),
		}
		for name, err := range checks {
			if want := ErrClosed; name == "Close" {
				if err != nil {
					t.Errorf("second Close: got %v, want nil", err)
				}
			} else if !errors.Is(err, want) {
				t.Errorf("%s: got %v, want %v", name, err, want)
			}
		}
	})
}

func TestMemoryReopenAndDelete(t *testing.T) {
	b, q1 := openMem(t, QueueConfig{Name: "q", LockDuration: time.Minute})
	ctx := t.Context()
	q2, err := b.OpenQueue(ctx, QueueConfig{Name: "q", LockDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	memSend(t, q1, memMsg("shared"))
	if d := memReceive(t, q2); string(d.Body) != "shared" || time.Until(d.LockedUntil()) < 59*time.Minute {
		t.Fatalf("got %q locked until %v, want the shared message under the new LockDuration", d.Body, d.LockedUntil())
	}
	for _, cfg := range []QueueConfig{{Name: "q", Partitions: 2}, {Name: "q", RequiresSession: true}} {
		if _, err := b.OpenQueue(ctx, cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("reopen with %+v: got %v, want %v", cfg, err, ErrInvalidConfig)
		}
	}
	if err := b.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteQueue(ctx, "q"); err != nil {
		t.Fatalf("deleting a missing queue: %v", err)
	}
	if _, err := q1.Send(ctx, memMsg("x")); err == nil {
		t.Fatal("Send on a deleted queue succeeded")
	}
	q3, err := b.OpenQueue(ctx, QueueConfig{Name: "q", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ms := memPeekAll(t, q3); len(ms) != 0 {
		t.Fatalf("recreated queue has %d messages", len(ms))
	}
}

// memFakeClock moves only when told to.
type memFakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []memFakeTimer
}

type memFakeTimer struct {
	at      time.Time
	f       func()
	stopped *bool
}

func (c *memFakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *memFakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	stopped := new(bool)
	c.timers = append(c.timers, memFakeTimer{at: c.now.Add(d), f: f, stopped: stopped})
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := *stopped
		*stopped = true
		return !was
	}
}

// Advance moves the clock by d and runs the timers that came due, one after
// another.
func (c *memFakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	c.timers = slices.DeleteFunc(c.timers, func(t memFakeTimer) bool {
		if *t.stopped || t.at.After(c.now) {
			return *t.stopped
		}
		*t.stopped = true
		due = append(due, t.f)
		return true
	})
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

func TestMemoryWithClock(t *testing.T) {
	clock := &memFakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, q := openMem(t, QueueConfig{Name: "q"}, WithClock(clock))
	at := clock.Now().Add(14 * 24 * time.Hour)
	if _, err := q.Schedule(t.Context(), memMsg("x"), at); err != nil {
		t.Fatal(err)
	}
	clock.Advance(14*24*time.Hour - 1)
	if ms := memPeekAll(t, q); ms[0].State != Scheduled {
		t.Fatal("activated early")
	}
	clock.Advance(1)
	if d := memReceive(t, q); !d.EnqueuedAt.Equal(at) {
		t.Fatalf("EnqueuedAt: got %v, want %v", d.EnqueuedAt, at)
	}
}
