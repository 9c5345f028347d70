package transport_test

import (
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The tests in this file check, on a real server and with a raw nats.go
// client as any other client would write it, what docs/wire.md says about
// scheduled sends, reading a delivery, and dead-lettering.

// wirePartition is docs/wire.md's partition of a MessageID: FNV-1a 64 of
// its bytes modulo the number of partitions.
func wirePartition(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// errCode returns the err_code of a JetStream API error, or 0.
func errCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}

// docs/wire.md, Scheduled sends: a target the partition's schedule stream
// does not listen on is refused with err_code 10190; the acknowledgement's
// seq, as p*2^48 + 2^47 + seq, is the number Queue.Cancel takes.
func TestWireScheduledSends(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "orders", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p := wirePartition("sched", 2) // where its duplicates are detected
	ps, other := strconv.Itoa(p), strconv.Itoa(1-p)
	k := wireKey("sched")
	sched := func(target string) (*jetstream.PubAck, error) {
		at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		m := &nats.Msg{Subject: "JETSAGA.S.orders." + ps + "." + k + ".s", Header: nats.Header{}, Data: []byte("later")}
		m.Header.Set(transport.HeaderMessageID, "sched")
		m.Header.Set(transport.HeaderScheduledAt, at)
		m.Header.Set("Nats-Schedule", "@at "+at)
		m.Header.Set("Nats-Schedule-Target", target)
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", "0")
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "JETSAGA.S.orders."+ps+"."+k+".>")
		return js.PublishMsg(ctx, m)
	}
	for _, bad := range []string{
		"JETSAGA.S.orders." + ps + "." + k + ".x.m",    // a subject the server refuses
		"JETSAGA.S.orders." + other + "." + k + ".f.m", // another partition's
		"JETSAGA.S.orders." + ps + "." + k + ".s",      // the schedule's own
	} {
		if _, err := sched(bad); errCode(err) != 10190 {
			t.Errorf("schedule with target %s: %v, want err_code 10190", bad, err)
		}
	}
	ack, err := sched("JETSAGA.S.orders." + ps + "." + k + ".f.m")
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(p)<<48 + 1<<47 + ack.Sequence
	if got := transport.FormatSeq(seq); got != ps+":s"+strconv.FormatUint(ack.Sequence, 10) {
		t.Errorf("FormatSeq(%d) = %s, want %s:s%d", seq, got, ps, ack.Sequence)
	}
	if err := q.Cancel(ctx, seq); err != nil {
		t.Fatalf("Cancel(p*2^48 + 2^47 + seq = %d): %v", seq, err)
	}
	if r, err := q.Send(ctx, &transport.Message{MessageID: "sched"}); err != nil || !r.Duplicate {
		t.Errorf("Send with the cancelled MessageID: %+v, %v; want Duplicate", r, err)
	}
}

// docs/wire.md, Receiving and settling and Dead letters: the reply
// subject gives the stream sequence and the enqueue time in nanoseconds,
// which make the message's number p*2^48 + stream seq; a client that
// dead-letters writes the four Jetsaga-Dead-Letter- headers and
// Nats-Msg-Id dl-<number>-<RFC3339Nano UTC>, which makes a second try a
// duplicate; a copy with the delivery's Nats-Stream-Source is refused
// with err_code 10227.
func TestWireReceiveAndDeadLetter(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "orders", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const p = 1
	m := &nats.Msg{Subject: "JETSAGA.S.orders.1." + wireKey("poison") + ".f.m", Header: nats.Header{}, Data: []byte("poison")}
	m.Header.Set(transport.HeaderMessageID, "poison")
	m.Header.Set(transport.HeaderPropertyPrefix+"jetsaga-type", "x.Poison")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "JETSAGA_Q_orders_1", transport.ReceiveConsumer)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>
	tok := strings.Split(d.Reply(), ".")
	if len(tok) != 9 {
		t.Fatalf("reply subject %s has %d tokens, the document's form 9", d.Reply(), len(tok))
	}
	sseq, err1 := strconv.ParseUint(tok[5], 10, 64)
	ns, err2 := strconv.ParseInt(tok[7], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("reply subject %s: %v %v", d.Reply(), err1, err2)
	}
	enqueued := time.Unix(0, ns).UTC()
	number := uint64(p)<<48 + sseq
	ms, err := q.Peek(ctx, uint64(p)<<48, 1)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Peek: %v, %v", ms, err)
	}
	if ms[0].Seq != number || !ms[0].EnqueuedAt.Equal(enqueued) {
		t.Errorf("Peek gives number %d enqueued %v; from the reply subject: %d, %v", ms[0].Seq, ms[0].EnqueuedAt, number, enqueued)
	}

	// Dead-letter it as the document says.
	dl := &nats.Msg{Subject: "JETSAGA.D.orders.0.m", Header: nats.Header{}, Data: d.Data()}
	for k, vs := range d.Headers() {
		if strings.HasPrefix(k, "Jetsaga-") {
			dl.Header[k] = vs
		}
	}
	dl.Header.Set(transport.HeaderDeadLetterReason, "Poison")
	dl.Header.Set(transport.HeaderDeadLetterDescription, "a client gave up")
	dl.Header.Set(transport.HeaderDeadLetterSource, "orders")
	dl.Header.Set(transport.HeaderDeadLetterSeq, strconv.FormatUint(number, 10))
	dl.Header.Set("Nats-Msg-Id", "dl-"+strconv.FormatUint(number, 10)+"-"+enqueued.Format(time.RFC3339Nano))

	withSource := &nats.Msg{Subject: dl.Subject, Header: nats.Header{}, Data: dl.Data}
	for k, vs := range dl.Header {
		withSource.Header[k] = vs
	}
	withSource.Header.Set("Nats-Msg-Id", "other")
	withSource.Header.Set("Nats-Stream-Source", d.Headers().Get("Nats-Stream-Source"))
	if withSource.Header.Get("Nats-Stream-Source") == "" {
		t.Fatal("the delivery has no Nats-Stream-Source header (the test's premise)")
	}
	if _, err := js.PublishMsg(ctx, withSource); errCode(err) != 10227 {
		t.Errorf("dead letter with Nats-Stream-Source: %v, want err_code 10227", err)
	}

	for try, wantDup := range []bool{false, true} {
		ack, err := js.PublishMsg(ctx, dl)
		if err != nil || ack.Duplicate != wantDup {
			t.Fatalf("dead-letter publish %d: %+v, %v; want duplicate %v", try+1, ack, err, wantDup)
		}
	}
	if err := d.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := q.DeadLetterQueue().Peek(ctx, 0, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("dead letters: %v, %v; want one", got, err)
	}
	g := got[0]
	if g.DeadLetterSeq != number || g.DeadLetterSource != "orders" || g.DeadLetterReason != "Poison" ||
		g.MessageID != "poison" || g.Properties["jetsaga-type"] != "x.Poison" || string(g.Body) != "poison" {
		t.Errorf("dead letter as jetsaga reads it: %+v", g)
	}
	c, err := q.Counts(ctx)
	if err != nil || c.Active != 0 || c.DeadLettered != 1 {
		t.Errorf("Counts: %+v, %v; want no active message, one dead letter", c, err)
	}
}
