package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
)

// topicFanOut are the subscription counts the topic bench publishes to.
var topicFanOut = []int{1, 4, 16}

// benchTopic compares Topic.Send to topics with 1, 4 and 16 subscriptions
// (nobody receives meanwhile) with js.PublishMsg of the same message to a
// work-queue stream, all lanes interleaved in the same rounds.
func benchTopic(ctx context.Context, e *env) ([]Result, error) {
	lanes := make([]lane, 0, len(topicFanOut)+1)
	for _, n := range topicFanOut {
		name := fmt.Sprintf("topic%d", n)
		if err := e.broker.DeleteTopic(ctx, name); err != nil {
			return nil, err
		}
		defer e.broker.DeleteTopic(context.WithoutCancel(ctx), name)
		tp, err := e.broker.OpenTopic(ctx, transport.TopicConfig{Name: name})
		if err != nil {
			return nil, err
		}
		for i := range n {
			f := transport.Filter{}
			if i%2 == 1 {
				// Half filter on the type, as a service interested in some
				// events would; every message passes.
				f.Subjects = []string{"CodeExpired"}
			}
			if _, err := tp.OpenSubscription(ctx, fmt.Sprintf("s%d", i), transport.SubscriptionConfig{Filter: f}); err != nil {
				return nil, err
			}
		}
		lanes = append(lanes, lane{fmt.Sprintf("%d subs", n), func(ctx context.Context, n int) (step, error) {
			ids := newIDs(n)
			return chunked(n, 50, 1, func(ctx context.Context, i int) error {
				m := jetMessage(ids[i])
				m.Subject = "CodeExpired"
				_, err := tp.Send(ctx, m)
				return err
			}), nil
		}})
	}
	rawStream, rawPrefix := rawNames("Q", "topic")
	if _, _, err := e.rawQueueStream(ctx, rawStream, rawPrefix); err != nil {
		return nil, err
	}
	defer e.dropStream(ctx, rawStream)
	lanes = append(lanes, lane{"raw", func(ctx context.Context, n int) (step, error) {
		ids := newIDs(n)
		return chunked(n, 50, 1, func(ctx context.Context, i int) error {
			_, err := e.js.PublishMsg(ctx, rawSendMsg(rawPrefix+".m", ids[i]))
			return err
		}), nil
	}})
	res, err := e.abRates(ctx, "topic", e.scaled(baseCount), lanes...)
	if err != nil {
		return nil, err
	}
	raw := res[len(res)-1]
	var out []Result
	for i, n := range topicFanOut {
		out = append(out, rateResult(fmt.Sprintf("topic-%d", n), fmt.Sprintf("topic send, %d subscriptions (sync, sequential)", n), res[i], raw, 0))
	}
	return out, nil
}

// countsPending is how many far schedules the counts bench keeps pending.
const countsPending = 100_000

// benchCounts schedules -n × 100k messages an hour ahead on one queue,
// then times Queue.Counts against the other server-side way to count
// schedules: StreamInfo of the schedule stream with a subject filter
// (which returns one entry per pending schedule's subject).
func benchCounts(ctx context.Context, e *env) ([]Result, error) {
	q, drop, err := e.openQueue(ctx, "counts")
	if err != nil {
		return nil, err
	}
	defer drop()
	n := e.scaled(countsPending)
	ids := newIDs(n)
	at := time.Now().Add(time.Hour)
	start := time.Now()
	if err := parallel(8*e.cfg.conc, n, func(i int) error {
		_, err := q.Schedule(ctx, jetMessage(ids[i]), at)
		return err
	}); err != nil {
		return nil, err
	}
	e.progress("  counts: %d schedules pending after %v", n, time.Since(start).Round(time.Millisecond))
	c, err := q.Counts(ctx) // creates the counting consumer
	if err != nil {
		return nil, err
	}
	if c.Scheduled != int64(n) {
		return nil, fmt.Errorf("Counts().Scheduled = %d, want %d", c.Scheduled, n)
	}
	sched, err := e.js.Stream(ctx, benchPrefix+"_S_counts_0")
	if err != nil {
		return nil, err
	}
	const reps = 20
	var jet, raw []time.Duration
	for range reps {
		t0 := time.Now()
		if _, err := q.Counts(ctx); err != nil {
			return nil, err
		}
		jet = append(jet, time.Since(t0))
		t0 = time.Now()
		info, err := sched.Info(ctx, jetstream.WithSubjectFilter(benchPrefix+".S.counts.0.*.s"))
		if err != nil {
			return nil, err
		}
		raw = append(raw, time.Since(t0))
		if len(info.State.Subjects) != n {
			return nil, fmt.Errorf("StreamInfo subjects: %d, want %d", len(info.State.Subjects), n)
		}
	}
	r := latencyResult("counts", fmt.Sprintf("Queue.Counts, %d schedules pending", n), summarize(jet), summarize(raw), 0, "")
	r.RawName, r.RawDesc = "subject info", "StreamInfo with a subject filter on the schedules"
	return []Result{r}, nil
}
