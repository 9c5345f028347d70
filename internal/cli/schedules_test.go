package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The schedules commands' objects, checked against docs/operating.md by
// TestJSONOutputDocumented.
func init() {
	jsonTypes["schedule"] = reflect.TypeFor[ScheduleView]()
	jsonTypes["schedule-occurrence"] = reflect.TypeFor[OccurrenceView]()
	jsonTypes["schedule-action"] = reflect.TypeFor[actionView]()
}

func TestSchedulesCommands(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &workload{t: t, srv: srv, nc: nc, prefix: "OPS", bucket: "ops_sagas"}
	b, err := transport.NewJetStream(nc, transport.WithPrefix(w.prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	w.broker = b
	ctx := context.Background()

	// A calendar, as a file for --calendar and in a registry for the service.
	calFile := filepath.Join(t.TempDir(), "pl.cal")
	if err := os.WriteFile(calFile, []byte("*-01-01 New Year\n*-01-06 Epiphany\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(calFile)
	days, err := calendar.Load(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pl, err := calendar.New("pl", "1", days)
	if err != nil {
		t.Fatal(err)
	}
	reg := &calendar.Registry{}
	_ = reg.Add(pl)
	s, err := schedule.New(b, schedule.WithCalendars(reg))
	if err != nil {
		t.Fatal(err)
	}
	msg := &transport.Message{Subject: "Report"}
	if err := s.Create(ctx, schedule.Schedule{Name: "nightly", Spec: schedule.Spec{Cron: "30 2 * * *", Zone: "Europe/Warsaw"},
		Action: schedule.Action{Queue: "reports", Message: msg}}); err != nil {
		t.Fatal(err)
	}
	rule := calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
	if err := s.Create(ctx, schedule.Schedule{Name: "reminders", Spec: schedule.Spec{Rule: &rule, Calendar: calendar.RefOf(pl)},
		Start: time.Now().Add(-30 * 24 * time.Hour), Action: schedule.Action{Queue: "reports", Message: msg}}); err != nil {
		t.Fatal(err)
	}

	list := jsonOf[[]ScheduleView](w, 0, "schedules", "list")
	if len(list) != 2 {
		t.Fatalf("schedules list: got %d, want 2", len(list))
	}
	warsaw, _ := time.LoadLocation("Europe/Warsaw")
	show := jsonOf[ScheduleView](w, 0, "schedules", "show", "nightly", "--next", "3")
	if len(show.Upcoming) != 3 || show.State != "active" || show.Engine != "queue" {
		t.Fatalf("show nightly: %+v, want 3 upcoming, active, its tick on the queue engine", show)
	}
	for _, o := range show.Upcoming {
		if got := o.UTC.In(warsaw).Format("15:04"); got != "02:30" && got != "03:00" {
			t.Errorf("upcoming %s is %s in Warsaw, want 02:30 (or 03:00 on the night the clocks go forward)", o.ID, got)
		}
		if !strings.HasPrefix(o.Local, o.UTC.In(warsaw).Format("2006-01-02 15:04:05")) {
			t.Errorf("local %q is not %s in Warsaw", o.Local, o.UTC)
		}
		if o.ID != schedule.OccurrenceID("nightly", o.UTC) {
			t.Errorf("ID %s for %s", o.ID, o.UTC)
		}
	}
	// A spec on a calendar: the next occurrences need the calendar.
	rem := jsonOf[ScheduleView](w, 0, "schedules", "show", "reminders")
	if len(rem.Upcoming) != 0 || !strings.Contains(rem.UpcomingError, "--calendar pl@1=FILE") {
		t.Fatalf("show without the calendar: %+v, want an error naming --calendar", rem)
	}
	rem = jsonOf[ScheduleView](w, 0, "schedules", "show", "reminders", "--calendar", "pl@1="+calFile)
	if len(rem.Upcoming) != 5 {
		t.Fatalf("show with the calendar: %+v, want 5 upcoming", rem)
	}
	if table := w.must(0, "schedules", "show", "reminders", "--calendar", "pl@1="+calFile).stdout; !strings.Contains(table, "NEXT (Europe/Warsaw)") || !strings.Contains(table, rem.Upcoming[0].ID) || !strings.Contains(table, "queue engine") {
		t.Errorf("show table:\n%s", table)
	}

	act := jsonOf[actionView](w, 0, "schedules", "pause", "nightly", "--note", "ledger migration")
	if act.Action != "paused" {
		t.Fatalf("pause: %+v", act)
	}
	show = jsonOf[ScheduleView](w, 0, "schedules", "show", "nightly")
	if show.State != "paused" || show.PauseNote != "ledger migration" || show.PausedAt == nil {
		t.Fatalf("after pause: %+v", show)
	}
	jsonOf[actionView](w, 0, "schedules", "resume", "nightly")
	if show = jsonOf[ScheduleView](w, 0, "schedules", "show", "nightly"); show.State != "active" || show.Next == nil {
		t.Fatalf("after resume: %+v", show)
	}

	occ := jsonOf[OccurrenceView](w, 0, "schedules", "trigger", "nightly")
	reports := w.queueHandle("reports")
	testutil.Await(t, 5*time.Second, func() string {
		ms, err := reports.Peek(ctx, 0, 10)
		if err != nil {
			return err.Error()
		}
		if len(ms) != 1 || ms[0].MessageID != occ.ID {
			return "triggered occurrence not on the queue"
		}
		return ""
	})

	// Backfill the 3 nights before the schedule existed.
	from := time.Now().Add(-72 * time.Hour).UTC().Format(time.RFC3339)
	to := time.Now().UTC().Format(time.RFC3339)
	if r := w.run("schedules", "backfill", "nightly", from, to); r.code != ExitAborted {
		t.Fatalf("backfill without --yes: %v, want exit %d", r, ExitAborted)
	}
	bf := jsonOf[[]OccurrenceView](w, 0, "schedules", "backfill", "nightly", from, to, "--yes")
	if len(bf) < 2 || len(bf) > 3 {
		t.Fatalf("backfill: %d occurrences, want 2 or 3", len(bf))
	}
	for _, o := range bf {
		if o.Sent == nil || !*o.Sent || o.Duplicate == nil || *o.Duplicate {
			t.Errorf("backfill %s: sent %v duplicate %v, want sent", o.ID, o.Sent, o.Duplicate)
		}
	}
	bf = jsonOf[[]OccurrenceView](w, 0, "schedules", "backfill", "nightly", from, to, "--yes")
	for _, o := range bf {
		if o.Duplicate == nil || !*o.Duplicate {
			t.Errorf("second backfill %s: not reported as a duplicate", o.ID)
		}
	}

	w.must(ExitUsage, "schedules", "show", "a.b")
	w.must(ExitUsage, "schedules", "pause", "*")
	w.must(ExitNotFound, "schedules", "show", "nope")
	w.must(ExitAborted, "schedules", "delete", "nightly")
	jsonOf[actionView](w, 0, "schedules", "delete", "nightly", "--yes")
	w.must(ExitNotFound, "schedules", "show", "nightly")
	if list = jsonOf[[]ScheduleView](w, 0, "schedules", "list"); len(list) != 1 {
		t.Fatalf("after delete: %d schedules, want 1", len(list))
	}

	// The console's page shows the same: the paused one with its note, the
	// next occurrences of a cron spec in Warsaw time and in UTC.
	jsonOf[actionView](w, 0, "schedules", "pause", "reminders", "--note", "audit <b>week</b>")
	nightly := jsonOf[ScheduleView](w, 0, "schedules", "show", "reminders")
	if err := s.Create(ctx, schedule.Schedule{Name: "hourly", Spec: schedule.Spec{Cron: "0 * * * *", Zone: "Europe/Warsaw"},
		Action: schedule.Action{Queue: "reports", Message: msg}}); err != nil {
		t.Fatal(err)
	}
	hourly := jsonOf[ScheduleView](w, 0, "schedules", "show", "hourly", "--next", "3")
	srvc := w.console("", false)
	code, body := get(t, client(t), srvc.URL+"/schedules")
	if code != 200 {
		t.Fatalf("console /schedules: %d\n%s", code, body)
	}
	for _, want := range []string{"reminders", "paused", "audit &lt;b&gt;week&lt;/b&gt;", nightly.Spec, "hourly",
		hourly.Upcoming[0].Local, hourly.Upcoming[2].UTC.Format("2006-01-02 15:04:05Z")} {
		if !strings.Contains(body, want) {
			t.Errorf("console /schedules lacks %q", want)
		}
	}
	w.must(ExitUsage, "schedules", "resume", "reminders") // a rule on a calendar: resume needs it
	jsonOf[actionView](w, 0, "schedules", "resume", "reminders", "--calendar", "pl@1="+calFile)

	// Every --json output as docs/operating.md documents it.
	doc := readJSONDoc(t)
	for _, args := range [][]string{
		{"schedules", "list"}, {"schedules", "show", "reminders", "--calendar", "pl@1=" + calFile},
		{"schedules", "show", "reminders"}, {"schedules", "trigger", "reminders"},
		{"schedules", "pause", "reminders", "--note", "x"},
	} {
		out := w.must(0, append(args, "--json")...)
		var v any
		if err := json.Unmarshal([]byte(out.stdout), &v); err != nil {
			t.Fatal(err)
		}
		path := args[0] + " " + args[1]
		var errs []string
		for _, alt := range doc.prints[path] {
			if errs = checkJSON(doc, v, alt, path); len(errs) == 0 {
				break
			}
		}
		for _, e := range errs {
			t.Errorf("jetsaga %s --json: %s", strings.Join(args, " "), e)
		}
	}
}
