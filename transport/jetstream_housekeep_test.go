package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// These tests play a client that is not jetsaga's, following the wire
// format (docs/wire.md) with nats.go's plain JetStream API: what it does
// must lose nothing, and a broker that merely has the queue open keeps
// the queue's promises for it.

// foreignNak receives the message of queue stream's partition 0 through
// the shared consumer and abandons it (-NAK), n times, checking the
// delivery count each time.
func foreignNak(t *testing.T, js jetstream.JetStream, queue string, n int) {
	t.Helper()
	c, err := js.Consumer(t.Context(), "JETSAGA_Q_"+queue+"_0", transport.ReceiveConsumer)
	if err != nil {
		t.Fatalf("the receive consumer: %v", err)
	}
	for i := 1; i <= n; i++ {
		msg, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		md, _ := msg.Metadata()
		if int(md.NumDelivered) != i {
			t.Fatalf("delivery %d: delivered %d", i, md.NumDelivered)
		}
		if err := msg.Nak(); err != nil {
			t.Fatalf("NAK: %v", err)
		}
	}
	// The server delivers it no more.
	if msg, err := c.Next(jetstream.FetchMaxWait(1500 * time.Millisecond)); err == nil {
		md, _ := msg.Metadata()
		t.Fatalf("delivery %d past MaxDeliveryCount %d", md.NumDelivered, n)
	}
}

// awaitExhaustedMoved waits for the one message of q to be in its
// dead-letter queue with reason MaxDeliveryCountExceeded, and the queue
// empty.
func awaitExhaustedMoved(t *testing.T, q *transport.Queue, within time.Duration) {
	t.Helper()
	testutil.Await(t, within, func() string {
		c, err := q.Counts(t.Context())
		if err != nil {
			return err.Error()
		}
		if c.Active != 0 || c.DeadLettered != 1 {
			return fmt.Sprintf("counts %+v", c)
		}
		return ""
	})
	dl, err := q.DeadLetterQueue().Peek(t.Context(), 0, 10)
	if err != nil || len(dl) != 1 {
		t.Fatalf("dead letters: %v %v", dl, err)
	}
	if dl[0].DeadLetterReason != transport.ReasonMaxDeliveryCountExceeded || string(dl[0].Body) != "poison" {
		t.Errorf("dead letter: reason %q body %q, want %q %q", dl[0].DeadLetterReason, dl[0].Body, transport.ReasonMaxDeliveryCountExceeded, "poison")
	}
}

// TestForeignReceiverExhaustsMaxDeliveryCount: a receiver that is not
// jetsaga's abandons a message MaxDeliveryCount times; the server stops
// delivering it, and the broker that has the queue open moves it to the
// dead-letter queue with its reason (on the server's advisory).
func TestForeignReceiverExhaustsMaxDeliveryCount(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "poison", MaxDeliveryCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), &transport.Message{Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	foreignNak(t, js, "poison", 2)
	awaitExhaustedMoved(t, q, 10*time.Second)
}

// TestExhaustedWhileNoBrokerRan: the message exhausts its deliveries
// while no jetsaga broker has the queue open, so no one hears the
// advisory; a broker that attaches the queue later finds and moves it.
func TestExhaustedWhileNoBrokerRan(t *testing.T) {
	srv, nc, b := startServer(t, embedded.Options{})
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "missed", MaxDeliveryCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), &transport.Message{Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	js, _ := jetstream.New(nc)
	foreignNak(t, js, "missed", 2)
	if si, err := js.Stream(t.Context(), "JETSAGA_Q_missed_0"); err != nil || si.CachedInfo().State.Msgs != 1 {
		t.Fatalf("with no broker, the exhausted message must stay in the queue: %v", err)
	}

	nc2, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	b2, err := transport.NewJetStream(nc2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	q2, err := b2.Queue(t.Context(), "missed")
	if err != nil {
		t.Fatal(err)
	}
	awaitExhaustedMoved(t, q2, 30*time.Second)
}

// TestWrongSubjectsRefused: a JetStream publish on a subject under a
// queue's prefix that the queue does not deliver from gets an error at
// the publisher, instead of being stored and never delivered; the
// subjects of the wire format are stored and delivered.
func TestWrongSubjectsRefused(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "sess", RequiresSession: true}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	k, sid := nuid.Next(), "_c2Vzc2lvbiAx"
	for _, subj := range []string{
		"JETSAGA.S.plain.0.x",
		"JETSAGA.S.plain.0." + k + ".f.z",
		"JETSAGA.S.plain.0." + k + ".m",
		"JETSAGA.S.plain.0." + k + ".f.s." + sid, // a session message on a queue without sessions
		"JETSAGA.S.plain.0." + k + ".f.m.extra",
		"JETSAGA.S.plain.1." + k + ".f.m", // no partition 1
		"JETSAGA.S.plain.0.L." + sid,
		"JETSAGA.Q.plain.0.m", // the queue stream takes nothing directly
		"JETSAGA.Q.plain.0.s." + sid,
		"JETSAGA.D.plain.0.x",
		"JETSAGA.S.sess.0." + k + ".f.m", // no session on a queue that requires them
		"JETSAGA.S.sess.0." + k + ".g.s",
		"JETSAGA.Q.sess.0.s." + sid,
		"JETSAGA.S.nosuchqueue.0." + k + ".f.m",
	} {
		if _, err := js.Publish(t.Context(), subj, []byte("lost?")); err == nil {
			t.Errorf("publish on %s: stored, want an error", subj)
		}
	}
	for _, subj := range []string{
		"JETSAGA.S.plain.0." + nuid.Next() + ".g.m",
		"JETSAGA.S.sess.0." + nuid.Next() + ".g.s." + sid,
	} {
		if _, err := js.Publish(t.Context(), subj, []byte("delivered")); err != nil {
			t.Errorf("publish on %s: %v", subj, err)
		}
	}
	q, _ := b.Queue(t.Context(), "plain")
	ds, err := q.Receive(t.Context(), 1)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "delivered" {
		t.Fatalf("Receive of a foreign send: %v %v", ds, err)
	}
	sq, _ := b.Queue(t.Context(), "sess")
	s, err := sq.AcceptSession(t.Context(), "session 1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.Receive(t.Context())
	if err != nil || string(d.Body) != "delivered" {
		t.Fatalf("session Receive of a foreign send: %v %v", d, err)
	}
}

// TestCopiesPurgedWithoutReceivers: messages sent by a client that is
// not jetsaga's, and not received yet, leave no copies behind in the
// schedule stream: the broker that has the queue open learns how far the
// queue stream sourced from the newest message it holds, and purges
// below it.
func TestCopiesPurgedWithoutReceivers(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "waiting"})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	const n = 20
	for range n {
		if _, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: "JETSAGA.S.waiting.0." + nuid.Next() + ".g.m", Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	sched, _ := js.Stream(t.Context(), "JETSAGA_S_waiting_0")
	testutil.Await(t, 30*time.Second, func() string {
		info, err := sched.Info(t.Context())
		if err != nil {
			return err.Error()
		}
		if info.State.Msgs != 0 {
			return fmt.Sprintf("schedule stream holds %d messages", info.State.Msgs)
		}
		return ""
	})
	if cs, err := q.Counts(t.Context()); err != nil || cs.Active != n {
		t.Errorf("Counts: %+v %v, want %d active", cs, err, n)
	}
}
