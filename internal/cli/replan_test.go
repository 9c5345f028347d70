package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
)

// Timeouts requested by a calendar rule: the CLI shows the rule beside
// the due time (sagas show, timeouts list), and timeouts replan plans them
// again under a calendar version read from a calendar file.

type Renew struct{ Sub string }
type renewDue struct{}

func (Renew) MessageName() string    { return "ops.Renew" }
func (renewDue) MessageName() string { return "ops.RenewDue" }

func TestTimeoutRulesAndReplan(t *testing.T) {
	w := newWorkload(t)
	// From a Monday, 2 business days after at 09:00 UTC is Wednesday; with
	// Wednesday a holiday (version 2), Thursday.
	from := time.Date(2030, time.January, 7, 10, 0, 0, 0, time.UTC)
	v1, err := calendar.New("ops", "1")
	if err != nil {
		t.Fatal(err)
	}
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	d := saga.Define[struct{}]("renewal")
	saga.StartedBy(d, saga.By(func(m Renew) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[struct{}], m Renew) error {
			_, err := c.RequestTimeoutBy(calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("UTC"), renewDue{}, saga.RuleFrom(from))
			return err
		})
	saga.OnTimeout(d, func(context.Context, *saga.Context[struct{}], renewDue) error { return nil })
	disp := w.dispatcher("billing", saga.WithSagas(d), saga.WithCalendars(reg))
	sendAll(t, disp, Renew{Sub: "s1"}, Renew{Sub: "s2"})
	rule := "2 business days after, at 09:00 UTC"
	wed, thu := time.Date(2030, time.January, 9, 9, 0, 0, 0, time.UTC), time.Date(2030, time.January, 10, 9, 0, 0, 0, time.UTC)
	testutil.AwaitTrue(t, 15*time.Second, "two renewal timeouts listed", func() bool {
		r := w.run("timeouts", "list", "--saga", "renewal", "--json")
		return r.code == 0 && len(decode[[]PendingView](t, r.stdout)) == 2
	})
	for _, p := range jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "renewal") {
		if p.Rule != rule || p.Calendar != "ops@1" || !p.At.Equal(wed) {
			t.Errorf("listed %+v; want rule %q on ops@1 due %v", p, rule, wed)
		}
	}
	v := jsonOf[InstanceView](w, 0, "sagas", "show", "renewal", "s1")
	if len(v.Timeouts) != 1 || v.Timeouts[0].Rule != rule || v.Timeouts[0].Calendar != "ops@1" || !v.Timeouts[0].From.Equal(from) {
		t.Fatalf("show s1: %+v", v.Timeouts)
	}
	if r := w.must(0, "sagas", "show", "renewal", "s1"); !strings.Contains(r.stdout, rule+" (ops@1, from 2030-01-07") {
		t.Errorf("sagas show does not show the rule beside the due time:\n%s", r.stdout)
	}
	if r := w.must(0, "timeouts", "list", "--saga", "renewal"); !strings.Contains(r.stdout, rule+" (ops@1)") {
		t.Errorf("timeouts list does not show the rule:\n%s", r.stdout)
	}

	file := filepath.Join(t.TempDir(), "ops.cal")
	if err := os.WriteFile(file, []byte("# ops\nweekend Sat Sun\n2030-01-09 Closed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.must(ExitAborted, "timeouts", "replan", "renewal", file, "ops@2")
	w.must(ExitUsage, "timeouts", "replan", "renewal", file, "ops")
	w.must(ExitUsage, "timeouts", "replan", "renewal", filepath.Join(t.TempDir(), "missing.cal"), "ops@2", "--yes")
	rows := jsonOf[[]ReplanView](w, 0, "timeouts", "replan", "renewal", file, "ops@2", "--yes")
	if len(rows) != 2 {
		t.Fatalf("replan: %+v, want two rows", rows)
	}
	for i, id := range []string{"s1", "s2"} {
		if r := rows[i]; r.ID != id || r.Outcome != "moved" || r.Old != "ops@1" || r.New != "ops@2" || !r.OldAt.Equal(wed) || !r.NewAt.Equal(thu) {
			t.Errorf("replan row %d: %+v; want %s moved from %v on ops@1 to %v on ops@2", i, r, id, wed, thu)
		}
	}
	for _, p := range jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "renewal") {
		if p.Calendar != "ops@2" || !p.At.Equal(thu) {
			t.Errorf("after the re-plan, listed %+v; want ops@2 due %v (and the old schedules gone)", p, thu)
		}
	}
	if rows := jsonOf[[]ReplanView](w, 0, "timeouts", "replan", "renewal", file, "ops@2", "--yes"); len(rows) != 0 {
		t.Errorf("a second re-plan: %+v; want nothing to do", rows)
	}
}

type Lapse struct{ Sub string }
type lapseDue struct{}

func (Lapse) MessageName() string    { return "ops.Lapse" }
func (lapseDue) MessageName() string { return "ops.LapseDue" }

// TestTimeoutsReplanIntoThePast: a re-plan that moves a timeout to a due
// time already past says so, with how long ago it was due; the timeout
// then fires at once.
func TestTimeoutsReplanIntoThePast(t *testing.T) {
	w := newWorkload(t)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	// One business day before a day ten days on, at 09:00: a week or more
	// ahead on shop@1; on shop@2, with every day from yesterday to then
	// closed, before yesterday.
	from := today.AddDate(0, 0, 10)
	v1, err := calendar.New("shop", "1")
	if err != nil {
		t.Fatal(err)
	}
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	fired := make(chan time.Time, 1)
	d := saga.Define[struct{}]("lapse")
	saga.StartedBy(d, saga.By(func(m Lapse) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[struct{}], m Lapse) error {
			_, err := c.RequestTimeoutBy(calendar.BusinessDays(-1).At(calendar.ClockOf(9, 0)).In("UTC"), lapseDue{}, saga.RuleFrom(from))
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[struct{}], _ lapseDue) error {
		select {
		case fired <- c.Now():
		default:
		}
		return nil
	})
	disp := w.dispatcher("shop", saga.WithSagas(d), saga.WithCalendars(reg))
	sendAll(t, disp, Lapse{Sub: "l1"})
	testutil.AwaitTrue(t, 15*time.Second, "the lapse timeout listed", func() bool {
		r := w.run("timeouts", "list", "--saga", "lapse", "--json")
		return r.code == 0 && len(decode[[]PendingView](t, r.stdout)) == 1
	})
	var cal strings.Builder
	cal.WriteString("# shop\nweekend Sat Sun\n")
	for day := today.AddDate(0, 0, -1); !day.After(from); day = day.AddDate(0, 0, 1) {
		cal.WriteString(day.Format(time.DateOnly) + " Closed\n")
	}
	file := filepath.Join(t.TempDir(), "shop.cal")
	if err := os.WriteFile(file, []byte(cal.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := jsonOf[[]ReplanView](w, 0, "timeouts", "replan", "lapse", file, "shop@2", "--yes")
	if len(rows) != 1 || rows[0].Outcome != "moved" || !rows[0].NewAt.Before(today.AddDate(0, 0, -1)) {
		t.Fatalf("replan: %+v; want one moved before yesterday", rows)
	}
	overdue, err := time.ParseDuration(rows[0].Overdue)
	if err != nil || overdue < 24*time.Hour {
		t.Errorf("replan row: overdue %q (%v); want a duration over a day", rows[0].Overdue, err)
	}
	select {
	case <-fired:
	case <-time.After(15 * time.Second):
		t.Fatal("the re-planned timeout did not fire at once")
	}
	// The table says it fires at once, and since when it was due.
	v3 := strings.ReplaceAll(cal.String(), "# shop", "# shop v3") + today.AddDate(0, 0, -2).Format(time.DateOnly) + " Closed\n"
	if err := os.WriteFile(file, []byte(v3), 0o644); err != nil {
		t.Fatal(err)
	}
	sendAll(t, disp, Lapse{Sub: "l2"})
	testutil.AwaitTrue(t, 15*time.Second, "the second lapse timeout listed", func() bool {
		r := w.run("timeouts", "list", "--saga", "lapse", "--id", "l2", "--json")
		return r.code == 0 && len(decode[[]PendingView](t, r.stdout)) == 1
	})
	if r := w.must(0, "timeouts", "replan", "lapse", file, "shop@3", "--yes"); !strings.Contains(r.stdout, "ago: fires at once; its type's catch-up policy applies") {
		t.Errorf("timeouts replan into the past does not say it fires at once:\n%s", r.stdout)
	}
}
