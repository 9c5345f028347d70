package sagaotel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jetsaga/jetsaga/saga/sagaotel"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// TestScheduleHooks runs two schedules (every second, 95 occurrences,
// catch-up tolerance 2 s, planned a minute ahead) through an outage of
// their runner from 2.5 s to 90 s, on a virtual clock: the occurrences
// planned before it (0 to 62 s) are sent on time, and of those that were
// not (63 to 90 s) 25 are late — the one that fires late occurrences is
// counted 70 sent on time and 25 sent late, the one that skips them 70
// sent and 25 skipped — what each schedule's Info says — and the lateness
// histogram has one point per occurrence sent.
func TestScheduleHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		tel, err := sagaotel.New(sagaotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
		if err != nil {
			t.Fatal(err)
		}
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		s, err := docsScheduleTelemetry(b, tel)
		if err != nil {
			t.Fatal(err)
		}
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		for name, policy := range map[string]schedule.CatchUpPolicy{"fires": schedule.CatchUpFire, "skips": schedule.CatchUpSkip} {
			err := s.Create(t.Context(), schedule.Schedule{Name: name, Spec: schedule.Spec{Every: time.Second}, Start: base,
				End: base.Add(94 * time.Second), CatchUp: schedule.CatchUp{Policy: policy, Tolerance: 2 * time.Second},
				Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}})
			if err != nil {
				t.Fatal(err)
			}
		}
		run := func(until time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); _ = s.Run(ctx) }()
			time.Sleep(time.Until(until))
			cancel()
			<-done
		}
		run(base.Add(2*time.Second + 500*time.Millisecond))
		time.Sleep(time.Until(base.Add(90 * time.Second)))
		run(base.Add(100 * time.Second))

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		counts := map[string]int64{}
		points := map[string]uint64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					if m.Name != "jetsaga.schedule.occurrences" {
						continue
					}
					for _, p := range d.DataPoints {
						name, _ := p.Attributes.Value("jetsaga.schedule.name")
						outcome, _ := p.Attributes.Value("jetsaga.schedule.outcome")
						late, _ := p.Attributes.Value("jetsaga.schedule.late")
						counts[name.AsString()+" "+outcome.AsString()+" late="+late.String()] += p.Value
					}
				case metricdata.Histogram[float64]:
					if m.Name != "jetsaga.schedule.lateness" {
						continue
					}
					for _, p := range d.DataPoints {
						name, _ := p.Attributes.Value("jetsaga.schedule.name")
						points[name.AsString()] += p.Count
					}
				}
			}
		}
		want := map[string]int64{
			"fires sent late=false": 70, "fires sent late=true": 25,
			"skips sent late=false": 70, "skips skipped late=true": 25,
		}
		if len(counts) != len(want) {
			t.Errorf("jetsaga.schedule.occurrences %v, want %v", counts, want)
		}
		for k, n := range want {
			if counts[k] != n {
				t.Errorf("jetsaga.schedule.occurrences{%s} = %d, want %d (all: %v)", k, counts[k], n, counts)
			}
		}
		for name, n := range map[string]uint64{"fires": 95, "skips": 70} {
			if points[name] != n {
				t.Errorf("jetsaga.schedule.lateness{%s}: %d points, want %d", name, points[name], n)
			}
			info, err := s.Get(t.Context(), name)
			if err != nil {
				t.Fatal(err)
			}
			if info.Sent != counts[name+" sent late=false"]+counts[name+" sent late=true"] ||
				info.Late != counts[name+" sent late=true"] || info.Skipped != counts[name+" skipped late=true"] {
				t.Errorf("%s: Info sent %d late %d skipped %d, counters %v", name, info.Sent, info.Late, info.Skipped, counts)
			}
		}
	})
}
