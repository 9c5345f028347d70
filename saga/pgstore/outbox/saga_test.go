package outbox_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	SignedUp  struct{ Email string }
	Confirmed struct{ Email string }
	signup    struct{ Steps int }
)

func (SignedUp) MessageName() string  { return "outbox.test.SignedUp" }
func (Confirmed) MessageName() string { return "outbox.test.Confirmed" }

// signupSaga reports each sign-up it is started by on the queue
// "confirmed".
func signupSaga() saga.Saga {
	d := saga.Define[signup]("signup")
	saga.StartedBy(d, saga.By(func(m SignedUp) string { return m.Email }),
		func(ctx context.Context, c *saga.Context[signup], m SignedUp) error {
			c.Data.Steps++
			c.MarkComplete()
			return c.Send("confirmed", Confirmed(m))
		})
	return d
}

// TestSagaThroughOutbox: SendSaga writes the very message Dispatcher.Send
// sends (every field but the MessageID and what the broker assigns
// equal), and a saga started through the outbox, relayed by the
// dispatcher's own Run (saga.WithService), runs as one started by Send.
func TestSagaThroughOutbox(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	broker, _ := newBroker(t)
	tbl := newOutbox(t, pool, broker)
	d, err := saga.NewDispatcher(broker, memstore.New(), "signups", saga.WithSagas(signupSaga()),
		saga.WithService(tbl), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := broker.Queue(ctx, "signups")
	if err != nil {
		t.Fatal(err)
	}
	opts := []saga.SendOption{saga.WithMessageID("via-send")}
	if _, err := d.Send(ctx, SignedUp{Email: "ann@example.com"}, opts...); err != nil {
		t.Fatal(err)
	}
	err = inTx(t, pool, func(tx pgx.Tx) error {
		_, err := tbl.SendSaga(ctx, tx, d, SignedUp{Email: "bob@example.com"}, saga.WithMessageID("via-outbox"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Relay by hand, before the dispatcher runs, to compare the two as
	// stored.
	if n, err := tbl.Relay(ctx); n != 1 || err != nil {
		t.Fatalf("Relay: %d, %v; want 1, nil", n, err)
	}
	var viaSend, viaOutbox *transport.Message
	testutil.Await(t, 10*time.Second, func() string {
		viaSend, viaOutbox = nil, nil
		ms, err := q.Peek(ctx, 0, 10)
		if err != nil {
			return err.Error()
		}
		for _, m := range ms {
			switch m.MessageID {
			case "via-send":
				viaSend = m
			case "via-outbox":
				viaOutbox = m
			}
		}
		if viaSend == nil || viaOutbox == nil {
			return fmt.Sprintf("%d messages in the queue", len(ms))
		}
		return ""
	})
	if viaSend.ContentType != viaOutbox.ContentType || viaSend.CorrelationID != viaOutbox.CorrelationID ||
		viaSend.SessionID != viaOutbox.SessionID || viaSend.ReplyTo != viaOutbox.ReplyTo ||
		viaSend.Subject != viaOutbox.Subject || !maps.Equal(viaSend.Properties, viaOutbox.Properties) ||
		!viaSend.ScheduledAt.Equal(viaOutbox.ScheduledAt) || viaSend.State != viaOutbox.State {
		t.Errorf("via Send:   %+v\nvia outbox: %+v\nwant the same but for the MessageID, body and broker fields", viaSend, viaOutbox)
	}
	if want := `{"Email":"bob@example.com"}`; string(viaOutbox.Body) != want || string(viaSend.Body) != `{"Email":"ann@example.com"}` {
		t.Errorf("bodies %s and %s, want ann's and %s", viaSend.Body, viaOutbox.Body, want)
	}
	// The dispatcher runs the relay: a third sign-up goes through it.
	testutil.RunUntilCleanup(t, d.Run)
	err = inTx(t, pool, func(tx pgx.Tx) error {
		_, err := tbl.SendSaga(ctx, tx, d, SignedUp{Email: "carl@example.com"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	confirmed, err := broker.Queue(ctx, "confirmed")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range receive(t, confirmed, 3) {
		c, err := saga.Decode[Confirmed](m)
		if err != nil {
			t.Fatal(err)
		}
		got[c.Email] = true
	}
	for _, e := range []string{"ann@example.com", "bob@example.com", "carl@example.com"} {
		if !got[e] {
			t.Errorf("%s not confirmed; got %v", e, got)
		}
	}
}
