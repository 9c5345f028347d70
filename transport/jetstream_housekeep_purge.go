package transport

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The purge of sourced copies: a copy stays in the schedule stream after
// the queue stream has sourced it, until housekeeping purges it.

// purgeEvery is how often a partition's sourced copies are purged.
const purgeEvery = 5 * time.Second

// peekSourced learns how far the queue stream has sourced the schedule
// stream when no receiver of this broker told (see noteSourced): from the
// newest message the queue stream holds, which it looks at at most every
// purgeEvery, and only when the schedule stream holds writes beyond what
// is known sourced. A queue drained at once by receivers that are not
// jetsaga's may hold none at those moments: its copies then wait in the
// schedule stream until a look finds a message (see docs/wire.md).
func (h *housekeeper) peekSourced(ctx context.Context, q *jsQueue, part *jsPartition) error {
	k := &part.keep
	if part.sched == nil || time.Since(k.lastPeek) < purgeEvery {
		return nil
	}
	k.lastPeek = time.Now()
	ctx, cancel := h.d.apiContext(ctx)
	defer cancel()
	info, err := part.sched.Info(ctx)
	if err != nil {
		return err
	}
	if !info.Created.Equal(part.created) {
		// Deleted and created again since: this handle is stale.
		return jetstream.ErrStreamNotFound
	}
	if info.State.LastSeq <= k.sourcedUpTo.Load() {
		return nil
	}
	raw, err := part.queue.GetLastMsgForSubject(ctx, part.n.qSubj+".>")
	if err == nil {
		h.noteSourced(part, raw.Header.Get(natsStreamSource), raw.Time)
	}
	return nil
}

// noteSourced records the schedule-stream sequence of a copy that reached
// the queue (from its Nats-Stream-Source header: "<stream> <seq> ...")
// and the time it was enqueued there. Sourcing is in order, so every copy
// below it has reached the queue too.
func (h *housekeeper) noteSourced(part *jsPartition, src string, enqueued time.Time) {
	seq := sourcedSeq(src)
	if seq == 0 {
		return
	}
	k := &part.keep
	for {
		cur := k.sourcedUpTo.Load()
		if seq <= cur || k.sourcedUpTo.CompareAndSwap(cur, seq) {
			break
		}
	}
	// A checkpoint a second: copies up to seq were stored no later than
	// enqueued.
	if !k.purgeMu.TryLock() {
		return
	}
	defer k.purgeMu.Unlock()
	if n := len(k.aged); n == 0 || enqueued.Sub(k.aged[n-1].at) >= time.Second && seq > k.aged[n-1].seq {
		k.aged = append(k.aged, checkpoint{seq: seq, at: enqueued})
	}
}

// maybePurge removes copies the queue stream has already sourced from the
// schedule stream, at most every purgeEvery: those without a MessageID at
// once, those with one once they are older than the duplicate window (they
// are what remembers the MessageID, see guard).
func (h *housekeeper) maybePurge(ctx context.Context, q *jsQueue, part *jsPartition) {
	k := &part.keep
	if !k.purgeMu.TryLock() {
		return
	}
	defer k.purgeMu.Unlock()
	if time.Since(time.Unix(0, k.lastPurge.Load())) < purgeEvery {
		return
	}
	k.lastPurge.Store(time.Now().UnixNano())
	ctx = context.WithoutCancel(ctx)
	purge := func(kind string, upTo uint64) bool {
		err := part.sched.Purge(ctx, jetstream.WithPurgeSubject(part.n.sSubj+".*."+kind+".>"), jetstream.WithPurgeSequence(upTo))
		if err != nil && h.d.check() == nil { // not the broker closing meanwhile
			h.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: purging sourced copies failed", slogErr(err), slogQueue(q.cfg.Name))
		}
		return err == nil
	}
	if upTo := k.sourcedUpTo.Load(); upTo > k.purgedUpTo && purge(KindWithoutID, upTo+1) {
		k.purgedUpTo = upTo
	}
	old := time.Now().Add(-q.cfg.DuplicateWindow)
	upTo := k.agedUpTo
	for len(k.aged) > 0 && k.aged[0].at.Before(old) {
		upTo = k.aged[0].seq
		k.aged = k.aged[1:]
	}
	if upTo > k.agedUpTo && purge(KindWithID, upTo+1) {
		k.agedUpTo = upTo
	}
}

type checkpoint struct {
	seq uint64
	at  time.Time
}

// sourcedSeq returns the schedule-stream sequence in a Nats-Stream-Source
// header ("<stream> <seq> ..."), or 0.
func sourcedSeq(src string) uint64 {
	// The second field, without splitting the header (one allocation per
	// delivered message otherwise).
	_, rest, ok := strings.Cut(strings.TrimLeft(src, " "), " ")
	if !ok {
		return 0
	}
	rest = strings.TrimLeft(rest, " ")
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		rest = rest[:i]
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return 0
	}
	return seq
}

// sourceSeq returns the schedule-stream sequence of a delivered message,
// from its header (see sourcedSeq).
func sourceSeq(h nats.Header) uint64 { return sourcedSeq(h.Get(natsStreamSource)) }

// raise sets v to n if n is higher.
func raise(v *atomic.Uint64, n uint64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}
