package transport_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// wireKey is docs/wire.md's key(MessageID), computed here as a foreign
// client would.
func wireKey(id string) string {
	h := sha256.Sum256([]byte(id))
	return "_" + base64.RawURLEncoding.EncodeToString(h[:16])
}

// A publish that mistypes the kind token of a send (x for f, on the
// subject of a cancel record) is refused by the server, as docs/wire.md
// promises for every subject it does not give: it is not acknowledged,
// lost, and left to make a later send with its MessageID a duplicate.
func TestStrayCancelSubjectRefused(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	k := wireKey("victim")
	for _, subj := range []string{
		"JETSAGA.S.orders.0." + k + ".x.m", // x for f
		"JETSAGA.S.orders.0." + k + ".x.1", // a cancel record's stored form
	} {
		msg := &nats.Msg{Subject: subj, Header: nats.Header{}, Data: []byte("lost?")}
		msg.Header.Set(transport.HeaderMessageID, "victim")
		ack, err := js.PublishMsg(ctx, msg)
		if err == nil {
			t.Errorf("publish on %s: acknowledged by %s (seq %d), want a refusal", subj, ack.Stream, ack.Sequence)
		} else if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("publish on %s: %v, want no responders", subj, err)
		}
	}
	r, err := q.Send(ctx, &transport.Message{MessageID: "victim", Body: []byte("real")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Duplicate {
		t.Fatal("Send with MessageID victim: Duplicate, after only refused publishes with it")
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := q.Receive(rctx, 1)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "real" {
		t.Fatalf("Receive: %v, %v; want the message sent", ds, err)
	}
}

// oldScheduleConfig turns the schedule stream sched back into what the
// version before cancelTransform provisioned: cancel records written on
// their stored subject P.S.N.p.<key>.x.<seq>, no subject transform. It
// is what an older process that (re)opens the queue during a rolling
// deploy makes of the stream.
func oldScheduleConfig(t *testing.T, js jetstream.JetStream, sched string) {
	t.Helper()
	s, err := js.Stream(t.Context(), sched)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	for i, subj := range cfg.Subjects {
		if base, ok := strings.CutSuffix(subj, ".x.*.cancel"); ok {
			cfg.Subjects[i] = base + ".x.*"
		}
	}
	cfg.SubjectTransform = nil
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
}

// A queue whose schedule stream an earlier version provisioned (cancel
// records on P.S.N.p.<key>.x.<seq>) keeps working while processes of both
// versions open it in turn: Cancel succeeds on either stream config, the
// records of both are honoured (a cancelled MessageID stays taken, a
// second Cancel says it was cancelled), a message pending across the
// config changes arrives, and once the new config is in force a stray
// publish on .x. is refused.
func TestCancelAcrossScheduleStreamVersions(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	open := func() *transport.Queue {
		q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "roll"})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := open()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour)
	seqA, err := q.Schedule(ctx, &transport.Message{MessageID: "a", Body: []byte("a")}, at)
	if err != nil {
		t.Fatal(err)
	}
	seqB, err := q.Schedule(ctx, &transport.Message{MessageID: "b", Body: []byte("b")}, at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, &transport.Message{Body: []byte("pending")}); err != nil {
		t.Fatal(err)
	}

	oldScheduleConfig(t, js, "JETSAGA_S_roll_0")
	if err := q.Cancel(ctx, seqA); err != nil {
		t.Fatalf("Cancel on the old stream config: %v", err)
	}
	stray := &nats.Msg{Subject: "JETSAGA.S.roll.0." + wireKey("c") + ".x.m", Data: []byte("stray")}
	if _, err := js.PublishMsg(ctx, stray); err != nil {
		t.Fatalf("the old config takes .x.<anything> (the test's premise): %v", err)
	}

	upgraded := func(how string) {
		t.Helper()
		testutil.AwaitTrue(t, 10*time.Second, "the schedule stream upgraded after "+how, func() bool {
			s, err := js.Stream(ctx, "JETSAGA_S_roll_0")
			if err != nil {
				t.Fatal(err)
			}
			tr := s.CachedInfo().Config.SubjectTransform
			return tr != nil && strings.HasSuffix(tr.Source, ".x.*.cancel")
		})
		stray.Subject = "JETSAGA.S.roll.0." + wireKey("d") + ".x.m"
		if _, err := js.PublishMsg(ctx, stray); err == nil {
			t.Errorf("stray publish on .x.m acknowledged after %s, want refused", how)
		}
	}
	// A process of the new version that attaches the queue (a sender, or
	// jetsaga housekeep) upgrades the stream; so does one that opens it.
	b2, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if _, err := b2.Queue(ctx, "roll"); err != nil {
		t.Fatal(err)
	}
	upgraded("an attach")
	oldScheduleConfig(t, js, "JETSAGA_S_roll_0")
	q = open()
	upgraded("an open")
	if err := q.Cancel(ctx, seqB); err != nil {
		t.Fatalf("Cancel on the new stream config: %v", err)
	}
	for _, seq := range []uint64{seqA, seqB} {
		if err := q.Cancel(ctx, seq); !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), "was cancelled") {
			t.Errorf("Cancel(%#x) again: %v, want ErrNotFound: was cancelled", seq, err)
		}
	}
	for _, id := range []string{"a", "b"} {
		r, err := q.Send(ctx, &transport.Message{MessageID: id})
		if err != nil || !r.Duplicate {
			t.Errorf("Send with the cancelled MessageID %q: %+v, %v; want Duplicate", id, r, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ds, err := q.Receive(rctx, 10)
	if err != nil || len(ds) != 1 || string(ds[0].Body) != "pending" {
		t.Fatalf("Receive: %v, %v; want the pending message alone", ds, err)
	}
}

// A publish on a schedule's subject without the server's schedule headers
// is stored by the server as it is, and never activates: Browse shows it
// as a scheduled message, and Cancel removes it (it refused it as "not a
// scheduled message" before), leaving it cancelled like any other: not
// counted, its number answered "was cancelled", its MessageID taken.
func TestCancelRemovesScheduleWithoutScheduleHeaders(t *testing.T) {
	_, nc, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: "JETSAGA.S.orders.0." + wireKey("bare") + ".s", Header: nats.Header{}, Data: []byte("bare")}
	msg.Header.Set(transport.HeaderMessageID, "bare")
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	seq := transport.ScheduledBit | ack.Sequence // partition 0
	ms, err := q.Peek(ctx, transport.ScheduledBit, 10)
	if err != nil || len(ms) != 1 || ms[0].Seq != seq {
		t.Fatalf("Peek scheduled: %v, %v; want the bare message at %s", ms, err, transport.FormatSeq(seq))
	}
	if err := q.Cancel(ctx, seq); err != nil {
		t.Fatalf("Cancel(%s): %v", transport.FormatSeq(seq), err)
	}
	c, err := q.Counts(ctx)
	if err != nil || c.Scheduled != 0 {
		t.Errorf("Counts after Cancel: %+v, %v; want nothing scheduled", c, err)
	}
	if err := q.Cancel(ctx, seq); !errors.Is(err, transport.ErrNotFound) || !strings.Contains(err.Error(), "was cancelled") {
		t.Errorf("Cancel(%s) again: %v, want ErrNotFound: was cancelled", transport.FormatSeq(seq), err)
	}
	if r, err := q.Send(ctx, &transport.Message{MessageID: "bare"}); err != nil || !r.Duplicate {
		t.Errorf("Send with the cancelled MessageID: %+v, %v; want Duplicate", r, err)
	}
}

// A process that may not update streams (a sender whose user is denied
// the stream update API) attaches a queue with an earlier version's
// schedule stream all the same, and its Cancel works on it.
func TestAttachWithoutStreamUpdatePermission(t *testing.T) {
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true,
		Users: []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "sender", Password: "s", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.STREAM.UPDATE.>"}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	connect := func(user, pass string) (*nats.Conn, *transport.Broker) {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, pass))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		b, err := transport.NewJetStream(nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return nc, b
	}
	ctx := t.Context()
	anc, admin := connect("admin", "a")
	if _, err := admin.OpenQueue(ctx, transport.QueueConfig{Name: "perm"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	oldScheduleConfig(t, js, "JETSAGA_S_perm_0")

	_, sender := connect("sender", "s")
	q, err := sender.Queue(ctx, "perm")
	if err != nil {
		t.Fatalf("attach without the stream update permission: %v", err)
	}
	seq, err := q.Schedule(ctx, &transport.Message{MessageID: "p"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Cancel(ctx, seq); err != nil {
		t.Fatalf("Cancel on the old config: %v", err)
	}
	s, err := js.Stream(ctx, "JETSAGA_S_perm_0")
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedInfo().Config.SubjectTransform != nil {
		t.Error("the stream was upgraded by a user denied stream updates (the test's premise is wrong)")
	}
}
