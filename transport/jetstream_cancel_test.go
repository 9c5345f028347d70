package transport_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// A cancel record that lands after its schedule activated (a Cancel
// delayed past the cancel margin) makes receivers drop that activation,
// and only that one, among activations pulled in one batch.
func TestLateCancelRecordDropsOnlyItsActivation(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "late"})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	const n = 20
	due := time.Now().Add(300 * time.Millisecond)
	seqs := make([]uint64, n)
	for i := range n {
		if seqs[i], err = q.Schedule(ctx, &transport.Message{MessageID: "m" + strconv.Itoa(i), Body: []byte("x")}, due); err != nil {
			t.Fatal(err)
		}
	}
	// The schedules' subjects, before they activate.
	sched, err := js.Stream(ctx, "JETSAGA_S_late_0")
	if err != nil {
		t.Fatal(err)
	}
	subj := map[int]string{}
	for _, i := range []int{3, 11} {
		raw, err := sched.GetMsg(ctx, transport.LocalSeq(seqs[i]))
		if err != nil {
			t.Fatal(err)
		}
		subj[i] = raw.Subject
	}
	// Wait until all are active in the queue stream, unreceived.
	queue, err := js.Stream(ctx, "JETSAGA_Q_late_0")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := queue.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d activated", info.State.Msgs, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Late cancel records for two of them, as a delayed Cancel would
	// have written them an instant before the activation.
	for i, s := range subj {
		key := strings.TrimSuffix(s, ".s")
		rec := &nats.Msg{Subject: key + ".x." + strconv.FormatUint(transport.LocalSeq(seqs[i]), 10) + ".cancel", Header: nats.Header{}}
		rec.Header.Set("Jetsaga-Cancelled", "1")
		if _, err := js.PublishMsg(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for len(got) < n-2 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := q.Receive(rctx, 100)
		cancel()
		if err != nil {
			break
		}
		for _, d := range ds {
			got[d.MessageID] = true
			if err := d.Complete(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nothing more arrives.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ds, err := q.Receive(rctx, 100); err == nil {
		for _, d := range ds {
			got[d.MessageID] = true
		}
	}
	if len(got) != n-2 || got["m3"] || got["m11"] {
		t.Fatalf("received %d: %v; want all but m3 and m11", len(got), got)
	}
}
