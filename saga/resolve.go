package saga

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/jetsaga/jetsaga/transport"
)

// The resolve stage: which sagas a message goes to (by type, or the saga a
// timeout names), the message decoded for each, and the instance it
// correlates to.

// target is one saga a message goes to, with the message decoded and
// correlated for it.
type target struct {
	rt   sagaRuntime
	kind routeKind
	m    any    // the decoded message
	id   string // the instance ID; "" if correlation failed
	err  error  // why decoding or correlation failed

	done, doneID string // doneKey, and the id it was made for

	in incomingCtx // the Finder's context: see IncomingMessage

	// lookUp: correlate by a full index lookup (ByIndex), never by an
	// entry alone: the instance an entry named did not hold its value.
	lookUp bool
}

// resolve finds the sagas a message goes to, decodes it and correlates it
// for each. A message for one saga fills in info's Saga and ID.
func (d *Dispatcher) resolve(ctx context.Context, del *transport.Delivery, info *StepInfo) ([]*target, error) {
	rts, err := d.targets(del)
	if err != nil {
		return nil, err
	}
	ts := make([]*target, len(rts))
	for i, rt := range rts {
		ts[i] = &target{rt: rt}
		d.correlate(ctx, del, ts[i])
	}
	if len(ts) == 1 {
		info.Saga, info.ID = ts[0].rt.Name(), ts[0].id
	}
	return ts, nil
}

// targets returns the sagas a message goes to: the one named on a
// timeout, or every saga that starts or handles its type.
func (d *Dispatcher) targets(del *transport.Delivery) ([]sagaRuntime, error) {
	typ := del.Properties[propType]
	if name, ok := del.Properties[propSaga]; ok {
		rt, ok := d.byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: timeout for saga %q, which this dispatcher does not run", ErrUnknownMessage, name)
		}
		if kind, ok := rt.lookup(typ); !ok || kind != routeTimeout {
			return nil, fmt.Errorf("%w: saga %s has no OnTimeout for %q", ErrUnknownMessage, name, typ)
		}
		return []sagaRuntime{rt}, nil
	}
	rts := d.byType[typ]
	if len(rts) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownMessage, typ)
	}
	return rts, nil
}

// correlate decodes the message for t's saga and finds its instance ID.
func (d *Dispatcher) correlate(ctx context.Context, del *transport.Delivery, t *target) {
	typ := del.Properties[propType]
	t.kind, _ = t.rt.lookup(typ)
	t.m, t.id, t.err = nil, "", nil
	var id string
	if t.kind == routeTimeout {
		id = del.Properties[propSagaID]
	}
	m, err := t.rt.decode(d.cfg.codec, typ, del.Body)
	if err != nil {
		t.err = Permanent(fmt.Errorf("%w: %s: %w", ErrMalformed, typ, err))
	} else if t.kind != routeTimeout {
		t.in = incomingCtx{Context: ctx, m: del.Message, d: d, kind: t.kind, lookUp: t.lookUp}
		id, t.err = t.rt.find(&t.in, typ, m)
	}
	if verr := validateID(id); verr != nil {
		if t.err == nil {
			t.err = Permanent(fmt.Errorf("%w: saga %s: ID %.64q: %w", ErrCorrelation, t.rt.Name(), id, verr))
		}
		return
	}
	t.m, t.id = m, id
}

type incomingKey struct{}

// incomingCtx is a Finder's context: ctx with the message being
// correlated as the value of incomingKey. It lives in the target, so that
// correlating allocates no context of its own (context.WithValue would,
// on every message).
type incomingCtx struct {
	context.Context
	m    *transport.Message
	d    *Dispatcher // for ByIndex
	kind routeKind

	// check, set by ByIndex from an entry alone, is the index value the
	// instance must hold when the step loads it (see indexCheck).
	check  *indexCheck
	lookUp bool // ByIndex: look the value up in full (target.lookUp)
}

func (c *incomingCtx) Value(key any) any {
	if key == (incomingKey{}) {
		return c.m
	}
	return c.Context.Value(key)
}

// IncomingMessage returns, in a Finder, the message being correlated,
// with its transport fields (CorrelationID, ReplyTo, Properties), for a
// Finder that takes the instance ID from them rather than from the body:
// a reply correlated by the CorrelationID of its request, as package
// saga/machine's requests are. It returns nil outside a Finder. Read it;
// do not change it.
func IncomingMessage(ctx context.Context) *transport.Message {
	m, _ := ctx.Value(incomingKey{}).(*transport.Message)
	return m
}

const maxIDLen = 512

// validateID accepts instance IDs of 1–512 bytes of UTF-8 without control
// characters: they travel in message properties and store keys.
func validateID(id string) error {
	if id == "" || len(id) > maxIDLen || !utf8.ValidString(id) {
		return fmt.Errorf("must be 1-%d bytes of UTF-8", maxIDLen)
	}
	for _, r := range id {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return fmt.Errorf("contains control character %U", r)
		}
	}
	return nil
}

// anonymousIdentity identifies a message sent without a MessageID: its
// sequence number is unique only within its queue (and queue lifetime), so
// the queue and the enqueue instant are part of it.
func anonymousIdentity(queue string, m *transport.Message) string {
	return "seq:" + queue + ":" + strconv.FormatUint(m.Seq, 10) + ":" + strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10)
}
