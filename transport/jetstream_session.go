package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport/internal/pull"
)

// Sessions. Each session has its own durable consumer, filtered on the
// session's subject, with MaxAckPending 1: the server hands out the next
// message of a session only after the previous one is acked, or its ack
// wait (the lock) expires and it is redelivered first. That holds across
// any number of receivers in any number of processes.

// Session locks. A receiver holds its session through a lock message in
// the partition's schedule stream, on a subject of the session's own,
// written only if the subject is empty (expected last subject sequence
// 0) and carrying a per-message TTL of LockDuration: the server removes
// it when the lock expires, also if its holder died. Renewing rewrites it
// (rollup) only if it is still the holder's (expected last subject
// sequence = the holder's lock), and Close deletes exactly that message.

func (q *jsQueue) acceptSession(ctx context.Context, id string, p int) (sessionDriver, error) {
	if err := q.d.check(); err != nil {
		return nil, err
	}
	part := q.parts[p]
	s := &jsSession{q: q, part: part, id: id, lockSubj: sessionLockSubject(part, id), holder: []byte(nuid.Next())}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	// Finding or making the session's consumer takes a few requests (on a
	// subscription, up to four), which over a slow link may take longer
	// than the lock: renew it meanwhile.
	stop := s.renewWhile(ctx)
	c, err := q.sessionConsumer(ctx, part, id)
	if lerr := stop(); err == nil && lerr != nil {
		err = lerr
	}
	if err != nil {
		_ = s.close()
		return nil, err
	}
	s.c = c
	s.p = pull.New(q.d.pullConn(), c, q.cfg.LockDuration)
	return s, nil
}

// renewWhile renews the session lock when due until stop is called, and
// stop returns the first renewal's error, if one failed.
func (s *jsSession) renewWhile(ctx context.Context) (stop func() error) {
	done := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		t := time.NewTicker(max(s.q.cfg.LockDuration/8, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := s.renewDue(ctx); err != nil {
					failed <- err
					return
				}
			}
		}
	}()
	return func() error {
		close(done)
		select {
		case err := <-failed:
			return err
		default:
			return nil
		}
	}
}

// sessionConsumer returns the durable consumer of session id, creating
// it on first use in this process (on a subscription, see
// subSessionConsumer).
func (q *jsQueue) sessionConsumer(ctx context.Context, part *jsPartition, id string) (jetstream.Consumer, error) {
	if q.topic != nil {
		return q.subSessionConsumer(ctx, part, id, 0)
	}
	cc := q.sessionConsumerConfig(part, id)
	q.mu.Lock()
	c, ok := q.sessions[cc.Durable]
	q.mu.Unlock()
	if ok {
		return c, nil
	}
	ctx, cancel := q.d.apiContext(ctx)
	defer cancel()
	c, err := part.queue.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return nil, q.d.mapErr(err)
	}
	q.mu.Lock()
	q.sessions[cc.Durable] = c
	q.mu.Unlock()
	return c, nil
}

func (q *jsQueue) sessionConsumerConfig(part *jsPartition, id string) jetstream.ConsumerConfig {
	if q.topic != nil {
		return q.topic.sessionConsumerConfig(q, part, id)
	}
	return jetstream.ConsumerConfig{
		Durable:           sessionConsumerName(id),
		Description:       "jetsaga session",
		FilterSubject:     part.n.qSubj + ".s." + subjectToken(id),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           serverAckWait(q.cfg.LockDuration),
		MaxDeliver:        -1,
		MaxAckPending:     1,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: max(10*q.cfg.LockDuration, 5*time.Minute),
	}
}

// lockTTL is the per-message TTL of a session lock: LockDuration rounded
// up to whole seconds (the server's TTL unit), at least 1 s.
func (q *jsQueue) lockTTL() time.Duration {
	return max(time.Second, (q.cfg.LockDuration+time.Second-1)/time.Second*time.Second)
}

type jsSession struct {
	q        *jsQueue
	part     *jsPartition
	id       string
	lockSubj string
	c        jetstream.Consumer
	p        *pull.Puller // pulls from c; nil on a session being collected

	holder []byte // the lock's body: a NUID naming this receiver

	mu     sync.Mutex
	seq    uint64 // the stream sequence of our lock message
	closed bool

	renewAt  atomic.Int64 // unix nanos: renew the lock when receiving after this
	renewing atomic.Bool  // a renewal runs in the background (see renewSoon)
	renewErr atomic.Pointer[error]
}

// lock takes the session lock, or returns ErrSessionLocked.
func (s *jsSession) lock(ctx context.Context) error {
	ttl := s.q.lockTTL()
	msg := &nats.Msg{Subject: s.lockSubj, Data: s.holder, Header: nats.Header{
		"Nats-TTL":                          {ttl.String()},
		jetstream.ExpectedLastSubjSeqHeader: {"0"},
	}}
	start := time.Now()
	ack, err := s.q.d.js.PublishMsg(ctx, msg)
	if isWrongLastSeq(err) {
		return fmt.Errorf("%w: session %.64q", ErrSessionLocked, s.id)
	}
	if err != nil {
		return s.q.d.mapErr(err)
	}
	s.mu.Lock()
	s.seq = ack.Sequence
	s.renewAt.Store(start.Add(s.q.cfg.LockDuration / 2).UnixNano())
	s.mu.Unlock()
	return nil
}

func (s *jsSession) renew(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, ErrClosed
	}
	ttl := s.q.lockTTL()
	msg := &nats.Msg{Subject: s.lockSubj, Data: s.holder, Header: nats.Header{
		"Nats-TTL":                          {ttl.String()},
		"Nats-Rollup":                       {"sub"},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(s.seq, 10)},
	}}
	start := time.Now()
	ack, err := s.q.d.js.PublishMsg(ctx, msg)
	if isWrongLastSeq(err) {
		return time.Time{}, fmt.Errorf("%w: session %.64q", ErrSessionLockLost, s.id)
	}
	if err != nil {
		return time.Time{}, s.q.d.mapErr(err)
	}
	s.seq = ack.Sequence
	s.renewAt.Store(start.Add(s.q.cfg.LockDuration / 2).UnixNano())
	return start.Add(s.q.cfg.LockDuration), nil
}

// renewDue renews the lock if half its duration has passed.
func (s *jsSession) renewDue(ctx context.Context) error {
	if time.Now().UnixNano() <= s.renewAt.Load() {
		return nil
	}
	_, err := s.renew(ctx)
	return err
}

// renewSoon starts renewing the lock in the background if half its
// duration has passed and no renewal runs, and returns the error of a
// renewal that failed since the last call. A receive does not wait for
// the renewal (over a slow link it takes a round trip, during which
// messages that arrive would wait too), unless the lock has expired by
// the receiver's clock: then it renews at once, and fails if that fails.
func (s *jsSession) renewSoon(ctx context.Context) error {
	if err := s.renewErr.Swap(nil); err != nil {
		return *err
	}
	now := time.Now().UnixNano()
	if now > s.renewAt.Load()+int64(s.q.cfg.LockDuration/2) {
		return s.renewDue(ctx)
	}
	if now <= s.renewAt.Load() || !s.renewing.CompareAndSwap(false, true) {
		return nil
	}
	go func() {
		defer s.renewing.Store(false)
		rctx, cancel := s.q.d.apiContext(context.WithoutCancel(ctx))
		defer cancel()
		if _, err := s.renew(rctx); err != nil && !errors.Is(err, ErrClosed) {
			s.renewErr.Store(&err)
		}
	}()
	return nil
}

func (s *jsSession) receive(ctx context.Context) (*Delivery, error) {
	for {
		d, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		if ds := s.q.fresh([]*Delivery{d}); len(ds) > 0 {
			return ds[0], nil
		}
	}
}

// next returns the session's next delivery, or why it stopped.
func (s *jsSession) next(ctx context.Context) (*Delivery, error) {
	// Wait in slices short enough to renew the lock in between.
	wait := min(pullWait, max(s.q.cfg.LockDuration/4, 50*time.Millisecond))
	for {
		if err := s.q.d.check(); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		if err := s.renewSoon(ctx); err != nil {
			return nil, err
		}
		s.q.maybeHandOver(ctx, s.part)
		if ds := s.q.collect(ctx, s.part, s.p, s.p.Take(1)); len(ds) > 0 {
			return ds[0], nil
		}
		if err := s.q.pullOne(ctx, s.p, wait, time.Unix(0, s.renewAt.Load())); err != nil {
			return nil, err
		}
		if ds := s.q.collect(ctx, s.part, s.p, s.p.Take(1)); len(ds) > 0 {
			return ds[0], nil
		}
		s.q.d.hk.idle(ctx, s.q, s.part)
	}
}

// close releases the lock by deleting the lock message, if it is still
// ours (a lock that expired and was taken by another receiver has
// another sequence number).
func (s *jsSession) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.p != nil {
		s.p.Close()
	}
	if s.q.d.check() != nil {
		return nil
	}
	ctx, cancel := s.q.d.apiContext(context.Background())
	defer cancel()
	s.q.collectSession(ctx, s)
	err := s.part.sched.DeleteMsg(ctx, s.seq)
	if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		// The server refused: the lock is gone (it expired, and perhaps
		// another receiver holds the session now).
		return nil
	}
	if err != nil && !isNotFound(err) {
		return s.q.d.mapErr(err)
	}
	return nil
}

// nextSession looks for a session subject with messages whose consumer
// has nothing locked, polling with backoff until one appears.
func (q *jsQueue) nextSession(ctx context.Context) (string, error) {
	backoff := 20 * time.Millisecond
	for {
		if err := q.d.check(); err != nil {
			return "", err
		}
		for _, p := range rand.Perm(len(q.parts)) {
			id, err := q.freeSession(ctx, q.parts[p])
			if err != nil || id != "" {
				return id, err
			}
		}
		select {
		case <-ctx.Done():
			return "", context.Cause(ctx)
		case <-q.d.life.Done():
			return "", ErrClosed
		case <-time.After(backoff):
			backoff = min(2*backoff, 500*time.Millisecond)
		}
	}
}

func (q *jsQueue) freeSession(ctx context.Context, part *jsPartition) (string, error) {
	if q.topic != nil {
		return q.freeSubSession(ctx, part)
	}
	prefix := part.n.qSubj + ".s."
	info, err := part.queue.Info(ctx, jetstream.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return "", q.d.mapErr(err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if n > 0 {
			subjects = append(subjects, subj)
		}
	}
	rand.Shuffle(len(subjects), func(i, j int) { subjects[i], subjects[j] = subjects[j], subjects[i] })
	for _, subj := range subjects {
		id, ok := fromSubjectToken(strings.TrimPrefix(subj, prefix))
		if !ok {
			continue
		}
		if _, err := part.sched.GetLastMsgForSubject(ctx, sessionLockSubject(part, id)); err == nil {
			continue // a receiver holds it
		} else if !isNotFound(err) {
			return "", q.d.mapErr(err)
		}
		ci, err := part.queue.Consumer(ctx, sessionConsumerName(id))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return id, nil
		}
		if err != nil {
			return "", q.d.mapErr(err)
		}
		if sessionFree(ci.CachedInfo(), serverAckWait(q.cfg.LockDuration)) {
			return id, nil
		}
	}
	return "", nil
}

// sessionFree reports whether no receiver holds a session: nothing is
// locked and nobody waits for the next message, or the lock on the one
// message in flight has expired (the server redelivers it to the next
// receiver). A server that restarted no longer knows when it delivered
// the message in flight: then the session lock alone decides, and the
// next receiver gets the message when its lock expires.
func sessionFree(c *jetstream.ConsumerInfo, lock time.Duration) bool {
	if c.NumAckPending == 0 {
		return c.NumWaiting == 0
	}
	last := c.Delivered.Last
	return last == nil || time.Since(*last) > lock
}
