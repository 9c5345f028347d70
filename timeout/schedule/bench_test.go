package schedule_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// BenchmarkOccurrenceLateness measures how late occurrences reach their
// target queue (EnqueuedAt − nominal time) with -schedules schedules every
// second on an embedded nats-server, beside the baseline of the same
// number of one-shot scheduled messages per second written straight to a
// queue (transport.Queue.Schedule) for the same instants, in the same run:
//
//	go test -run '^$' -bench OccurrenceLateness -benchtime 1x ./timeout/schedule
//
// Each iteration runs 5 seconds of occurrences.
func BenchmarkOccurrenceLateness(b *testing.B) {
	const schedules, seconds = 500, 5
	srv := testutil.StartServer(b, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	br, err := transport.NewJetStream(nc, transport.WithLogger(discard()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range b.N {
		target, err := br.OpenQueue(ctx, transport.QueueConfig{Name: "sched-" + strconv.Itoa(i)})
		if err != nil {
			b.Fatal(err)
		}
		raw, err := br.OpenQueue(ctx, transport.QueueConfig{Name: "raw-" + strconv.Itoa(i)})
		if err != nil {
			b.Fatal(err)
		}
		s, err := schedule.New(br, schedule.WithQueue("home-"+strconv.Itoa(i)), schedule.WithLogger(discard()))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now().Truncate(time.Second).Add(schedules/100*time.Second + 3*time.Second)
		end := start.Add((seconds - 1) * time.Second)
		for j := range schedules {
			if err := s.Create(ctx, schedule.Schedule{Name: fmt.Sprintf("s%d", j), Spec: schedule.Spec{Every: time.Second},
				Start: start, End: end, Action: schedule.Action{Queue: target.Name(), Message: &transport.Message{Subject: "Tick"}}}); err != nil {
				b.Fatal(err)
			}
			for k := range seconds {
				at := start.Add(time.Duration(k) * time.Second)
				if _, err := raw.Schedule(ctx, &transport.Message{MessageID: fmt.Sprintf("r%d-%d", j, k)}, at); err != nil {
					b.Fatal(err)
				}
			}
		}
		if time.Now().After(start) {
			b.Fatalf("set-up took past the first occurrence (%s): lower the count", start)
		}
		runCtx, cancel := context.WithCancel(ctx)
		go func() { _ = s.Run(runCtx) }()
		sched := drain(b, target, schedules*seconds, func(m *transport.Message) time.Time {
			t, _ := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
			return t
		})
		base := drain(b, raw, schedules*seconds, func(m *transport.Message) time.Time { return m.ScheduledAt })
		cancel()
		b.ReportMetric(pct(sched, 50), "sched-p50-ms")
		b.ReportMetric(pct(sched, 99), "sched-p99-ms")
		b.ReportMetric(pct(base, 50), "raw-p50-ms")
		b.ReportMetric(pct(base, 99), "raw-p99-ms")
		b.ReportMetric(pct(sched, 0), "sched-min-ms")
	}
}

// drain receives n messages from q and returns their lateness in ms.
func drain(b *testing.B, q *transport.Queue, n int, due func(*transport.Message) time.Time) []float64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []float64
	for len(out) < n {
		ds, err := q.Receive(ctx, 256)
		if err != nil {
			b.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		for _, d := range ds {
			out = append(out, float64(d.EnqueuedAt.Sub(due(d.Message)))/1e6)
			_ = d.CompleteNoWait(ctx)
		}
	}
	return out
}

func pct(v []float64, p int) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	i := p * (len(v) - 1) / 100
	return v[i]
}
