package transport

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The move of exhausted messages to the dead-letter queue: the server
// delivers a message MaxDeliveryCount times at most (the receive
// consumer's MaxDeliver) and announces it with an advisory, which one
// broker of those that have the queue open receives (a queue group,
// whether or not it holds the lease: no polling); the partition's
// housekeeper looks every exhaustedEvery for those whose advisory no
// broker heard (findExhausted).

// advisory is the part of a max-deliveries advisory housekeeping reads.
type advisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// onExhausted handles a max-deliveries advisory of queue stream stream.
func (h *housekeeper) onExhausted(stream string, data []byte) {
	var a advisory
	if err := json.Unmarshal(data, &a); err != nil || a.StreamSeq == 0 {
		return
	}
	for _, q := range h.housekept() {
		for _, part := range q.parts {
			if part.n.queue == stream {
				go h.moveExhausted(h.d.life, q, part, a.StreamSeq, a.Deliveries)
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
func (h *housekeeper) findExhausted(ctx context.Context, q *jsQueue, part *jsPartition) {
	k := &part.keep
	if part.cons == nil || time.Since(k.lastExhausted) < exhaustedEvery {
		return
	}
	k.lastExhausted = time.Now()
	ctx, cancel := h.d.apiContext(ctx)
	defer cancel()
	ci, err := part.cons.Info(ctx)
	if err != nil || ci.NumAckPending > 0 || ci.Config.MaxDeliver <= 0 || ci.AckFloor.Stream >= ci.Delivered.Stream {
		k.suspects = nil
		return
	}
	seen := make(map[uint64]bool)
	for start := ci.AckFloor.Stream + 1; start <= ci.Delivered.Stream && len(seen) < 1000; {
		raw, err := part.queue.GetMsg(ctx, start, jetstream.WithGetMsgSubject(part.n.qSubj+".m"))
		if err != nil || raw.Sequence > ci.Delivered.Stream {
			break
		}
		if k.suspects[raw.Sequence] {
			h.moveExhausted(ctx, q, part, raw.Sequence, ci.Config.MaxDeliver)
		} else {
			seen[raw.Sequence] = true
		}
		start = raw.Sequence + 1
	}
	k.suspects = seen
}

// moveExhausted moves the message at seq of part, delivered deliveries
// times, to the dead-letter queue with reason
// ReasonMaxDeliveryCountExceeded, and removes it from the queue. Its
// dead-letter copy is deduplicated like a receiver's (see
// jsSettler.deadLetter), so brokers and receivers racing to move one
// message leave one copy.
func (h *housekeeper) moveExhausted(ctx context.Context, q *jsQueue, part *jsPartition, seq uint64, deliveries int) {
	ctx, cancel := h.d.apiContext(ctx)
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
		h.d.o.logger.LogAttrs(ctx, slog.LevelError, "transport: moving an exhausted message to the dead-letter queue failed; the next look tries again",
			slog.Uint64("seq", seq), slogErr(err), slogQueue(q.cfg.Name))
	}
}
