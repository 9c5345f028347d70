package transporttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testSession checks S8: a session's messages are processed one at a time
// in sequence order across competing receivers, different sessions in
// parallel, and a dead consumer's session moves on when its lock expires.
func (s *suite) testSession(t *testing.T) {
	parallel(t, "Required", s.testSessionRequired)
	parallel(t, "NotSessionQueue", s.testSessionNotSessionQueue)
	parallel(t, "OwnMessages", s.testSessionOwnMessages)
	parallel(t, "Scheduled", s.testSessionScheduled)
	parallel(t, "OrderAndExclusion", s.testSessionOrder)
	parallel(t, "DeadConsumer", func(t *testing.T) { s.testSessionDeadConsumer(t, false) })
	parallel(t, "DeadConsumerNextSession", func(t *testing.T) { s.testSessionDeadConsumer(t, true) })
	parallel(t, "NextSkipsLocked", s.testSessionNextSkipsLocked)
	parallel(t, "ContextEnded", s.testSessionContextEnded)
	parallel(t, "DeadLetter", s.testSessionDeadLetter)
	parallel(t, "Exclusive", s.testSessionExclusive)
	parallel(t, "LockExpires", s.testSessionLockExpires)
}

func acceptSession(t *testing.T, q *transport.Queue, id string) *transport.SessionReceiver {
	t.Helper()
	r, err := q.AcceptSession(t.Context(), id)
	if err != nil {
		t.Fatalf("AcceptSession(%q): %v", id, err)
	}
	if r.SessionID() != id {
		t.Errorf("AcceptSession(%q).SessionID() = %q", id, r.SessionID())
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// awaitAcceptSession accepts session id, retrying while another receiver
// holds it, for at most within.
func awaitAcceptSession(t *testing.T, q *transport.Queue, id string, within time.Duration) *transport.SessionReceiver {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := q.AcceptSession(t.Context(), id)
		if err == nil {
			t.Cleanup(func() { r.Close() })
			return r
		}
		if !errors.Is(err, transport.ErrSessionLocked) || time.Now().After(deadline) {
			t.Fatalf("AcceptSession(%q) within %v: %v", id, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// receiveSession receives one message of r's session within timeout and
// leaves it locked.
func receiveSession(t *testing.T, r *transport.SessionReceiver, timeout time.Duration) arrival {
	t.Helper()
	d, err := r.Receive(withTimeout(t, timeout))
	now := time.Now()
	if err != nil {
		t.Fatalf("session %q: Receive within %v: %v", r.SessionID(), timeout, err)
	}
	if d.SessionID != r.SessionID() {
		t.Errorf("session %q: received %s of another session", r.SessionID(), describe(d.Message))
	}
	return arrival{d, now}
}

func complete(t *testing.T, d *transport.Delivery) {
	t.Helper()
	if err := d.Complete(t.Context()); err != nil {
		t.Errorf("Complete(%s): %v", describe(d.Message), err)
	}
}

func (s *suite) testSessionRequired(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true})
	if _, err := q.Send(t.Context(), keyed(q, numbered("m", 0))); !errors.Is(err, transport.ErrSessionRequired) {
		t.Errorf("Send without SessionID = %v, want %v", err, transport.ErrSessionRequired)
	}
	m := numbered("m", 1)
	m.ScheduledAt = time.Now().Add(time.Hour)
	if _, err := q.Send(t.Context(), keyed(q, m)); !errors.Is(err, transport.ErrSessionRequired) {
		t.Errorf("Send with ScheduledAt without SessionID = %v, want %v", err, transport.ErrSessionRequired)
	}
	if _, err := q.Schedule(t.Context(), keyed(q, numbered("m", 2)), time.Now().Add(time.Hour)); !errors.Is(err, transport.ErrSessionRequired) {
		t.Errorf("Schedule without SessionID = %v, want %v", err, transport.ErrSessionRequired)
	}
	if _, err := q.Receive(t.Context(), 1); !errors.Is(err, transport.ErrSessionRequired) {
		t.Errorf("Receive on a session queue = %v, want %v", err, transport.ErrSessionRequired)
	}
	if ms := peekAll(t, q); len(ms) != 0 {
		t.Errorf("Peek after refused sends: seqs %s, want none", seqsOf(ms))
	}
	m = numbered("m", 3)
	m.SessionID = "s"
	if r, want := send(t, q, m), seqFor(q, m, 1); r.Seq != want {
		t.Errorf("Send with SessionID after refused sends: Seq %#x, want %#x", r.Seq, want)
	}
	if _, err := q.AcceptSession(t.Context(), ""); !errors.Is(err, transport.ErrInvalidMessage) {
		t.Errorf("AcceptSession(\"\") = %v, want %v", err, transport.ErrInvalidMessage)
	}
}

func (s *suite) testSessionNotSessionQueue(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	m := numbered("m", 0)
	m.SessionID = "s"
	send(t, q, m) // a SessionID is allowed, and ignored for ordering
	if _, err := q.AcceptSession(t.Context(), "s"); !errors.Is(err, transport.ErrNotSessionQueue) {
		t.Errorf("AcceptSession on a queue without sessions = %v, want %v", err, transport.ErrNotSessionQueue)
	}
	if _, err := q.AcceptNextSession(withTimeout(t, time.Second)); !errors.Is(err, transport.ErrNotSessionQueue) {
		t.Errorf("AcceptNextSession on a queue without sessions = %v, want %v", err, transport.ErrNotSessionQueue)
	}
	if a := receiveN(t, q, 1, awaitMargin)[0]; a.SessionID != "s" {
		t.Errorf("received SessionID %q, want %q", a.SessionID, "s")
	}
}

func (s *suite) testSessionOwnMessages(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true})
	ids := []string{"A", "B", "C"}
	for i := range 4 {
		for _, id := range ids {
			m := numbered(id, i)
			m.SessionID = id
			send(t, q, m)
		}
	}
	for _, id := range []string{"B", "A"} {
		r := acceptSession(t, q, id)
		for i := range 4 {
			a := receiveSession(t, r, awaitMargin)
			if n, ok := number(a.Message, id); !ok || n != i {
				t.Errorf("session %q: message %d is %s, want %s-%d", id, i, describe(a.Message), id, i)
			}
			complete(t, a.Delivery)
		}
		_, err := r.Receive(withTimeout(t, quietMargin))
		expectCtxErr(t, fmt.Sprintf("session %q: Receive after its last message", id), err, context.DeadlineExceeded)
	}
	r, err := q.AcceptNextSession(withTimeout(t, awaitMargin))
	if err != nil {
		t.Fatalf("AcceptNextSession with only session C left: %v", err)
	}
	defer r.Close()
	if r.SessionID() != "C" {
		t.Errorf("AcceptNextSession: session %q, want %q, the only one with messages", r.SessionID(), "C")
	}
}

// testSessionScheduled checks that an activated message takes its place
// in its session by its new sequence number.
func (s *suite) testSessionScheduled(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true})
	mk := func(i int) *transport.Message {
		m := numbered("m", i)
		m.SessionID = "s"
		return m
	}
	send(t, q, mk(0))
	at := time.Now().Add(300 * time.Millisecond)
	schedule(t, q, mk(1), at)
	send(t, q, mk(2))
	r := acceptSession(t, q, "s")
	var order []int
	for range 3 {
		a := receiveSession(t, r, time.Until(at)+s.f.ActivationSlack+awaitMargin)
		i, _ := number(a.Message, "m")
		order = append(order, i)
		if i == 1 {
			checkNotEarly(t, a, at)
			if want := seqFor(q, a.Message, 3); a.Seq != want {
				t.Errorf("activated message: Seq %#x, want %#x", a.Seq, want)
			}
		}
		complete(t, a.Delivery)
	}
	if fmt.Sprint(order) != "[0 2 1]" {
		t.Errorf("session received m-%v, want [0 2 1] (sequence order after activation)", order)
	}
}

// testSessionOrder has 4 workers compete for 8 sessions of 50 messages,
// taking sessions with AcceptNextSession and AcceptSession in turn. Per
// session, messages must be processed strictly in order and never two
// at once; different sessions must overlap at some point.
func (s *suite) testSessionOrder(t *testing.T) {
	const sessions, perSession, workers = 8, 50, 4
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true, LockDuration: 10 * time.Second})
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("session-%d", i)
	}
	lastSeq := make(map[string]uint64)
	for i := range perSession {
		for _, id := range ids {
			m := numbered(id, i)
			m.SessionID = id
			r := send(t, q, m)
			if r.Seq <= lastSeq[id] {
				t.Fatalf("Send: seq %#x not above the session's previous %#x", r.Seq, lastSeq[id])
			}
			lastSeq[id] = r.Seq
		}
	}

	type state struct {
		inFlight  atomic.Int32
		receivers atomic.Int32
		mu        sync.Mutex
		next      int
		lastSeq   uint64
	}
	states := make(map[string]*state)
	for _, id := range ids {
		states[id] = new(state)
	}
	var (
		active, maxActive atomic.Int32
		processed         atomic.Int32
	)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	process := func(w int, d *transport.Delivery) {
		st := states[d.SessionID]
		if st == nil {
			t.Errorf("worker %d: %s of an unknown session", w, describe(d.Message))
			return
		}
		if n := st.inFlight.Add(1); n != 1 {
			t.Errorf("worker %d: %s delivered while %d other message(s) of its session are unsettled", w, describe(d.Message), n-1)
		}
		a := active.Add(1)
		for m := maxActive.Load(); a > m && !maxActive.CompareAndSwap(m, a); m = maxActive.Load() {
		}
		st.mu.Lock()
		i, _ := number(d.Message, d.SessionID)
		if i != st.next || d.Seq <= st.lastSeq {
			t.Errorf("worker %d: session %q: got %s (message %d), want message %d after seq %#x",
				w, d.SessionID, describe(d.Message), i, st.next, st.lastSeq)
		}
		st.next, st.lastSeq = i+1, d.Seq
		st.mu.Unlock()
		if d.DeliveryCount != 1 {
			t.Errorf("worker %d: %s DeliveryCount %d, want 1", w, describe(d.Message), d.DeliveryCount)
		}
		time.Sleep(time.Millisecond) // the work itself
		active.Add(-1)
		// Leave the session before settling: the next message may be
		// delivered as soon as this one is completed.
		st.inFlight.Add(-1)
		if err := d.Complete(ctx); err != nil {
			t.Errorf("worker %d: Complete(%s): %v", w, describe(d.Message), err)
		}
		if processed.Add(1) == sessions*perSession {
			cancel()
		}
	}

	// Even workers take sessions with AcceptNextSession, odd ones with
	// AcceptSession on a random session, which may be one another worker
	// is on. Each keeps a session for a few messages only, so that
	// sessions change hands often (and AcceptSession of a held one is
	// refused).
	var (
		wg      sync.WaitGroup
		shared  atomic.Int32 // receivers opened on a session another one was on
		refused atomic.Int32 // AcceptSession refused: another receiver held it
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for ctx.Err() == nil {
				var (
					r   *transport.SessionReceiver
					err error
				)
				if w%2 == 0 {
					actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
					r, err = q.AcceptNextSession(actx)
					acancel()
					if errors.Is(err, transport.ErrNoSession) {
						continue
					}
				} else {
					r, err = q.AcceptSession(ctx, ids[rng.IntN(sessions)])
					if errors.Is(err, transport.ErrSessionLocked) {
						refused.Add(1)
						continue
					}
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("worker %d: accepting a session: %v", w, err)
					}
					return
				}
				st := states[r.SessionID()]
				if st == nil {
					t.Errorf("worker %d: accepted unknown session %q", w, r.SessionID())
					r.Close()
					return
				}
				if st.receivers.Add(1) > 1 {
					shared.Add(1)
				}
				for range 1 + rng.IntN(8) {
					rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
					d, err := r.Receive(rctx)
					rcancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
							t.Errorf("worker %d: session %q: Receive: %v", w, r.SessionID(), err)
						}
						break
					}
					if d.SessionID != r.SessionID() {
						t.Errorf("worker %d: receiver of session %q got %s", w, r.SessionID(), describe(d.Message))
					}
					process(w, d)
				}
				st.receivers.Add(-1)
				if err := r.Close(); err != nil {
					t.Errorf("worker %d: Close: %v", w, err)
				}
			}
		})
	}
	wg.Wait()
	if got := processed.Load(); got != sessions*perSession {
		t.Errorf("processed %d messages in 30s, want %d", got, sessions*perSession)
	}
	for id, st := range states {
		if st.next != perSession {
			t.Errorf("session %q: processed up to message %d, want %d", id, st.next, perSession)
		}
	}
	if m := maxActive.Load(); m < 2 {
		t.Errorf("at most %d session(s) were processed at the same time, want at least 2", m)
	}
	if n := shared.Load(); n > 0 {
		t.Errorf("%d times a receiver accepted a session another receiver held", n)
	}
	t.Logf("at most %d sessions processed at once; AcceptSession refused %d times (session held)",
		maxActive.Load(), refused.Load())
}

// testSessionDeadConsumer has a receiver take a message and never settle
// it. Once its lock expires, another receiver of the session gets the
// same message again, before any later one of the session. With viaNext,
// that receiver comes from AcceptNextSession, which must offer the
// session once the lock has expired, and not before.
func (s *suite) testSessionDeadConsumer(t *testing.T, viaNext bool) {
	const lock = time.Second
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true, LockDuration: lock})
	var seqs []uint64
	for i := range 3 {
		m := numbered("m", i)
		m.SessionID = "s"
		seqs = append(seqs, send(t, q, m).Seq)
	}
	dead := acceptSession(t, q, "s")
	first := receiveSession(t, dead, awaitMargin)
	if first.Seq != seqs[0] {
		t.Fatalf("first delivery: seq %#x, want %#x", first.Seq, seqs[0])
	}
	until := first.LockedUntil()

	// The dead receiver is never used again.
	var r *transport.SessionReceiver
	if viaNext {
		var err error
		r, err = q.AcceptNextSession(withTimeout(t, lock+awaitMargin))
		if err != nil {
			t.Fatalf("AcceptNextSession while a dead consumer holds the session's lock: %v", err)
		}
		defer r.Close()
		if r.SessionID() != "s" {
			t.Fatalf("AcceptNextSession: session %q, want %q", r.SessionID(), "s")
		}
		if now := time.Now(); now.Before(until) {
			t.Errorf("AcceptNextSession returned the session at %v, %v before the dead consumer's LockedUntil %v",
				now, until.Sub(now), until)
		}
	} else {
		// The dead receiver holds the session until its session lock
		// expires, LockDuration after its last Receive.
		r = awaitAcceptSession(t, q, "s", lock+awaitMargin)
	}
	again := receiveSession(t, r, lock+awaitMargin)
	if again.Seq != seqs[0] || again.DeliveryCount != 2 {
		t.Errorf("after the lock expired: seq %#x DeliveryCount %d, want seq %#x DeliveryCount 2",
			again.Seq, again.DeliveryCount, seqs[0])
	}
	if again.At.Before(until) {
		t.Errorf("redelivered at %v, %v before the dead consumer's LockedUntil %v", again.At, until.Sub(again.At), until)
	}
	if err := first.Complete(t.Context()); !errors.Is(err, transport.ErrLockLost) {
		t.Errorf("dead consumer's late Complete = %v, want %v", err, transport.ErrLockLost)
	}
	complete(t, again.Delivery)
	for _, want := range seqs[1:] {
		a := receiveSession(t, r, awaitMargin)
		if a.Seq != want || a.DeliveryCount != 1 {
			t.Errorf("next delivery: seq %#x DeliveryCount %d, want %#x 1", a.Seq, a.DeliveryCount, want)
		}
		complete(t, a.Delivery)
	}
}

// testSessionNextSkipsLocked checks that AcceptNextSession passes over a
// session whose current message is locked to another receiver.
func (s *suite) testSessionNextSkipsLocked(t *testing.T) {
	const lock = 3 * time.Second
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true, LockDuration: lock})
	for _, id := range []string{"busy", "busy", "free"} {
		m := numbered(id, 0)
		m.SessionID = id
		send(t, q, m)
	}
	busy := acceptSession(t, q, "busy")
	held := receiveSession(t, busy, awaitMargin)

	r, err := q.AcceptNextSession(withTimeout(t, awaitMargin))
	if err != nil {
		t.Fatalf("AcceptNextSession: %v", err)
	}
	if r.SessionID() != "free" {
		t.Errorf("AcceptNextSession: session %q, want %q (the other's message is locked)", r.SessionID(), "free")
	}
	complete(t, receiveSession(t, r, awaitMargin).Delivery)
	r.Close()

	// Only "busy" has messages left, and its current one is locked.
	r, err = q.AcceptNextSession(withTimeout(t, quietMargin))
	if !errors.Is(err, transport.ErrNoSession) {
		id := ""
		if r != nil {
			id = r.SessionID()
			r.Close()
		}
		t.Errorf("AcceptNextSession while the only session with messages is locked = %q, %v; want %v", id, err, transport.ErrNoSession)
	}
	if time.Now().After(held.LockedUntil()) {
		t.Logf("the lock expired before the check; the ErrNoSession check above proved nothing")
	}
	complete(t, held.Delivery)
	r, err = q.AcceptNextSession(withTimeout(t, awaitMargin))
	if err != nil {
		t.Fatalf("AcceptNextSession after the lock was released: %v", err)
	}
	defer r.Close()
	if r.SessionID() != "busy" {
		t.Errorf("AcceptNextSession: session %q, want %q", r.SessionID(), "busy")
	}
}

func (s *suite) testSessionContextEnded(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true})
	_, err := q.AcceptNextSession(withTimeout(t, 200*time.Millisecond))
	if !errors.Is(err, transport.ErrNoSession) {
		t.Errorf("AcceptNextSession on an empty queue = %v, want %v", err, transport.ErrNoSession)
	}
	r := acceptSession(t, q, "empty")
	_, err = r.Receive(withTimeout(t, 200*time.Millisecond))
	expectCtxErr(t, "SessionReceiver.Receive on an empty session", err, context.DeadlineExceeded)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = r.Receive(ctx)
	expectCtxErr(t, "SessionReceiver.Receive with a cancelled context", err, context.Canceled)

	// A cancellation (not a deadline) ends a waiting call promptly.
	const wait = 200 * time.Millisecond
	start := time.Now()
	_, err = r.Receive(cancelAfter(t, wait))
	expectCtxErr(t, "SessionReceiver.Receive cancelled while waiting", err, context.Canceled)
	checkPrompt(t, "SessionReceiver.Receive", start, wait)
	start = time.Now()
	_, err = q.AcceptNextSession(cancelAfter(t, wait))
	if !errors.Is(err, transport.ErrNoSession) {
		t.Errorf("AcceptNextSession cancelled while waiting = %v, want %v", err, transport.ErrNoSession)
	}
	checkPrompt(t, "AcceptNextSession", start, wait)
}

// testSessionDeadLetter dead-letters a session message: the dead-letter
// queue does not require sessions and keeps the SessionID.
func (s *suite) testSessionDeadLetter(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true})
	m := numbered("m", 0)
	m.SessionID = "s"
	seq := send(t, q, m).Seq
	r := acceptSession(t, q, "s")
	a := receiveSession(t, r, awaitMargin)
	if err := a.DeadLetter(t.Context(), "Poison", "cannot parse"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	d := receiveN(t, q.DeadLetterQueue(), 1, awaitMargin)[0]
	if d.SessionID != "s" || d.DeadLetterSeq != seq || d.DeadLetterReason != "Poison" {
		t.Errorf("dead letter: session %q seq %#x reason %q, want %q %#x %q",
			d.SessionID, d.DeadLetterSeq, d.DeadLetterReason, "s", seq, "Poison")
	}
}

// testSessionExclusive checks that a session is held by one receiver at a
// time, across brokers (processes): a second AcceptSession is refused
// with ErrSessionLocked, AcceptNextSession passes the held session over,
// and Close hands the session on at once.
func (s *suite) testSessionExclusive(t *testing.T) {
	const lock = 30 * time.Second
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true, LockDuration: lock})
	for _, id := range []string{"held", "other"} {
		m := numbered(id, 0)
		m.SessionID = id
		send(t, q, m)
	}
	holder := acceptSession(t, q, "held")
	q2 := s.peerQueue(t, q)
	for _, qq := range []*transport.Queue{q, q2} {
		if _, err := qq.AcceptSession(t.Context(), "held"); !errors.Is(err, transport.ErrSessionLocked) {
			t.Errorf("AcceptSession of a held session: %v, want ErrSessionLocked", err)
		}
	}
	next, err := q2.AcceptNextSession(withTimeout(t, awaitMargin))
	if err != nil {
		t.Fatalf("AcceptNextSession: %v", err)
	}
	if next.SessionID() != "other" {
		t.Errorf("AcceptNextSession gave session %q, held by another receiver; want %q", next.SessionID(), "other")
	}
	next.Close()
	d := receiveSession(t, holder, awaitMargin)
	complete(t, d.Delivery)
	if until, err := holder.RenewLock(t.Context()); err != nil || until.Before(time.Now().Add(lock/2)) {
		t.Errorf("RenewLock = %v, %v; want about %v from now", until, err, lock)
	}
	if err := holder.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r, err := q2.AcceptSession(t.Context(), "held")
	if err != nil {
		t.Fatalf("AcceptSession after the holder closed: %v", err)
	}
	r.Close()
}

// testSessionLockExpires has a receiver accept a session and then neither
// receive nor renew: once its session lock expires another receiver (on
// another broker) accepts the session, and the first one's Receive and
// RenewLock report ErrSessionLockLost.
func (s *suite) testSessionLockExpires(t *testing.T) {
	const lock = time.Second
	_, q := s.open(t, transport.QueueConfig{RequiresSession: true, LockDuration: lock})
	m := numbered("x", 0)
	m.SessionID = "x"
	send(t, q, m)
	start := time.Now()
	stale := acceptSession(t, q, "x")
	q2 := s.peerQueue(t, q)
	fresh := awaitAcceptSession(t, q2, "x", lock+awaitMargin)
	if held := time.Since(start); held < lock {
		t.Errorf("session taken over after %v, before its lock of %v expired", held, lock)
	}
	if _, err := stale.RenewLock(t.Context()); !errors.Is(err, transport.ErrSessionLockLost) {
		t.Errorf("RenewLock after the lock expired and was taken: %v, want ErrSessionLockLost", err)
	}
	if _, err := stale.Receive(withTimeout(t, awaitMargin)); !errors.Is(err, transport.ErrSessionLockLost) {
		t.Errorf("Receive after the lock expired and was taken: %v, want ErrSessionLockLost", err)
	}
	d := receiveSession(t, fresh, awaitMargin)
	complete(t, d.Delivery)
	if err := stale.Close(); err != nil {
		t.Errorf("Close of a receiver that lost its lock: %v", err)
	}
	if _, err := q.AcceptSession(t.Context(), "x"); !errors.Is(err, transport.ErrSessionLocked) {
		t.Errorf("after the stale receiver's Close, AcceptSession: %v, want ErrSessionLocked (the new holder keeps it)", err)
	}
}

// peerQueue returns queue q as another process sees it: through a second
// broker, if brokers made by newBroker share queues (brokers on one
// server), else (the memory broker) q itself.
func (s *suite) peerQueue(t *testing.T, q *transport.Queue) *transport.Queue {
	t.Helper()
	q2, err := s.newBroker(t).Queue(t.Context(), q.Name())
	if err != nil || q2.Config() != q.Config() {
		return q
	}
	return q2
}
