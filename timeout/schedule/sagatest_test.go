package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

type RunDunning struct{ Account string }

type dunning struct {
	Runs []time.Time
}

// A schedule that feeds a saga, in sagatest: the dunning run on the last
// business day of each month at 18:00 Warsaw time, for half a year, in
// virtual time.
func TestScheduleFeedsSagaInSagatest(t *testing.T) {
	d := saga.Define[dunning]("dunning")
	saga.StartedBy(d, saga.By(func(m RunDunning) string { return m.Account }),
		func(_ context.Context, c *saga.Context[dunning], _ RunDunning) error {
			c.Data.Runs = append(c.Data.Runs, c.Now())
			return nil
		})
	start := time.Date(2027, time.January, 4, 0, 0, 0, 0, time.UTC)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		pl, err := calendar.New("pl", "1", calendar.Yearly(time.May, 3, "Constitution Day"), calendar.Easter(1, "Easter Monday"))
		if err != nil {
			t.Fatal(err)
		}
		reg := &calendar.Registry{}
		_ = reg.Add(pl)
		s, err := schedule.New(env.Broker(), schedule.WithCalendars(reg), schedule.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		rule := calendar.LastBusinessDayOfMonth(1).At(calendar.ClockOf(18, 0)).In("Europe/Warsaw")
		err = s.Create(t.Context(), schedule.Schedule{Name: "dunning", Spec: schedule.Spec{Rule: &rule, Calendar: calendar.RefOf(pl)},
			Start: time.Date(2026, time.December, 15, 0, 0, 0, 0, time.UTC), // January's is the first
			Action: schedule.Action{Queue: env.Dispatcher().Queue(), Message: &transport.Message{
				Body: []byte(`{"Account":"acme"}`), ContentType: "application/json",
				Properties: map[string]string{saga.TypeProperty: saga.MessageName[RunDunning]()}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = s.Run(ctx) }()
		env.Advance(181 * 24 * time.Hour)

		data := sagatest.State(t, env, d, "acme")
		want := []string{"2027-01-29", "2027-02-26", "2027-03-31", "2027-04-30", "2027-05-31", "2027-06-30"}
		var got []string
		for _, r := range data.Runs {
			if r.In(mustZone(t, "Europe/Warsaw")).Format("15:04") != "18:00" {
				t.Errorf("run at %s, want 18:00 Warsaw time", r)
			}
			got = append(got, r.Format("2006-01-02"))
		}
		equalStrings(t, got, want)
	}, sagatest.WithStart(start))
}

func mustZone(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func equalStrings(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
