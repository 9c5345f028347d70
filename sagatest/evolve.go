package sagatest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Testing a change of a saga against what an older version left behind:
// records and messages recorded from it (golden files), loaded and
// delivered under the new version. See "Changing a saga" in the package
// documentation.

// StoredRecord returns the record the store holds for the instance of s
// with this id, as stored: to record a golden record of this version of
// the saga, which Restore loads under a later one. It fails the test if
// there is none.
func (e *Env) StoredRecord(s saga.Saga, id string) []byte {
	e.t.Helper()
	e.settle()
	b, _, err := e.store.Load(e.ctx, saga.StoreKey(s.Name(), id))
	if err != nil {
		e.t.Fatalf("sagatest: StoredRecord(%s, %s): %v", s.Name(), id, err)
	}
	return b
}

// Restore stores record, as StoredRecord returned it (perhaps under an
// older version of the saga), as the instance of s with this id, in
// place of any record there: the instance is then as the older version
// left it, and its next step upcasts its data (saga.DataVersion).
func (e *Env) Restore(s saga.Saga, id string, record []byte) {
	e.t.Helper()
	e.settle()
	key := saga.StoreKey(s.Name(), id)
	_, rev, err := e.store.Load(e.ctx, key)
	if err != nil && !errors.Is(err, saga.ErrNotFound) {
		e.t.Fatalf("sagatest: Restore(%s, %s): %v", s.Name(), id, err)
		return
	}
	if _, err := e.store.Put(e.ctx, key, record, rev); err != nil {
		e.t.Fatalf("sagatest: Restore(%s, %s): %v", s.Name(), id, err)
		return
	}
	e.record(0, time.Now(), fmt.Sprintf("test restored %s/%s%s", s.Name(), id, e.bodySuffix(record)))
}

// Deliver sends m to the dispatcher's queue as it is — properties,
// body, MessageID — and waits until it has been handled: a message, or
// the message of a timeout, recorded from an older version of a saga
// (Env.Messages, or the scheduled messages of Env.Broker's Queue). If m
// is scheduled for a time to come (ScheduledAt), it is scheduled, and
// handled once the clock reaches it (Advance).
func (e *Env) Deliver(m *transport.Message) {
	e.t.Helper()
	e.drive()
	c := &transport.Message{
		Body: m.Body, ContentType: m.ContentType, MessageID: m.MessageID, CorrelationID: m.CorrelationID,
		ReplyTo: m.ReplyTo, SessionID: m.SessionID, Subject: m.Subject, Properties: m.Properties,
	}
	if m.ScheduledAt.After(time.Now()) {
		c.ScheduledAt = m.ScheduledAt
	}
	e.record(0, time.Now(), fmt.Sprintf("test delivered %s%s", m.Properties[saga.TypeProperty], e.bodySuffix(m.Body)))
	if _, err := e.q.Send(e.ctx, c); err != nil {
		e.t.Fatalf("sagatest: Deliver(%s): %v", m.Properties[saga.TypeProperty], err)
		return
	}
	e.settle()
}

// AssertDecodes checks that body, a message recorded under the name
// name (perhaps by an older version of a saga), decodes as a message of
// type M with the JSON codec: name is M's (saga.MessageName) or one of
// its aliases (saga.Aliased), whose upcaster turns the body into M's
// shape. It returns the message, and fails the test if it does not
// decode.
func AssertDecodes[M any](t testing.TB, name string, body []byte) M {
	t.Helper()
	var zero M
	dec, err := saga.NewDecoder(saga.JSON{}, saga.TypeOf[M]())
	if err != nil {
		t.Fatalf("sagatest: AssertDecodes: %v", err)
		return zero
	}
	v, err := dec.Decode(&transport.Message{Body: body, Properties: map[string]string{saga.TypeProperty: name}})
	if err != nil {
		t.Fatalf("sagatest: AssertDecodes[%s]: %s%s: %v", saga.MessageName[M](), name, bodySuffix(body), err)
		return zero
	}
	return v.(M)
}
