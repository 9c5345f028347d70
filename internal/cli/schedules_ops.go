package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout/schedule"
)

// schedOpts are the flags of the schedules commands.
type schedOpts struct {
	queue     string
	next      int
	note      string
	calendars []string // NAME@VERSION=FILE
}

func (o *schedOpts) register(fs *flag.FlagSet) {
	fs.StringVar(&o.queue, "schedule-queue", envOr("JETSAGA_SCHEDULE_QUEUE", schedule.DefaultQueue), "the queue the schedules are kept on, schedule.WithQueue ($JETSAGA_SCHEDULE_QUEUE)")
	fs.IntVar(&o.next, "next", 5, "show this many next occurrences")
	fs.StringVar(&o.note, "note", "", "why: kept with a pause (resume clears it, or sets this one)")
	fs.Func("calendar", "NAME@VERSION=FILE: a calendar file (calendar.Load) for specs on that calendar; repeat for several", func(s string) error {
		o.calendars = append(o.calendars, s)
		return nil
	})
}

func init() {
	examples := func(e ...string) []string { return e }
	commands = append(commands,
		&command{path: "schedules list", short: "list recurring schedules with their next occurrence",
			long: `Lists the schedules kept on --schedule-queue (timeout/schedule): name, spec,
target, state (active, paused, ended), the next occurrence in the schedule's
zone and in UTC, and how many occurrences were sent and skipped.`,
			examples: examples("jetsaga schedules list", "jetsaga schedules list --json"),
			flags:    fJSON | fSchedules, maxArgs: 0, run: cmdSchedulesList},
		&command{path: "schedules show", args: "NAME", minArgs: 1, maxArgs: 1,
			short: "show a schedule and its next occurrences in its zone and UTC",
			long: `Shows a schedule's definition and state, and its next --next occurrences in
its zone and in UTC. A spec on a calendar needs the calendar: --calendar
NAME@VERSION=FILE (the calendar file format of calendar.Load); without it
the pending occurrence alone is shown.`,
			examples: examples("jetsaga schedules show nightly", "jetsaga schedules show reminders --next 10 --calendar pl@2027.1=pl.cal --json"),
			flags:    fJSON | fSchedules, run: cmdSchedulesShow},
		&command{path: "schedules pause", args: "NAME", minArgs: 1, maxArgs: 1,
			short:    "pause a schedule (its pending occurrence is not sent)",
			examples: examples(`jetsaga schedules pause nightly --note "ledger migration, until Monday"`),
			flags:    fJSON | fSchedules, run: cmdSchedulesPause},
		&command{path: "schedules resume", args: "NAME", minArgs: 1, maxArgs: 1,
			short: "resume a paused schedule from its next occurrence after now",
			long: `Occurrences that fell in the pause are skipped (counted as skipped);
"jetsaga schedules backfill" sends them.`,
			examples: examples("jetsaga schedules resume nightly"),
			flags:    fJSON | fSchedules, run: cmdSchedulesResume},
		&command{path: "schedules trigger", args: "NAME", minArgs: 1, maxArgs: 1,
			short:    "send an occurrence of a schedule now",
			examples: examples("jetsaga schedules trigger nightly"),
			flags:    fJSON | fSchedules, run: cmdSchedulesTrigger},
		&command{path: "schedules backfill", args: "NAME FROM TO", minArgs: 3, maxArgs: 3,
			short: "send the occurrences of a past range that the schedule did not send",
			long: `FROM and TO are RFC 3339 instants or durations ago (2h). Occurrences the
schedule sent itself are left out; the target queue drops any whose
occurrence ID it remembers (its DuplicateWindow). At most 10,000.`,
			examples: examples("jetsaga schedules backfill nightly 2027-03-01T00:00:00Z 2027-03-08T00:00:00Z --yes"),
			flags:    fJSON | fYes | fSchedules, run: cmdSchedulesBackfill},
		&command{path: "schedules delete", args: "NAME", minArgs: 1, maxArgs: 1,
			short:    "delete a schedule (its pending occurrence is not sent)",
			examples: examples("jetsaga schedules delete nightly --yes"),
			flags:    fJSON | fYes | fSchedules, run: cmdSchedulesDelete},
	)
}

// ScheduleView is a schedule as jetsaga shows it.
type ScheduleView struct {
	Name    string `json:"name"`
	Spec    string `json:"spec"` // for people
	Zone    string `json:"zone"`
	Queue   string `json:"queue,omitempty"`
	Topic   string `json:"topic,omitempty"`
	State   string `json:"state"` // active, paused or ended
	Note    string `json:"note,omitempty"`
	CatchUp string `json:"catch_up"`
	// Engine is the timeout engine that holds the pending occurrence's
	// tick: "queue", or the engine given to the scheduler (WithTimeouts).
	Engine string `json:"engine,omitempty"`
	// Next is the pending occurrence's nominal time (UTC) and NextLocal the
	// same in the schedule's zone; FireAt includes jitter.
	Next      *time.Time `json:"next,omitempty"`
	NextLocal string     `json:"next_local,omitempty"`
	FireAt    *time.Time `json:"fire_at,omitempty"`
	Last      *time.Time `json:"last,omitempty"`
	PausedAt  *time.Time `json:"paused_at,omitempty"`
	PauseNote string     `json:"pause_note,omitempty"`
	Sent      int64      `json:"sent"`
	Skipped   int64      `json:"skipped"`
	Late      int64      `json:"late"`
	// Upcoming are the next occurrences (show only).
	Upcoming []OccurrenceView `json:"upcoming,omitempty"`
	// UpcomingError says why Upcoming is missing (a calendar not given).
	UpcomingError string `json:"upcoming_error,omitempty"`
}

// OccurrenceView is one occurrence: its ID and nominal time in UTC and in
// the schedule's zone.
type OccurrenceView struct {
	ID        string    `json:"id"`
	UTC       time.Time `json:"utc"`
	Local     string    `json:"local"`
	Sent      *bool     `json:"sent,omitempty"`      // backfill: false when the schedule sent it itself
	Duplicate *bool     `json:"duplicate,omitempty"` // backfill, trigger: the queue already had it
}

func (c *call) scheduler() (*schedule.Scheduler, error) {
	o := c.o.sched
	reg := &calendar.Registry{}
	for _, spec := range o.calendars {
		refText, file, ok := strings.Cut(spec, "=")
		name, version, ok2 := strings.Cut(refText, "@")
		if !ok || !ok2 || name == "" || version == "" || file == "" {
			return nil, fmt.Errorf("%w: --calendar %q: want NAME@VERSION=FILE", ErrUsage, spec)
		}
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("%w: --calendar: %v", ErrUsage, err)
		}
		days, err := calendar.Load(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: --calendar %s: %v", ErrUsage, file, err)
		}
		cal, err := calendar.New(name, version, days)
		if err != nil {
			return nil, fmt.Errorf("%w: --calendar %s: %v", ErrUsage, file, err)
		}
		if err := reg.Add(cal); err != nil {
			return nil, fmt.Errorf("%w: --calendar %s: %v", ErrUsage, file, err)
		}
	}
	return schedule.New(c.env.broker, schedule.WithQueue(o.queue), schedule.WithCalendars(reg), schedule.WithLogger(c.rc.logger))
}

// schedErr maps the schedule package's errors to the command's.
func schedErr(err error) error {
	switch {
	case errors.Is(err, schedule.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, schedule.ErrInvalidName), errors.Is(err, schedule.ErrInvalidOption):
		return fmt.Errorf("%w: %w", ErrUsage, err)
	case errors.Is(err, calendar.ErrUnknownCalendar):
		return fmt.Errorf("%w: %w (give the calendar: --calendar NAME@VERSION=FILE)", ErrUsage, err)
	}
	return err
}

func scheduleViewOf(i schedule.Info) ScheduleView {
	v := ScheduleView{Name: i.Name, Spec: i.Spec.String(), Zone: i.Spec.ZoneName(), Queue: i.Action.Queue, Topic: i.Action.Topic,
		State: "active", Note: i.Note, CatchUp: i.CatchUp.Policy.String(), PauseNote: i.PauseNote, Engine: i.Engine,
		Sent: i.Sent, Skipped: i.Skipped, Late: i.Late}
	if i.CatchUp.Tolerance > 0 {
		v.CatchUp += " beyond " + i.CatchUp.Tolerance.String()
	}
	switch {
	case i.Ended:
		v.State = "ended"
	case i.Paused:
		v.State = "paused"
	}
	ptr := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	v.Next, v.FireAt, v.Last, v.PausedAt = ptr(i.Next), ptr(i.FireAt), ptr(i.Last), ptr(i.PausedAt)
	if v.Next != nil {
		v.NextLocal = inZone(i.Next, v.Zone)
	}
	return v
}

func inZone(t time.Time, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		loc = time.UTC
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

func fmtOpt(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format("2006-01-02 15:04:05Z")
}

func cmdSchedulesList(c *call) error {
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	vs := []ScheduleView{}
	for i, err := range s.List(c.ctx) {
		if err != nil {
			return err
		}
		vs = append(vs, scheduleViewOf(i))
	}
	return c.out(vs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "NAME\tSTATE\tSPEC\tTARGET\tNEXT (ZONE)\tNEXT (UTC)\tSENT\tSKIPPED")
		for _, v := range vs {
			target := v.Queue
			if v.Topic != "" {
				target = "topic " + v.Topic
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", v.Name, v.State, v.Spec, target, cmpOr(v.NextLocal, "-"), fmtOpt(v.Next), v.Sent, v.Skipped)
		}
	})
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func cmdSchedulesShow(c *call) error {
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	info, err := s.Get(c.ctx, c.args[0])
	if err != nil {
		return schedErr(err)
	}
	v := scheduleViewOf(info)
	ts, err := s.Upcoming(c.ctx, info.Name, c.o.sched.next)
	if err != nil {
		v.UpcomingError = err.Error()
		if info.Spec.Calendar != (calendar.Ref{}) {
			v.UpcomingError += fmt.Sprintf(" (give --calendar %s=FILE)", info.Spec.Calendar)
		}
	}
	for _, t := range ts {
		v.Upcoming = append(v.Upcoming, OccurrenceView{ID: schedule.OccurrenceID(info.Name, t), UTC: t.UTC(), Local: inZone(t, v.Zone)})
	}
	return c.out(v, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "Name:\t%s\n", v.Name)
		fmt.Fprintf(w, "Spec:\t%s\n", v.Spec)
		fmt.Fprintf(w, "Zone:\t%s\n", v.Zone)
		if v.Topic != "" {
			fmt.Fprintf(w, "Target:\ttopic %s\n", v.Topic)
		} else {
			fmt.Fprintf(w, "Target:\tqueue %s\n", v.Queue)
		}
		fmt.Fprintf(w, "State:\t%s\n", v.State)
		if v.PauseNote != "" || v.PausedAt != nil {
			fmt.Fprintf(w, "Paused:\t%s %s\n", fmtOpt(v.PausedAt), v.PauseNote)
		}
		fmt.Fprintf(w, "Catch-up:\t%s\n", v.CatchUp)
		if v.Engine != "" {
			fmt.Fprintf(w, "Tick on:\t%s engine\n", v.Engine)
		}
		fmt.Fprintf(w, "Last:\t%s\n", fmtOpt(v.Last))
		fmt.Fprintf(w, "Sent/skipped/late:\t%d/%d/%d\n", v.Sent, v.Skipped, v.Late)
		fmt.Fprintln(w)
		if v.UpcomingError != "" {
			fmt.Fprintf(w, "Next:\t%s (%s)\n", cmpOr(v.NextLocal, "-"), fmtOpt(v.Next))
			fmt.Fprintf(w, "Upcoming:\t%s\n", v.UpcomingError)
			return
		}
		fmt.Fprintf(w, "NEXT (%s)\tUTC\tOCCURRENCE ID\n", v.Zone)
		for _, o := range v.Upcoming {
			fmt.Fprintf(w, "%s\t%s\t%s\n", o.Local, o.UTC.Format("2006-01-02 15:04:05Z"), o.ID)
		}
	})
}

// actionView is what pause, resume and delete print.
type actionView struct {
	Name   string `json:"name"`
	Action string `json:"action"`
	Note   string `json:"note,omitempty"`
}

func (c *call) done(name, action string) error {
	v := actionView{Name: name, Action: action, Note: c.o.sched.note}
	return c.out(v, func(w *tabwriter.Writer) { fmt.Fprintf(w, "schedule %s %s\n", name, action) })
}

func cmdSchedulesPause(c *call) error  { return c.setPaused((*schedule.Scheduler).Pause, "paused") }
func cmdSchedulesResume(c *call) error { return c.setPaused((*schedule.Scheduler).Resume, "resumed") }

// setPaused pauses or resumes (change) the schedule named by the first
// argument, with the --note, and prints it as done.
func (c *call) setPaused(change func(*schedule.Scheduler, context.Context, string, string) error, done string) error {
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	if err := change(s, c.ctx, c.args[0], c.o.sched.note); err != nil {
		return schedErr(err)
	}
	return c.done(c.args[0], done)
}

func cmdSchedulesDelete(c *call) error {
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	if _, err := s.Get(c.ctx, c.args[0]); err != nil {
		return schedErr(err)
	}
	if err := c.confirm("delete schedule " + c.args[0]); err != nil {
		return err
	}
	if err := s.Delete(c.ctx, c.args[0]); err != nil {
		return schedErr(err)
	}
	return c.done(c.args[0], "deleted")
}

func cmdSchedulesTrigger(c *call) error {
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	info, err := s.Get(c.ctx, c.args[0])
	if err != nil {
		return schedErr(err)
	}
	o, err := s.Trigger(c.ctx, c.args[0])
	if err != nil {
		return schedErr(err)
	}
	v := OccurrenceView{ID: o.ID, UTC: o.Nominal.UTC(), Local: inZone(o.Nominal, info.Spec.ZoneName()), Duplicate: &o.Duplicate}
	return c.out(v, func(w *tabwriter.Writer) { fmt.Fprintf(w, "sent %s\n", v.ID) })
}

func cmdSchedulesBackfill(c *call) error {
	from, err := parseWhen("FROM", c.args[1])
	if err != nil {
		return err
	}
	to, err := parseWhen("TO", c.args[2])
	if err != nil {
		return err
	}
	s, err := c.scheduler()
	if err != nil {
		return err
	}
	info, err := s.Get(c.ctx, c.args[0])
	if err != nil {
		return schedErr(err)
	}
	if err := c.confirm(fmt.Sprintf("send the occurrences of schedule %s from %s to %s that it did not send", info.Name, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))); err != nil {
		return err
	}
	occ, err := s.Backfill(c.ctx, info.Name, from, to)
	if errors.Is(err, schedule.ErrInvalidSchedule) {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	vs := []OccurrenceView{}
	for _, o := range occ {
		v := OccurrenceView{ID: o.ID, UTC: o.Nominal.UTC(), Local: inZone(o.Nominal, info.Spec.ZoneName())}
		v.Sent, v.Duplicate = new(o.Sent), new(o.Duplicate)
		vs = append(vs, v)
	}
	if outErr := c.out(vs, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "OCCURRENCE ID\tLOCAL\tOUTCOME")
		for i, v := range vs {
			outcome := "sent"
			switch {
			case !occ[i].Sent:
				outcome = "left out: the schedule sent it"
			case occ[i].Duplicate:
				outcome = "dropped: the queue had it"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", v.ID, v.Local, outcome)
		}
	}); outErr != nil {
		return outErr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPartial, err)
	}
	return nil
}

// schedulesPage is the console's page of schedules: what schedules list
// shows, with the next three occurrences of each (of specs that need no
// calendar).
func (c *console) schedulesPage(r *http.Request) (string, string, any, error) {
	queue := cmpOr(r.URL.Query().Get("queue"), envOr("JETSAGA_SCHEDULE_QUEUE", schedule.DefaultQueue))
	page := struct {
		Queue     string
		Schedules []ScheduleView
	}{Queue: queue}
	s, err := schedule.New(c.env.broker, schedule.WithQueue(queue), schedule.WithLogger(c.log))
	if err != nil {
		return "schedules", "schedules", page, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	for i, err := range s.List(r.Context()) {
		if err != nil {
			return "schedules", "schedules", page, err
		}
		v := scheduleViewOf(i)
		if ts, err := s.Upcoming(r.Context(), i.Name, 3); err == nil {
			for _, t := range ts {
				v.Upcoming = append(v.Upcoming, OccurrenceView{ID: schedule.OccurrenceID(i.Name, t), UTC: t.UTC(), Local: inZone(t, v.Zone)})
			}
		}
		page.Schedules = append(page.Schedules, v)
	}
	return "schedules", "schedules", page, nil
}
