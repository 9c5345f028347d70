package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nuid"
)

// P1: Queue.Schedule against js.PublishMsg of the message it publishes.
// Two raw baselines run interleaved with it:
//
//   - raw: one stream configured like the transport's schedule stream,
//     which is all a hand-written scheduler needs. P1 is judged on it.
//   - raw+source: the same stream plus a work-queue stream that sources
//     its activation subjects, the pair the transport provisions per
//     partition (for gap-free queue sequences). Against it the ratio
//     isolates the transport's client-side cost from its stream layout.
//
// Due times lie an hour ahead, so nothing fires while the bench runs.

func benchScheduleSeq(ctx context.Context, e *env) ([]Result, error) {
	return scheduleRates(ctx, e, "schedule", "schedule (sync, sequential)", 1)
}

func benchSchedulePar(ctx context.Context, e *env) ([]Result, error) {
	return scheduleRates(ctx, e, "schedule-par", fmt.Sprintf("schedule (sync, %d concurrent)", e.cfg.conc), e.cfg.conc)
}

func scheduleRates(ctx context.Context, e *env, name, label string, workers int) ([]Result, error) {
	q, drop, err := e.openQueue(ctx, "sched")
	if err != nil {
		return nil, err
	}
	defer drop()
	rawStream, rawPrefix := rawNames("S", "sched")
	if _, err := e.rawScheduleStream(ctx, rawStream, rawPrefix); err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, rawStream)
	srcStream, srcPrefix := rawNames("S", "schsr")
	if _, err := e.rawScheduleStream(ctx, srcStream, srcPrefix); err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, srcStream)
	sinkStream, sinkPrefix := rawNames("Q", "schsr")
	if err := e.rawSourcingStream(ctx, sinkStream, sinkPrefix, srcStream, srcPrefix); err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, sinkStream)

	due := time.Now().Add(time.Hour)
	chunk := 50 * workers
	jet := func(ctx context.Context, n int) (step, error) {
		ids := newIDs(n)
		return chunked(n, chunk, workers, func(ctx context.Context, i int) error {
			_, err := q.Schedule(ctx, jetMessage(ids[i]), due.Add(time.Duration(i)*time.Microsecond))
			return err
		}), nil
	}
	raw := func(prefix string) contender {
		return func(ctx context.Context, n int) (step, error) {
			ids := newIDs(n)
			return chunked(n, chunk, workers, func(ctx context.Context, i int) error {
				_, err := e.js.PublishMsg(ctx, rawScheduleMsg(prefix, ids[i], due.Add(time.Duration(i)*time.Microsecond)))
				return err
			}), nil
		}
	}
	res, err := e.abRates(ctx, name, e.scaled(baseCount),
		lane{"jetsaga", jet}, lane{"raw", raw(rawPrefix)}, lane{"raw+source", raw(srcPrefix)})
	if err != nil {
		return nil, err
	}
	p1 := rateResult(name, label, res[0], res[1], 0.85)
	p1.Target += " (P1)"
	same := rateResult(name, "  vs raw+source (same stream pair)", res[0], res[2], 0)
	same.RawName = "raw+source"
	same.RawDesc = "raw's schedule stream plus a work-queue stream that sources its activations, the pair the transport provisions"
	return []Result{p1, same}, nil
}

// newIDs returns n unique message IDs, made before the clock starts.
func newIDs(n int) []string {
	base := nuid.Next()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = base + "-" + strconv.Itoa(i)
	}
	return ids
}
