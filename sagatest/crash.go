package sagatest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// CrashPoint is a point in a step at which Explore crashes the dispatcher
// (Crash): the process dies there, and the transport redelivers the
// message to a dispatcher that starts afresh, with what the store holds.
type CrashPoint int

const (
	// BeforeCommit: the handler ran, and the process died before the
	// step's commit. Nothing of the step is stored, and nothing it asked
	// for is carried out; the redelivery runs the handler again. A side
	// effect the handler has outside its Context (a call to another
	// service, a counter) happens twice.
	BeforeCommit CrashPoint = iota + 1
	// BeforeOutboxCleared: the step committed and carried out its effects
	// (messages sent, timeouts requested and cancelled), and the process
	// died before it cleared them from the record. The redelivery carries
	// them out again — the transport drops sends with a MessageID it has
	// seen within its DuplicateWindow; timeouts are requested again under
	// the same IDs — and is then a duplicate. A step whose effects are
	// timeouts only may leave them in the record until the next step (see
	// saga's outbox): then this point is BeforeAck's, with the record
	// still holding them.
	BeforeOutboxCleared
	// BeforeAck: the step committed and carried out its effects, and the
	// process died before it acknowledged the message. The redelivery is
	// a duplicate: the message's identity is in the instance's inbox.
	BeforeAck
	// AfterCallIntent: the handler's saga.Call recorded its intent, and
	// the process died before making the call. The redelivery runs the
	// handler again, and its Call finds the intent without an outcome:
	// the call's policy decides (call again with the same key, reconcile,
	// or ErrCallInDoubt). (A crash after the call answered, before the
	// step's commit, is BeforeCommit: the outcome dies with the process.)
	AfterCallIntent
)

// String names the crash point as Explore reports it: "before commit",
// "before the outbox is cleared", "before the ack".
func (p CrashPoint) String() string {
	switch p {
	case BeforeCommit:
		return "before commit"
	case BeforeOutboxCleared:
		return "before the outbox is cleared"
	case BeforeAck:
		return "before the ack"
	case AfterCallIntent:
		return "after a call's intent"
	}
	return fmt.Sprintf("CrashPoint(%d)", int(p))
}

// Crash is in (a Send or a Timeout input) with the dispatcher crashing at
// the point given in the step that handles it. The message is then
// redelivered — same MessageID, DeliveryCount 2 — as one more input:
// Explore delivers it in every position after the crash among the other
// inputs, as a redelivery after a lock expires can land anywhere. Replay
// numbers the redeliveries after the inputs: with n inputs, the
// redelivery of the first Crash input is n, of the second n+1, and so on.
//
// The crash is at the first instance's step, if the message goes to
// several sagas.
func Crash(in Input, at CrashPoint) Input {
	in.crash = at
	return in
}

// crashSlots returns, for each redelivery slot after the inputs, the
// index of the Crash input it redelivers.
func crashSlots(inputs []Input) []int {
	var out []int
	for i, in := range inputs {
		if in.crash != 0 {
			out = append(out, i)
		}
	}
	return out
}

// crashState is the crash armed for the step in flight.
type crashState struct {
	point     CrashPoint
	committed map[string]bool // keys the step committed to (BeforeOutboxCleared)
	died      bool            // the step's goroutine stopped in the handler (AfterCallIntent)
}

// crashed is what the store panics with at a crash point: it unwinds the
// dispatcher's Handle, as a dying process stops it, up to handleCrashing.
type crashed struct{ point CrashPoint }

// crashStore is the Env's store as the dispatcher sees it: memstore, with
// the crash points of an armed step in its writes.
type crashStore struct {
	*memstore.Store
	e *Env
}

var _ interface {
	saga.ExpiringStore
	saga.ListingStore
} = crashStore{}

func (s crashStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	s.crashPoint(ctx, key, value)
	n, err := s.Store.Put(ctx, key, value, rev)
	s.crashAfter(key, err)
	return n, err
}

func (s crashStore) PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	s.crashPoint(ctx, key, value)
	n, err := s.Store.PutTTL(ctx, key, value, rev, ttl)
	s.crashAfter(key, err)
	return n, err
}

// crashAfter stops the step at AfterCallIntent once a call's intent is
// written. The write is in the handler, where the dispatcher recovers
// panics (a handler's panic is its error): the step's goroutine exits
// instead (runtime.Goexit), which nothing recovers, as a process that
// dies runs nothing more of the step.
func (s crashStore) crashAfter(key string, err error) {
	c := s.e.crash
	if c == nil || c.point != AfterCallIntent || err != nil || !strings.HasPrefix(key, saga.CallKeyPrefix) {
		return
	}
	c.died = true
	runtime.Goexit()
}

func (s crashStore) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return s.Store.ListKeys(ctx, prefix)
}

// crashPoint panics if the write of value under key is where the armed
// step crashes: the step's commit (it adds the message's identity to the
// instance's inbox), for BeforeCommit; the write after it on the same
// key (it clears the outbox), for BeforeOutboxCleared.
func (s crashStore) crashPoint(ctx context.Context, key string, value []byte) {
	c := s.e.crash
	if c == nil {
		return
	}
	if c.committed[key] && c.point == BeforeOutboxCleared {
		panic(crashed{c.point})
	}
	var next, stored struct {
		Inbox []string `json:"inbox"`
	}
	if json.Unmarshal(value, &next) != nil {
		return
	}
	if raw, _, err := s.Store.Load(ctx, key); err == nil {
		_ = json.Unmarshal(raw, &stored)
	}
	if slices.Equal(next.Inbox, stored.Inbox) {
		return // not a step's commit: an earlier step's outbox cleared
	}
	if c.point == BeforeCommit {
		panic(crashed{c.point})
	}
	c.committed[key] = true
}

// crashedDelivery is a Crash input's message after its step: still
// locked (the process died holding it) or acknowledged (the crash came
// after, or the step had no such point).
type crashedDelivery struct {
	del    *transport.Delivery
	locked bool
	point  CrashPoint
	what   string // the input, as the report names it
}

// handleCrashing runs del through the dispatcher with the crash armed,
// and returns what is left of it for the redelivery.
func (e *Env) handleCrashing(del *transport.Delivery, point CrashPoint, what string) *crashedDelivery {
	e.t.Helper()
	cd := &crashedDelivery{del: del, point: point, what: what}
	e.crash = &crashState{point: point, committed: make(map[string]bool)}
	// The step runs on a goroutine of its own, which a crash in the
	// handler stops (see crashAfter).
	var other any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(crashed); !ok {
					other = p
					return
				}
				cd.locked = true
			}
		}()
		e.handle(del)
	}()
	<-done
	if other != nil {
		panic(other)
	}
	if e.crash.died {
		cd.locked = true
	}
	e.crash = nil
	now := time.Now()
	switch {
	case cd.locked && point == AfterCallIntent:
		e.record(0, now, fmt.Sprintf("explore: crash %s: the dispatcher died in the step of %s (MessageID %s) with a call's intent recorded, before making the call", point, messageType(del.Message), del.MessageID))
	case cd.locked && point == BeforeCommit:
		e.record(0, now, fmt.Sprintf("explore: crash %s: the dispatcher died in the step of %s (MessageID %s); nothing of the step is stored", point, messageType(del.Message), del.MessageID))
	case cd.locked:
		e.record(0, now, fmt.Sprintf("explore: crash %s: the dispatcher died in the step of %s (MessageID %s) after carrying out its effects; the record still holds them", point, messageType(del.Message), del.MessageID))
	case point == BeforeAck:
		e.record(0, now, fmt.Sprintf("explore: crash %s: the dispatcher died after the step of %s (MessageID %s), before acknowledging it", point, messageType(del.Message), del.MessageID))
	default:
		e.record(0, now, fmt.Sprintf("explore: crash %s: the step of %s (MessageID %s) had no such point (no commit, or an outbox kept in the record); it died before the ack", point, messageType(del.Message), del.MessageID))
	}
	return cd
}

func messageType(m *transport.Message) string { return m.Properties[saga.TypeProperty] }

// redeliverCrashed delivers a crashed input's message again: the locked
// delivery once its lock is given up, or a copy of an acknowledged one.
func (e *Env) redeliverCrashed(cd *crashedDelivery) {
	e.t.Helper()
	if cd == nil {
		return // the input was not delivered (a timeout no longer scheduled)
	}
	if !cd.locked {
		e.redeliverCopy(cd.del.Message)
		return
	}
	e.pause()
	defer e.resume()
	if err := cd.del.Abandon(e.ctx); err != nil { // the lock of the dead process ends
		e.t.Fatalf("sagatest: Explore: redelivering after the crash: %v", err)
		return
	}
	for _, del := range e.takeActive() {
		if del.Seq != cd.del.Seq {
			e.handle(del)
			continue
		}
		e.record(0, time.Now(), fmt.Sprintf("explore: redelivered %s%s (MessageID %s, delivery %d)", messageType(del.Message), e.bodySuffix(del.Body), del.MessageID, del.DeliveryCount))
		e.handle(del)
	}
}

// sendCrashing sends a Crash input's message and handles it with the
// crash armed: the last message on the queue, which nothing sends to
// while the receive loop is paused.
func (e *Env) sendCrashing(in Input) *crashedDelivery {
	e.t.Helper()
	e.pause()
	defer e.resume()
	e.send(in.msg, in.opts)
	ds := e.takeActive()
	if len(ds) == 0 {
		e.t.Fatalf("sagatest: Explore: %s: the message sent is not on the queue", in)
		return nil
	}
	for _, del := range ds[:len(ds)-1] {
		e.handle(del)
	}
	return e.handleCrashing(ds[len(ds)-1], in.crash, in.String())
}
