package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Housekeeping, a service of the broker. Every broker looks after the
// queues it has open, whether or not it receives from them, so that a
// queue whose receivers are not jetsaga's (see the wire format) keeps its
// promises too. One goroutine per broker, started with the first queue
// and stopped with the broker, does in turn, every housekeepEvery, for
// each partition whose lease this broker holds (see lease):
//
//   - the sourcing watch (jetstream_source_stall.go);
//   - the purge of copies the queue stream has sourced (maybePurge),
//     learning how far sourcing got from receivers' deliveries or, when
//     none are seen, from the newest message in the queue (peekSourced);
//   - the move of messages that exhausted MaxDeliveryCount to the
//     dead-letter queue (findExhausted, jetstream_housekeep_exhausted.go).
//
// The lease makes one broker across all processes the housekeeper of a
// partition, so that a hundred processes with a queue open make one
// process's worth of housekeeping requests. What needs no polling stays
// with every broker: the max-deliveries advisories, which the server
// hands to one broker of those listening (a queue group), and what the
// receive paths tell through the hook (delivered, idle): a receiver
// purges what its own deliveries show sourced, and watches the sourcing
// while it waits, whoever holds the lease, so that no receiver waits for
// another process. Every step is idempotent: two brokers that both
// believe they hold a lease for a moment do no harm.
const (
	housekeepEvery = time.Second
	exhaustedEvery = 5 * time.Second

	maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
	housekeepGroup        = "jetsaga-housekeeping"
)

// housekeeper is the broker's housekeeping service. It owns the
// per-partition housekeeping state (keepState, reached through each
// partition's partKeep) and the leases.
type housekeeper struct {
	d  *jsDriver
	id string // names this broker as a lease holder

	mu      sync.Mutex
	queues  map[string]*jsQueue           // by queue name
	subs    map[string]*nats.Subscription // advisories, by queue stream
	leases  map[string]*lease             // by schedule stream
	running bool
	stopped bool
	done    chan struct{} // closed when the loop ends
}

// keepState is the housekeeping state of one queue partition in one
// broker.
type keepState struct {
	// The sourcing watch (see checkSourcing).
	watchMu             sync.Mutex
	lastWatch, lastKick time.Time
	unheardSince        time.Time

	// Copies stay in the schedule stream after the queue stream has
	// sourced them; receivers note the highest sourced one and purge below
	// it now and then (see maybePurge). Copies of messages with a
	// MessageID are kept for the duplicate window: aged holds checkpoints
	// of (sourced sequence, enqueue time) to tell which are old enough.
	sourcedUpTo atomic.Uint64
	purgeMu     sync.Mutex
	purgedUpTo  uint64 // copies without MessageID
	agedUpTo    uint64 // copies with MessageID
	aged        []checkpoint
	lastPurge   atomic.Int64 // unix nanoseconds of the last purge's start
	purging     atomic.Bool  // a purge a receive started runs (see delivered)

	// The loop's looks, touched by its goroutine alone: messages that
	// exhausted their deliveries, seen by the last look (see
	// findExhausted), and the last look at how far sourcing got (see
	// peekSourced).
	lastExhausted time.Time
	suspects      map[uint64]bool
	lastPeek      time.Time
}

// housekeepCycled, when set (by tests), is called after each cycle of a
// broker's loop for each partition it looks after, with the broker's
// holder id and whether it holds the partition's lease (and so did its
// housekeeping).
var housekeepCycled atomic.Pointer[func(broker, queue string, part int, held bool)]

// delivered is the receive paths' hook for a message of part delivered
// to a receiver of q: src is its Nats-Stream-Source header, enqueued the
// time it entered the queue stream. What it shows sourced is purged from
// the schedule stream now and then (see maybePurge), in the background:
// a purge is a request to the server, and the receive that delivers the
// message does not wait for it (over a slow link it takes a round trip,
// which would hold the message back that long).
func (h *housekeeper) delivered(q *jsQueue, part *jsPartition, src string, enqueued time.Time) {
	h.noteSourced(part, src, enqueued)
	k := &part.keep
	if time.Since(time.Unix(0, k.lastPurge.Load())) < purgeEvery || !k.purging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer k.purging.Store(false)
		if h.d.check() == nil {
			h.maybePurge(h.d.life, q, part)
		}
	}()
}

// idle is the receive paths' hook for a receiver of q that waited on
// part and got nothing: it watches the partition's sourcing (see
// checkSourcing).
func (h *housekeeper) idle(ctx context.Context, q *jsQueue, part *jsPartition) {
	h.checkSourcing(ctx, q, part)
}

// housekeep has the broker look after q from now on.
func (h *housekeeper) housekeep(q *jsQueue) {
	if q.isDLQ || q.topic != nil {
		return
	}
	d := h.d
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if h.queues == nil {
		h.queues = make(map[string]*jsQueue)
		h.subs = make(map[string]*nats.Subscription)
		h.leases = make(map[string]*lease)
	}
	h.queues[q.cfg.Name] = q
	for _, part := range q.parts {
		if part.sched != nil && part.n.vSubj != "" && h.leases[part.n.sched] == nil {
			h.leases[part.n.sched] = h.newLease(q, part)
		}
		if part.cons == nil || h.subs[part.n.queue] != nil {
			continue
		}
		stream := part.n.queue
		sub, err := d.nc.QueueSubscribe(maxDeliveriesAdvisory+stream+"."+ReceiveConsumer, housekeepGroup,
			func(m *nats.Msg) { h.onExhausted(stream, m.Data) })
		if err != nil {
			d.o.logger.LogAttrs(d.life, slog.LevelWarn, "transport: no subscription to max-deliveries advisories; exhausted messages move on the next look",
				slogErr(err), slogQueue(q.cfg.Name))
			continue
		}
		h.subs[stream] = sub
	}
	if !h.running {
		h.running = true
		h.done = make(chan struct{})
		go h.loop()
	}
}

// forget stops looking after queue name (deleted).
func (h *housekeeper) forget(name string) {
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
		if l := h.leases[part.n.sched]; l != nil {
			l.drop()
			delete(h.leases, part.n.sched)
		}
	}
}

// stop ends the service: it hands the leases it holds over (see
// lease.release) and stops listening. The loop ends with the broker's
// life.
func (h *housekeeper) stop() {
	h.mu.Lock()
	h.stopped = true
	leases := make([]*lease, 0, len(h.leases))
	for _, l := range h.leases {
		leases = append(leases, l)
	}
	for _, sub := range h.subs {
		_ = sub.Unsubscribe()
	}
	h.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(h.d.o.apiTimeout, 2*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Go(func() { l.release(ctx) })
	}
	wg.Wait()
}

func (h *housekeeper) housekept() []*jsQueue {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*jsQueue, 0, len(h.queues))
	for _, q := range h.queues {
		out = append(out, q)
	}
	return out
}

func (h *housekeeper) leaseOf(part *jsPartition) *lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leases[part.n.sched]
}

func (h *housekeeper) loop() {
	defer close(h.done)
	d := h.d
	t := time.NewTicker(housekeepEvery)
	defer t.Stop()
	for {
		select {
		case <-d.life.Done():
			h.mu.Lock()
			for _, sub := range h.subs {
				_ = sub.Unsubscribe()
			}
			for _, l := range h.leases {
				l.drop()
			}
			h.mu.Unlock()
			return
		case <-t.C:
		}
		if d.check() != nil {
			continue
		}
		for _, q := range h.housekept() {
			for _, part := range q.parts {
				held := h.holds(d.life, part)
				if held {
					if err := h.upkeep(d.life, q, part); errors.Is(err, jetstream.ErrStreamNotFound) {
						h.forget(q.cfg.Name)
						break
					}
				}
				if f := housekeepCycled.Load(); f != nil {
					(*f)(h.id, q.cfg.Name, part.idx, held)
				}
			}
		}
	}
}

// holds reports whether this broker is part's housekeeper: it holds the
// partition's lease, or the partition has none (a queue created by a
// version without state records).
func (h *housekeeper) holds(ctx context.Context, part *jsPartition) bool {
	l := h.leaseOf(part)
	return l == nil || l.hold(ctx)
}

// upkeep does one round of housekeeping on part.
func (h *housekeeper) upkeep(ctx context.Context, q *jsQueue, part *jsPartition) error {
	h.checkSourcing(ctx, q, part)
	if err := h.peekSourced(ctx, q, part); err != nil {
		return err
	}
	h.maybePurge(ctx, q, part)
	h.findExhausted(ctx, q, part)
	return nil
}
