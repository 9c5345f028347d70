package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga/pgstore/outbox"
	"github.com/jetsaga/jetsaga/transport"
)

// inTx runs f in a transaction on pool, committing if f returns nil and
// rolling back otherwise.
func inTx(t testing.TB, pool *pgxpool.Pool, f func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(t.Context(), pool, f)
}

// receive takes n messages from q (completing them), keyed by MessageID;
// a MessageID received twice fails the test.
func receive(t *testing.T, q *transport.Queue, n int) map[string]*transport.Message {
	t.Helper()
	got := map[string]*transport.Message{}
	testutil.Await(t, 30*time.Second, func() string {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		ds, _ := q.Receive(ctx, 100)
		for _, d := range ds {
			if _, dup := got[d.MessageID]; dup {
				t.Errorf("message %s received twice", d.MessageID)
			}
			got[d.MessageID] = d.Message
			if err := d.Complete(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) < n {
			return fmt.Sprintf("%d of %d messages", len(got), n)
		}
		return ""
	})
	return got
}

// pending returns how many rows of tbl are not dead.
func pending(t testing.TB, pool *pgxpool.Pool, tbl *outbox.Table) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+tbl.Name()+" WHERE dead_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSendCommitRollback: the message of a committed transaction reaches
// its queue with every field as written (and a MessageID given when it
// had none), woken by the commit's notification and not the poll; a
// rolled-back one never does.
func TestSendCommitRollback(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "signups"})
	if err != nil {
		t.Fatal(err)
	}
	// A poll interval longer than the test: only a notification wakes it.
	tbl := newOutbox(t, pool, broker, outbox.WithPollInterval(time.Hour))
	testutil.RunUntilCleanup(t, tbl.Run)
	if _, err := pool.Exec(ctx, "CREATE TABLE users (email text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	full := &transport.Message{
		Body: []byte(`{"email":"ann@example.com"}`), ContentType: "application/json",
		MessageID: "signup-ann", CorrelationID: "corr-1", SessionID: "ann", ReplyTo: "replies",
		Subject: "signup", Properties: map[string]string{"tenant": "acme", "trace": "00-ab-cd-01"},
	}
	bare := &transport.Message{Body: []byte("bob")}
	lost := &transport.Message{Body: []byte("carl"), MessageID: "signup-carl"}
	var bareID string
	err = inTx(t, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO users VALUES ('ann@example.com'), ('bob@example.com')"); err != nil {
			return err
		}
		if id, err := tbl.Send(ctx, tx, "signups", full); err != nil || id != full.MessageID {
			return fmt.Errorf("send: %q, %v; want %q", id, err, full.MessageID)
		}
		bareID, err = tbl.Send(ctx, tx, "signups", bare)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if bareID == "" || bare.MessageID != "" {
		t.Fatalf("Send gave MessageID %q and left the message's as %q; want one given, the message unchanged", bareID, bare.MessageID)
	}
	errRollback := errors.New("rolled back")
	err = inTx(t, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO users VALUES ('carl@example.com')"); err != nil {
			return err
		}
		if _, err := tbl.Send(ctx, tx, "signups", lost); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	got := receive(t, q, 2)
	if got[lost.MessageID] != nil || len(got) != 2 {
		t.Fatalf("received %v, want %s and %s (%s rolled back)", slicesKeys(got), full.MessageID, bareID, lost.MessageID)
	}
	m := got[full.MessageID]
	if m == nil {
		t.Fatalf("got %v, want %s", slicesKeys(got), full.MessageID)
	}
	if string(m.Body) != string(full.Body) || m.ContentType != full.ContentType || m.CorrelationID != full.CorrelationID ||
		m.SessionID != full.SessionID || m.ReplyTo != full.ReplyTo || m.Subject != full.Subject || !maps.Equal(m.Properties, full.Properties) {
		t.Errorf("received %+v, want the fields of %+v", m, full)
	}
	if b := got[bareID]; b == nil || string(b.Body) != "bob" {
		t.Errorf("the message without a MessageID: got %v, want %s", slicesKeys(got), bareID)
	}
	testutil.AwaitTrue(t, 10*time.Second, "the table empty", func() bool { return pending(t, pool, tbl) == 0 })
	// Nothing else arrives: the rolled-back message was never written.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ds, err := q.Receive(rctx, 10); err == nil {
		t.Fatalf("received %s, want nothing (rolled back)", ds[0].MessageID)
	}
}

func slicesKeys(m map[string]*transport.Message) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestScheduleFiresAtItsTime: a message scheduled through the outbox is
// scheduled on the queue and becomes active at its time, never before.
func TestScheduleFiresAtItsTime(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "expiries"})
	if err != nil {
		t.Fatal(err)
	}
	tbl := newOutbox(t, pool, broker)
	testutil.RunUntilCleanup(t, tbl.Run)
	at := time.Now().Add(2 * time.Second).Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	viaField := &transport.Message{Body: []byte("b"), MessageID: "by-field", ScheduledAt: at}
	err = inTx(t, pool, func(tx pgx.Tx) error {
		if _, err := tbl.Schedule(ctx, tx, "expiries", &transport.Message{Body: []byte("a"), MessageID: "by-call"}, at); err != nil {
			return err
		}
		_, err := tbl.Send(ctx, tx, "expiries", viaField)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, 10*time.Second, "the rows relayed", func() bool { return pending(t, pool, tbl) == 0 })
	scheduled := 0
	for m, err := range q.Browse(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if m.State == transport.Scheduled && m.ScheduledAt.Equal(at) {
			scheduled++
		}
	}
	if scheduled != 2 && time.Now().Before(at) {
		t.Fatalf("%d messages scheduled for %v, want 2", scheduled, at)
	}
	got := receive(t, q, 2)
	for _, id := range []string{"by-call", "by-field"} {
		m := got[id]
		if m == nil {
			t.Fatalf("got %v, want %s", slicesKeys(got), id)
		}
		if m.EnqueuedAt.Before(at) || !m.ScheduledAt.Equal(at) {
			t.Errorf("%s: enqueued %v, scheduled %v; want at or after %v, scheduled then", id, m.EnqueuedAt, m.ScheduledAt, at)
		}
	}
}

// TestTwoRelaysPublishEachRowOnce: two relays on one table, 400 rows
// written while they run: each row is published exactly once (counted at
// the publish, before the queue's duplicate detection could hide a
// second one) and reaches the queue.
func TestTwoRelaysPublishEachRowOnce(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	a := newOutbox(t, pool, broker, outbox.WithBatchSize(10))
	b, err := outbox.New(ctx, pool, broker, outbox.WithTable(a.Name()), outbox.WithBatchSize(10), outbox.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	publishes := map[string]int{}
	by := map[*outbox.Table]int{}
	for _, tbl := range []*outbox.Table{a, b} {
		outbox.OnPublish(tbl, func(_, id string) {
			mu.Lock()
			publishes[id]++
			by[tbl]++
			mu.Unlock()
		})
		testutil.RunUntilCleanup(t, tbl.Run)
	}
	const writers, each = 4, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				err := inTx(t, pool, func(tx pgx.Tx) error {
					_, err := a.Send(ctx, tx, "work", &transport.Message{Body: []byte("x"), MessageID: fmt.Sprintf("w%d-%d", w, i)})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := receive(t, q, writers*each)
	if len(got) != writers*each {
		t.Fatalf("%d messages, want %d", len(got), writers*each)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range publishes {
		if n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
	}
	t.Logf("relay a published %d, relay b %d", by[a], by[b])
}

// TestRefusedRowDoesNotBlock: a row the queue refuses for good (no
// SessionID for a queue that requires sessions) is marked dead with the
// error, and the rows after it are relayed.
func TestRefusedRowDoesNotBlock(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	if _, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "sessions", RequiresSession: true}); err != nil {
		t.Fatal(err)
	}
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	tbl := newOutbox(t, pool, broker)
	err = inTx(t, pool, func(tx pgx.Tx) error {
		if _, err := tbl.Send(ctx, tx, "sessions", &transport.Message{Body: []byte("no session"), MessageID: "bad"}); err != nil {
			return err
		}
		_, err := tbl.Send(ctx, tx, "plain", &transport.Message{Body: []byte("fine"), MessageID: "good"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, tbl.Run)
	if got := receive(t, q, 1); got["good"] == nil {
		t.Fatalf("got %v, want good", slicesKeys(got))
	}
	var id, lastErr string
	var attempts int
	err = pool.QueryRow(ctx, "SELECT message_id, attempts, last_error FROM "+tbl.Name()+" WHERE dead_at IS NOT NULL").Scan(&id, &attempts, &lastErr)
	if err != nil {
		t.Fatalf("the dead row: %v", err)
	}
	if id != "bad" || attempts != 1 || !strings.Contains(lastErr, "session") {
		t.Errorf("dead row %s, %d attempts, error %q; want bad, 1, about sessions", id, attempts, lastErr)
	}
	if n := pending(t, pool, tbl); n != 0 {
		t.Errorf("%d rows pending, want 0", n)
	}
}

// TestHostileInput: queue names that would be NATS wildcards or SQL,
// bad property keys and control characters are ErrInvalidMessage at
// Send (wrapping the transport's error), and nothing is written;
// SQL-looking values and wildcard-looking IDs are data, written as
// parameters and delivered byte for byte.
func TestHostileInput(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	tbl := newOutbox(t, pool, broker)
	for _, tc := range []struct {
		name    string
		queue   string
		m       *transport.Message
		wantErr error
	}{
		{"wildcard queue", "orders.>", &transport.Message{}, transport.ErrInvalidQueueName},
		{"star queue", "*", &transport.Message{}, transport.ErrInvalidQueueName},
		{"SQL queue", "x'); DROP TABLE users; --", &transport.Message{}, transport.ErrInvalidQueueName},
		{"empty queue", "", &transport.Message{}, transport.ErrInvalidQueueName},
		{"property key", "q", &transport.Message{Properties: map[string]string{"a.b": "v"}}, transport.ErrInvalidMessage},
		{"control character", "q", &transport.Message{Subject: "a\x00b"}, transport.ErrInvalidMessage},
		{"long ID", "q", &transport.Message{MessageID: strings.Repeat("x", 129)}, transport.ErrInvalidMessage},
		{"too large", "q", &transport.Message{Body: make([]byte, 2<<20)}, transport.ErrMessageTooLarge},
		{"nil", "q", nil, outbox.ErrInvalidMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := inTx(t, pool, func(tx pgx.Tx) error {
				_, err := tbl.Send(ctx, tx, tc.queue, tc.m)
				return err
			})
			if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v and %v", err, outbox.ErrInvalidMessage, tc.wantErr)
			}
		})
	}
	err := inTx(t, pool, func(tx pgx.Tx) error {
		_, err := tbl.Schedule(ctx, tx, "q", &transport.Message{}, time.Time{})
		return err
	})
	if !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Errorf("zero schedule time: got %v, want %v", err, outbox.ErrInvalidMessage)
	}
	if _, err := tbl.Send(ctx, nil, "q", &transport.Message{}); !errors.Is(err, outbox.ErrNoTx) {
		t.Errorf("nil transaction: got %v, want %v", err, outbox.ErrNoTx)
	}
	if n := pending(t, pool, tbl); n != 0 {
		t.Fatalf("%d rows written for refused messages, want 0", n)
	}
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "hostile"})
	if err != nil {
		t.Fatal(err)
	}
	sqlish := "'); DROP TABLE " + tbl.Name() + "; --"
	m := &transport.Message{
		Body: []byte(sqlish), MessageID: "orders.*.>", SessionID: "a.b.>", CorrelationID: "$1",
		Subject: sqlish, Properties: map[string]string{"x": sqlish, "y": `{"json": true}`},
	}
	if err := inTx(t, pool, func(tx pgx.Tx) error { _, err := tbl.Send(ctx, tx, "hostile", m); return err }); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, tbl.Run)
	got := receive(t, q, 1)[m.MessageID]
	if got == nil || string(got.Body) != sqlish || got.SessionID != m.SessionID || got.CorrelationID != "$1" ||
		got.Subject != sqlish || !maps.Equal(got.Properties, m.Properties) {
		t.Fatalf("received %+v, want %+v", got, m)
	}
}

// TestSchemaChecked: New refuses a table that was never migrated or that
// only newer code can read, and a name that is not a plain identifier.
func TestSchemaChecked(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	if _, err := outbox.New(ctx, pool, broker); !errors.Is(err, outbox.ErrNeedsMigration) {
		t.Fatalf("unmigrated: got %v, want %v", err, outbox.ErrNeedsMigration)
	}
	if err := outbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Migrate(ctx, pool); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := outbox.New(ctx, pool, broker); err != nil {
		t.Fatalf("migrated: %v", err)
	}
	if _, err := pool.Exec(ctx, "UPDATE jetsaga_outbox_schema SET version = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.New(ctx, pool, broker); !errors.Is(err, outbox.ErrNeedsMigration) {
		t.Fatalf("older schema: got %v, want %v", err, outbox.ErrNeedsMigration)
	}
	if _, err := pool.Exec(ctx, "UPDATE jetsaga_outbox_schema SET version = 3, readable_by = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.New(ctx, pool, broker); !errors.Is(err, outbox.ErrSchemaTooNew) {
		t.Fatalf("newer schema: got %v, want %v", err, outbox.ErrSchemaTooNew)
	}
	for _, name := range []string{"Outbox", "a;b", `x"y`, "a.b.c", strings.Repeat("x", 56), ""} {
		if err := outbox.Migrate(ctx, pool, outbox.WithTable(name)); !errors.Is(err, outbox.ErrInvalidOption) {
			t.Errorf("table %q: got %v, want %v", name, err, outbox.ErrInvalidOption)
		}
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Migrate(ctx, pool, outbox.WithTable("billing.outbox")); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.New(ctx, pool, broker, outbox.WithTable("billing.outbox")); err != nil {
		t.Fatalf("schema-qualified: %v", err)
	}
}

// TestRelayListensAgainAfterRestart: a relay that only notifications wake
// (its poll longer than the test) still relays after PostgreSQL restarts
// (immediate shutdown) under it: it listens again on a new connection,
// and passes once it does, for rows committed while it could not listen.
func TestRelayListensAgainAfterRestart(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	q, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: "after-restart"})
	if err != nil {
		t.Fatal(err)
	}
	tbl := newOutbox(t, pool, broker, outbox.WithPollInterval(time.Hour))
	testutil.RunUntilCleanup(t, tbl.Run)
	send := func(id string) {
		t.Helper()
		testutil.Await(t, 30*time.Second, func() string { // the pool reconnects after the restart
			err := inTx(t, pool, func(tx pgx.Tx) error {
				_, err := tbl.Send(ctx, tx, "after-restart", &transport.Message{Body: []byte(id), MessageID: id})
				return err
			})
			if err != nil {
				return err.Error()
			}
			return ""
		})
	}
	send("before")
	receive(t, q, 1)
	if err := pg.Restart(ctx, pgtest.Immediate); err != nil {
		t.Fatal(err)
	}
	send("after")
	if got := receive(t, q, 1); got["after"] == nil {
		t.Fatalf("got %v, want after", slicesKeys(got))
	}
}
