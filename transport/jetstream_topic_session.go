package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport/internal/pull"
)

// Sessions of a subscription. Each session has a durable consumer on the
// topic stream ("S-<sub>-<hash of the session>"), filtered on the
// session's subjects and the subscription's filter, with MaxAckPending 1,
// as on a queue. It starts where the subscription started, or after the
// session's floor (see below), so it sees every message of its session
// that the subscription got and has not completed, and none twice.
//
// The topic stream keeps a message only while some consumer is
// interested, and a session's consumer exists only once the session was
// seen: so the subscription's own consumer holds every message until it
// is handed over: handOver reads it from there, makes sure its session's
// consumer exists (which from then on holds it) and only then
// acknowledges it. Session receivers hand over now and then (at most
// every handoverEvery), AcceptNextSession and Counts before they look.
//
// A session receiver that closes with nothing left in its session
// collects the session's consumer (collectSession), and so does
// AcceptNextSession for an idle session no receiver holds
// (collectAbandoned): it marks its session
// lock "gc", so that hand-overs leave the session alone; checks again
// that nothing is pending; records the session's floor (the last stream
// sequence the consumer delivered, all of them completed) on
// <lock subject>.F; and deletes the consumer. A message that enters
// meanwhile either is pending before the check (and the consumer stays),
// or is handed over only once the mark is gone, to a new consumer that
// starts after the floor. A hand-over of a message at or below the floor
// (completed before its consumer was collected) just acknowledges it.

// handoverAckWait is how long a message read by a hand-over that died
// waits before another hand-over reads it again.
const handoverAckWait = 10 * time.Second

// handoverEvery is how often a session receiver hands over.
const handoverEvery = time.Second

type handoverTime struct {
	mu   sync.Mutex
	last time.Time
}

const metaSessionID = "jetsaga.session"

func (t *jsTopicShape) sessionConsumerConfig(q *jsQueue, part *jsPartition, id string) jetstream.ConsumerConfig {
	var filters []string
	for _, p := range t.patterns {
		filters = append(filters, part.n.qSubj+".s."+subjectToken(id)+"."+p)
	}
	return jetstream.ConsumerConfig{
		Durable:        subSessionPrefix(t.sub) + sessionConsumerName(id)[2:],
		Description:    "jetsaga session of subscription " + t.sub,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        serverAckWait(q.cfg.LockDuration),
		MaxDeliver:     -1,
		MaxAckPending:  1,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    part.cons.CachedInfo().Config.OptStartSeq,
		Metadata:       map[string]string{metaSessionID: id},
	}
}

// maybeHandOver hands over part's messages if it is a session
// subscription's and handoverEvery has passed since the last time. It
// does so in the background: over a slow link a hand-over takes several
// round trips, which a receive (and the renewal of its session lock)
// must not wait for.
func (q *jsQueue) maybeHandOver(ctx context.Context, part *jsPartition) {
	if q.topic == nil || q.topic.sub == "" || !q.cfg.RequiresSession {
		return
	}
	h := q.topic.handover[part.idx]
	if !h.mu.TryLock() {
		return
	}
	if time.Since(h.last) < handoverEvery {
		h.mu.Unlock()
		return
	}
	h.last = time.Now()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer h.mu.Unlock()
		if err := q.handOver(ctx, part); err != nil && q.d.check() == nil {
			q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: handing messages over to sessions failed", slogErr(err), slogQueue(q.cfg.Name))
		}
	}()
}

// handOver moves the interest in every message the subscription's
// consumer holds on part to the consumer of the message's session.
func (q *jsQueue) handOver(ctx context.Context, part *jsPartition) error {
	const batch = 256
	for {
		if err := q.d.check(); err != nil {
			return err
		}
		p := q.puller(part)
		pl, err := p.Request(batch, 0, true)
		if err != nil {
			return q.d.mapErr(err)
		}
		p.WaitEnd(ctx, pl, time.Now().Add(pull.Slack))
		// What the pull brings later is released at once, for the next
		// hand-over, of any receiver, to read: kept here, it would wait
		// for this receiver's next hand-over, which may never come.
		p.Cancelled(pl)
		hs := p.TakeAll()
		// Per session, within this batch (whose messages all entered
		// before the checks): whether it is being collected, and whether
		// its consumer was seen. A collection that starts after the check
		// finds the batch's messages pending, unless they are completed,
		// and then it does not matter who acknowledges them here.
		collecting := make(map[string]bool)
		ensured := make(map[string]bool)
		for i, h := range hs {
			if err := q.handOverOne(ctx, part, h.Msg, collecting, ensured); err != nil {
				// The rest is released, for the next hand-over to read at
				// once rather than after handoverAckWait.
				for _, h := range hs[i:] {
					_ = h.Msg.Nak()
				}
				return err
			}
		}
		if len(hs) < batch {
			return nil
		}
	}
}

// handOverOne hands over msg (see handOver).
func (q *jsQueue) handOverOne(ctx context.Context, part *jsPartition, msg *pull.Msg, collecting, ensured map[string]bool) error {
	var m Message
	decodeHeader(msg.Headers(), &m)
	md, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("transport: hand-over: %w", err)
	}
	c, seen := collecting[m.SessionID]
	if !seen {
		if c, err = q.sessionCollecting(ctx, part, m.SessionID); err != nil {
			return err
		}
		collecting[m.SessionID] = c
	}
	if c {
		return nil // redelivered to a later hand-over
	}
	if !ensured[m.SessionID] {
		c, err := q.subSessionConsumer(ctx, part, m.SessionID, md.Sequence.Stream)
		if err != nil {
			return err
		}
		ensured[m.SessionID] = c != nil
	}
	return q.d.mapErr(msg.Ack())
}

// gcMark is the body of a session lock held by collectSession.
var gcMark = []byte("gc")

// sessionCollecting reports whether a receiver is collecting the consumer
// of session id (its lock holds gcMark).
func (q *jsQueue) sessionCollecting(ctx context.Context, part *jsPartition, id string) (bool, error) {
	raw, err := part.sched.GetLastMsgForSubject(ctx, sessionLockSubject(part, id))
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, q.d.mapErr(err)
	}
	return string(raw.Data) == string(gcMark), nil
}

// sessionFloor returns the floor recorded when session id's consumer was
// last collected, 0 if never.
func (q *jsQueue) sessionFloor(ctx context.Context, part *jsPartition, id string) (uint64, error) {
	raw, err := part.sched.GetLastMsgForSubject(ctx, sessionFloorSubject(part, id))
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, q.d.mapErr(err)
	}
	f, err := strconv.ParseUint(string(raw.Data), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("transport: session floor %q: %w", raw.Data, err)
	}
	return f, nil
}

// subSessionConsumer returns the consumer of session id of a
// subscription, creating it if it does not exist, starting after the
// session's floor. For the hand-over of the message at stream sequence
// seq (seq > 0) it creates none if seq is at or below the floor (that
// message was completed) and returns nil. It never trusts a cached
// consumer: another process may have collected it.
func (q *jsQueue) subSessionConsumer(ctx context.Context, part *jsPartition, id string, seq uint64) (jetstream.Consumer, error) {
	cc := q.sessionConsumerConfig(part, id)
	ctx, cancel := q.d.apiContext(ctx)
	defer cancel()
	for {
		c, err := part.queue.Consumer(ctx, cc.Durable)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, q.d.mapErr(err)
		}
		floor, err := q.sessionFloor(ctx, part, id)
		if err != nil {
			return nil, err
		}
		if seq != 0 && seq <= floor {
			return nil, nil
		}
		cc.OptStartSeq = max(cc.OptStartSeq, floor+1)
		c, err = part.queue.CreateConsumer(ctx, cc)
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return c, q.d.mapErr(err)
		}
	}
}

// collectAbandoned collects the consumer of a session that has nothing
// pending, if no receiver holds the session: its last receiver died, or
// closed while a message was on its way. It takes the session lock as a
// receiver would, and closes it.
func (q *jsQueue) collectAbandoned(ctx context.Context, part *jsPartition, ci *jetstream.ConsumerInfo) {
	id := ci.Config.Metadata[metaSessionID]
	s := &jsSession{q: q, part: part, id: id, lockSubj: sessionLockSubject(part, id), holder: []byte(nuid.Next())}
	if s.lock(ctx) != nil {
		return // held, or the server unreachable
	}
	if c, err := part.queue.Consumer(ctx, ci.Name); err == nil {
		s.c = c
	}
	_ = s.close()
}

// collectSession deletes the consumer of the session s holds if nothing
// is pending on it, recording the session's floor first (see above).
// Called by close, with s.mu held; failures leave the consumer in place.
func (q *jsQueue) collectSession(ctx context.Context, s *jsSession) {
	if q.topic == nil || q.topic.sub == "" || s.c == nil {
		return
	}
	idle := func() (*jetstream.ConsumerInfo, bool) {
		ci, err := s.c.Info(ctx)
		return ci, err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	}
	if _, ok := idle(); !ok {
		return
	}
	mark := &nats.Msg{Subject: s.lockSubj, Data: gcMark, Header: nats.Header{
		natsTTL:                             {q.lockTTL().String()},
		"Nats-Rollup":                       {"sub"},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(s.seq, 10)},
	}}
	ack, err := q.d.js.PublishMsg(ctx, mark)
	if err != nil {
		return // the lock is lost, or the server unreachable
	}
	s.seq = ack.Sequence
	ci, ok := idle()
	if !ok {
		return
	}
	floor := &nats.Msg{Subject: sessionFloorSubject(s.part, s.id), Data: strconv.AppendUint(nil, ci.Delivered.Stream, 10),
		Header: nats.Header{"Nats-Rollup": {"sub"}}}
	if _, err := q.d.js.PublishMsg(ctx, floor); err != nil {
		return
	}
	if err := s.part.queue.DeleteConsumer(ctx, ci.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: deleting an idle session consumer failed", slogErr(err), slogQueue(q.cfg.Name))
		return
	}
	q.mu.Lock()
	delete(q.sessions, ci.Name)
	q.mu.Unlock()
}

// sessionConsumers lists the consumers of the subscription's sessions on
// part.
func (q *jsQueue) sessionConsumers(ctx context.Context, part *jsPartition) ([]*jetstream.ConsumerInfo, error) {
	var out []*jetstream.ConsumerInfo
	l := part.queue.ListConsumers(ctx)
	for ci := range l.Info() {
		if strings.HasPrefix(ci.Name, subSessionPrefix(q.topic.sub)) {
			out = append(out, ci)
		}
	}
	if err := l.Err(); err != nil {
		return nil, q.d.mapErr(err)
	}
	return out, nil
}

// freeSubSession hands over, then looks for a session consumer with work
// and no receiver.
func (q *jsQueue) freeSubSession(ctx context.Context, part *jsPartition) (string, error) {
	if err := q.handOver(ctx, part); err != nil {
		return "", err
	}
	cis, err := q.sessionConsumers(ctx, part)
	if err != nil {
		return "", err
	}
	rand.Shuffle(len(cis), func(i, j int) { cis[i], cis[j] = cis[j], cis[i] })
	for _, ci := range cis {
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			q.collectAbandoned(ctx, part, ci)
			continue
		}
		id := ci.Config.Metadata[metaSessionID]
		if _, err := part.sched.GetLastMsgForSubject(ctx, sessionLockSubject(part, id)); err == nil {
			continue // a receiver holds it
		} else if !isNotFound(err) {
			return "", q.d.mapErr(err)
		}
		if sessionFree(ci, serverAckWait(q.cfg.LockDuration)) {
			return id, nil
		}
	}
	return "", nil
}
