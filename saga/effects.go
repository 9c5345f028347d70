package saga

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// TypeProperty is the transport property that carries a message's type
// name (see MessageName). Services that exchange messages with sagas
// without this package set and read it.
const TypeProperty = "jetsaga-type"

// Transport properties the dispatcher sets on messages it sends.
const (
	propType    = TypeProperty             // message type name
	propSaga    = timeout.PropertySaga     // saga name, on timeouts
	propSagaID  = timeout.PropertyInstance // instance ID, on timeouts
	propToken   = "jetsaga-token"          // timeout token
	propOrigin  = "jetsaga-origin"         // identity of the original message, on retries
	propAttempt = "jetsaga-attempt"        // delayed retry count, on retries

	// Bookkeeping of delayed retries, removed from dead letters.
	propMessageID = "jetsaga-message-id"  // the original's MessageID, if it had one
	propTries     = "jetsaga-retry-tries" // step runs so far
	propSince     = "jetsaga-retry-since" // first failure, RFC 3339
	// How many times the message was left for a newer worker (VersionWait).
	propVersionWaits = "jetsaga-version-waits"
	// The instances a retried message is committed on (digests of their
	// store keys, comma-separated; see doneKey).
	propDone = "jetsaga-done"
)

// retryProps are the properties a delayed retry's copy has and its
// original had not.
var retryProps = []string{propOrigin, propAttempt, propMessageID, propTries, propSince, propVersionWaits, propDone}

// stepState is one handler run on one instance: the loaded record, changed in
// place by the handler through its Context, and the facts it may read.
type stepState struct {
	ctx      context.Context // the handler's, for Hooks.Outgoing
	d        *Dispatcher
	rt       sagaRuntime
	sagaName string
	id       string
	key      string
	identity string // the incoming message's identity, for the inbox
	in       *transport.Message
	rec      *record
	isNew    bool
	now      time.Time
	codec    Codec
	timeout  string // token of the timeout being handled, if one is
	// timeoutDue is the due time of the timeout being handled (its
	// record's), if one is.
	timeoutDue time.Time
	// occurrence numbers the occurrence of a recurring timeout being
	// handled, from 1; 0 for any other message.
	occurrence int
	late       *Lateness // the timeout goes to its late handler (CatchUpLate)
	n          int       // effects so far, for effect IDs

	// Calls (call.go).
	outer      context.Context // the step's context outside its unit of work, if in one
	mayBeStale bool            // the record may be a cached, stale one
	reload     bool            // a Call asked for the step to run from the store
	calls      map[string]int  // calls so far by name, for their keys
	made       []string        // keys of the calls made or found settled
	committed  bool            // the step's commit is done
}

func (s *stepState) envelope(m any, opts []SendOption) (*envelope, error) {
	if m == nil {
		return nil, Permanent(fmt.Errorf("saga %s/%s: %w: nil message", s.sagaName, s.id, transport.ErrInvalidMessage))
	}
	body, err := s.codec.Marshal(m)
	if err != nil {
		return nil, Permanent(fmt.Errorf("saga %s/%s: encoding %T: %w", s.sagaName, s.id, m, err))
	}
	e := &envelope{
		ID:          effectID(s.key, s.identity, s.n),
		Type:        nameOf(m),
		Body:        body,
		ContentType: s.codec.ContentType(),
	}
	s.n++
	s.inheritKey(e)
	for _, o := range opts {
		o(e)
	}
	s.keepKey(e)
	if h := s.d.cfg.hooks.Outgoing; h != nil && s.ctx != nil {
		if e.Properties == nil {
			e.Properties = make(map[string]string)
		}
		h(s.ctx, e.Properties)
	}
	return e, nil
}

// check refuses an effect the transport would refuse once the step
// committed: such an outbox could never be carried out.
func (s *stepState) check(e *envelope) error {
	if err := s.d.broker.Validate(transportMessage(e)); err != nil {
		return Permanent(fmt.Errorf("saga %s/%s: outgoing %s: %w", s.sagaName, s.id, e.Type, err))
	}
	return nil
}

func (s *stepState) send(queue string, m any, opts []SendOption) error {
	if err := transport.ValidateQueueName(queue); err != nil {
		return Permanent(fmt.Errorf("saga %s/%s: sending %T: %w", s.sagaName, s.id, m, err))
	}
	e, err := s.envelope(m, opts)
	if err != nil {
		return err
	}
	if err := s.check(e); err != nil {
		return err
	}
	s.rec.Outbox = append(s.rec.Outbox, effect{Kind: effectSend, Queue: queue, Msg: e})
	return nil
}

// publish adds m's publication to the outbox: one effect for the topic,
// if the dispatcher has one, and one send per WithSubscribers queue, all
// with the same MessageID.
func (s *stepState) publish(m any, opts []SendOption) error {
	if t := s.d.cfg.topic; t != nil {
		e, err := s.envelope(m, opts)
		if err != nil {
			return err
		}
		if err := s.check(e); err != nil {
			return err
		}
		s.rec.Outbox = append(s.rec.Outbox, effect{Kind: effectPublish, Queue: t.Name, Msg: e})
	}
	for _, q := range s.d.subscribers[nameOf(m)] {
		if err := s.send(q, m, opts); err != nil {
			return err
		}
	}
	return nil
}

func (s *stepState) replyAddress() *address {
	return &address{ReplyTo: s.in.ReplyTo, CorrelationID: cmp.Or(s.in.CorrelationID, s.in.MessageID)}
}

func (s *stepState) reply(to *address, m any, opts []SendOption) error {
	if to == nil || to.ReplyTo == "" {
		return Permanent(fmt.Errorf("saga %s/%s: %w", s.sagaName, s.id, ErrNoReplyTo))
	}
	return s.send(to.ReplyTo, m, append([]SendOption{WithCorrelationID(to.CorrelationID)}, opts...))
}

// plan is how a timeout requested by a calendar rule was planned.
type plan struct {
	rule string        // calendar.Rule.String()
	cal  *calendar.Ref // nil if the rule needs no calendar
	from time.Time
}

func (s *stepState) requestTimeout(at time.Time, payload any, p *plan) (TimeoutHandle, error) {
	if payload == nil {
		return "", Permanent(fmt.Errorf("saga %s/%s: %w: nil timeout payload", s.sagaName, s.id, transport.ErrInvalidMessage))
	}
	if typ := nameOf(payload); s.rt != nil {
		if kind, ok := s.rt.lookup(typ); !ok || kind != routeTimeout {
			return "", Permanent(fmt.Errorf("saga %s/%s: timeout %s: %w", s.sagaName, s.id, typ, ErrNoTimeoutHandler))
		}
	}
	if at.IsZero() {
		return "", Permanent(fmt.Errorf("saga %s/%s: timeout %T: %w: zero due time", s.sagaName, s.id, payload, timeout.ErrInvalidTimeout))
	}
	e, err := s.envelope(payload, nil)
	if err != nil {
		return "", err
	}
	token := e.ID
	if e.Properties == nil {
		e.Properties = make(map[string]string, 3)
	}
	e.Properties[propSaga], e.Properties[propSagaID], e.Properties[propToken] = s.sagaName, s.id, token
	te := timeoutEntry{Type: e.Type, At: at}
	if p != nil {
		p.label(e.Properties)
		te.Rule, te.Calendar, te.From, te.Msg = p.rule, p.cal, recordfmt.InstantOf(p.from), e
	}
	if err := s.check(e); err != nil {
		return "", err
	}
	if s.rec.Timeouts == nil {
		s.rec.Timeouts = make(map[string]timeoutEntry)
	}
	s.rec.Timeouts[token] = te
	eff := effect{Kind: effectSchedule, Queue: s.d.queueName, Msg: e, At: at, Token: token}
	if s.rt != nil {
		eff.Engine = s.rt.timeoutEngine()
	}
	s.rec.Outbox = append(s.rec.Outbox, eff)
	return TimeoutHandle(token), nil
}

// cancelTimeout forgets a pending timeout. If it was scheduled in an
// earlier step, its ref is cancelled after commit; if it was requested in
// this step, it is never scheduled.
func (s *stepState) cancelTimeout(token string) {
	te, ok := s.rec.Timeouts[token]
	if !ok {
		return
	}
	delete(s.rec.Timeouts, token)
	if te.Ref != "" {
		s.rec.Outbox = append(s.rec.Outbox, effect{Kind: effectCancel, Ref: te.Ref, Token: token})
		return
	}
	s.rec.Outbox = slices.DeleteFunc(s.rec.Outbox, func(e effect) bool {
		return e.Kind == effectSchedule && e.Token == token
	})
}

func (s *stepState) pending() []PendingTimeout {
	out := make([]PendingTimeout, 0, len(s.rec.Timeouts))
	for _, tok := range slices.Sorted(maps.Keys(s.rec.Timeouts)) {
		out = append(out, pendingOf(tok, s.rec.Timeouts[tok]))
	}
	slices.SortStableFunc(out, func(a, b PendingTimeout) int { return a.At.Compare(b.At) })
	return out
}

// pendingOf describes the pending timeout te, under token tok.
func pendingOf(tok string, te timeoutEntry) PendingTimeout {
	pt := PendingTimeout{Handle: TimeoutHandle(tok), Type: te.Type, At: te.At, Rule: te.Rule, From: te.From.Time(),
		Recurring: te.Recurring(), Every: te.Every, Occurrence: te.Occurrence}
	if te.Calendar != nil {
		pt.Calendar = *te.Calendar
	}
	return pt
}

// complete turns a completed record into a tombstone: every pending
// timeout is cancelled, the data dropped; the inbox stays, so that a
// redelivered message cannot start the instance again.
func (s *stepState) complete() {
	for _, tok := range slices.Sorted(maps.Keys(s.rec.Timeouts)) {
		s.cancelTimeout(tok)
	}
	s.rec.SetData(nil)
}

// transportMessage makes the transport message for an outgoing envelope.
// eventMessage is the message published to a topic: the type is also
// the message's Subject, which subscriptions filter on.
func eventMessage(e *envelope) *transport.Message {
	m := transportMessage(e)
	m.Subject = e.Type
	return m
}

func transportMessage(e *envelope) *transport.Message {
	props := make(map[string]string, len(e.Properties)+1)
	maps.Copy(props, e.Properties)
	props[propType] = e.Type
	return &transport.Message{
		Body:          e.Body,
		ContentType:   e.ContentType,
		MessageID:     e.ID,
		CorrelationID: e.CorrelationID,
		ReplyTo:       e.ReplyTo,
		SessionID:     e.SessionID,
		PartitionKey:  e.PartitionKey,
		Properties:    props,
	}
}
