package transport

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Housekeeping. Every broker looks after the queues it has open, whether
// or not it receives from them, so that a queue whose receivers are not
// jetsaga's (see the wire format) keeps its promises too. One goroutine
// per broker, started with the first queue, does in turn for each
// partition:
//
//   - the sourcing watch (checkSourcing);
//   - the purge of copies the queue stream has sourced (maybePurge),
//     learning how far sourcing got from receivers' deliveries or, when
//     none are seen, from the newest message in the queue (peekSourced);
//   - the move of messages that exhausted MaxDeliveryCount to the
//     dead-letter queue: the server delivers a message MaxDeliveryCount
//     times at most (the receive consumer's MaxDeliver) and announces it
//     with an advisory, which one broker of those that have the queue
//     open receives (a queue group); a look every exhaustedEvery catches
//     those whose advisory no broker heard (findExhausted).
//
// Every step is idempotent: any number of brokers in any number of
// processes may look after one queue.
const (
	housekeepEvery = time.Second
	exhaustedEvery = 5 * time.Second

	maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
	housekeepGroup        = "jetsaga-housekeeping"
)

type housekeeper struct {
	mu      sync.Mutex
	queues  map[string]*jsQueue           // by queue name
	subs    map[string]*nats.Subscription // advisories, by queue stream
	running bool
}

// housekeep has the broker look after q from now on.
func (d *jsDriver) housekeep(q *jsQueue) {
	if q.isDLQ || q.topic != nil {
		return
	}
	h := &d.hk
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queues == nil {
		h.queues = make(map[string]*jsQueue)
		h.subs = make(map[string]*nats.Subscription)
	}
	h.queues[q.cfg.Name] = q
	for _, part := range q.parts {
		if part.cons == nil || h.subs[part.n.queue] != nil {
			continue
		}
		stream := part.n.queue
		sub, err := d.nc.QueueSubscribe(maxDeliveriesAdvisory+stream+"."+ReceiveConsumer, housekeepGroup,
			func(m *nats.Msg) { d.onExhausted(stream, m.Data) })
		if err != nil {
			d.o.logger.LogAttrs(d.life, slog.LevelWarn, "transport: no subscription to max-deliveries advisories; exhausted messages move on the next look",
				slogErr(err), slogQueue(q.cfg.Name))
			continue
		}
		h.subs[stream] = sub
	}
	if !h.running {
		h.running = true
		go d.housekeepLoop()
	}
}

// forget stops looking after queue name (deleted).
func (d *jsDriver) forget(name string) {
	h := &d.hk
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[name]
	if q == nil {
		return
	}
	delete(h.queues, name)
	for _, part := range q.parts {
		if sub := h.subs[part.n.queue]; sub != nil {
			_ = sub.Unsubscribe()
			delete(h.subs, part.n.queue)
		}
	}
}

func (d *jsDriver) housekept() []*jsQueue {
	h := &d.hk
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*jsQueue, 0, len(h.queues))
	for _, q := range h.queues {
		out = append(out, q)
	}
	return out
}

func (d *jsDriver) housekeepLoop() {
	t := time.NewTicker(housekeepEvery)
	defer t.Stop()
	for {
		select {
		case <-d.life.Done():
			h := &d.hk
			h.mu.Lock()
			for _, sub := range h.subs {
				_ = sub.Unsubscribe()
			}
			h.mu.Unlock()
			return
		case <-t.C:
		}
		if d.check() != nil {
			continue
		}
		for _, q := range d.housekept() {
			for _, part := range q.parts {
				if err := q.upkeep(d.life, part); errors.Is(err, jetstream.ErrStreamNotFound) {
					d.forget(q.cfg.Name)
					break
				}
			}
		}
	}
}

// upkeep does one round of housekeeping on part.
func (q *jsQueue) upkeep(ctx context.Context, part *jsPartition) error {
	q.checkSourcing(ctx, part)
	if err := q.peekSourced(ctx, part); err != nil {
		return err
	}
	q.maybePurge(ctx, part)
	q.findExhausted(ctx, part)
	return nil
}

// peekSourced learns how far the queue stream has sourced the schedule
// stream when no receiver of this broker told (see noteSourced): from the
// newest message the queue stream holds, which it looks at at most every
// purgeEvery, and only when the schedule stream holds writes beyond what
// is known sourced. A queue drained at once by receivers that are not
// jetsaga's may hold none at those moments: its copies then wait in the
// schedule stream until a look finds a message (see docs/wire.md).
func (q *jsQueue) peekSourced(ctx context.Context, part *jsPartition) error {
	if part.sched == nil || time.Since(part.lastPeek) < purgeEvery {
		return nil
	}
	part.lastPeek = time.Now()
	ctx, cancel := q.d.apiContext(ctx)
	defer cancel()
	info, err := part.sched.Info(ctx)
	if err != nil {
		return err
	}
	if !info.Created.Equal(part.created) {
		// Deleted and created again since: this handle is stale.
		return jetstream.ErrStreamNotFound
	}
	if info.State.LastSeq <= part.sourcedUpTo.Load() {
		return nil
	}
	raw, err := part.queue.GetLastMsgForSubject(ctx, part.n.qSubj+".>")
	if err == nil {
		part.noteSourced(raw.Header.Get(natsStreamSource), raw.Time)
	}
	return nil
}

// advisory is the part of a max-deliveries advisory housekeeping reads.
type advisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// onExhausted handles a max-deliveries advisory of queue stream stream.
func (d *jsDriver) onExhausted(stream string, data []byte) {
	var a advisory
	if err := json.Unmarshal(data, &a); err != nil || a.StreamSeq == 0 {
		return
	}
	for _, q := range d.housekept() {
		for _, part := range q.parts {
			if part.n.queue == stream {
				go q.moveExhausted(d.life, part, a.StreamSeq, a.Deliveries)
				return
			}
		}
	}
}

// findExhausted moves the messages that exhausted their deliveries and
// whose advisory no broker heard. While no delivery of the partition is
// in flight (no ack pending), every message the consumer delivered that
// is still stored was delivered MaxDeliver times: a completed one is
// removed, an abandoned or expired one is pending again. A message seen
// so in two looks in a row is moved.
func (q *jsQueue) findExhausted(ctx context.Context, part *jsPartition) {
	if part.cons == nil || time.Since(part.lastExhausted) < exhaustedEvery {
		return
	}
	part.lastExhausted = time.Now()
	ctx, cancel := q.d.apiContext(ctx)
	defer cancel()
	ci, err := part.cons.Info(ctx)
	if err != nil || ci.NumAckPending > 0 || ci.Config.MaxDeliver <= 0 || ci.AckFloor.Stream >= ci.Delivered.Stream {
		part.suspects = nil
		return
	}
	seen := make(map[uint64]bool)
	for start := ci.AckFloor.Stream + 1; start <= ci.Delivered.Stream && len(seen) < 1000; {
		raw, err := part.queue.GetMsg(ctx, start, jetstream.WithGetMsgSubject(part.n.qSubj+".m"))
		if err != nil || raw.Sequence > ci.Delivered.Stream {
			break
		}
		if part.suspects[raw.Sequence] {
			q.moveExhausted(ctx, part, raw.Sequence, ci.Config.MaxDeliver)
		} else {
			seen[raw.Sequence] = true
		}
		start = raw.Sequence + 1
	}
	part.suspects = seen
}

// moveExhausted moves the message at seq of part, delivered deliveries
// times, to the dead-letter queue with reason
// ReasonMaxDeliveryCountExceeded, and removes it from the queue. Its
// dead-letter copy is deduplicated like a receiver's (see
// jsSettler.deadLetter), so brokers and receivers racing to move one
// message leave one copy.
func (q *jsQueue) moveExhausted(ctx context.Context, part *jsPartition, seq uint64, deliveries int) {
	ctx, cancel := q.d.apiContext(ctx)
	defer cancel()
	raw, err := part.queue.GetMsg(ctx, seq)
	if isNotFound(err) {
		return
	}
	if err == nil && !strings.HasPrefix(raw.Subject, part.n.qSubj+".") {
		return
	}
	if err == nil {
		m := rawMessage(raw, part.idx, false)
		err = q.publishDeadLetter(ctx, m, ReasonMaxDeliveryCountExceeded,
			exhaustedDescription(deliveries, q.cfg.MaxDeliveryCount), nil)
	}
	if err == nil {
		if err = part.queue.DeleteMsg(ctx, seq); isNotFound(err) {
			err = nil
		}
	}
	if err != nil {
		q.d.o.logger.LogAttrs(ctx, slog.LevelError, "transport: moving an exhausted message to the dead-letter queue failed; the next look tries again",
			slog.Uint64("seq", seq), slogErr(err), slogQueue(q.cfg.Name))
	}
}

func (q *jsQueue) checkSourcing(ctx context.Context, part *jsPartition) {
	if !part.replicated || part.sched == nil || !part.watchMu.TryLock() {
		return
	}
	defer part.watchMu.Unlock()
	if time.Since(part.lastWatch) < sourceCheckEvery || time.Since(part.lastKick) < sourceKickEvery {
		return
	}
	part.lastWatch = time.Now()
	ctx, cancel := q.d.apiContext(context.WithoutCancel(ctx))
	defer cancel()
	info, err := part.queue.Info(ctx)
	if err != nil {
		return // no leader right now: nothing to move
	}
	for _, si := range info.Sources {
		silent := si.Active
		if silent < 0 {
			// Never heard from since this leader took over: silent since
			// the first check that saw it so.
			if part.unheardSince.IsZero() {
				part.unheardSince = time.Now()
			}
			silent = time.Since(part.unheardSince)
		} else {
			part.unheardSince = time.Time{}
		}
		if silent < sourceStalled {
			continue
		}
		if _, err := part.sched.Info(ctx); err != nil {
			// The schedule stream has no leader (a node restarting):
			// a new queue leader could not source from it either, and a
			// kick now would hold back the next one by sourceKickEvery.
			return
		}
		part.lastKick, part.unheardSince = time.Now(), time.Time{}
		_, err := q.d.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+part.n.queue, nil)
		q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: queue stream's source silent; moved its leader to restart it",
			slog.String("stream", part.n.queue), slog.Duration("silent", silent), slogErr(err), slogQueue(q.cfg.Name))
		return
	}
}

// noteSourced records the schedule-stream sequence of a copy that reached
// the queue (from its Nats-Stream-Source header: "<stream> <seq> ...")
// and the time it was enqueued there. Sourcing is in order, so every copy
// below it has reached the queue too.
func (p *jsPartition) noteSourced(src string, enqueued time.Time) {
	// The second field, without splitting the header (one allocation per
	// delivered message otherwise).
	_, rest, ok := strings.Cut(strings.TrimLeft(src, " "), " ")
	if !ok {
		return
	}
	rest = strings.TrimLeft(rest, " ")
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		rest = rest[:i]
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return
	}
	for {
		cur := p.sourcedUpTo.Load()
		if seq <= cur || p.sourcedUpTo.CompareAndSwap(cur, seq) {
			break
		}
	}
	// A checkpoint a second: copies up to seq were stored no later than
	// enqueued.
	if !p.purgeMu.TryLock() {
		return
	}
	defer p.purgeMu.Unlock()
	if n := len(p.aged); n == 0 || enqueued.Sub(p.aged[n-1].at) >= time.Second && seq > p.aged[n-1].seq {
		p.aged = append(p.aged, checkpoint{seq: seq, at: enqueued})
	}
}

// purgeEvery is how often a receiver purges sourced copies.
const purgeEvery = 5 * time.Second

// maybePurge removes copies the queue stream has already sourced from the
// schedule stream, at most every purgeEvery: those without a MessageID at
// once, those with one once they are older than the duplicate window (they
// are what remembers the MessageID, see guard).
func (q *jsQueue) maybePurge(ctx context.Context, part *jsPartition) {
	if !part.purgeMu.TryLock() {
		return
	}
	defer part.purgeMu.Unlock()
	if time.Since(part.lastPurge) < purgeEvery {
		return
	}
	part.lastPurge = time.Now()
	ctx = context.WithoutCancel(ctx)
	purge := func(kind string, upTo uint64) bool {
		err := part.sched.Purge(ctx, jetstream.WithPurgeSubject(part.n.sSubj+".*."+kind+".>"), jetstream.WithPurgeSequence(upTo))
		if err != nil {
			q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: purging sourced copies failed", slogErr(err), slogQueue(q.cfg.Name))
		}
		return err == nil
	}
	if upTo := part.sourcedUpTo.Load(); upTo > part.purgedUpTo && purge(KindWithoutID, upTo+1) {
		part.purgedUpTo = upTo
	}
	old := time.Now().Add(-q.cfg.DuplicateWindow)
	upTo := part.agedUpTo
	for len(part.aged) > 0 && part.aged[0].at.Before(old) {
		upTo = part.aged[0].seq
		part.aged = part.aged[1:]
	}
	if upTo > part.agedUpTo && purge(KindWithID, upTo+1) {
		part.agedUpTo = upTo
	}
}

type checkpoint struct {
	seq uint64
	at  time.Time
}

// Sourcing watch. After the leader of a schedule stream changes, the
// queue stream's leader re-creates its source consumer, and when that
// fails (the schedule stream has no leader yet) nats-server retries with a
// backoff of 10 s, 20 s, ... up to 2 minutes, and notices a stalled source
// only every 10 s: activations, written to the schedule stream on time,
// would wait that long to reach receivers. A healthy source hears a
// heartbeat every second, so idle receivers check now and then, and move
// the queue stream's leadership when its source has been silent for
// sourceStalled: the new leader sets the source up at once. Only a
// replicated stream can change leader; on one server the source runs
// inside the same process and does not stall this way.
const (
	sourceCheckEvery = 2 * time.Second
	sourceStalled    = 4 * time.Second
	sourceKickEvery  = 15 * time.Second
)
