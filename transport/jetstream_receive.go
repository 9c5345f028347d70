package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport/internal/lookup"
	"github.com/jetsaga/jetsaga/transport/internal/pull"
)

// pullWait bounds the pulls a receive waits on (one on each of its
// partitions). A pull the server forgets (it restarted) is replaced after
// at most this long. Over a slow link a pull lives on the server for this
// long from when it gets there: shorter pulls would leave gaps in which a
// message that arrives waits for the next pull to get there.
const pullWait = time.Second

func (q *jsQueue) receive(ctx context.Context, max int, from []bool) ([]*Delivery, error) {
	parts := q.parts
	if from != nil {
		parts = make([]*jsPartition, 0, len(q.parts))
		for i, part := range q.parts {
			if from[i] {
				parts = append(parts, part)
			}
		}
	}
	for {
		ds, err := q.gather(ctx, max, parts)
		if ds = q.fresh(ds); len(ds) > 0 || err != nil {
			return ds, err
		}
	}
}

// fresh returns ds with at least three quarters of their locks left:
// it renews the locks that are older, and releases (as Abandon would,
// which counts a delivery) those that expired meanwhile, which it drops.
// Between a message's arrival and its Receive's return come the lookup
// of cancel records, housekeeping and, on a slow link, the wait for
// pulls: each a round trip, and on a slow link that is seconds.
func (q *jsQueue) fresh(ds []*Delivery) []*Delivery {
	out := ds[:0]
	for _, d := range ds {
		left := time.Until(d.LockedUntil())
		if left >= q.cfg.LockDuration*3/4 {
			out = append(out, d)
			continue
		}
		if left > 0 && d.RenewLock(context.Background()) == nil {
			out = append(out, d)
			continue
		}
		if s, ok := d.s.(*jsSettler); ok {
			_ = s.msg.Nak()
		}
	}
	clear(ds[len(out):])
	return out
}

// gather returns deliveries for receive from parts (some or all of the
// queue's partitions): one or more, or none and why it stopped.
func (q *jsQueue) gather(ctx context.Context, max int, parts []*jsPartition) ([]*Delivery, error) {
	// Each receive starts at the partition after the one the previous
	// receive started at (see sweep).
	start := 0
	if len(parts) > 1 {
		start = int(q.rr.Add(1) % uint32(len(parts)))
	}
	for {
		if err := q.d.check(); err != nil {
			return nil, err
		}
		if ds, err := q.sweep(ctx, max, parts, start); err != nil || len(ds) > 0 {
			return ds, err
		}
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		part := parts[start]
		if len(parts) > 1 {
			// Wait on every partition at once; the next sweep takes what
			// came, a share from each.
			if err := q.waitAny(ctx, parts); err != nil {
				return nil, err
			}
			q.d.hk.idle(ctx, q, part)
			start = (start + 1) % len(parts)
			continue
		}
		// Wait for one message only: a batch pull returns when full or
		// expired, and its messages' locks would run out meanwhile.
		p := q.puller(part)
		if err := q.pullOne(ctx, p, pullWait, time.Time{}); err != nil {
			return nil, err
		}
		if ds := q.collect(ctx, part, p, p.Take(max)); len(ds) > 0 {
			if max > len(ds) {
				more, _, _ := q.pullNow(ctx, nil, part, max-len(ds))
				ds = append(ds, more...)
			}
			return ds, nil
		}
		q.d.hk.idle(ctx, q, part)
		start = (start + 1) % len(parts)
	}
}

// sweep takes up to max deliveries from parts without waiting for any to
// be sent: from each, what earlier pulls brought (see pull.Puller), else
// a pull that does not wait. With several partitions each gets a share
// of max, in turn from start (the first ones one more when max does not
// divide evenly), all asked at once; what a partition cannot fill goes,
// in a further round, to those that filled theirs or had no share, until
// max is reached or none has more. So a partition with a burst takes its
// share of a receive and no more while others have messages, and each
// partition's messages still leave in the order its consumer sends them.
func (q *jsQueue) sweep(ctx context.Context, max int, all []*jsPartition, start int) ([]*Delivery, error) {
	if len(all) == 1 {
		ds, _, err := q.take(ctx, nil, all[0], max)
		return ds, err
	}
	parts := make([]*jsPartition, 0, len(all))
	for i := range all {
		parts = append(parts, all[(start+i)%len(all)])
	}
	parts = q.watched(ctx, parts)
	type taken struct {
		ds   []*Delivery
		full bool
		err  error
	}
	var out []*Delivery
	var failed error
	for len(parts) > 0 && len(out) < max {
		left := max - len(out)
		share := func(i int) int {
			n := left / len(parts)
			if i < left%len(parts) {
				n++
			}
			return n
		}
		res := make([]taken, len(parts))
		// Once a partition has given deliveries, the others' answers are
		// waited for sweepGrace more, not pull.Slack: over a slow link an
		// answer comes a second or more late, and what the receive has
		// would wait with it (what comes later is kept).
		grace, ended := newAnswerGrace()
		var wg sync.WaitGroup
		for i, part := range parts {
			if n := share(i); n > 0 {
				wg.Go(func() {
					ds, full, err := q.take(ctx, ended, part, n)
					res[i] = taken{ds, full, err}
					if len(ds) > 0 {
						grace.start()
					}
				})
			}
		}
		wg.Wait()
		grace.stop()
		more := parts[:0]
		for i, r := range res {
			out = append(out, r.ds...)
			if r.err != nil && failed == nil {
				failed = r.err
			}
			if r.err == nil && (r.full || share(i) == 0) {
				more = append(more, parts[i])
			}
		}
		parts = more
	}
	if len(out) == 0 && failed != nil {
		return nil, failed
	}
	return out, nil
}

// sweepGrace is how long a sweep's round waits for the other partitions'
// answers once one partition gave deliveries (see sweep). A fast link
// answers within it.
const sweepGrace = 100 * time.Millisecond

// answerGrace ends a sweep round's waits for answers sweepGrace after its
// first start.
type answerGrace struct {
	once   sync.Once
	t      *time.Timer
	cancel context.CancelFunc
}

// newAnswerGrace returns a grace and the context it ends.
func newAnswerGrace() (*answerGrace, context.Context) {
	ctx, cancel := context.WithCancel(context.Background())
	return &answerGrace{cancel: cancel}, ctx
}

func (g *answerGrace) start() {
	g.once.Do(func() { g.t = time.AfterFunc(sweepGrace, g.cancel) })
}

// stop releases the grace; call it once no wait uses its context.
func (g *answerGrace) stop() {
	g.once.Do(func() {})
	if g.t != nil {
		g.t.Stop()
	}
	g.cancel()
}

// take takes up to max deliveries from part: what earlier pulls brought
// if any of it can be delivered, else what a pull that does not wait
// brings (never both: a receive returns what a late pull brought without
// waiting for another). full reports whether it took max messages (the
// partition may have more), counting those it settled itself or held
// back (see collect).
//
// A partition that this broker sent a message to since its consumer last
// said it had nothing (see pull.Puller.Expecting) is not asked with a
// pull that does not wait: on a replicated consumer its "no messages"
// can overtake the message, which a pull that waits there got first (see
// watched) and which the server sends only once its replicas recorded
// the delivery; and the message reaches the queue stream a moment after
// its send returned (it is sourced from the schedule stream). take waits
// for it instead, with a pull that waits, for up to pull.Slack, or until
// ended ends (sweepGrace after another partition gave deliveries): a
// message later than that goes to the next receive.
func (q *jsQueue) take(ctx, ended context.Context, part *jsPartition, max int) (ds []*Delivery, full bool, err error) {
	p := q.puller(part)
	expected := false
	if p.Expecting() && !p.Ready() {
		if expires := watchFor(ctx); expires > 0 {
			wait := ctx
			if ended != nil {
				var cancel context.CancelFunc
				wait, cancel = context.WithCancel(ctx)
				stop := context.AfterFunc(ended, cancel)
				defer func() { stop(); cancel() }()
			}
			if err := p.Expect(wait, expires, time.Now().Add(pull.Slack)); err != nil {
				return nil, false, q.d.mapErr(err)
			}
			expected = true
		}
	}
	hs := p.Take(max)
	if ds := q.collect(ctx, part, p, hs); len(ds) > 0 {
		if expected && len(hs) < max && !p.Empty() {
			// The pull that waited brought one; the rest without waiting
			// (it ended: what a later pull brings comes after it).
			more, n, _ := q.pullNow(ctx, ended, part, max-len(hs))
			return append(ds, more...), len(hs)+n == max, nil
		}
		return ds, len(hs) == max, nil
	}
	ds, n, err := q.pullNow(ctx, ended, part, max)
	return ds, n == max, err
}

// watched returns parts less those that a receive over several
// partitions need not ask now: a partition whose consumer said it has
// nothing (see pull.Puller.Empty) and whose puller holds nothing for it
// is not asked again on every sweep, which on a queue of many quiet
// partitions was a request per partition per receive (and a share of the
// receive's batch each, which the busy partitions then asked for again).
// A pull for one message waits there instead (pull.Puller.Watch), shared
// by the queue's receivers, and brings the next message as soon as the
// server has one; a later sweep takes what it brought. A partition whose
// watching pull this call starts stays in, and is asked as well (on one
// server the consumer answers that request after the watching pull's
// message; on a replicated consumer the answer can come first, and the
// message goes to the next receive). A partition this broker sent to
// since it said it had nothing stays in too: take waits there for what
// was sent (see pull.Puller.Expecting), so a receive brings a message
// sent through its broker, before it started, to a partition that had
// nothing.
func (q *jsQueue) watched(ctx context.Context, parts []*jsPartition) []*jsPartition {
	expires := watchFor(ctx)
	if expires == 0 {
		return parts
	}
	out := parts[:0]
	for _, part := range parts {
		p := q.puller(part)
		if p.Empty() && !p.Ready() && !p.Expecting() {
			if _, made, err := p.Watch(expires); err == nil && !made {
				continue
			}
		}
		out = append(out, part)
	}
	return out
}

// watchFor returns how long a pull that waits on a partition may wait in
// a receive of ctx (pullWait, less near ctx's deadline), or 0 if too
// short to be worth a request.
func watchFor(ctx context.Context) time.Duration {
	expires := pullWait
	if dl, ok := ctx.Deadline(); ok {
		expires = min(expires, time.Until(dl)-pullGuard)
	}
	if expires < minPull {
		return 0
	}
	return expires
}

// puller returns the puller of part's consumer (see pull.Puller).
func (q *jsQueue) puller(part *jsPartition) *pull.Puller {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pullers == nil {
		q.pullers = map[*jsPartition]*pull.Puller{}
	}
	p := q.pullers[part]
	if p == nil {
		p = pull.New(q.d.pullConn(), part.cons, q.cfg.LockDuration)
		p.SetBell(&q.bell)
		if q.topic == nil {
			// Not a subscription's: its consumer's filter may pass over
			// what was sent.
			p.SetSent(&part.sent, sourceSeq)
		}
		q.pullers[part] = p
	}
	return p
}

// pullNow pulls up to max messages from part without waiting for any to
// be sent, and returns the deliveries among them and how many messages it
// took. It waits for the server's answer for at most pull.Slack, or until
// ended (if not nil) ends: what arrives later is kept.
func (q *jsQueue) pullNow(ctx, ended context.Context, part *jsPartition, max int) ([]*Delivery, int, error) {
	p := q.puller(part)
	pl, err := p.Request(max, 0, true)
	if err != nil {
		return nil, 0, q.d.mapErr(err)
	}
	until := time.Now().Add(pull.Slack)
	wait := ctx
	if ended != nil {
		var cancel context.CancelFunc
		wait, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(ended, cancel)()
	}
	p.WaitEnd(wait, pl, until)
	switch {
	case stopping(ctx):
		p.Cancelled(pl) // the receiver is stopping
	case ctx.Err() != nil:
		// A deadline: the answer is on its way (see pullOne).
		p.WaitEnd(context.WithoutCancel(ctx), pl, until)
	}
	q.pullEnded(ctx, pl)
	hs := p.Take(max)
	return q.collect(ctx, part, p, hs), len(hs), nil
}

// pullOne waits for a message from p for up to wait, until ctx ends, the
// broker closes, or by (if set), with a pull for one message (or one
// still live from an earlier call). The message, if any, is left to take.
//
// The pull asks the server to give up pullGuard before ctx's deadline,
// and pullOne then waits for the pull's end (a message, or the server's
// end-of-pull status) even a little past that deadline, for up to
// pull.Slack past the pull's expiry. Over a slow link the server still
// holds the pull after that; what it brings then is kept for the next
// receive (see pull.Puller), unless ctx was cancelled (not a deadline): then
// its receiver is stopping, and what the pull brings is released at once.
func (q *jsQueue) pullOne(ctx context.Context, p *pull.Puller, wait time.Duration, by time.Time) error {
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
		p.Wait(ctx, nil, until)
		return nil
	}
	pl := p.Live()
	if pl == nil {
		var err error
		if pl, err = p.Request(1, expires, false); err != nil {
			if ctx.Err() != nil || q.d.check() != nil {
				return nil // the caller reports why it stopped
			}
			return q.d.mapErr(err)
		}
	}
	until := pl.Expires().Add(pull.Slack)
	if !by.IsZero() && by.Before(until) {
		until = by
	}
	p.Wait(ctx, pl, until)
	switch {
	case stopping(ctx):
		// Not a deadline: the receiver is stopping.
		p.Cancelled(pl)
		return nil
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrReceiveInterrupted):
		// Its receiver receives again at once: the pull stays live, and
		// what it brings is kept for that receive (see pull.Puller).
		return nil
	case ctx.Err() != nil:
		// A deadline: the pull expired pullGuard before it on the server,
		// so its end (or its message) is on its way; waiting for it, for
		// up to pull.Slack, keeps the pull from outliving the receive
		// (its message would then wait for the next one, or, if the
		// receiver closes meanwhile, be released and count a delivery).
		p.Wait(context.WithoutCancel(ctx), pl, until)
	}
	if q.pullEnded(ctx, pl) && !p.Ready() {
		// The pull failed at once (the consumer or stream has no
		// leader during an election, say): wait out the slice rather
		// than spin.
		until := time.Now().Add(expires)
		if !by.IsZero() && by.Before(until) {
			until = by
		}
		p.Wait(ctx, nil, until)
	}
	return nil
}

// waitAny waits for a message on any of parts for up to pullWait, until
// ctx ends or the broker closes, with a pull for one message on each (or
// one still live from an earlier call); what comes is left to take. The
// pulls ask the server to give up pullGuard before ctx's deadline; one
// that has not brought its message when waitAny returns (another
// partition's came first) stays live, and what it brings is kept for the
// next receive (see pull.Puller), unless ctx was cancelled: then its
// receiver is stopping, and what they bring is released at once. After a
// deadline waitAny waits for the pulls' ends as pullOne does.
func (q *jsQueue) waitAny(ctx context.Context, parts []*jsPartition) error {
	expires := watchFor(ctx)
	if expires == 0 {
		// Too short a pull to be worth a request: wait out the rest.
		p := q.puller(parts[0])
		dl, _ := ctx.Deadline()
		p.Wait(ctx, nil, dl)
		return nil
	}
	type live struct {
		p  *pull.Puller
		pl *pull.Request
	}
	pulls := make([]live, 0, len(parts))
	for _, part := range parts {
		p := q.puller(part)
		pl, _, err := p.Watch(expires)
		if err != nil {
			if ctx.Err() != nil || q.d.check() != nil {
				break // the caller reports why it stopped
			}
			for _, l := range pulls {
				l.p.Cancelled(l.pl)
			}
			return q.d.mapErr(err)
		}
		pulls = append(pulls, live{p, pl})
	}
	// The first wait to end with a message, or with its pull's expiry,
	// ends the others (a pull that failed at once does not: the others
	// may still bring one). One wait on the queue's bell, which every
	// puller rings, rather than a goroutine per partition: the receivers
	// of a quiet queue all wait here, and each message wakes them.
	done := q.d.pullConn().Done
	for ctx.Err() == nil && q.d.check() == nil {
		bell := q.bell.C()
		stop, failed := false, true
		next := time.Time{}
		for _, l := range pulls {
			until := l.pl.Expires().Add(pull.Slack)
			ready, at := l.p.ReadyBy(until)
			ended, err := l.pl.Ended()
			if ready || (ended && err == nil) || !time.Now().Before(until) {
				stop = true
			}
			if !ended || err == nil {
				failed = false
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if stop || failed {
			break
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-bell:
		case <-t.C:
		case <-ctx.Done():
		case <-done:
		}
		t.Stop()
	}
	switch {
	case stopping(ctx):
		for _, l := range pulls {
			l.p.Cancelled(l.pl)
		}
		return nil
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrReceiveInterrupted):
		return nil // the pulls stay live; what they bring is kept
	case ctx.Err() != nil:
		// A deadline: the pulls expired pullGuard before it on the
		// server (see pullOne).
		for _, l := range pulls {
			l.p.Wait(context.WithoutCancel(ctx), l.pl, l.pl.Expires().Add(pull.Slack))
		}
	}
	failed := len(pulls) > 0
	for _, l := range pulls {
		if !q.pullEnded(ctx, l.pl) || l.p.Ready() {
			failed = false
		}
	}
	if failed {
		// Every pull failed at once (no leaders during an election, say):
		// wait out the slice rather than spin.
		pulls[0].p.Wait(ctx, nil, time.Now().Add(expires))
	}
	return nil
}

// stopping reports whether ctx was cancelled other than by an
// interruption (see ErrReceiveInterrupted): its receiver is stopping, and
// what its pulls still bring is released at once.
func stopping(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled) && !errors.Is(context.Cause(ctx), ErrReceiveInterrupted)
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
func (q *jsQueue) pullEnded(ctx context.Context, pl *pull.Request) bool {
	ended, err := pl.Ended()
	return ended && q.pullFailed(ctx, err)
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
func (q *jsQueue) collect(ctx context.Context, part *jsPartition, p *pull.Puller, hs []*pull.Held) []*Delivery {
	if len(hs) == 0 {
		return nil
	}
	var out []*Delivery
	var back []*pull.Held
	cancelled, unknown := q.cancelledActivations(ctx, part, hs)
	for _, h := range hs {
		if unknown[h.Msg.Headers().Get(natsScheduler)] {
			back = append(back, h)
			continue
		}
		if d := q.delivery(ctx, part, h, cancelled); d != nil {
			out = append(out, d)
		}
	}
	if len(back) > 0 {
		p.HoldBack(back, time.Now().Add(lookupRetry))
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
func (q *jsQueue) delivery(ctx context.Context, part *jsPartition, h *pull.Held, cancelled map[string]bool) *Delivery {
	msg := h.Msg
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
	s := &jsSettler{q: q, part: part, msg: msg, m: m, count: int(md.NumDelivered), lockedUntil: h.LockedAt.Add(q.cfg.LockDuration)}
	if !q.isDLQ {
		q.d.hk.delivered(q, part, hd.Get(natsStreamSource), m.EnqueuedAt)
		if sched := hd.Get(natsScheduler); sched != "" && cancelled[sched] {
			if err := msg.Ack(); err != nil {
				q.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: ack of cancelled activation failed", slogErr(err), slogQueue(q.cfg.Name))
			}
			return nil
		}
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
// so there it asks the leader once per activation, those of a pull at
// once (up to leaderLookups).
func (q *jsQueue) cancelledActivations(ctx context.Context, part *jsPartition, hs []*pull.Held) (cancelled, unknown map[string]bool) {
	if q.isDLQ {
		return nil, nil
	}
	var scheds []string
	for _, h := range hs {
		if sched := h.Msg.Headers().Get(natsScheduler); sched != "" {
			scheds = append(scheds, sched)
		}
	}
	if len(scheds) == 0 {
		return nil, nil
	}
	cancelled, unknown = map[string]bool{}, map[string]bool{}
	if part.replicated {
		// Direct gets are off there (see leaderReads): a get per
		// activation, up to leaderLookups at once. One after the other, a
		// pull of eight activations in a burst took eight round trips to
		// the leader (up to 160 ms on a busy 3-node cluster), and a
		// receive over several partitions waited for them with the other
		// partitions' messages in hand.
		found, errs := make([]bool, len(scheds)), make([]error, len(scheds))
		atOnce(len(scheds), leaderLookups, func(i int) {
			found[i], errs[i] = q.dropCancelled(ctx, part, scheds[i])
		})
		for i, sched := range scheds {
			switch {
			case errs[i] != nil:
				unknown[sched] = true
			case found[i]:
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

// leaderLookups bounds the cancel record lookups of one pull that run at
// once on a replicated partition (see cancelledActivations).
const leaderLookups = 16

// lookupCancelRecords returns the subjects of the last cancel records on
// filters in part's schedule stream (see lastBySubjects), in a lookup it
// may share with the partition's other receivers (see lookup.Group).
func (q *jsQueue) lookupCancelRecords(ctx context.Context, part *jsPartition, filters []string) ([]string, error) {
	// Not the receive's context: it may end during the lookup.
	return part.lookups.Lookup(context.WithoutCancel(ctx), filters, func(ctx context.Context, filters []string) ([]string, error) {
		if q.lookupFault != nil {
			if err := q.lookupFault(); err != nil {
				return nil, err
			}
		}
		return q.d.lastBySubjects(ctx, part.n.sched, filters)
	})
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

// multiLastMax bounds the subjects of one multi_last direct get.
const multiLastMax = lookup.MaxFilters

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
