package schedule_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

var (
	benchSchedules = flag.Int("schedules", 500, "BenchmarkOccurrenceLateness: how many schedules")
	benchRounds    = flag.Int("rounds", 5, "BenchmarkOccurrenceLateness: how many occurrences of each")
	benchEvery     = flag.Duration("every", time.Second, "BenchmarkOccurrenceLateness: their period")
	benchHorizon   = flag.Duration("horizon", schedule.DefaultHorizon, "BenchmarkOccurrenceLateness: the scheduler's planning horizon (WithHorizon)")
	benchLead      = flag.Duration("lead", 0, "BenchmarkOccurrenceLateness: from the start of set-up to the first occurrence (default: 10 ms a schedule, plus 3 s)")
)

// BenchmarkOccurrenceLateness measures how late occurrences reach their
// target queue (EnqueuedAt − nominal time) with -schedules schedules every
// -every, all due at the same instants, on an embedded nats-server, beside
// the baseline of the same number of one-shot scheduled messages written
// straight to a queue (transport.Queue.Schedule) for the same instants, in
// the same run:
//
//	go test -run '^$' -bench OccurrenceLateness -benchtime 1x ./timeout/schedule
//	go test -run '^$' -bench OccurrenceLateness -benchtime 1x ./timeout/schedule -args -schedules 10000 -rounds 2 -every 1m
//	go test -run '^$' -bench OccurrenceLateness -benchtime 1x -timeout 30m ./timeout/schedule -args -schedules 100000 -rounds 1 -every 1m -horizon 10m -lead 5m
//
// With -lead within -horizon, Create plans each occurrence as it creates
// the schedule, so that the set-up, not a burst of ticks, does the
// planning.
// It also reports the server's resident memory at the end (the server runs
// in the test process: the process's peak RSS, VmHWM, Linux only).
func BenchmarkOccurrenceLateness(b *testing.B) {
	schedules, seconds, every := *benchSchedules, *benchRounds, *benchEvery
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
		s, err := schedule.New(br, schedule.WithQueue("home-"+strconv.Itoa(i)), schedule.WithHorizon(*benchHorizon), schedule.WithLogger(discard()))
		if err != nil {
			b.Fatal(err)
		}
		lead := *benchLead
		if lead == 0 {
			lead = time.Duration(schedules)*10*time.Millisecond + 3*time.Second
		}
		start := time.Now().Truncate(time.Second).Add(lead)
		setup := time.Now()
		end := start.Add(time.Duration(seconds-1) * every)
		// Eight at a time: a Create waits on three requests in a row.
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for j := w; j < schedules; j += 8 {
					if err := s.Create(ctx, schedule.Schedule{Name: fmt.Sprintf("s%d", j), Spec: schedule.Spec{Every: every},
						Start: start, End: end, Action: schedule.Action{Queue: target.Name(), Message: &transport.Message{Subject: "Tick"}}}); err != nil {
						b.Error(err)
						return
					}
					for k := range seconds {
						at := start.Add(time.Duration(k) * every)
						if _, err := raw.Schedule(ctx, &transport.Message{MessageID: fmt.Sprintf("r%d-%d", j, k)}, at); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		if time.Now().After(start) {
			b.Fatalf("set-up took past the first occurrence (%s): lower the count", start)
		}
		b.ReportMetric(time.Since(setup).Seconds(), "setup-s")
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
		if rss := peakRSS(); rss > 0 {
			b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MiB")
		}
	}
}

// drain receives n messages from q and returns their lateness in ms.
func drain(b *testing.B, q *transport.Queue, n int, due func(*transport.Message) time.Time) []float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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

// peakRSS returns the process's peak resident set (VmHWM) in bytes, or 0.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
