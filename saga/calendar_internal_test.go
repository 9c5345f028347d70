package saga

import (
	"context"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/transport"
)

type benchStart struct{ ID string }

// BenchmarkPlanRule measures what RequestTimeoutBy adds to a request: the
// calendar lookup, the zone (loaded once per dispatcher) and the rule.
func BenchmarkPlanRule(b *testing.B) {
	broker, err := transport.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	pl, err := calendar.New("pl", "1", calendar.Yearly(time.May, 1, "Labour Day"), calendar.Easter(1, "Easter Monday"))
	if err != nil {
		b.Fatal(err)
	}
	reg := new(calendar.Registry)
	if err := reg.Add(pl); err != nil {
		b.Fatal(err)
	}
	s := Define[struct{}]("bench")
	StartedBy(s, By(func(m benchStart) string { return m.ID }), func(ctx context.Context, c *Context[struct{}], m benchStart) error { return nil })
	d, err := NewDispatcher(broker, nopStore{}, "bench", WithSagas(s), WithCalendars(reg, calendar.RefOf(pl)))
	if err != nil {
		b.Fatal(err)
	}
	rule := calendar.BusinessDays(-7).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
	from := time.Date(2026, time.May, 12, 10, 0, 0, 0, time.UTC)
	for b.Loop() {
		if _, _, err := d.planRule(rule, ruleRequest{from: from}); err != nil {
			b.Fatal(err)
		}
	}
}

// nopStore is a Store that stores nothing: the benchmark never steps.
type nopStore struct{}

func (nopStore) Load(context.Context, string) ([]byte, uint64, error)        { return nil, 0, ErrNotFound }
func (nopStore) Put(context.Context, string, []byte, uint64) (uint64, error) { return 1, nil }
func (nopStore) Delete(context.Context, string, uint64) error                { return nil }
