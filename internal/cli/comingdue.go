package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// ComingDue is a queue's pending scheduled messages (timeouts, retries,
// planned occurrences) by due time over a span ahead, as the console's
// queue page draws it: is a burst coming?
type ComingDue struct {
	Base    string // the page's URL path, for the span links
	Saga    string // the saga type whose timeouts are counted; empty: every message
	Span    string // "hour", "day" or "month"
	Spans   []string
	Bars    []DueBar
	Max     int // the largest bar's count
	Total   int // scheduled messages due within the span
	Later   int // due after it
	Overdue int // past due, not activated yet
	Read    int // scheduled messages read
	Partial bool
	// Burst is the largest bar's top partition keys (fairness keys).
	Burst     *DueBar
	BurstKeys []KeyWork
	// SVG geometry: the chart is drawn as bars in a viewBox of Width×Height.
	Width, Height int
}

// DueBar is one bar: the messages due from From, for the span's step.
type DueBar struct {
	From  time.Time
	Label string
	Count int
	keys  map[string]int
	// X, H, Y place it in the chart.
	X, W, H, Y int
}

// spans are the chart's spans ahead: bar width and count.
var spans = map[string]struct {
	step time.Duration
	bars int
	fmt  string
}{
	"hour":  {time.Minute, 60, "15:04"},
	"day":   {30 * time.Minute, 48, "Jan 2 15:04"},
	"month": {24 * time.Hour, 31, "Jan 2"},
}

// comingDueRead bounds the scheduled messages the chart reads.
const comingDueRead = 200_000

// comingDue reads the scheduled messages of qs (up to comingDueRead in
// all) and counts them by due time (a timeout's PropertyDue, else
// ScheduledAt) over span from now: those of every kind, or with sagaName
// the timeouts of that saga type only.
func comingDue(ctx context.Context, qs []*transport.Queue, sagaName, span string, now time.Time) (ComingDue, error) {
	sp, ok := spans[span]
	if !ok {
		return ComingDue{}, fmt.Errorf("%w: span %q: hour, day or month", ErrUsage, span)
	}
	cd := ComingDue{Saga: sagaName, Span: span, Spans: []string{"hour", "day", "month"}, Width: 960, Height: 160}
	start := now.Truncate(sp.step)
	for i := range sp.bars {
		from := start.Add(time.Duration(i) * sp.step)
		cd.Bars = append(cd.Bars, DueBar{From: from, Label: from.UTC().Format(sp.fmt), keys: map[string]int{}})
	}
	for _, q := range qs {
		if err := cd.count(ctx, q, sagaName, start, now, sp.step); err != nil || cd.Partial {
			return cd, err
		}
	}
	cd.draw()
	return cd, nil
}

// count adds q's scheduled messages (sagaName's timeouts, if not empty)
// to cd's bars, from start in steps of step.
func (cd *ComingDue) count(ctx context.Context, q *transport.Queue, sagaName string, start, now time.Time, step time.Duration) error {
	for m, err := range q.Browse(ctx, transport.ScheduledBit) {
		if err != nil {
			return err
		}
		if m.State != transport.Scheduled || sagaName != "" && m.Properties[timeout.PropertySaga] != sagaName {
			continue
		}
		if cd.Read++; cd.Read > comingDueRead {
			cd.Read, cd.Partial = comingDueRead, true
			return nil
		}
		due := m.ScheduledAt
		if t, err := time.Parse(time.RFC3339Nano, m.Properties[timeout.PropertyDue]); err == nil {
			due = t
		}
		switch i := int(due.Sub(start) / step); {
		case due.Before(now):
			cd.Overdue++
		case i >= len(cd.Bars):
			cd.Later++
		default:
			b := &cd.Bars[i]
			b.Count++
			b.keys[m.PartitionKey]++
			cd.Total++
		}
	}
	return nil
}

// draw places cd's bars in the chart and finds the burst.
func (cd *ComingDue) draw() {
	big := -1
	for i, b := range cd.Bars {
		if b.Count > cd.Max {
			cd.Max, big = b.Count, i
		}
	}
	w := cd.Width / len(cd.Bars)
	for i := range cd.Bars {
		b := &cd.Bars[i]
		b.X, b.W = i*w, max(w-1, 1)
		if cd.Max > 0 {
			b.H = max(b.Count*(cd.Height-20)/cd.Max, min(b.Count, 1))
		}
		b.Y = cd.Height - b.H
	}
	if big >= 0 {
		cd.Burst = &cd.Bars[big]
		for k, n := range cd.Burst.keys {
			if k != "" {
				cd.BurstKeys = append(cd.BurstKeys, KeyWork{Key: k, Scheduled: n})
			}
		}
		slices.SortFunc(cd.BurstKeys, func(a, b KeyWork) int { return cmp.Or(b.Scheduled-a.Scheduled, cmp.Compare(a.Key, b.Key)) })
		cd.BurstKeys = cd.BurstKeys[:min(len(cd.BurstKeys), 5)]
	}
}
