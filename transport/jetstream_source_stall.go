package transport

import (
	"context"
	"log/slog"
	"time"
)

// The sourcing watch, a workaround for nats-server's stalled sources.
// After the leader of a schedule stream changes, the queue stream's
// leader re-creates its source consumer, and when that fails (the
// schedule stream has no leader yet) nats-server retries with a backoff
// of 10 s, 20 s, ... up to 2 minutes, and notices a stalled source only
// every 10 s: activations, written to the schedule stream on time, would
// wait that long to reach receivers. A healthy source hears a heartbeat
// every second, so the partition's housekeeper and idle receivers check
// now and then, and move the queue stream's leadership when its source
// has been silent for sourceStalled: the new leader sets the source up at
// once. Only a replicated stream can change leader; on one server the
// source runs inside the same process and does not stall this way.
const (
	sourceCheckEvery = 2 * time.Second
	sourceStalled    = 4 * time.Second
	sourceKickEvery  = 15 * time.Second
)

// checkSourcing looks at part's source at most every sourceCheckEvery
// and restarts it when it has been silent for sourceStalled.
func (h *housekeeper) checkSourcing(ctx context.Context, q *jsQueue, part *jsPartition) {
	k := &part.keep
	if !part.replicated || part.sched == nil || !k.watchMu.TryLock() {
		return
	}
	defer k.watchMu.Unlock()
	if time.Since(k.lastWatch) < sourceCheckEvery || time.Since(k.lastKick) < sourceKickEvery {
		return
	}
	k.lastWatch = time.Now()
	ctx, cancel := h.d.apiContext(context.WithoutCancel(ctx))
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
			if k.unheardSince.IsZero() {
				k.unheardSince = time.Now()
			}
			silent = time.Since(k.unheardSince)
		} else {
			k.unheardSince = time.Time{}
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
		k.lastKick, k.unheardSince = time.Now(), time.Time{}
		_, err := h.d.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+part.n.queue, nil)
		h.d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: queue stream's source silent; moved its leader to restart it",
			slog.String("stream", part.n.queue), slog.Duration("silent", silent), slogErr(err), slogQueue(q.cfg.Name))
		return
	}
}
