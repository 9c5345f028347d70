package saga_test

// Stage settle (settle.go): how a delivery ends, here the dead-letter
// queue: the reason, the description and the original message kept.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// R5: dead-lettering with reasons.

type DLGood struct{ ID string }

type DLPanic struct{ ID string }

type DLPermanent struct{ ID string }

type DLPoke struct{ ID string }

func dlSaga(panics, perms *atomic.Int64) *saga.Definition[counter] {
	d := saga.Define[counter]("dl", saga.WhenNotFound(saga.NotFoundPolicy{DeadLetter: true}))
	saga.StartedBy(d, saga.By(func(m DLGood) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ DLGood) error {
			c.Data.Count++
			return nil
		})
	saga.StartedBy(d, saga.By(func(m DLPanic) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m DLPanic) error {
			panics.Add(1)
			c.Data.Count++
			panic("boom-" + m.ID)
		})
	saga.StartedBy(d, saga.By(func(m DLPermanent) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m DLPermanent) error {
			perms.Add(1)
			c.Data.Count++
			return saga.Permanent(errors.New("card declined for " + m.ID))
		})
	saga.Handles(d, saga.By(func(m DLPoke) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ DLPoke) error {
			c.Data.Count++
			return nil
		})
	return d
}

func TestDeadLetterReasons(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "dl", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	var panics, perms atomic.Int64
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(dlSaga(&panics, &perms)),
		saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))

	typed := func(typ string, extra ...string) map[string]string {
		p := map[string]string{saga.TypeProperty: typ}
		for i := 0; i+1 < len(extra); i += 2 {
			p[extra[i]] = extra[i+1]
		}
		return p
	}
	cases := []struct {
		id, reason, descHas string
		msg                 *transport.Message
	}{
		{id: "m-malformed", reason: saga.ReasonMalformed, descHas: "malformed",
			msg: &transport.Message{Body: []byte("{not json"), ContentType: "application/json",
				Properties: typed(saga.MessageName[DLGood](), "trace", "t-1")}},
		{id: "m-unknown", reason: saga.ReasonUnknownType, descHas: "nobody.Handles",
			msg: &transport.Message{Body: []byte(`{"ID":"u-1"}`), Properties: typed("nobody.Handles", "trace", "t-2")}},
		{id: "m-untyped", reason: saga.ReasonUnknownType, descHas: "unknown message type",
			msg: &transport.Message{Body: []byte("plain text")}},
		{id: "m-foreign-timeout", reason: saga.ReasonUnknownType, descHas: "elsewhere",
			msg: &transport.Message{Body: []byte(`{}`), Properties: typed(saga.MessageName[DLGood](),
				"jetsaga-saga", "elsewhere", "jetsaga-saga-id", "x", "jetsaga-token", "tok")}},
		{id: "m-panic", reason: saga.ReasonRetriesExhausted, descHas: "boom-p-1",
			msg: &transport.Message{Body: []byte(`{"ID":"p-1"}`), Properties: typed(saga.MessageName[DLPanic](), "trace", "t-3")}},
		{id: "m-permanent", reason: saga.ReasonPermanent, descHas: "card declined for x-1",
			msg: &transport.Message{Body: []byte(`{"ID":"x-1"}`), Properties: typed(saga.MessageName[DLPermanent]())}},
		{id: "m-notfound", reason: saga.ReasonSagaNotFound, descHas: "ghost",
			msg: &transport.Message{Body: []byte(`{"ID":"ghost"}`), Properties: typed(saga.MessageName[DLPoke]())}},
	}
	for _, tc := range cases {
		tc.msg.MessageID = tc.id
		rawSend(t, q, tc.msg)
	}
	rawSend(t, q, &transport.Message{MessageID: "m-good", Body: []byte(`{"ID":"g-1"}`), Properties: typed(saga.MessageName[DLGood]())})
	run(t, d)

	dlq := q.DeadLetterQueue()
	byID := map[string]*transport.Message{}
	testutil.Await(t, 20*time.Second, func() string {
		clear(byID)
		for _, m := range peekAll(t, dlq) {
			byID[originalID(m)] = m
		}
		if len(byID) < len(cases) {
			return fmt.Sprintf("%d of %d messages dead-lettered: %v", len(byID), len(cases), keys(byID))
		}
		return queueEmpty(t, q)
	})
	if len(byID) != len(cases) {
		t.Errorf("dead-lettered %v, want exactly the %d bad messages", keys(byID), len(cases))
	}
	for _, tc := range cases {
		m := byID[tc.id]
		if m == nil {
			t.Errorf("%s: not dead-lettered (dead letters: %v)", tc.id, keys(byID))
			continue
		}
		if m.DeadLetterReason != tc.reason {
			t.Errorf("%s: reason %q, want %q (description %q)", tc.id, m.DeadLetterReason, tc.reason, m.DeadLetterDescription)
		}
		if !strings.Contains(m.DeadLetterDescription, tc.descHas) {
			t.Errorf("%s: description %q does not mention %q", tc.id, m.DeadLetterDescription, tc.descHas)
		}
		if string(m.Body) != string(tc.msg.Body) {
			t.Errorf("%s: body %q, want the original %q", tc.id, m.Body, tc.msg.Body)
		}
		for k, v := range tc.msg.Properties {
			if m.Properties[k] != v {
				t.Errorf("%s: property %s = %q, want the original %q", tc.id, k, m.Properties[k], v)
			}
		}
		if m.ContentType != tc.msg.ContentType || m.DeadLetterSource != qcfg.Name || m.DeadLetterSeq == 0 {
			t.Errorf("%s: content type %q, source %q, seq %d; want %q, %q, the original seq",
				tc.id, m.ContentType, m.DeadLetterSource, m.DeadLetterSeq, tc.msg.ContentType, qcfg.Name)
		}
	}
	// (1 + Immediate) runs per delivery, 1 + Delayed deliveries.
	if got, want := panics.Load(), int64((1+fastRetry.Immediate)*(1+fastRetry.Delayed)); got != want {
		t.Errorf("panicking handler ran %d times, want %d", got, want)
	}
	if got := perms.Load(); got != 1 {
		t.Errorf("handler failing permanently ran %d times, want 1 (no retries)", got)
	}
	for _, id := range []string{"p-1", "x-1", "ghost"} {
		if _, inst, ok := data[counter](t, d, "dl", id); ok {
			t.Errorf("instance %s stored (%+v) by a step that failed", id, inst)
		}
	}
	if c, _, _ := data[counter](t, d, "dl", "g-1"); c.Count != 1 {
		t.Errorf("good message: count %d, want 1", c.Count)
	}
}

// Dead letters after delayed retries.

type DLFail struct{ ID string }

func TestDeadLetterAfterRetriesKeepsMessage(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "dlkeep", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	def := saga.Define[counter]("dlkeep")
	saga.StartedBy(def, saga.By(func(m DLFail) string { return m.ID }),
		func(context.Context, *saga.Context[counter], DLFail) error { return errors.New("payment service down") })
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry))
	ctx := ctxFor(t)
	if _, err := d.Send(ctx, DLFail{ID: "o-43"}, saga.WithMessageID("order-43"), saga.WithProperty("trace", "t-43"),
		saga.WithCorrelationID("corr-43")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Send(ctx, DLFail{ID: "o-44"}, saga.WithProperty("trace", "t-44")); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	dlq := q.DeadLetterQueue()
	testutil.Await(t, 20*time.Second, func() string {
		if got := len(peekAll(t, dlq)); got != 2 {
			return fmt.Sprintf("%d of 2 messages dead-lettered", got)
		}
		return queueEmpty(t, q)
	})
	byTrace := map[string]*transport.Message{}
	for _, m := range peekAll(t, dlq) {
		byTrace[m.Properties["trace"]] = m
	}
	for _, tc := range []struct{ trace, id, corr, body string }{
		{"t-43", "order-43", "corr-43", `{"ID":"o-43"}`},
		{"t-44", "", "", `{"ID":"o-44"}`},
	} {
		m := byTrace[tc.trace]
		if m == nil {
			t.Errorf("%s: not dead-lettered", tc.trace)
			continue
		}
		if m.MessageID != tc.id || m.CorrelationID != tc.corr || string(m.Body) != tc.body {
			t.Errorf("%s: MessageID %q, CorrelationID %q, body %s; want the original's: %q, %q, %s",
				tc.trace, m.MessageID, m.CorrelationID, m.Body, tc.id, tc.corr, tc.body)
		}
		if m.DeadLetterReason != saga.ReasonRetriesExhausted || !strings.Contains(m.DeadLetterDescription, "payment service down") {
			t.Errorf("%s: %s: %s", tc.trace, m.DeadLetterReason, m.DeadLetterDescription)
		}
		if m.Properties[saga.TypeProperty] != saga.MessageName[DLFail]() {
			t.Errorf("%s: type property %q lost", tc.trace, m.Properties[saga.TypeProperty])
		}
		for _, internal := range []string{"jetsaga-origin", "jetsaga-attempt", "jetsaga-message-id"} {
			if v, ok := m.Properties[internal]; ok {
				t.Errorf("%s: internal property %s=%q kept", tc.trace, internal, v)
			}
		}
		want := map[string]string{
			saga.PropertyDelayedRetries: "1",
			saga.PropertyAttempts:       "4", // (1 + Immediate) runs on each of 2 deliveries
		}
		for k, v := range want {
			if m.Properties[k] != v {
				t.Errorf("%s: property %s = %q, want %q", tc.trace, k, m.Properties[k], v)
			}
		}
		if !strings.Contains(m.Properties[saga.PropertyLastError], "payment service down") {
			t.Errorf("%s: %s = %q, want the handler's error", tc.trace, saga.PropertyLastError, m.Properties[saga.PropertyLastError])
		}
		if ts, err := time.Parse(time.RFC3339Nano, m.Properties[saga.PropertyFirstFailure]); err != nil || ts.After(m.EnqueuedAt) {
			t.Errorf("%s: %s = %q (%v), want a time before the dead letter", tc.trace, saga.PropertyFirstFailure, m.Properties[saga.PropertyFirstFailure], err)
		}
	}
}
