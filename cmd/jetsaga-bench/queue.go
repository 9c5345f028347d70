package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Plain queue traffic, for reference: no DESIGN target, but a gap to raw
// here would show up in every saga step (P2).

// benchSend compares Queue.Send with js.PublishMsg of the same message to
// a work-queue stream with the same consumer.
func benchSend(ctx context.Context, e *env) ([]Result, error) {
	q, drop, err := e.openQueue(ctx, "send")
	if err != nil {
		return nil, err
	}
	defer drop()
	rawStream, rawPrefix := rawNames("Q", "send")
	if _, _, err := e.rawQueueStream(ctx, rawStream, rawPrefix); err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, rawStream)

	const chunk = 50
	jet := func(ctx context.Context, n int) (step, error) {
		ids := newIDs(n)
		return chunked(n, chunk, 1, func(ctx context.Context, i int) error {
			_, err := q.Send(ctx, jetMessage(ids[i]))
			return err
		}), nil
	}
	raw := func(ctx context.Context, n int) (step, error) {
		ids := newIDs(n)
		return chunked(n, chunk, 1, func(ctx context.Context, i int) error {
			_, err := e.js.PublishMsg(ctx, rawSendMsg(rawPrefix+".m", ids[i]))
			return err
		}), nil
	}
	res, err := e.abRates(ctx, "send", e.scaled(baseCount), lane{"jetsaga", jet}, lane{"raw", raw})
	if err != nil {
		return nil, err
	}
	return []Result{rateResult("send", "send (sync, sequential)", res[0], res[1], 0.85)}, nil
}

// benchReceive pre-fills each queue with the round's messages, untimed,
// then times draining them batch by batch: Queue.Receive(ctx, 100) and
// Complete per delivery against consumer.Fetch(100) and DoubleAck per
// message, which is what Complete sends.
func benchReceive(ctx context.Context, e *env) ([]Result, error) {
	q, drop, err := e.openQueue(ctx, "recv")
	if err != nil {
		return nil, err
	}
	defer drop()
	rawStream, rawPrefix := rawNames("Q", "recv")
	_, cons, err := e.rawQueueStream(ctx, rawStream, rawPrefix)
	if err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, rawStream)

	const batch = 100
	jet := func(ctx context.Context, n int) (step, error) {
		ids := newIDs(n)
		if err := parallel(e.cfg.conc, n, func(i int) error {
			_, err := q.Send(ctx, jetMessage(ids[i]))
			return err
		}); err != nil {
			return nil, fmt.Errorf("pre-fill: %w", err)
		}
		return func(ctx context.Context) (int, error) {
			ds, err := q.Receive(ctx, batch)
			if err != nil {
				return 0, err
			}
			for _, d := range ds {
				if err := d.Complete(ctx); err != nil {
					return 0, err
				}
			}
			return len(ds), nil
		}, nil
	}
	raw := func(ctx context.Context, n int) (step, error) {
		ids := newIDs(n)
		if err := parallel(e.cfg.conc, n, func(i int) error {
			_, err := e.js.PublishMsg(ctx, rawSendMsg(rawPrefix+".m", ids[i]))
			return err
		}); err != nil {
			return nil, fmt.Errorf("pre-fill: %w", err)
		}
		left := n
		return func(ctx context.Context) (int, error) {
			// Ask for no more than remain: a batch that cannot fill waits
			// out its expiry.
			b, err := cons.Fetch(min(batch, left), jetstream.FetchMaxWait(10*time.Second))
			if err != nil {
				return 0, err
			}
			got := 0
			for m := range b.Messages() {
				if err := m.DoubleAck(ctx); err != nil {
					return got, err
				}
				got++
			}
			left -= got
			return got, b.Error()
		}, nil
	}
	res, err := e.abRates(ctx, "receive", e.scaled(baseCount), lane{"jetsaga", jet}, lane{"raw", raw})
	if err != nil {
		return nil, err
	}
	return []Result{rateResult("receive", "receive+complete (batch 100)", res[0], res[1], 0)}, nil
}
