package sagaotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jetsaga/jetsaga/timeout/schedule"
)

// Values of the attribute jetsaga.schedule.outcome.
const (
	ScheduleOutcomeSent    = "sent"
	ScheduleOutcomeSkipped = "skipped"
)

// scheduleInstruments are the instruments of ScheduleHooks, made on first
// use.
type scheduleInstruments struct {
	occurrences metric.Int64Counter
	lateness    metric.Float64Histogram
}

// ScheduleHooks returns hooks for schedule.WithHooks that count the
// occurrences a schedule.Scheduler's Run handles:
//
//   - jetsaga.schedule.occurrences ({occurrence}): occurrences by
//     jetsaga.schedule.name, jetsaga.schedule.outcome (ScheduleOutcomeSent,
//     "sent", or ScheduleOutcomeSkipped, "skipped": by the catch-up policy,
//     or left out of an occurrence CatchUpCoalesce sent for several) and
//     jetsaga.schedule.late (true beyond the schedule's catch-up
//     tolerance). Fired occurrences are the sent ones, late ones those with
//     jetsaga.schedule.late true;
//   - jetsaga.schedule.lateness (s): a histogram of how late occurrences
//     were sent, after their nominal time and jitter, by
//     jetsaga.schedule.name.
//
// Schedules are named objects, few per service, so the schedule's name
// is an attribute; occurrence IDs never are. Occurrences sent by Trigger
// or Backfill, or skipped by a pause, are not counted (Run does not
// handle them; Info.Skipped counts a pause's).
func (t *Telemetry) ScheduleHooks() (schedule.Hooks, error) {
	var errs []error
	occurrences, err := t.meter.Int64Counter("jetsaga.schedule.occurrences", metric.WithUnit("{occurrence}"),
		metric.WithDescription("Occurrences of recurring schedules handled, by outcome (sent, skipped) and lateness."))
	errs = append(errs, err)
	lateness, err := t.meter.Float64Histogram("jetsaga.schedule.lateness", metric.WithUnit("s"),
		metric.WithDescription("How late occurrences of recurring schedules were sent, after their nominal time and jitter."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return schedule.Hooks{}, err
	}
	in := &scheduleInstruments{occurrences: occurrences, lateness: lateness}
	return schedule.Hooks{
		Sent:    func(ctx context.Context, p schedule.OccurrenceParams) { in.record(ctx, p, ScheduleOutcomeSent) },
		Skipped: func(ctx context.Context, p schedule.OccurrenceParams) { in.record(ctx, p, ScheduleOutcomeSkipped) },
	}, nil
}

func (in *scheduleInstruments) record(ctx context.Context, p schedule.OccurrenceParams, outcome string) {
	name := attribute.String("jetsaga.schedule.name", p.Schedule)
	in.occurrences.Add(ctx, 1, metric.WithAttributes(name,
		attribute.String("jetsaga.schedule.outcome", outcome), attribute.Bool("jetsaga.schedule.late", p.Late)))
	if outcome == ScheduleOutcomeSent {
		in.lateness.Record(ctx, max(p.Lateness, 0).Seconds(), metric.WithAttributes(name))
	}
}
