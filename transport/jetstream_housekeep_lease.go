package transport

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The housekeeping lease: one broker across all processes is the
// housekeeper of a queue partition. The lease is a durable consumer named
// LeaseConsumer on the partition's schedule stream, whose description
// names its holder and whose filter matches no message. Creating it is
// the compare-and-set: the server refuses to create a consumer that
// exists with another config, so one broker holds it at a time. The
// holder keeps a pull request waiting on it, renewed every leasePull; the
// server deletes a consumer with no waiting request for leaseTTL
// (InactiveThreshold, plus up to 1 s of jitter), so a holder that dies
// loses the lease within leasePull+leaseTTL+1 s, and at once when its
// connection closes with the process (no interest in its request, the
// countdown runs from its last pull). A holder that stops deletes it. The
// server announces every deletion with an advisory, on which the others
// try to create it; one that missed the advisory (disconnected at that
// moment) tries every leaseRecheck. The lease needs no stream and no
// message of its own (a queue's streams and counts are as before), only
// the permission to create and pull consumers on the schedule stream: a
// process without it does not housekeep.
const (
	leaseTTL     = 6 * time.Second
	leasePull    = 3 * time.Second
	leaseRecheck = time.Minute

	consumerDeletedAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.DELETED."
)

// lease is this broker's side of one partition's housekeeping lease.
type lease struct {
	h    *housekeeper
	q    string // queue name, for logs
	part *jsPartition
	cfg  jetstream.ConsumerConfig
	sub  *nats.Subscription // deletion advisories

	wake atomic.Bool // the lease ended somewhere: try at the next cycle
	lost atomic.Bool // our lease consumer went away

	mu     sync.Mutex
	cc     jetstream.ConsumeContext // while held
	due    time.Time                // next try while not held
	closed bool
	// none: the server refused the lease consumer's config (a stream
	// made by an older version, a consumer limit): this partition has no
	// lease, and the broker housekeeps it as every broker did before.
	none bool
}

func (h *housekeeper) newLease(q *jsQueue, part *jsPartition) *lease {
	l := &lease{h: h, q: q.cfg.Name, part: part, cfg: jetstream.ConsumerConfig{
		Durable: LeaseConsumer,
		Description: "jetsaga: housekeeping lease of queue " + q.cfg.Name + " partition " + strconv.Itoa(part.idx) +
			", held by " + h.id,
		FilterSubject:     part.n.vSubj + ".~housekeeper",
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: leaseTTL,
	}}
	sub, err := h.d.nc.Subscribe(consumerDeletedAdvisory+part.n.sched+"."+LeaseConsumer, func(*nats.Msg) {
		l.wake.Store(true)
		l.lost.Store(true) // ours, or an older one's: hold tells
	})
	if err == nil {
		l.sub = sub
	}
	return l
}

// hold reports whether this broker holds the lease, taking it if it is
// free and due for a try.
func (l *lease) hold(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.none {
		return true
	}
	if l.cc != nil {
		if !l.lost.Load() {
			return true
		}
		// Deleted, or an advisory of an older holder's consumer: trying
		// again tells (creating ours again succeeds if it still exists).
		l.cc.Stop()
		l.cc = nil
		l.due = time.Time{}
	}
	now := time.Now()
	if !l.wake.Swap(false) && now.Before(l.due) {
		return false
	}
	l.due = now.Add(leaseRecheck)
	tctx, cancel := l.h.d.apiContext(ctx)
	defer cancel()
	l.lost.Store(false)
	c, err := l.part.sched.CreateConsumer(tctx, l.cfg)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrConsumerExists):
		return false // another broker holds it
	case errors.As(err, &apiErr) && apiErr.Code == 400:
		l.none = true
		l.h.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: no housekeeping lease possible on this partition; this broker housekeeps it regardless",
			slogErr(err), slogQueue(l.q), slog.Int("partition", l.part.idx))
		return true
	case err != nil:
		// No answer (a permission the process lacks, the server busy):
		// another broker housekeeps, or this one on a later try.
		l.h.d.o.logger.LogAttrs(ctx, slog.LevelDebug, "transport: housekeeping lease not taken",
			slogErr(err), slogQueue(l.q), slog.Int("partition", l.part.idx))
		return false
	}
	cc, err := c.Consume(func(jetstream.Msg) {}, jetstream.PullExpiry(leasePull), jetstream.ConsumeErrHandler(l.consumeErr))
	if err != nil {
		return false // the consumer lapses by itself
	}
	l.cc = cc
	l.h.d.o.logger.LogAttrs(ctx, slog.LevelDebug, "transport: housekeeping lease taken", slogQueue(l.q), slog.Int("partition", l.part.idx))
	return true
}

func (l *lease) consumeErr(_ jetstream.ConsumeContext, err error) {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		l.lost.Store(true)
	}
}

// release hands the lease over: it deletes the lease consumer if this
// broker holds it, which the others hear.
func (l *lease) release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.cc != nil && !l.lost.Load()
	l.stop()
	if held && !l.h.d.nc.IsClosed() {
		_ = l.part.sched.DeleteConsumer(ctx, LeaseConsumer)
	}
}

// drop forgets the lease without handing it over: it lapses.
func (l *lease) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stop()
}

func (l *lease) stop() {
	if l.cc != nil {
		l.cc.Stop()
		l.cc = nil
	}
	if l.sub != nil {
		_ = l.sub.Unsubscribe()
		l.sub = nil
	}
	l.closed = true
}
