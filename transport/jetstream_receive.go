package transport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// pollWait bounds one pull request, so that a receive spread over several
// partitions, or a closed broker, is noticed promptly.
const pollWait = 250 * time.Millisecond

// pullWait bounds a pull on a single consumer. A pull the server forgets
// (it restarted) is replaced after at most this long.
const pullWait = time.Second

func (q *jsQueue) receive(ctx context.Context, max int) ([]*Delivery, error) {
	start := rand.IntN(len(q.parts))
	for {
		if err := q.d.check(); err != nil {
			return nil, err
		}
		// First what earlier pulls brought after their receive returned
		// (see puller).
		for i := range q.parts {
			part := q.parts[(start+i)%len(q.parts)]
			p := q.puller(part)
			if ds := q.collect(ctx, part, p, p.take(max)); len(ds) > 0 {
				return ds, nil
			}
		}
		// One pass without waiting over every partition, then a short
		// blocking pull on one of them.
		for i := range q.parts {
			ds, err := q.pullNow(ctx, q.parts[(start+i)%len(q.parts)], max)
			if err != nil || len(ds) > 0 {
				return ds, err
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		// Wait for one message only: a batch pull returns when full or
		// expired, and its messages' locks would run out meanwhile.
		wait := pollWait
		if len(q.parts) == 1 {
			wait = pullWait
		}
		part := q.parts[start]
		p := q.puller(part)
		if err := q.pullOne(ctx, p, wait, time.Time{}); err != nil {
			return nil, err
		}
		if ds := q.collect(ctx, part, p, p.take(max)); len(ds) > 0 {
			if max > len(ds) {
				more, _ := q.pullNow(ctx, part, max-len(ds))
				ds = append(ds, more...)
			}
			return ds, nil
		}
		q.checkSourcing(ctx, part)
		start = (start + 1) % len(q.parts)
	}
}

// puller returns the puller of part's consumer (see puller).
func (q *jsQueue) puller(part *jsPartition) *puller {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pullers == nil {
		q.pullers = map[*jsPartition]*puller{}
	}
	p := q.pullers[part]
	if p == nil {
		p = newPuller(q.d, part.cons, q.cfg.LockDuration)
		q.pullers[part] = p
	}
	return p
}

// pullNow pulls up to max messages from part without waiting for any to
// be sent, and returns the deliveries among them. It waits for the
// server's answer for at most pullSlack: what arrives later is kept.
func (q *jsQueue) pullNow(ctx context.Context, part *jsPartition, max int) ([]*Delivery, error) {
	p := q.puller(part)
	pl, err := p.request(max, 0, true)
	if err != nil {
		return nil, q.d.mapErr(err)
	}
	until := time.Now().Add(pullSlack)
	p.waitEnd(ctx, pl, until)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		p.cancelled(pl) // the receiver is stopping
	case ctx.Err() != nil:
		// A deadline: the answer is on its way (see pullOne).
		p.waitEnd(context.WithoutCancel(ctx), pl, until)
	}
	q.pullEnded(ctx, pl)
	return q.collect(ctx, part, p, p.take(max)), nil
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

// pullOne waits for a message from p for up to wait, until ctx ends, the
// broker closes, or by (if set), with a pull for one message (or one
// still live from an earlier call). The message, if any, is left to take.
//
// The pull asks the server to give up pullGuard before ctx's deadline,
// and pullOne then waits for the pull's end (a message, or the server's
// end-of-pull status) even a little past that deadline, for up to
// pullSlack past the pull's expiry. Over a slow link the server still
// holds the pull after that; what it brings then is kept for the next
// receive (see puller), unless ctx was cancelled (not a deadline): then
// its receiver is stopping, and what the pull brings is released at once.
func (q *jsQueue) pullOne(ctx context.Context, p *puller, wait time.Duration, by time.Time) error {
	expires := wait
	if dl, ok := ctx.Deadline(); ok {
		expires = min(expires, time.Until(dl)-pullGuard)
	}
	if expires < minPull {
		// Too short a pull to be worth a request: wait out the rest.
		until := time.Now().Add(max(expires+pullGuard, 0))
		if !by.IsZero() && by.Before(until) {
			until = by
		}
		p.wait(ctx, nil, until)
		return nil
	}
	pl := p.live()
	if pl == nil {
		var err error
		if pl, err = p.request(1, expires, false); err != nil {
			if ctx.Err() != nil || q.d.check() != nil {
				return nil // the caller reports why it stopped
			}
			return q.d.mapErr(err)
		}
	}
	until := pl.sent.Add(pl.expiry + pullSlack)
	if !by.IsZero() && by.Before(until) {
		until = by
	}
	p.wait(ctx, pl, until)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// Not a deadline: the receiver is stopping.
		p.cancelled(pl)
		return nil
	case ctx.Err() != nil:
		// A deadline: the pull expired pullGuard before it on the server,
		// so its end (or its message) is on its way; waiting for it, for
		// up to pullSlack, keeps the pull from outliving the receive
		// (its message would then wait for the next one, or, if the
		// receiver closes meanwhile, be released and count a delivery).
		p.wait(context.WithoutCancel(ctx), pl, until)
	}
	if q.pullEnded(ctx, pl) && !p.ready() {
		// The pull failed at once (the consumer or stream has no
		// leader during an election, say): wait out the slice rather
		// than spin.
		until := time.Now().Add(expires)
		if !by.IsZero() && by.Before(until) {
			until = by
		}
		p.wait(ctx, nil, until)
	}
	return nil
}

// pullGuard is how long before a receive's deadline its pull expires on
// the server; minPull is the shortest pull worth a request.
const (
	pullGuard = 20 * time.Millisecond
	minPull   = 5 * time.Millisecond
)

// pullWarnEvery bounds how often a queue logs failed pulls.
const pullWarnEvery = 5 * time.Second

// pullEnded reports whether pl ended in failure (see pullFailed).
func (q *jsQueue) pullEnded(ctx context.Context, pl *pull) bool {
	select {
	case <-pl.ended:
		return q.pullFailed(ctx, pl.err)
	default:
		return false
	}
}

// pullFailed reports whether a pull's err is a failure (not merely its
// expiry), and logs failures at most every pullWarnEvery per queue.
func (q *jsQueue) pullFailed(ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || q.d.check() != nil {
		return false
	}
	now := time.Now().UnixNano()
	if last := q.lastPullWarn.Load(); now-last >= int64(pullWarnEvery) && q.lastPullWarn.CompareAndSwap(last, now) {
		q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: pull failed (logged at most every 5s)", slogErr(err), slogQueue(q.cfg.Name))
	}
	return true
}

// collect turns messages taken from p into deliveries, dropping those
// the transport settles itself (cancelled activations, exhausted ones),
// and giving back to p, for lookupRetry, activations of which it cannot
// tell yet whether they were cancelled.
func (q *jsQueue) collect(ctx context.Context, part *jsPartition, p *puller, hs []*held) []*Delivery {
	if len(hs) == 0 {
		return nil
	}
	var out []*Delivery
	var back []*held
	cancelled, unknown := q.cancelledActivations(ctx, part, hs)
	for _, h := range hs {
		if unknown[h.msg.Headers().Get(natsScheduler)] {
			back = append(back, h)
			continue
		}
		if d := q.delivery(ctx, part, h, cancelled); d != nil {
			out = append(out, d)
		}
	}
	if len(back) > 0 {
		p.holdBack(back, time.Now().Add(lookupRetry))
	}
	return out
}

// lookupRetry is how long an activation waits for another try after the
// lookup of its cancel record failed.
const lookupRetry = 250 * time.Millisecond

// delivery turns one pulled message into a delivery, or settles it and
// returns nil. cancelled holds the schedule subjects, among this pull's
// activations, whose cancel record landed as they activated (see
// cancelledActivations).
func (q *jsQueue) delivery(ctx context.Context, part *jsPartition, h *held, cancelled map[string]bool) *Delivery {
	msg := h.msg
	md, err := msg.Metadata()
	if err != nil {
		q.d.o.logger.LogAttrs(ctx, slog.LevelError, "transport: message without metadata", slogErr(err), slogQueue(q.cfg.Name))
		return nil
	}
	m := &Message{
		Body:       msg.Data(),
		Seq:        makeSeq(part.idx, false, md.Sequence.Stream),
		EnqueuedAt: md.Timestamp.UTC(),
		State:      Active,
	}
	hd := msg.Headers()
	decodeHeader(hd, m)
	s := &jsSettler{q: q, part: part, msg: msg, m: m, count: int(md.NumDelivered), lockedUntil: h.lockedAt.Add(q.cfg.LockDuration)}
	if !q.isDLQ {
		part.noteSourced(hd.Get(natsStreamSource), m.EnqueuedAt)
		if sched := hd.Get(natsScheduler); sched != "" && cancelled[sched] {
			if err := msg.Ack(); err != nil {
				q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: ack of cancelled activation failed", slogErr(err), slogQueue(q.cfg.Name))
			}
			return nil
		}
		q.maybePurge(ctx, part)
	}
	count := int(md.NumDelivered)
	if count > q.cfg.MaxDeliveryCount && !q.isDLQ {
		// Not the receive's context, which may end meanwhile.
		dctx, cancel := q.d.apiContext(context.WithoutCancel(ctx))
		defer cancel()
		if err := s.deadLetter(dctx, ReasonMaxDeliveryCountExceeded,
			exhaustedDescription(count-1, q.cfg.MaxDeliveryCount), nil); err != nil {
			q.d.o.logger.LogAttrs(ctx, slog.LevelError, "transport: dead-lettering failed", slogErr(err), slogQueue(q.cfg.Name))
		}
		return nil
	}
	return newDelivery(m, count, s.lockedUntil, s)
}

// cancelledActivations returns the schedule subjects (P.S.N.p.<key>.s),
// among the activations in hs, whose activation must be dropped because
// a cancel record for them landed in the instant they activated (see
// dropCancelled), and those whose lookup failed: whether they were
// cancelled is not known, and they must not be delivered yet. On a
// stream with one replica it asks once for the whole pull: a direct get
// of the last message on each <key>.x.* (multi_last), answered by a
// single "no results" when none was cancelled, which is the rule. A
// lookup per activation was the receivers' bottleneck in a burst: a
// million activations meant a million JetStream API requests queued
// behind the scheduler's store lock. On replicated streams any replica may
// answer a direct get, and a follower may not have stored the record yet,
// so there it asks the leader once per activation, as before.
func (q *jsQueue) cancelledActivations(ctx context.Context, part *jsPartition, hs []*held) (cancelled, unknown map[string]bool) {
	if q.isDLQ {
		return nil, nil
	}
	var scheds []string
	for _, h := range hs {
		if sched := h.msg.Headers().Get(natsScheduler); sched != "" {
			scheds = append(scheds, sched)
		}
	}
	if len(scheds) == 0 {
		return nil, nil
	}
	cancelled, unknown = map[string]bool{}, map[string]bool{}
	if part.replicated {
		// Direct gets are off there (see leaderReads).
		for _, sched := range scheds {
			found, err := q.dropCancelled(ctx, part, sched)
			switch {
			case err != nil:
				unknown[sched] = true
			case found:
				cancelled[sched] = true
			}
		}
		return cancelled, unknown
	}
	prefix := part.n.sSubj + "."
	for len(scheds) > 0 {
		chunk := scheds[:min(len(scheds), multiLastMax)]
		scheds = scheds[len(chunk):]
		filters := make([]string, 0, len(chunk))
		for _, sched := range chunk {
			if key, ok := strings.CutSuffix(sched, ".s"); ok && strings.HasPrefix(key, prefix) {
				filters = append(filters, key+".x.*")
			}
		}
		if len(filters) == 0 {
			continue
		}
		found, err := q.lookupCancelRecords(ctx, part, filters)
		if err != nil {
			// Not delivered while unknown: Cancel may have returned nil.
			q.lookupFailed(ctx, err)
			for _, sched := range chunk {
				unknown[sched] = true
			}
			continue
		}
		for _, subj := range found {
			if i := strings.LastIndex(subj, ".x."); i > 0 {
				cancelled[subj[:i]+".s"] = true
			}
		}
	}
	return cancelled, unknown
}

// lookupCancelRecords returns the subjects of the last cancel records on
// filters in part's schedule stream (see lastBySubjects).
func (q *jsQueue) lookupCancelRecords(ctx context.Context, part *jsPartition, filters []string) ([]string, error) {
	if q.lookupFault != nil {
		if err := q.lookupFault(); err != nil {
			return nil, err
		}
	}
	// Not the receive's context: it may end during the lookup.
	return q.d.lastBySubjects(context.WithoutCancel(ctx), part.n.sched, filters)
}

// lookupFailed logs a failed cancel record lookup, at most every
// pullWarnEvery per queue.
func (q *jsQueue) lookupFailed(ctx context.Context, err error) {
	now := time.Now().UnixNano()
	if last := q.lastLookupWarn.Load(); now-last >= int64(pullWarnEvery) && q.lastLookupWarn.CompareAndSwap(last, now) {
		q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: cancel record lookup failed; keeping the activation until it answers (logged at most every 5s)",
			slogErr(err), slogQueue(q.cfg.Name))
	}
}

// multiLastMax bounds the subjects of one multi_last direct get (the
// server answers at most 1024 messages).
const multiLastMax = 256

// lastBySubjects returns the subjects of the last messages on the filters
// (wildcards allowed) that stream holds, with one direct get (multi_last):
// the server answers with the messages found and an end-of-batch status,
// or a single 404 when none is.
func (d *jsDriver) lastBySubjects(ctx context.Context, stream string, filters []string) ([]string, error) {
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{filters})
	if err != nil {
		return nil, err
	}
	ctx, cancel := d.apiContext(ctx)
	defer cancel()
	// A channel of its own, sized for the longest answer: SubscribeSync
	// would allocate one of the connection's SubChanLen (64k slots, 512 KiB)
	// for every lookup, which in a burst was a quarter of the whole
	// process's allocations. The server answers at most
	// multiLastResponses messages and one status; should more arrive
	// anyway, the overflow is dropped, and the lookup fails rather than
	// miss a record.
	ch := make(chan *nats.Msg, multiLastResponses+1)
	inbox := d.nc.NewRespInbox()
	sub, err := d.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, d.mapErr(err)
	}
	defer sub.Unsubscribe()
	if err := d.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, d.mapErr(err)
	}
	var found []string
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return nil, d.mapErr(ctx.Err())
		}
		switch status := m.Header.Get("Status"); status {
		case "":
			found = append(found, m.Header.Get(jetstream.SubjectHeader))
			continue
		case "404", "204": // no results; end of batch
		default:
			return nil, fmt.Errorf("transport: direct get of cancel records: status %s %s", status, m.Header.Get("Description"))
		}
		if n, err := sub.Dropped(); err != nil || n > 0 {
			return nil, fmt.Errorf("transport: direct get of cancel records: %d answers dropped (%v)", n, err)
		}
		return found, nil
	}
}

// multiLastResponses is the most messages nats-server (2.15) sends in
// answer to one multi_last direct get.
const multiLastResponses = 1024

// dropCancelled reports whether the activation of the schedule on
// subject sched (P.S.N.p.<key>.s) was cancelled in the instant it
// activated: then Cancel returned nil and the message must not be
// delivered. An error means it cannot tell.
func (q *jsQueue) dropCancelled(ctx context.Context, part *jsPartition, sched string) (bool, error) {
	key, ok := strings.CutSuffix(sched, ".s")
	if !ok || !strings.HasPrefix(key, part.n.sSubj+".") {
		return false, nil
	}
	if q.lookupFault != nil {
		if err := q.lookupFault(); err != nil {
			q.lookupFailed(ctx, err)
			return false, err
		}
	}
	// Not the receive's context: it may end during the lookup, and a
	// cancelled activation must not be delivered then.
	found, err := q.d.lastBySubject(context.WithoutCancel(ctx), part.n.sched, key+".x.*")
	if err != nil {
		q.lookupFailed(ctx, err)
		return false, err
	}
	return found, nil
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

// jsSettler settles one JetStream delivery. The lock is tracked on the
// client from the moment of receipt, which is never later than the
// server's own ack deadline: a settle after it returns ErrLockLost and
// leaves the message to its redelivery.
type jsSettler struct {
	q           *jsQueue
	part        *jsPartition
	msg         *pulledMsg
	m           *Message
	count       int // delivery count
	lockedUntil time.Time
}

func (s *jsSettler) live() error {
	if err := s.q.d.check(); err != nil {
		return err
	}
	if time.Now().After(s.lockedUntil) {
		return fmt.Errorf("%w: seq %d locked until %s", ErrLockLost, s.m.Seq, s.lockedUntil.Format(time.RFC3339Nano))
	}
	return nil
}

func (s *jsSettler) complete(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	return s.acked(ctx, s.ack(ctx))
}

// removalWait bounds how long a settle on a replicated stream waits for
// the stream leader to remove the acknowledged message.
const removalWait = 5 * time.Second

// acked finishes a settle whose ack returned err. On a replicated queue
// stream the server acknowledges the ack once the consumer has recorded
// it, and removes the message afterwards, through a proposal of the
// stream's own: until then Peek, Browse and AcceptNextSession (which read
// from the stream leader) would still see it. So a settle there returns
// once the leader no longer holds the message, or after removalWait (the
// ack stands either way; the removal is the server's to finish).
func (s *jsSettler) acked(ctx context.Context, err error) error {
	if err != nil || !s.part.replicated || s.part.n.topic {
		// A topic's message stays until every subscription has settled it.
		return s.q.d.mapErr(err)
	}
	deadline := time.Now().Add(removalWait)
	backoff := time.Millisecond
	for {
		gctx, cancel := context.WithTimeout(ctx, s.q.d.firstTryLimit()) // see tries
		_, err := s.part.queue.GetMsg(gctx, LocalSeq(s.m.Seq))
		cancel()
		if isNotFound(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		if err != nil && s.q.d.check() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
			backoff = min(2*backoff, 50*time.Millisecond)
		}
	}
}

// abandon gives the message back. Abandoning its last delivery
// dead-letters it at once, as Service Bus does, rather than leaving it to
// housekeeping (the server would not deliver it again).
func (s *jsSettler) abandon(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.q.isDLQ && s.count >= s.q.cfg.MaxDeliveryCount {
		return s.deadLetter(ctx, ReasonMaxDeliveryCountExceeded,
			exhaustedDescription(s.count, s.q.cfg.MaxDeliveryCount), nil)
	}
	return s.q.d.mapErr(s.msg.Nak())
}

func (s *jsSettler) renew(ctx context.Context) (time.Time, error) {
	if err := s.live(); err != nil {
		return time.Time{}, err
	}
	until := time.Now().Add(s.q.cfg.LockDuration)
	if err := s.msg.InProgress(); err != nil {
		return time.Time{}, s.q.d.mapErr(err)
	}
	s.lockedUntil = until
	return until, nil
}

// deadLetter copies the message to the dead-letter stream, deduplicated
// by its queue and sequence number, and then acks it. A crash between the
// two redelivers the message, and dead-lettering it again is a duplicate.
func (s *jsSettler) deadLetter(ctx context.Context, reason, description string, edit func(*Message)) error {
	if s.q.isDLQ {
		return fmt.Errorf("%w: dead-lettering from a dead-letter queue", ErrUnsupported)
	}
	if err := s.q.d.check(); err != nil {
		return err
	}
	if err := s.q.publishDeadLetter(ctx, s.m, reason, description, edit); err != nil {
		return err
	}
	return s.acked(ctx, s.ack(ctx))
}

// publishDeadLetter writes m's dead-letter copy, with a Nats-Msg-Id made
// of its sequence number and enqueue time: a retried try (see tries), or
// another process moving the same message, is a duplicate.
func (q *jsQueue) publishDeadLetter(ctx context.Context, m *Message, reason, description string, edit func(*Message)) error {
	dl := *m
	if edit != nil {
		dl = *m.Clone()
		edit(&dl)
	}
	dl.DeadLetterReason, dl.DeadLetterDescription = reason, description
	dl.DeadLetterSource, dl.DeadLetterSeq = q.cfg.Name, m.Seq
	dlq := q.dlq.parts[0]
	msg := &nats.Msg{Subject: dlq.n.qSubj + ".m", Header: encodeHeader(&dl), Data: dl.Body}
	msg.Header.Set(jetstream.MsgIDHeader, "dl-"+strconv.FormatUint(m.Seq, 10)+"-"+m.EnqueuedAt.Format(time.RFC3339Nano))
	return q.d.mapErr(q.d.tries(ctx, func(tctx context.Context) error {
		_, err := q.d.js.PublishMsg(tctx, msg, noPubRetry)
		return err
	}))
}

// Sessions. Each session has its own durable consumer, filtered on the
// session's subject, with MaxAckPending 1: the server hands out the next
// message of a session only after the previous one is acked, or its ack
// wait (the lock) expires and it is redelivered first. That holds across
// any number of receivers in any number of processes.

func sessionConsumerName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "s_" + hex.EncodeToString(h[:16])
}

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
	s.p = newPuller(q.d, c, q.cfg.LockDuration)
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

// Session locks. A receiver holds its session through a lock message in
// the partition's schedule stream, on a subject of the session's own,
// written only if the subject is empty (expected last subject sequence
// 0) and carrying a per-message TTL of LockDuration: the server removes
// it when the lock expires, also if its holder died. Renewing rewrites it
// (rollup) only if it is still the holder's (expected last subject
// sequence = the holder's lock), and Close deletes exactly that message.

func sessionLockSubject(part *jsPartition, id string) string {
	return part.n.lock + "." + subjectToken(id)
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
	p        *puller // pulls from c; nil on a session being collected

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
		if ds := s.q.collect(ctx, s.part, s.p, s.p.take(1)); len(ds) > 0 {
			return ds[0], nil
		}
		if err := s.q.pullOne(ctx, s.p, wait, time.Unix(0, s.renewAt.Load())); err != nil {
			return nil, err
		}
		if ds := s.q.collect(ctx, s.part, s.p, s.p.take(1)); len(ds) > 0 {
			return ds[0], nil
		}
		s.q.checkSourcing(ctx, s.part)
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
		s.p.close()
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
